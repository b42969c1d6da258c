"""The generated C writers (c/inert_<format>_write.c) write the Python encoders' bytes for the same value.

They run through the CPython accelerator's ``encode`` (inert._accel, built from c/; CI builds it),
which hands them the value as a tree.  Compared on every accept vector of the written formats and
on random valid values from the fuzzers' registry.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from inert.conformance._corpus import load_corpus

from fuzz.registry import FORMATS as REGISTRY
from fuzz.registry import codec
from inert import _accel
from inert.gen.c_writer import WRITTEN

NAMES = sorted(_accel.writers())


def test_every_written_format_has_its_writer_built() -> None:
    expected = {fmt if part is None else f"{fmt}.{part}" for fmt, parts in WRITTEN.items() for part in parts}
    assert set(NAMES) == expected


def _python_encode(name: str, value: Any, version: int) -> bytes:
    return bytes(codec(REGISTRY[name]).encode(value, version=version))


def _is_value_record(value: Any) -> bool:
    kind = value["body"]["kind"] if isinstance(value, dict) and isinstance(value.get("body"), dict) else None
    return kind == "VALUE" or (isinstance(kind, int) and int(kind) == 2)  # RecordKind.VALUE, by name or value


@pytest.mark.parametrize("name", NAMES)
def test_c_writer_bytes_equal_the_python_encoder_on_every_accept_vector(name: str) -> None:
    entry = REGISTRY[name]
    compared = unsupported = 0
    for vector in load_corpus(formats=[name]):
        if vector.value is not None or vector.accepted is None:
            continue
        value = codec(entry).decode(vector.data, version=vector.version, **vector.params)
        try:
            got = _accel.encode(name, value, vector.version)
        except TypeError as exc:  # a typed value (numpy, torch, a registered object): no value tree holds it
            assert _is_value_record(value) and "no value tree" in str(exc), (vector.test_name, exc)
            unsupported += 1
            continue
        assert got == _python_encode(name, value, vector.version), vector.test_name
        compared += 1
    assert compared >= 10, (compared, unsupported)


@pytest.mark.parametrize("name", NAMES)
def test_c_writer_bytes_equal_the_python_encoder_on_random_values(name: str) -> None:
    entry = REGISTRY[name]
    version = max(codec(entry).decode.__globals__["VERSIONS"]) if entry.part is None else 1

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(entry.values)
    def check(value: Any) -> None:
        try:
            got = _accel.encode(name, value, version)
        except TypeError as exc:
            assert _is_value_record(value) and "no value tree" in str(exc), exc
            return
        assert got == _python_encode(name, value, version)

    check()


def test_c_writer_refuses_what_the_python_encoder_refuses_for_its_shape() -> None:
    with pytest.raises(ValueError) as missing:
        _accel.encode("shm-samples-meta", {"samples": [{"kind": 0, "offset": 0}]}, 1)
    assert missing.value.args[:2] == ("write-type", "samples[0].nbytes")
    with pytest.raises(ValueError) as tag:
        _accel.encode("shm-samples-meta", {"samples": [{"kind": "NOPE"}]}, 1)
    assert tag.value.args[:2] == ("write-value", "samples[0].kind")
    with pytest.raises(ValueError) as long_text:
        _accel.encode("shm-samples-meta", {"samples": [{"kind": 0, "offset": 0, "nbytes": 0, "dtype": "x" * 17, "shape": []}]}, 1)
    assert long_text.value.args[:2] == ("write-value", "samples[0].dtype")


def test_value_documents_are_written_canonically() -> None:
    document = {
        "ints": [0, 127, 128, 255, 256, 65536, 2**32, 2**64 - 1, -1, -32, -33, -128, -129, -(2**15) - 1, -(2**63)],
        b"bin": (1.5, float("nan"), -0.0), "set": {"b", "a"}, "frozen": frozenset({b"z", b"y"}), "complex": 1 - 2j,
        "bytearray": bytearray(b"\x00\x01"), "none": None, "bools": [True, False], "long": "x" * 300, "bytes": b"y" * 70000,
        "empty": [(), {}, [], set()], "nested": [[[["deep"]]]],
    }
    name = "checkpoint-shard.record"
    for version in (1, 2):
        record = {"body": {"kind": "VALUE", "value": document}}
        assert _accel.encode(name, record, version) == _python_encode(name, record, version)
    with pytest.raises(ValueError) as int_key:  # map keys are str or bytes, as the Python encoder requires
        _accel.encode(name, {"body": {"kind": "VALUE", "value": {"a": 1, 1: 2}}}, 1)
    assert int_key.value.args[:2] == ("write-type", "body.value")
