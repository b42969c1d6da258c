"""Compressed checkpoints: Inert's ZSTD records against DCP's own ``ZStandard`` extension, side by side.

    python benchmarks/bench_compression.py [--mib 64] [--repeat 3]

The same state is saved with ``_extensions=[ZStandard()]`` by ``inert.torch.FileSystemWriter``
and by ``torch.distributed.checkpoint.FileSystemWriter``, and loaded back with each one's
reader; the uncompressed saves of both are measured too.  The state is what training saves:
float32 parameters after a few Adam steps with their bf16 copies, Adam's ``exp_avg`` and
``exp_avg_sq``, the steps, int64 token counts, a zero-initialised buffer and a boolean mask,
plus ``param_groups``.  Both write with ``sync_files=False`` (fsync measures the disk) and
read from a warm page cache; Inert verifies every CRC-32.  Both compress at zstd's default
level 3 with the same ``zstandard`` module.

``--record-mib N`` adds one N MiB tensor that compresses well (a mostly-zero buffer), the
case where inflating a record whole would cost its full size on top of its destination.

Printed: bytes on disk (data files and metadata), the best of ``--repeat`` save and load
times, the load's peak resident memory above what the process held before it (the state
and the blank destinations are already resident: this is the reader's own memory; Linux's
VmHWM, reset through ``/proc/self/clear_refs`` before each load; the largest of the runs),
and ratios (DCP over Inert: above 1 favours Inert).  Runs take turns.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._extension import ZStandard

import inert.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from limits import file_ranges, load_line, pread_limit, report, write_limit  # noqa: E402

warnings.filterwarnings("ignore")


def make_state(mib: int) -> dict[str, Any]:
    """About ``mib`` MiB of training state (see the module docstring)."""
    torch.manual_seed(0)
    count = 8
    rows = max(1, (mib << 20) // (count * 1024 * (4 * 3 + 2)))  # fp32 weight, exp_avg, exp_avg_sq, bf16 copy
    model: dict[str, Any] = {}
    optim: dict[str, Any] = {}
    params = []
    for index in range(count):
        weight = torch.nn.Parameter(torch.randn(rows, 1024) * 0.02)
        params.append(weight)
        model[f"layer{index}.weight"] = weight
    opt = torch.optim.Adam(params, lr=1e-3)
    for _ in range(3):
        for weight in params:
            weight.grad = torch.randn_like(weight) * 1e-3
        opt.step()
    for index, weight in enumerate(params):
        model[f"layer{index}.weight_bf16"] = weight.detach().to(torch.bfloat16)
        state = opt.state[weight]
        optim[f"layer{index}"] = {"exp_avg": state["exp_avg"], "exp_avg_sq": state["exp_avg_sq"], "step": state["step"]}
    model["tokens_seen"] = torch.arange(rows * 64, dtype=torch.int64)
    model["zero_buffer"] = torch.zeros(rows, 512)
    model["mask"] = torch.rand(rows, 256) > 0.5
    return {"model": {k: v.detach() for k, v in model.items()}, "optim": optim,
            "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}]}


def blank(state: Any) -> Any:
    if isinstance(state, torch.Tensor):
        return torch.zeros_like(state)
    if isinstance(state, dict):
        return {k: blank(v) for k, v in state.items()}
    return state


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir())


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1])


def peak_over(fn: Callable[[], None]) -> tuple[float, int]:
    """``fn``'s time and the peak resident bytes it added to what the process held when it began."""
    before = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear:  # 5: reset the peak (VmHWM) to the current RSS
        clear.write("5")
    seconds = timed(fn)
    return seconds, max(0, _status_kib("VmHWM") - before) << 10


