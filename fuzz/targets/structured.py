#!/usr/bin/env python3
"""Structure-aware fuzzing: valid values, encoded, then damaged.

The fuzzer's bytes drive Hypothesis (``fuzz_one_input``): they choose a format,
a valid value from its registry strategy and up to four mutations.  The valid
encoding must round-trip; the damaged one must satisfy the differential oracle
and the harness's bounds.
"""

import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))
from fuzz import harness  # noqa: E402
from fuzz.registry import FORMATS  # noqa: E402

harness.instrument(*FORMATS)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fuzz.oracle import differential, mutate, mutations, same_value  # noqa: E402
from fuzz.registry import codec  # noqa: E402


@settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def check(data: st.DataObject) -> None:
    entry = data.draw(st.sampled_from(list(FORMATS.values())), label="format")
    module = codec(entry)
    value = data.draw(entry.values, label="value")
    encoded = module.encode(value)
    assert same_value(module.decode(encoded), value), "round trip changed the value"
    damaged = mutate(encoded, data.draw(mutations, label="mutations"))
    differential(entry, damaged, data.draw(st.sampled_from(entry.decode_kwargs), label="kwargs"), run=harness.guarded)


test_one_input = check.hypothesis.fuzz_one_input  # type: ignore[attr-defined]

if __name__ == "__main__":
    harness.main(test_one_input)
