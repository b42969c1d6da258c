#!/usr/bin/env python3
"""Differential fuzzing of the generated codecs against the Construct-interpreted grammar.

The first byte picks a format and ``decode`` keyword set from the registry
(modulo their number); the rest is the input.  Both codecs must give the same
value or the same error (class and message); the generated one must also keep
the harness's invariant and bounds.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))
from fuzz import harness  # noqa: E402
from fuzz.registry import FORMATS  # noqa: E402

harness.instrument(*FORMATS)

from fuzz.oracle import differential  # noqa: E402
from fuzz.registry import cases  # noqa: E402

CASES = cases()


def test_one_input(data: bytes) -> None:
    if not data:
        return
    entry, kwargs = CASES[data[0] % len(CASES)]
    differential(entry, data[1:], kwargs, run=harness.guarded)


if __name__ == "__main__":
    harness.main(test_one_input)