def _ratio(theirs: int, ours: int) -> str:
    """A ratio of peaks, or what it cannot be when Inert's stayed under a page-cache-noise MiB."""
    return f"{theirs / ours:.2f}x" if ours >= 1 << 20 else f"n/a (Inert's under 1 MiB, DCP's {theirs / 2**20:.1f} MiB)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--record-mib", type=int, default=0, help="add one tensor of this many MiB that compresses well")
    args = parser.parse_args()
    state = make_state(args.mib)
    if args.record_mib:
        big = torch.zeros((args.record_mib << 20) // 4)
        big[:: 4096] = 1.0  # mostly zeros: deflates to a small fraction
        state["model"]["big_buffer"] = big
    writers: dict[str, Callable[[Path], Any]] = {
        "dcp zstd": lambda p: dcp.FileSystemWriter(p, sync_files=False, _extensions=[ZStandard()]),
        "inert zstd": lambda p: inert.torch.FileSystemWriter(p, sync_files=False, _extensions=[ZStandard()]),
        "dcp plain": lambda p: dcp.FileSystemWriter(p, sync_files=False),
        "inert plain": lambda p: inert.torch.FileSystemWriter(p, sync_files=False),
    }
    readers: dict[str, Callable[[Path], Any]] = {
        "dcp zstd": dcp.FileSystemReader, "dcp plain": dcp.FileSystemReader,
        "inert zstd": inert.torch.FileSystemReader, "inert plain": inert.torch.FileSystemReader,
    }
    root = Path(tempfile.mkdtemp(prefix="bench-compression-"))
    saves: dict[str, list[float]] = {name: [] for name in writers}
    loads: dict[str, list[float]] = {name: [] for name in writers}
    peaks: dict[str, list[int]] = {name: [] for name in writers}
    sizes: dict[str, int] = {}
    try:
        for _ in range(args.repeat):
            for name, writer in writers.items():  # taking turns: a busy moment hits every candidate
                path = root / name.replace(" ", "-")
                shutil.rmtree(path, ignore_errors=True)
                saves[name].append(timed(partial(dcp.save, state, storage_writer=writer(path), no_dist=True)))
                sizes[name] = size_of(path)
                into = blank(state)
                seconds, peak = peak_over(partial(dcp.load, into, storage_reader=readers[name](path), no_dist=True))
                loads[name].append(seconds)
                peaks[name].append(peak)
                assert torch.equal(into["model"]["layer0.weight"], state["model"]["layer0.weight"])
                assert torch.equal(into["optim"]["layer7"]["exp_avg_sq"], state["optim"]["layer7"]["exp_avg_sq"])
        limits = []
        for name in ("inert zstd", "inert plain"):  # the limits on the files as Inert wrote them, on its threads
            files = sorted(p for p in (root / name.replace(" ", "-")).iterdir() if p.is_file())
            written = write_limit([p.stat().st_size for p in files], root, threads=1, sync=False, repeat=args.repeat)
            read = pread_limit(file_ranges(files), threads=2, repeat=args.repeat)
            limits.append(report(f"{name} save", written, statistics.median(saves[name]), "its files' sizes written, 1 thread"))
            limits.append(report(f"{name} load", read, statistics.median(loads[name]), "its files read by os.preadv, 2 threads"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    raw = sizes["inert plain"]
    print(f"state: {raw / 2**20:.1f} MiB uncompressed (Inert's files), {args.repeat} runs each, best times; "
          f"torch {torch.__version__}")
    print(f"{'':12} {'bytes':>12} {'of plain':>9} {'save s':>8} {'load s':>8} {'load peak RSS MiB':>18}")
    for name in writers:
        print(f"{name:12} {sizes[name]:>12,} {sizes[name] / raw:>8.1%} {min(saves[name]):>8.3f} {min(loads[name]):>8.3f}"
              f" {max(peaks[name]) / 2**20:>18.1f}")
    for kind in ("zstd", "plain"):
        d, i = f"dcp {kind}", f"inert {kind}"
        print(f"{kind}: size dcp/inert {sizes[d] / sizes[i]:.3f}x, save dcp/inert {min(saves[d]) / min(saves[i]):.2f}x, "
              f"load dcp/inert {min(loads[d]) / min(loads[i]):.2f}x, load peak RSS dcp/inert "
              f"{_ratio(max(peaks[d]), max(peaks[i]))}  (above 1 favours Inert)")
    print("\n".join(limits) + "\n  (against the medians of the runs)")
    print(load_line())


if __name__ == "__main__":
    main()
