#!/usr/bin/env python3
"""Fuzz one reader: ``decode.py <format> [libFuzzer flags] [corpus dirs]``.

The format may instead come from ``INERT_FUZZ_FORMAT``; the script sets it,
so that the copies of itself libFuzzer starts (``-minimize_crash``) fuzz the
same reader.

Invariant: ``decode`` returns a value or raises an ``InertError`` subclass,
within the harness's time and memory bounds, for every ``decode`` keyword set
the registry lists; and it reads a ``memoryview`` of the bytes (what a
shared-memory channel hands it) exactly as it reads the bytes.
"""

import os
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))
from fuzz import harness  # noqa: E402
from fuzz.oracle import Disagreement, outcome  # noqa: E402
from fuzz.registry import FORMATS, codec  # noqa: E402

ARGS = sys.argv[1:]
if ARGS and ARGS[0] in FORMATS:
    os.environ["INERT_FUZZ_FORMAT"] = ARGS.pop(0)
if os.environ.get("INERT_FUZZ_FORMAT") not in FORMATS:
    sys.exit(f"usage: {sys.argv[0]} {{{','.join(FORMATS)}}} [libFuzzer flags] [corpus dirs]")
ENTRY = FORMATS[os.environ["INERT_FUZZ_FORMAT"]]
harness.instrument(ENTRY.name, grammar=False)
DECODE = codec(ENTRY).decode


def test_one_input(data: bytes) -> None:
    view = memoryview(bytearray(data))
    for kwargs in ENTRY.decode_kwargs:
        from_bytes = harness.guarded(DECODE, data, kwargs)
        from_view = outcome(DECODE, view, kwargs)
        if from_view != from_bytes:
            raise Disagreement(f"{ENTRY.name} {kwargs} on {data.hex()}: bytes {from_bytes}, memoryview {from_view}")


if __name__ == "__main__":
    harness.main(test_one_input, ARGS)
