"""Value documents: the canonical form is enforced, and decoding costs at most what the input pays for.

The bounds are Inert's promise for any reader (issue 16, case 4 and 5): at most 1 s of CPU per MiB
of input and at most 100 bytes of memory per input byte plus 1 MiB.  The inputs are the two that
broke it: keys chosen so that Python hashes them alike (950 KB took 29.6 s), and a document of a
million empty maps (+141 MiB, with the old depth checker's own stack).
"""

from __future__ import annotations

import resource
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgpack
import pytest

from inert import InertError, InvalidValueError
from inert._value_doc import pack_value, unpack_value
from inert.codecs import checkpoint_metadata
from inert.conformance._vectors_checkpoint_metadata import metadata_file, representative
from inert.spec._rules import VALUE_RULES

MIB = 1 << 20


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _bounded(read: Callable[[], Any], size: int) -> Any:
    """Run ``read`` twice and assert the cost bounds for an input of ``size`` bytes: CPU time on a plain
    run, memory under tracemalloc (which slows allocation several times).  The result or the InertError."""

    def run() -> Any:
        try:
            return read()
        except InertError as exc:
            return exc

    start = _cpu()
    result = run()
    cpu = _cpu() - start
    assert cpu <= size / MIB + 0.05, f"{cpu:.2f} s of CPU for {size} bytes"
    del result
    tracemalloc.start()
    try:
        result = run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 100 * size + MIB, f"{peak} bytes of memory for {size} bytes"
    return result


def _array_header(count: int) -> bytes:
    """The shortest array header (the canonical form refuses a longer one)."""
    return b"\xdc" + struct.pack(">H", count) if count < 1 << 16 else b"\xdd" + struct.pack(">I", count)


def _colliding_complex(count: int) -> list[msgpack.ExtType]:
    """Complex numbers that all hash alike: hash(r + i*j) = hash(r) + 1000003 * hash(i), and small integral
    floats hash to themselves."""
    return [msgpack.ExtType(2, struct.pack("<dd", float(-1000003 * k), float(k))) for k in range(count)]


def _assert_collide(keys: list[msgpack.ExtType]) -> None:
    hashes = {hash(complex(*struct.unpack("<dd", key.data))) for key in keys[:2000]}
    assert len(hashes) < 20, "the hostile keys must hash alike for the test to mean anything"


def _metadata_with_planner(document: bytes) -> bytes:
    return metadata_file({**representative(), "planner_raw": document}).data


def test_colliding_complex_keys_are_refused_within_the_bounds() -> None:
    keys = _colliding_complex(50_000)
    _assert_collide(keys)
    document = msgpack.packb(dict.fromkeys(keys, 0))
    data = _metadata_with_planner(document)
    assert len(data) > 900_000
    err = _bounded(lambda: checkpoint_metadata.decode(data), len(data))
    assert isinstance(err, InvalidValueError) and "str or bin" in str(err) and err.field == "planner_data"


def test_a_set_of_colliding_complex_numbers_is_refused_within_the_bounds() -> None:
    members = _colliding_complex(50_000)
    document = msgpack.packb(msgpack.ExtType(4, msgpack.packb(members)))
    data = _metadata_with_planner(document)
    err = _bounded(lambda: checkpoint_metadata.decode(data), len(data))
    assert isinstance(err, InvalidValueError) and "set member" in str(err)


def test_a_million_empty_maps_decode_within_the_bounds() -> None:
    count = 1_000_000
    document = _array_header(count) + b"\x80" * count
    data = _metadata_with_planner(document)
    decoded = _bounded(lambda: checkpoint_metadata.decode(data), len(data))
    assert not isinstance(decoded, Exception), decoded
    assert len(decoded["planner_data"]) == count and decoded["planner_data"][-1] == {}


@pytest.mark.parametrize(
    "element",
    [
        b"\x81\xa0" * 62 + b"\x80",  # maps of one key nested 62 deep: the most memory per input byte (about 93)
        b"\x91\x01",  # one-element lists: the most frames
        b"\xd4\x04\x90",  # empty sets
        b"\x81\xa0\xd4\x04\x90",  # maps holding an empty set
    ],
    ids=["nested-one-key-maps", "one-element-lists", "empty-sets", "maps-of-empty-sets"],
)
def test_containers_chosen_for_cost_decode_within_the_bounds(element: bytes) -> None:
    count = (MIB // 4) // len(element)  # the bound is per byte: a quarter MiB keeps the test quick
    document = _array_header(count) + element * count
    decoded = _bounded(lambda: unpack_value("t", document, 0, "v", 64), len(document))
    assert not isinstance(decoded, Exception), decoded
    assert len(decoded) == count


def test_many_distinct_str_keys_decode_within_the_bounds() -> None:
    document = pack_value("t", "v", {f"key{i:07d}": i for i in range(60_000)}, 64 * MIB, 64)
    decoded = _bounded(lambda: unpack_value("t", document, 0, "v", 64), len(document))
    assert len(decoded) == 60_000


def test_writers_sort_keys_and_members_and_refuse_other_key_types() -> None:
    document = pack_value("t", "v", {b"b": 1, "b": 2, "aa": 3, "é": {"y", "x", b"x"}}, MIB, 64)
    assert list(unpack_value("t", document, 0, "v", 64)) == ["aa", "b", "é", b"b"]
    assert document == pack_value("t", "v", {"é": {b"x", "x", "y"}, "aa": 3, "b": 2, b"b": 1}, MIB, 64)
    for bad in ({1: "a"}, {(1,): "a"}, {None: 1}, {"s": {1}}, frozenset({1.5})):
        with pytest.raises(TypeError, match="str or bytes"):
            pack_value("t", "v", bad, MIB, 64)


def test_writers_write_the_one_nan() -> None:
    payload_nan = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
    negative_nan = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]
    for nan in (payload_nan, negative_nan):
        assert pack_value("t", "v", nan, MIB, 64) == b"\xcb\x7f\xf8" + bytes(6)
        assert pack_value("t", "v", complex(nan, nan), MIB, 64)[2:] == struct.pack("<dd", float("nan"), float("nan"))


def test_every_canonical_form_rule_is_pinned_by_an_accepting_and_a_refusing_vector() -> None:
    from inert.conformance._vectors_checkpoint_shard import CANONICAL_FORM

    pinned = {(rule, outcome) for *_, outcome, _, rule in CANONICAL_FORM}
    decisions = {"value.shortest-int", "value.shortest-length", "value.float64", "value.nan", "value.key-order"}
    for rule in VALUE_RULES:
        if rule.id in decisions:  # a decision has both sides: the shortest form accepted beside a longer one refused
            assert {(rule.id, "accept"), (rule.id, "reject")} <= pinned, rule.id
