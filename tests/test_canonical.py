"""The canonical JSON mapping: one text per value, and back to the same value."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inert._canonical import from_json, to_json

_LEAVES = (
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.floats(allow_nan=False)
    | st.text(max_size=5) | st.binary(max_size=5) | st.builds(bytearray, st.binary(max_size=3))
    | st.complex_numbers(allow_nan=False)
)
_KEYS = st.text(max_size=3) | st.binary(max_size=3) | st.just("$set")
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.lists(inner, max_size=3)
    | st.lists(inner, max_size=3).map(tuple)
    | st.sets(st.binary(max_size=2) | st.text(max_size=2), max_size=3)
    | st.frozensets(st.text(max_size=2), max_size=3)
    | st.dictionaries(_KEYS, inner, max_size=3),
    max_leaves=12,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True would hide a lost type)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return sorted(map(repr, a)) == sorted(map(repr, b)) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@settings(max_examples=500, deadline=None)
@given(_VALUES)
def test_every_value_of_the_subset_comes_back_with_its_types(value: Any) -> None:
    text = to_json(value)
    assert _same(from_json(text), value), text
    assert to_json(from_json(text)) == text


def test_spellings() -> None:
    assert to_json((1, "a")) == '{"$tuple":[1,"a"]}'
    assert to_json({2, 1, "b"}) == '{"$set":["b",1,2]}'
    assert to_json(frozenset()) == '{"$frozenset":[]}'
    assert to_json(complex(1.5, math.inf)) == '{"$complex":[1.5,{"$float":"inf"}]}'
    assert to_json(bytearray(b"\x00")) == '{"$bytearray":"AA=="}'
    assert to_json({1: "a", "b": 2}) == '{"$map":[["b",2],[1,"a"]]}'
    assert to_json({"$bytes": "not bytes"}) == '{"$map":[["$bytes","not bytes"]]}'
    assert to_json({"b": [1.0], "a": None}) == '{"a":null,"b":[1.0]}'
    assert from_json('{"$map":[[{"$tuple":[1,2]},"x"]]}') == {(1, 2): "x"}


@pytest.mark.parametrize(
    "text",
    ['{"$set": 5}', '{"$complex": [1, 2, 3]}', '{"$map": [[[1], 2]]}', '{"$bytes": "@@"}', '{"$float": "x"}',
     '{"$tuple": [{"$set": [[1]]}]}', '{"$map": [1]}', '{"$bytearray": 7}', "[1, 2"],
)
def test_a_bad_spelling_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        from_json(text)


def test_cli_refuses_bad_json_in_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "inert", "encode", "--format", "checkpoint-shard.record", "-"],
        input=b'{"body": {"kind": "VALUE", "value": {"$set": 5}}}',
        capture_output=True,
    )
    assert result.returncode == 2 and result.stdout == b""
    assert result.stderr.decode().splitlines() == [
        "inert: encode: input is not canonical JSON: {'$set': ...} is not a valid spelling: 'int' object is not iterable"
    ]
