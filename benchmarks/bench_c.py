"""Benchmark the generated C readers (c/) beside the Python baselines, in one run.

For each input: the C reader validating (no visitor) and visiting (every value reported to
empty callbacks), the generated Python codec's ``decode``, and ``pickle.loads`` of the same
content as its users pickle it today, all in CPU time (best of N).  Ratios are over ``pickle.loads``.

* the shm messages and the 256-array samples meta of ``bench_shm.py`` (DALI's objects);
* ``checkpoint-metadata`` of the 70B/Adam/64-way shape of ``bench_dcp.py`` (pickle with the GC
  on and off), with the C reader's throughput in GB/s of input validated (target: at least 1).

Beside them, the limit (benchmarks/limits.py): a memcpy of the input's bytes between preallocated
buffers, and the C reader's fraction of it (the limit's time over its validating time); the load
average before and after.

Run: ``python benchmarks/bench_c.py`` (builds ``c/build/bench`` with ``make -C c bench``).
The C readers only read; the CPython accelerator (C called from ``decode``) is not built yet, so
the Python figures are the pure-Python codec.
"""

from __future__ import annotations

import gc
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
C_DIR = HERE.parent / "c"
sys.path.insert(0, str(HERE))
from limits import fraction, load_line, memcpy_limit, report  # noqa: E402


def best(fn: Callable[[], Any], repeat: int) -> float:
    """Best CPU time of ``fn`` over ``repeat`` runs, in nanoseconds (as c/bench.c measures: a shared
    machine's waits do not count)."""
    times = []
    for _ in range(repeat):
        start = time.process_time_ns()
        fn()
        times.append(time.process_time_ns() - start)
    return float(min(times))


def c_times(fmt: str, data: bytes, repeat: int, *extra: str) -> tuple[float, float]:
    """Best validate and visit times of the C reader of ``fmt`` on ``data``, in nanoseconds."""
    with tempfile.NamedTemporaryFile(suffix=".bin") as f:
        f.write(data)
        f.flush()
        out = subprocess.run([str(C_DIR / "build" / "bench"), fmt, f.name, str(repeat), *extra], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"c/build/bench {fmt}: {out.stderr.strip()}")
    words = out.stdout.split()
    return float(words[1]), float(words[3])


def main() -> None:
    subprocess.run(["make", "-s", "-C", str(C_DIR), "bench"], check=True)
    import bench_shm

    print(load_line())
    print(f"{'input':<36} {'bytes':>8} | {'C valid.':>9} {'C visit':>9} {'py dec.':>9} {'pickle':>9} | "
          f"{'Cval/pkl':>8} {'Cvis/pkl':>8} {'py/pkl':>7} | {'limit':>7} {'of lim.':>7}   (ns)")
    for message in bench_shm.MESSAGES:
        codec = bench_shm.CODECS[message.format]
        data = codec.encode(message.value)
        pickled = pickle.dumps(message.objects)
        validate, visit = c_times(message.format, data, 2000)
        python = best(lambda: codec.decode(data), 2000)  # noqa: B023
        loads = best(lambda: pickle.loads(pickled), 2000)  # noqa: B023
        print(f"{message.name:<36} {len(data):>8} | {validate:>9.0f} {visit:>9.0f} {python:>9.0f} {loads:>9.0f} | "
              f"{validate / loads:>8.3f} {visit / loads:>8.3f} {python / loads:>7.2f} | "
              f"{(limit := memcpy_limit(len(data)) * 1e9):>7.0f} {fraction(limit, validate):>7.3f}")

    import bench_dcp

    from inert.codecs import checkpoint_metadata
    from inert.torch import dumps_metadata

    metadata = bench_dcp.synthetic_70b()
    data = dumps_metadata(metadata)
    pickled = pickle.dumps(metadata)
    validate, visit = c_times("checkpoint-metadata", data, 20)
    unchecked, _ = c_times("checkpoint-metadata", data, 20, "nocrc")
    python = best(lambda: checkpoint_metadata.decode(data), 5)
    loads = best(lambda: pickle.loads(pickled), 5)
    gc.disable()
    try:
        loads_nogc = best(lambda: pickle.loads(pickled), 5)
    finally:
        gc.enable()
    print(f"\ncheckpoint-metadata 70B/Adam/64-way: {len(data) / (1 << 20):.1f} MiB (pickled {len(pickled) / (1 << 20):.1f} MiB)")
    print(f"  C validate {validate / 1e6:.2f} ms = {len(data) / validate:.2f} GB/s   C visit {visit / 1e6:.2f} ms   "
          f"Python decode {python / 1e6:.1f} ms   pickle.loads {loads / 1e6:.1f} ms ({loads_nogc / 1e6:.1f} ms GC off)")
    print(f"  C validate without the CRC-32 (verify_checksums=false) {unchecked / 1e6:.2f} ms = {len(data) / unchecked:.2f} GB/s")
    print(f"  C validate / pickle.loads (GC off) {validate / loads_nogc:.3f}   C visit / pickle.loads (GC off) "
          f"{visit / loads_nogc:.3f}   Python decode / pickle.loads (GC off) {python / loads_nogc:.2f}")
    print(report("the C validate", memcpy_limit(len(data)), validate / 1e9, "a memcpy of the encoded bytes"))
    print("limit: a memcpy of the input's bytes between preallocated buffers (benchmarks/limits.py); "
          "of lim.: the limit's time over the C reader's validating time")
    print(load_line())


if __name__ == "__main__":
    main()
