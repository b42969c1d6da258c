#!/usr/bin/env python3
"""Hostile ZSTD record bodies inflated by the checkpoint reader's rules (``fuzz/zstd_bodies.py``).

The fuzzer's bytes drive Hypothesis: they choose a family (honest, lying sizes, truncated,
bombs, flipped bytes) and its parameters; the inflation must give exactly the declared bytes
or an ``InertError``, within the harness's bounds for the stored bytes plus the declared length.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))
import atheris  # noqa: E402

with atheris.instrument_imports(include=["inert"]):
    import inert._zstd  # noqa: F401

from hypothesis import HealthCheck, given, settings  # noqa: E402

from fuzz import harness  # noqa: E402
from fuzz.zstd_bodies import bodies, check  # noqa: E402


@settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=bodies)
def run(body: tuple) -> None:
    check(body)


test_one_input = run.hypothesis.fuzz_one_input  # type: ignore[attr-defined]

if __name__ == "__main__":
    harness.main(test_one_input)
