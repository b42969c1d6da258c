"""The state types training saves beside its tensors, through dcp.save and dcp.load: Inert against DCP's own classes.

    python benchmarks/bench_values.py [--repeat 7] [--loaders 8]

The state: a small model's parameters (so that values dominate) plus, per data
loader, numpy's RNG state (a uint32[624] array in a tuple), a shuffled index
array of 100,000 int64, a few numpy scalars, a ``torch.Size``, a dtype, a
device and an ``io.BytesIO`` of 64 KiB.  Inert stores them as typed MessagePack
values and rebuilds them without unpickling; DCP's own writer ``torch.save``s
each value and its reader unpickles it with ``weights_only=False``.  Both write
with ``sync_files=False``; loads read a warm page cache.  Runs take turns; each
time is the best of ``--repeat``; ratios above 1 favour Inert.
"""

from __future__ import annotations

import argparse
import inspect
import io
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from limits import file_ranges, load_line, pread_limit, report, write_limit  # noqa: E402

import inert.torch

warnings.filterwarnings("ignore", message="torch.distributed is disabled")
ONE = {"no_dist": True} if "no_dist" in inspect.signature(dcp.save).parameters else {}


def state(loaders: int) -> dict[str, Any]:
    rng = np.random.RandomState(0)
    return {
        "model": torch.nn.Linear(64, 64).state_dict(),
        "loaders": {
            f"l{i}": {
                "rng": np.random.RandomState(i).get_state(),
                "order": rng.permutation(100_000),
                "epoch": np.int64(3), "lr_scale": np.float32(0.5),
                "shape": torch.Size([8, 3, 224, 224]), "dtype": torch.bfloat16, "device": torch.device("cuda", 0),
                "blob": io.BytesIO(rng.bytes(64 << 10)),
            } for i in range(loaders)
        },
    }


def blank(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: blank(v) for k, v in value.items()}
    return torch.zeros_like(value) if isinstance(value, torch.Tensor) else None


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--loaders", type=int, default=8)
    args = parser.parse_args()
    print(load_line())
    source = state(args.loaders)
    root = tempfile.mkdtemp(prefix="bench_values_")
    try:
        paths = {"inert": os.path.join(root, "inert"), "dcp": os.path.join(root, "dcp")}
        writers = {"inert": lambda p: inert.torch.FileSystemWriter(p, sync_files=False),
                   "dcp": lambda p: dcp.FileSystemWriter(p, sync_files=False, overwrite=True)}
        readers = {"inert": inert.torch.FileSystemReader, "dcp": dcp.FileSystemReader}
        save, load = {}, {}
        for _ in range(2):  # take turns: both see the same background load
            for name in ("inert", "dcp"):
                save[name] = best(lambda n=name: dcp.save(source, storage_writer=writers[n](paths[n]), **ONE), args.repeat)
                load[name] = best(lambda n=name: dcp.load(blank(source), storage_reader=readers[n](paths[n]), **ONE),
                                  args.repeat)
        size = {n: sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p)) for n, p in paths.items()}
        print(f"{args.loaders} loaders' state (numpy RNG state, 100k-int64 index, scalars, Size, dtype, device, 64 KiB BytesIO)")
        print(f"save  inert {save['inert'] * 1e3:7.1f} ms  dcp (torch.save per value) {save['dcp'] * 1e3:7.1f} ms"
              f"  ratio {save['dcp'] / save['inert']:.2f}x")
        print(f"load  inert {load['inert'] * 1e3:7.1f} ms  dcp (unpickling, weights_only=False) {load['dcp'] * 1e3:7.1f} ms"
              f"  ratio {load['dcp'] / load['inert']:.2f}x")
        print(f"size  inert {size['inert'] / 1e6:.2f} MB  dcp {size['dcp'] / 1e6:.2f} MB"
              f"  ratio {size['dcp'] / size['inert']:.2f}x")
        files = sorted(os.path.join(paths["inert"], f) for f in os.listdir(paths["inert"]))
        written = write_limit([os.path.getsize(f) for f in files], root, threads=1, sync=False, repeat=args.repeat)
        print(report("the save", written, save["inert"], "Inert's file sizes written, 1 thread, no fsync"))
        print(report("the load", pread_limit(file_ranges(files), threads=2, repeat=args.repeat), load["inert"],
                     "Inert's files read with os.preadv, 2 threads"))
        print(load_line())
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
