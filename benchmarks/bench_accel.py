"""Benchmark the CPython accelerator (inert._accel) beside the pure-Python codecs and ``pickle.loads``, in one run.

For each input, the generated codec's ``decode`` with the accelerator and with it unbound (pure
Python, what ``INERT_PURE_PYTHON=1`` gives), and ``pickle.loads`` of the same content as its users
pickle it today (DALI's objects, DCP's ``Metadata``), measured interleaved round after round in CPU
time, best round counting.  Ratios are over ``pickle.loads``:

* the shm messages (ScheduledTask, CompletedTask) and the 256-array samples meta of ``bench_shm.py``;
* ``checkpoint-metadata`` of the 70B/Adam/64-way shape of ``bench_dcp.py``, over ``pickle.loads``
  with the garbage collector on and off.

Targets (issue 20): samples meta at most 0.5x ``pickle.loads``, ScheduledTask at most 0.1x,
checkpoint-metadata 70B at most 0.5x GC-off ``pickle.loads``.

Beside them, the floor (``benchmarks/floor.c``, compiled here with the interpreter's compiler): the
same value made anew through CPython's C API with no input read (presized dicts, the same keys, each
int made again), what any reader returning these dicts pays at least.

Run: ``python benchmarks/bench_accel.py [--rounds N]`` (the accelerator must be built: ``pip install -e .``
or ``python setup.py build_ext --inplace``).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import pickle
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from limits import fraction, memcpy_limit, report  # noqa: E402


def loadavg() -> str:
    """The 1, 5 and 15-minute load averages (the machine is shared: figures are read beside them)."""
    path = Path("/proc/loadavg")
    return " ".join(path.read_text().split()[:3]) if path.exists() else "?"


def rounds(candidates: dict[str, Callable[[], Any]], count: int, inner: int) -> dict[str, float]:
    """Best CPU time per call of each candidate in ns, measured interleaved (a slow moment hits them all)."""
    best = dict.fromkeys(candidates, float("inf"))
    for _ in range(count):
        for name, fn in candidates.items():
            start = time.process_time_ns()
            for _ in range(inner):
                fn()
            best[name] = min(best[name], (time.process_time_ns() - start) / inner)
    return best


def floor_module() -> ModuleType | None:
    """benchmarks/floor.c built into a temporary directory, or None where it does not compile."""
    out = Path(tempfile.mkdtemp(prefix="inert-floor-")) / f"floor{sysconfig.get_config_var('EXT_SUFFIX')}"
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    source = Path(__file__).resolve().parent / "floor.c"
    build = subprocess.run(
        [*cc, "-O2", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(out)],
        capture_output=True, text=True,
    )
    if build.returncode:
        return None
    spec = importlib.util.spec_from_file_location("floor", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pure(codec: ModuleType, fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` run with ``codec``'s accelerator unbound."""
    def run() -> Any:
        accel, codec._ACCEL = codec._ACCEL, None
        try:
            return fn()
        finally:
            codec._ACCEL = accel
    return run


def no_gc(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        gc.disable()
        try:
            return fn()
        finally:
            gc.enable()
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()

    import bench_dcp
    import bench_shm

    from inert.codecs import checkpoint_metadata
    from inert.torch import dumps_metadata

    codecs = {*bench_shm.CODECS.values(), checkpoint_metadata}
    missing = [c.FORMAT for c in codecs if c._ACCEL is None]
    if missing:
        raise SystemExit(f"the accelerator is not bound for {missing}: build it (pip install -e .) and unset INERT_PURE_PYTHON")

    floor = floor_module()
    print(f"load average before: {loadavg()}")
    if floor is None:
        print("floor: benchmarks/floor.c did not compile; its columns are left out")
    print(f"{'input':<36} {'bytes':>8} | {'accel':>9} {'python':>9} {'pickle':>9} {'floor':>9} | "
          f"{'acc/pkl':>7} {'py/pkl':>7} {'py/acc':>6} {'flr/pkl':>7} | {'limit':>7} {'of lim.':>7}   (ns, CPU)")
    for message in bench_shm.MESSAGES:
        codec = bench_shm.CODECS[message.format]
        data = codec.encode(message.value)
        pickled = pickle.dumps(message.objects)
        value = codec.decode(data)
        assert value == pure(codec, lambda: codec.decode(data))()  # noqa: B023
        inner = 2000 if len(data) < 1000 else 20
        candidates = {
            "accel": lambda: codec.decode(data),  # noqa: B023
            "python": pure(codec, lambda: codec.decode(data)),  # noqa: B023
            "pickle": lambda: pickle.loads(pickled),  # noqa: B023
        }
        if floor is not None:
            assert floor.rebuild(value) == value
            candidates["floor"] = lambda: floor.rebuild(value)  # noqa: B023
        t = rounds(candidates, args.rounds, inner)
        t.setdefault("floor", float("nan"))
        times = " ".join(f"{t[name]:>9.0f}" for name in ("accel", "python", "pickle", "floor"))
        print(f"{message.name:<36} {len(data):>8} | {times} | {t['accel'] / t['pickle']:>7.3f} {t['python'] / t['pickle']:>7.3f} "
              f"{t['python'] / t['accel']:>6.1f} {t['floor'] / t['pickle']:>7.3f} | "
              f"{(limit := memcpy_limit(len(data)) * 1e9):>7.0f} {fraction(limit, t['accel']):>7.3f}")

    metadata = bench_dcp.synthetic_70b()
    data = dumps_metadata(metadata)
    pickled = pickle.dumps(metadata)
    decode = lambda: checkpoint_metadata.decode(data)  # noqa: E731
    t = rounds(
        {
            "accel": decode,
            "accel, GC off": no_gc(decode),
            "python": pure(checkpoint_metadata, decode),
            "python, GC off": no_gc(pure(checkpoint_metadata, decode)),
            "pickle": lambda: pickle.loads(pickled),
            "pickle, GC off": no_gc(lambda: pickle.loads(pickled)),
        },
        max(3, args.rounds // 6), 1,
    )
    mib = 1 << 20
    print(f"\ncheckpoint-metadata 70B/Adam/64-way: {len(data) / mib:.1f} MiB (pickled {len(pickled) / mib:.1f} MiB), ms:")
    for name, ns in t.items():
        off, on = ns / t["pickle, GC off"], ns / t["pickle"]
        print(f"  {name:<16} {ns / 1e6:8.1f}   / pickle GC off {off:6.3f}   / pickle GC on {on:6.3f}")
    print(report("the decode", memcpy_limit(len(data)), t["accel"] / 1e9, "memcpy of the encoded bytes"))
    print("limit: a memcpy of the input's bytes between preallocated buffers (benchmarks/limits.py); "
          "of lim.: the limit's time over the accelerated decode's")
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
