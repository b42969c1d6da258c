#!/usr/bin/env python3
"""Differential fuzzing of the generated C readers against the Python reader's verdicts.

The first byte picks a format and ``decode`` keyword set from the registry; the rest is the input.
The C reader (through ctypes, ``fuzz/c_reader.py``) and the interpreted grammar must agree: both
accept, or both refuse with the same kind, offset and field path (the C readers check every rule
of the grammar).  Run it as any target: ``python fuzz/targets/c_differential.py -max_total_time=60``.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))
from fuzz import harness  # noqa: E402
from fuzz.registry import FORMATS  # noqa: E402

harness.instrument(*FORMATS)

from fuzz.c_reader import CReaders  # noqa: E402
from fuzz.registry import cases  # noqa: E402
from inert._errors import InertError  # noqa: E402
from inert._interpret import interpret_decode  # noqa: E402
from inert.spec import FORMATS as GRAMMARS  # noqa: E402

CASES = cases()
C = CReaders()


def python_verdict(entry, data: bytes, kwargs) -> tuple[str, int, str] | None:  # type: ignore[no-untyped-def]
    grammar = GRAMMARS[entry.format]
    params = {k: v for k, v in kwargs.items() if k != "version"}
    try:
        interpret_decode(grammar, data, kwargs.get("version"), part=entry.part, **params)
    except InertError as exc:
        return exc.kind, exc.offset, exc.field
    return None


def test_one_input(data: bytes) -> None:
    if not data:
        return
    entry, kwargs = CASES[data[0] % len(CASES)]
    expected = python_verdict(entry, data[1:], kwargs)
    got = C.verdict(entry.name, data[1:], kwargs)
    if got != expected:
        raise AssertionError(f"{entry.name} {dict(kwargs)} {data[1:].hex()}: C {got}, Python {expected}")


if __name__ == "__main__":
    harness.main(test_one_input)
