"""``inert.torch.enable()`` under torchtitan's own checkpointer, and the switch's own cost, in one run.

    python benchmarks/bench_switch.py [--mib 256] [--repeat 5] [--calls 200]

(a) torchtitan 0.3.0's ``CheckpointManager.save``/``load`` (sync, and async: ``dcp.async_save`` in a
    thread) of a model's parameters plus AdamW's exp_avg and exp_avg_sq (about ``--mib`` in all) and an
    LR scheduler, in a 1-rank gloo group, with the switch off (torch's FileSystemWriter/Reader, pickled
    metadata) and on (Inert's).  Both fsync, as torchtitan's checkpoints do (DCP's defaults).
(b) the switch's own cost per ``dcp.save`` call: a 16-byte state saved ``--calls`` times with
    ``dcp.save(state, checkpoint_id=...)`` while enabled, against the same save with Inert's writer
    passed explicitly (the difference is the redirection), and the cost of one redirected
    ``FileSystemWriter(path)`` construction against building Inert's directly.

Runs take turns (both see the same background load); each figure is the median of ``--repeat`` runs.
Ratios above 1 favour the switch.  Beside (a) it prints the limits (benchmarks/limits.py), from the
files of the switched side's first checkpoint of each mode: their sizes written to fresh files and
fsynced on 1 thread (the save's), and the files read with ``os.preadv`` into preallocated buffers on
2 threads (the load's), against the switched medians; and the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer
from torchtitan.components.optimizer.optimizer import ParamGroupConfig

import inert.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from limits import file_ranges, load_line, pread_limit, report, write_limit  # noqa: E402


def build(mib: int) -> tuple[nn.Module, OptimizersContainer, LRSchedulersContainer]:
    """Square Linear layers holding a third of ``mib`` (AdamW's two moments are the other two thirds)."""
    width = 1024
    layers = max(1, mib * 2**20 // 3 // (width * width * 4))
    model = nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)))
    optimizers: OptimizersContainer = OptimizersContainer(
        OptimizersContainer.Config(
            param_groups=[ParamGroupConfig(pattern=r".*", optimizer_name="AdamW", optimizer_kwargs={"lr": 1e-3})],
            implementation="foreach",
        ),
        model_parts=[model],
    )
    for param in model.parameters():
        param.grad = torch.randn_like(param)
    optimizers.step()
    schedulers = LRSchedulersContainer.Config(warmup_steps=2).build(optimizers=optimizers, training_steps=10)
    return model, optimizers, schedulers


Parts = tuple[nn.Module, OptimizersContainer, LRSchedulersContainer]


def titan_times(parts: Parts, async_mode: str, base: str) -> tuple[float, float]:
    model, optimizers, schedulers = parts
    config = CheckpointManager.Config(enable=True, folder="ckpt", interval=1, keep_latest_k=0, async_mode=async_mode)
    manager = CheckpointManager(
        config, dataloader=None, model_parts=[model], optimizers=optimizers, lr_schedulers=schedulers,
        states={}, sd_adapter=None, base_folder=base,
    )
    start = time.perf_counter()
    manager.save(curr_step=1)
    manager.maybe_wait_for_saving()
    saved = time.perf_counter() - start
    start = time.perf_counter()
    manager.load(step=1)
    loaded = time.perf_counter() - start
    manager.close()
    return saved, loaded


#: By async mode: the switched side's median (save, load) seconds.
SWITCHED: dict[str, tuple[float, float]] = {}
#: By async mode: the (save, load) limits of the switched side's first checkpoint (see titan_run).
LIMITS: dict[str, tuple[float, float]] = {}


def titan_run(parts: Parts, async_mode: str, tmp: str, on: bool) -> tuple[float, float]:
    """One save and load in a new folder, with the switch on or off (the first switched one also measures LIMITS)."""
    base = tempfile.mkdtemp(dir=tmp)
    try:
        if not on:
            return titan_times(parts, async_mode, base)
        with inert.torch.enabled():
            times = titan_times(parts, async_mode, base)
        if async_mode not in LIMITS:
            files = [os.path.join(top, name) for top, _, names in os.walk(base) for name in names]
            LIMITS[async_mode] = (write_limit([os.path.getsize(f) for f in files], tmp, threads=1, sync=True),
                                  pread_limit(file_ranges(files), threads=2))
        return times
    finally:
        shutil.rmtree(base, ignore_errors=True)


