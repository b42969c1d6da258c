#!/usr/bin/env python3
"""Differential fuzzing of the generated C writers against the Python encoders.

The first byte picks a written format (``inert.gen.c_writer.WRITTEN``) from the registry; the rest
is an input.  When the Python reader accepts it, the value it gives is encoded by the Python
encoder and by the C writer (through ``inert._accel.encode``), which must give the same bytes (typed
value-document extensions included).  Run it as any target:
``python fuzz/targets/c_writer_differential.py -max_total_time=60 fuzz/corpus/differential``.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))
from fuzz import harness  # noqa: E402
from fuzz.registry import FORMATS  # noqa: E402

harness.instrument(*(name for name in FORMATS if name.partition(".")[0] in ("shm-message", "shm-samples-meta",
                                                                           "checkpoint-shard")), grammar=False)

from fuzz.registry import codec  # noqa: E402
from inert import _accel  # noqa: E402
from inert._errors import InertError  # noqa: E402

NAMES = sorted(_accel.writers())


def test_one_input(data: bytes) -> None:
    if not data:
        return
    name = NAMES[data[0] % len(NAMES)]
    module = codec(FORMATS[name])
    try:
        value = module.decode(data[1:])
    except InertError:
        return
    expected = bytes(module.encode(value))  # the latest version: 2 for checkpoint-shard files and records
    got = _accel.encode(name, value, 2 if name.startswith("checkpoint-shard") else 1)
    if got != expected:
        raise AssertionError(f"{name} {data[1:].hex()}: C writer {got.hex()}, Python encoder {expected.hex()}")


if __name__ == "__main__":
    harness.main(test_one_input)
