"""Checkpoints on object storage: Inert's fsspec classes against DCP's own, on the same local S3 server.

    python benchmarks/bench_fsspec.py [--mib 256] [--repeat 3] [--threads 1]
    python benchmarks/bench_fsspec.py --mib 1024        # the issue's size: about 1 GiB (model + Adam)

A model's parameters (float32, 64 tensors) with Adam's exp_avg and exp_avg_sq and step, about
``--mib`` MiB in all, saved with ``dcp.save`` and loaded with ``dcp.load`` into preallocated
tensors through

* ``inert.torch.FsspecWriter``/``FsspecReader`` (every CRC-32 checked on load), and
* ``torch.distributed.checkpoint``'s ``FsspecWriter``/``FsspecReader`` (DCP's pickle and
  ``torch.save`` formats, no checksums),

both to ``s3://`` URLs of one S3 API server on 127.0.0.1 (moto's server mode, in its own
process, as the tests start it: ``tests/s3_server.py``), reached through s3fs with the same
options; both writers with ``thread_count=--threads`` (DCP's default is 1).  Inert's local
``FileSystemWriter``/``FileSystemReader`` (a temporary directory, no fsync) are timed
beside them for reference.  Runs take turns; each figure is the best of ``--repeat`` runs,
with the median beside it; ratios above 1 favour Inert.

moto keeps each object in a temporary file and reads the whole object for every request,
ranged or not: on this server, request count times object size is what costs, more than
the bytes moved.  It runs in one Python process (one core at most).

Beside the ratios it prints the limits (benchmarks/limits.py) of both paths, from the files of
Inert's last local checkpoint: their sizes written to fresh files on ``--threads`` threads without
fsync (the save's), and the files read with ``os.preadv`` into preallocated buffers on 2 threads
(the load's), against the medians; and the load average before and after.
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
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader as DcpFsspecReader
from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter as DcpFsspecWriter

from inert.torch import FileSystemReader, FileSystemWriter, FsspecReader, FsspecWriter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from limits import file_ranges, load_line, pread_limit, report, write_limit  # noqa: E402
from s3_server import S3Server  # noqa: E402 - the tests' server, started the same way

warnings.filterwarnings("ignore")


def model_and_adam(mib: int) -> dict[str, Any]:
    """64 float32 parameters with Adam's two moments: about ``mib`` MiB in all."""
    per_tensor = max(1, (mib << 20) // (3 * 64 * 4))
    params = {f"layer{i}.weight": torch.randn(per_tensor) for i in range(64)}
    state = {name: {"step": torch.tensor(10.0), "exp_avg": torch.randn_like(p), "exp_avg_sq": torch.rand_like(p)}
             for name, p in params.items()}
    groups = [{"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "params": list(params)}]
    return {"model": params, "optim": {"state": state, "param_groups": groups}}


def zeros_like(state: Any) -> Any:
    if isinstance(state, torch.Tensor):
        return torch.zeros_like(state)
    if isinstance(state, dict):
        return {key: zeros_like(value) for key, value in state.items()}
    return state


def timed(run: Callable[[], None]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256, help="checkpoint size in MiB (1024: the issue's 1 GiB)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="thread_count of both writers")
    args = parser.parse_args()
    print(load_line())

    state = model_and_adam(args.mib)
    nbytes = sum(t.numel() * t.element_size() for t in _tensors(state))
    server = S3Server()
    local = tempfile.mkdtemp(prefix="bench-fsspec-")
    try:
        bucket = server.new_bucket()
        options = server.options()
        candidates: dict[str, tuple[Callable[[str], Any], Callable[[str], Any], Callable[[int], str]]] = {
            "inert fsspec": (lambda url: FsspecWriter(url, thread_count=args.threads, storage_options=options),
                             lambda url: FsspecReader(url, storage_options=options),
                             lambda n: f"s3://{bucket}/inert-{n}"),
            "dcp fsspec": (lambda url: DcpFsspecWriter(url, thread_count=args.threads, **options),
                           lambda url: DcpFsspecReader(url, **options),
                           lambda n: f"s3://{bucket}/dcp-{n}"),
            "inert local": (lambda path: FileSystemWriter(path, thread_count=args.threads, sync_files=False),
                            lambda path: FileSystemReader(path),
                            lambda n: os.path.join(local, f"inert-{n}")),
        }
        times: dict[str, dict[str, list[float]]] = {name: {"save": [], "load": []} for name in candidates}
        failed: dict[str, str] = {}
        for n in range(args.repeat):
            for name, (writer, reader, where) in candidates.items():
                if name in failed:
                    continue
                target = where(n)
                into = zeros_like(state)
                try:
                    times[name]["save"].append(timed(partial(dcp.save, state, storage_writer=writer(target), no_dist=True)))
                    times[name]["load"].append(timed(partial(dcp.load, into, storage_reader=reader(target), no_dist=True)))
                except BaseException as exc:  # noqa: BLE001 - reported below: a baseline may fail on this server
                    failed[name] = str(exc).strip().splitlines()[-1]
                    print(f"  round {n + 1} {name:12s} FAILED: {failed[name]}", flush=True)
                    continue
                assert all(torch.equal(a, b) for a, b in zip(_tensors(state), _tensors(into), strict=True)), name
                print(f"  round {n + 1} {name:12s} save {times[name]['save'][-1]:7.2f} s  load {times[name]['load'][-1]:7.2f} s",
                      flush=True)
        # The limits, from the files of Inert's last local checkpoint (the same bytes as the S3 objects hold).
        last_local = candidates["inert local"][2](args.repeat - 1)
        files = [os.path.join(top, name) for top, _, names in os.walk(last_local) for name in names]
        limits = (write_limit([os.path.getsize(f) for f in files], local, threads=args.threads, sync=False),
                  pread_limit(file_ranges(files), threads=2)) if files and "inert local" not in failed else None
    finally:
        server.stop()
        shutil.rmtree(local, ignore_errors=True)

    print(f"\ndcp.save / dcp.load of {nbytes / (1 << 20):.0f} MiB (64 parameters + Adam), best of {args.repeat} "
          f"(median), writers with thread_count={args.threads}; moto S3 server on 127.0.0.1")
    print(f"{'':14s}{'save':>18s}{'load':>18s}")
    for name, runs in times.items():
        if name in failed:
            print(f"{name:14s} failed: {failed[name]}")
            continue
        print(f"{name:14s}" + "".join(f"{min(runs[k]):9.2f} s ({statistics.median(runs[k]):5.2f})" for k in ("save", "load")))
    if "dcp fsspec" not in failed and "inert fsspec" not in failed:
        base, ours = times["dcp fsspec"], times["inert fsspec"]
        for what in ("save", "load"):
            best = min(base[what]) / min(ours[what])
            median = statistics.median(base[what]) / statistics.median(ours[what])
            print(f"{what}: inert fsspec vs dcp fsspec {best:.2f}x faster (medians {median:.2f}x)")
    if limits is not None:
        hows = (f"the same file sizes written, {args.threads} thread(s), no fsync",
                "the same files read with os.preadv, 2 threads")
        for (what, how), limit in zip(zip(("save", "load"), hows, strict=True), limits, strict=True):
            for name in ("inert fsspec", "inert local"):
                if name in failed:
                    continue
                print(report(f"the {what} ({name})", limit, statistics.median(times[name][what]), how))
    print(load_line())


def _tensors(state: Any) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for value in state.values() for t in _tensors(value)]
    return []


if __name__ == "__main__":
    main()