def median_pair(run: Callable[[bool], tuple[float, float]], repeat: int) -> dict[bool, tuple[float, float]]:
    """Medians of (save, load) with the switch off and on, the two taking turns."""
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for i in range(repeat):
        for on in ((False, True) if i % 2 == 0 else (True, False)):
            runs[on].append(run(on))
    return {on: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for on, rs in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    print(load_line())
    logging.getLogger().setLevel(logging.ERROR)  # torchtitan logs each save and load on the root logger
    tmp = tempfile.mkdtemp(prefix="bench_switch-")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
    try:
        parts = build(args.mib)
        size = sum(p.numel() * 4 * 3 for p in parts[0].parameters()) / 2**20
        print(f"(a) torchtitan CheckpointManager, {size:.0f} MiB (params + AdamW moments), 1 rank, fsync on")
        print(f"    {'mode':<10}{'save torch':>12}{'save inert':>12}{'ratio':>8}{'load torch':>12}{'load inert':>12}{'ratio':>8}")
        for async_mode in ("disabled", "async"):
            got = median_pair(functools.partial(titan_run, parts, async_mode, tmp), args.repeat)
            (st, lt), (si, li) = got[False], got[True]
            SWITCHED[async_mode] = (si, li)
            print(f"    {async_mode:<10}{st:>11.3f}s{si:>11.3f}s{st / si:>8.2f}{lt:>11.3f}s{li:>11.3f}s{lt / li:>8.2f}")
        for async_mode in ("disabled", "async"):
            save_limit, load_limit = LIMITS[async_mode]
            print(report(f"the {async_mode} save", save_limit, SWITCHED[async_mode][0],
                         "the same file sizes written and fsynced, 1 thread"))
            print(report(f"the {async_mode} load", load_limit, SWITCHED[async_mode][1],
                         "the same files read with os.preadv, 2 threads"))

        print(f"(b) the switch's own cost: a 16-byte state saved {args.calls} times, median of {args.repeat}")
        state = {"x": torch.arange(4, dtype=torch.float32)}

        def saves(switched: bool) -> float:
            root = tempfile.mkdtemp(dir=tmp)
            start = time.perf_counter()
            for i in range(args.calls):
                path = os.path.join(root, str(i))
                if switched:
                    dcp.save(state, checkpoint_id=path)
                else:
                    dcp.save(state, storage_writer=inert.torch.FileSystemWriter(path))
            elapsed = (time.perf_counter() - start) / args.calls
            shutil.rmtree(root)
            return elapsed

        times: dict[bool, list[float]] = {False: [], True: []}
        for i in range(args.repeat):
            for on in ((False, True) if i % 2 == 0 else (True, False)):
                with inert.torch.enabled() if on else contextlib.nullcontext():
                    times[on].append(saves(on))
        e, s = statistics.median(times[False]), statistics.median(times[True])
        print(f"    dcp.save, Inert's writer passed explicitly  {e * 1e3:8.3f} ms per call")
        print(f"    dcp.save(checkpoint_id=...) while enabled   {s * 1e3:8.3f} ms per call ({(s - e) * 1e6:+.1f} us)")
        path = os.path.join(tmp, "w")
        number = 20000
        direct = min(timeit.repeat(lambda: inert.torch.FileSystemWriter(path), number=number, repeat=args.repeat))
        with inert.torch.enabled():
            redirected = min(timeit.repeat(lambda: dcp.FileSystemWriter(path), number=number, repeat=args.repeat))
        print(f"    inert.torch.FileSystemWriter(path)           {direct / number * 1e6:8.2f} us")
        print(f"    dcp.FileSystemWriter(path) while enabled     {redirected / number * 1e6:8.2f} us"
              f" ({(redirected - direct) / number * 1e6:+.2f} us: the redirection)")
        print(load_line())
    finally:
        dist.destroy_process_group()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
