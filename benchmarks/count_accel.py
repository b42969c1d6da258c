"""Instructions per decode of a ScheduledTask and of the 256-array samples meta, with the accelerator.

Counted by valgrind's callgrind, which does not depend on the load of the (shared) machine as CPU
time does: the program is run twice under it with two numbers of decodes, and the difference is
divided by the difference of the numbers (imports and set-up cancel out).  String hashes are fixed
(``PYTHONHASHSEED=0``) because a dict's probe sequence, and so its instruction count, depends on them.

The limit is counted the same way: the input's bytes copied into a preallocated buffer (a memoryview
slice assignment, as benchmarks/limits.py's ``memcpy_limit`` copies, with its one call from Python),
and the decode's fraction of it is the copy's instructions over the decode's.

Run: ``python benchmarks/count_accel.py`` (needs ``valgrind``; a few minutes).  For the profile by
function, ``valgrind --tool=callgrind --toggle-collect=Bound_vectorcall python benchmarks/count_accel.py
--decode st 2000`` then ``callgrind_annotate --inclusive=no callgrind.out.<pid>``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from limits import fraction, load_line  # noqa: E402

RANGE = {"start": 33536, "end": 33600, "iteration": 524, "epoch": 7, "slice_start": 0, "slice_end": 64}
TASK = {"type": "SCHEDULED_TASK", "context_i": 3, "scheduled_i": 1051, "epoch_start": 7, "minibatch_i": 1051,
        "task": {"kind": "SAMPLE_RANGE", "range": RANGE}}
ALIGNED = (150528 + 127) // 128 * 128
SAMPLES = {"samples": [{"kind": "ARRAY", "offset": i * ALIGNED, "nbytes": 150528, "dtype": "|u1", "shape": [224, 224, 3]}
                       for i in range(256)]}
#: (input, decodes in the shorter and the longer run)
RUNS = {"st": (1000, 3000), "sm": (20, 60)}


def decode_loop(which: str, count: int, copy: bool = False) -> None:
    """``count`` decodes of the input, or (``copy``) ``count`` copies of its bytes into a preallocated buffer."""
    from inert.codecs import shm_message, shm_samples_meta

    codec, value = (shm_message, TASK) if which == "st" else (shm_samples_meta, SAMPLES)
    if codec._ACCEL is None:
        raise SystemExit("the accelerator is not bound: build it (pip install -e .) and unset INERT_PURE_PYTHON")
    data = codec.encode(value)
    if copy:
        source, dest = memoryview(data), memoryview(bytearray(len(data)))
        for _ in range(count):
            dest[:] = source
        return
    for _ in range(count):
        codec.decode(data)


def instructions(which: str, count: int, mode: str = "--decode") -> int:
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    run = subprocess.run(
        [*valgrind, sys.executable, __file__, mode, which, str(count)],
        capture_output=True, text=True, env=os.environ | {"PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}, check=True,
    )
    found = re.search(r"Collected : (\d+)", run.stderr)
    assert found, run.stderr[-2000:]
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decode", nargs=2, metavar=("WHICH", "COUNT"), help="(internal) decode COUNT times, st or sm")
    parser.add_argument("--copy", nargs=2, metavar=("WHICH", "COUNT"), help="(internal) copy the input COUNT times")
    args = parser.parse_args()
    if args.decode or args.copy:
        which, count = args.decode or args.copy
        decode_loop(which, int(count), copy=bool(args.copy))
        return
    print(load_line())
    for which, (short, long) in RUNS.items():
        per = (instructions(which, long) - instructions(which, short)) // (long - short)
        copy = (instructions(which, long * 10, "--copy") - instructions(which, short * 10, "--copy")) // (10 * (long - short))
        name = "ScheduledTask" if which == "st" else "samples meta (256 arrays)"
        print(f"{name:<28} {per:>10,} instructions per decode (the call from Python and freeing the value included)")
        print(f"{'':<28} {copy:>10,} per copy of its bytes into a preallocated buffer (the limit): "
              f"{fraction(copy, per):.3g} of the limit")
    print(load_line())


if __name__ == "__main__":
    main()
