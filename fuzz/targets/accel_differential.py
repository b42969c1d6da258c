#!/usr/bin/env python3
"""Differential fuzzing of the CPython accelerator (inert._accel) against the pure-Python codecs.

The first byte picks an accelerated format and ``decode`` keyword set from the registry; the rest
is the input.  The codec's ``decode`` with its accelerator and with it unbound (pure Python, what
``INERT_PURE_PYTHON=1`` gives) must give the same value (the oracle's canonical JSON, plus every
type and dict key order) or the same error (class, format, offset, field, message).  Run it as any
target: ``python fuzz/targets/accel_differential.py -max_total_time=60 fuzz/corpus/differential``.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))
from fuzz import harness  # noqa: E402
from fuzz.registry import FORMATS  # noqa: E402
from inert.gen.c_python import ACCELERATED  # noqa: E402

harness.instrument(*(name for name in FORMATS if name in ACCELERATED), grammar=False)

from fuzz.registry import cases, codec  # noqa: E402
from inert._errors import InertError  # noqa: E402

CASES = [(entry, kwargs) for entry, kwargs in cases() if entry.name in ACCELERATED]


def shape(value):  # type: ignore[no-untyped-def]
    """``value`` with every container's type and every dict's key order spelled out."""
    if isinstance(value, dict):
        return ("dict", [(k, shape(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return (type(value).__name__, [shape(v) for v in items])
    if isinstance(value, float) and value != value:
        return ("float", "nan")
    return (type(value).__name__, value)


def verdict(decode, data: bytes, kwargs):  # type: ignore[no-untyped-def]
    try:
        return "value", shape(decode(data, **kwargs))
    except InertError as exc:
        return type(exc).__name__, exc.format, exc.offset, exc.field, str(exc)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    entry, kwargs = CASES[data[0] % len(CASES)]
    module = codec(entry)
    accel = module._ACCEL
    assert accel is not None, "the accelerator is not built"
    fast = verdict(module.decode, data[1:], kwargs)
    module._ACCEL = None
    try:
        slow = verdict(module.decode, data[1:], kwargs)
    finally:
        module._ACCEL = accel
    if fast != slow:
        raise AssertionError(f"{entry.name} {dict(kwargs)} {data[1:].hex()}: accelerated {fast}, pure Python {slow}")


if __name__ == "__main__":
    harness.main(test_one_input)
