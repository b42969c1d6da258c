"""The generated C writers (c/inert_<format>_write.c) write the Python encoders' bytes for the same value.

They run through the CPython accelerator's ``encode`` (inert._accel, built from c/; CI builds it),
which hands them the value as a tree.  Compared on every accept vector of the written formats and
on random valid values from the fuzzers' registry, against the Python encoder itself (the message
codecs' ``encode`` asks the C writer first: ``_ACCEL_ENCODE``, unbound for the comparison).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from fuzz.registry import FORMATS as REGISTRY
from fuzz.registry import codec
from inert import _accel
from inert.conformance._corpus import load_corpus
from inert.gen.c_writer import WRITTEN

NAMES = sorted(_accel.writers())


def test_every_written_format_has_its_writer_built() -> None:
    expected = {fmt if part is None else f"{fmt}.{part}" for fmt, parts in WRITTEN.items() for part in parts}
    assert set(NAMES) == expected


@contextlib.contextmanager
def _pure_python_encode(module_name: str) -> Iterator[Any]:
    """The codec module with its C writer unbound (``_ACCEL_ENCODE = None``: its ``encode`` is the Python encoder's)."""
    module = importlib.import_module(f"inert.codecs.{module_name}")
    bound = vars(module).get("_ACCEL_ENCODE")
    if bound is not None:
        module._ACCEL_ENCODE = None
    try:
        yield module
    finally:
        if bound is not None:
            module._ACCEL_ENCODE = bound


def _python_encode(name: str, value: Any, version: int) -> bytes:
    with _pure_python_encode(REGISTRY[name].module_name):
        return bytes(codec(REGISTRY[name]).encode(value, version=version))


_SAMPLES = {"samples": [{"kind": "ARRAY", "offset": 128 * i, "nbytes": 12, "dtype": "<f4", "shape": [3]} for i in range(4)]}


def test_the_message_codecs_encode_with_their_c_writer() -> None:
    from inert.codecs import shm_message, shm_samples_meta

    assert shm_message._ACCEL_ENCODE is not None and shm_samples_meta._ACCEL_ENCODE is not None
    assert shm_samples_meta._ACCEL_ENCODE("shm-samples-meta", _SAMPLES, 1) == shm_samples_meta.encode(_SAMPLES)
    assert shm_samples_meta.encode(_SAMPLES) == _python_encode("shm-samples-meta", _SAMPLES, 1)


def test_what_the_c_writer_leaves_is_the_python_encoders() -> None:
    """Values it has no tree for (numpy integers, which the Python encoder takes by ``__index__``), refusals
    (the Python encoder's own error and text) and unknown versions: the C writer answers None, Python decides."""
    from inert._errors import WriteTypeError, WriteValueError
    from inert.codecs import shm_samples_meta

    numpy_ints = {"samples": [dict(s, offset=np.int64(s["offset"])) for s in _SAMPLES["samples"]]}
    assert shm_samples_meta._ACCEL_ENCODE("shm-samples-meta", numpy_ints, 1) is None
    assert shm_samples_meta.encode(numpy_ints) == shm_samples_meta.encode(_SAMPLES)  # type: ignore[arg-type]
    missing = {"samples": [{"kind": 0, "offset": 0}]}
    assert shm_samples_meta._ACCEL_ENCODE("shm-samples-meta", missing, 1) is None
    with pytest.raises(WriteTypeError) as caught:
        shm_samples_meta.encode(missing)  # type: ignore[arg-type]
    assert caught.value.field == "samples[0].nbytes" and "requires this key" in str(caught.value)
    unaligned = {"samples": [dict(_SAMPLES["samples"][0], offset=2)]}
    with pytest.raises(WriteValueError) as rule:
        shm_samples_meta.encode(unaligned)  # type: ignore[arg-type]
    assert rule.value.field == "samples[0].offset" and "not a multiple of the itemsize 4" in str(rule.value)
    assert shm_samples_meta._ACCEL_ENCODE("shm-samples-meta", _SAMPLES, 7) is None
    with pytest.raises(Exception, match="version 7"):
        shm_samples_meta.encode(_SAMPLES, version=7)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
def test_c_writer_bytes_equal_the_python_encoder_on_every_accept_vector(name: str) -> None:
    entry = REGISTRY[name]
    compared = accepted = 0
    for vector in load_corpus(formats=[name]):
        if vector.value is not None or vector.accepted is None or vector.format != name:  # not its parts' vectors
            continue
        accepted += 1
        value = codec(entry).decode(vector.data, version=vector.version, **vector.params)
        got = _accel.encode(name, value, vector.version)  # typed values (numpy, torch, registered objects) too
        assert got == _python_encode(name, value, vector.version), vector.test_name
        compared += 1
    assert compared == accepted >= 10, (compared, accepted)


@pytest.mark.parametrize("name", NAMES)
def test_c_writer_bytes_equal_the_python_encoder_on_random_values(name: str) -> None:
    entry = REGISTRY[name]
    version = max(codec(entry).decode.__globals__["VERSIONS"]) if entry.part is None else 1

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(entry.values)
    def check(value: Any) -> None:
        assert _accel.encode(name, value, version) == _python_encode(name, value, version)

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


def _typed_values() -> list[Any]:
    """Typed values (inert/_value_types.py) at and beyond their rules' edges, inside containers and nestings."""
    import io

    from inert._checks import _DTYPE_NAMES, CHECKPOINT_ITEMSIZES
    from inert._value_types import ArrayValue, DeviceValue, DTypeValue, ObjectValue, SizeValue

    values: list[Any] = []
    for name in _DTYPE_NAMES:
        size = CHECKPOINT_ITEMSIZES[name]
        values += [ArrayValue(name, (2, 3), bytes(6 * size)), ArrayValue(name, (), b"\x01" * size, True),
                   ArrayValue(name, (0, 1 << 62), b""), DTypeValue(name)]
    values += [
        ArrayValue("BOOL", (3,), b"\x00\x01\x02"), ArrayValue("BOOL", (), b"\x02", True), ArrayValue("INT8", (2,), b"\x00"),
        ArrayValue("INT8", (1,) * 64, b"\x07"), ArrayValue("INT8", (1,) * 65, b"\x07"), ArrayValue("INT8", (1,), b"\x07", True),
        ArrayValue("UINT8", (1 << 32, 1 << 32), b""), ArrayValue("UINT8", (300,), bytes(300)), ArrayValue("NOPE", (), b""),
        ArrayValue("UINT8", (70000,), bytes(70000)), DTypeValue("NOPE"),
        SizeValue(()), SizeValue((0, (1 << 63) - 1)), SizeValue((1 << 63,)), SizeValue((1,) * 64), SizeValue((1,) * 65),
        DeviceValue("cuda", 0), DeviceValue("cpu", None), DeviceValue("privateuseone", (1 << 31) - 1),
        DeviceValue("cuda", 1 << 31), DeviceValue("Cuda", 0), DeviceValue("", None), DeviceValue("a" * 32, 1),
        DeviceValue("a" * 33, 1), DeviceValue("x_9", 5),
        ObjectValue("m.C", {"w": [1.5, b"z"]}), ObjectValue("", 1), ObjectValue("n" * 256, None), ObjectValue("n" * 257, None),
        ObjectValue("é", (1, 2)), ObjectValue("o", ObjectValue("p", SizeValue((2,)))),
        io.BytesIO(b""), io.BytesIO(b"x" * 300),
        {"a": SizeValue((1,)), "b": [DTypeValue("FLOAT32"), (DeviceValue("cpu", None),)]}, {SizeValue((1,)): 1},
    ]
    for levels in (61, 62, 63, 64):  # a typed value's document is one level below it
        deep: Any = SizeValue((1,))
        for _ in range(levels):
            deep = [deep]
        values.append(deep)
    return values


@pytest.mark.parametrize("version", [1, 2])
def test_c_writer_writes_typed_values_as_python_does_or_refuses_them_alike(version: int) -> None:
    """Every typed extension at its edges: the same bytes, or a refusal of the same kind."""
    from inert._errors import WriteTypeError, WriteValueError

    name = "checkpoint-shard.record"
    written = refused = 0
    for value in _typed_values():
        record = {"body": {"kind": "VALUE", "value": value}}
        try:
            expected: Any = _python_encode(name, record, version)
        except WriteTypeError:
            expected = "write-type"
        except WriteValueError:
            expected = "write-value"
        try:
            got: Any = _accel.encode(name, record, version)
        except ValueError as exc:
            got = exc.args[0]
        assert got == expected, (value if len(repr(value)) < 300 else type(value), got if isinstance(got, str) else "bytes")
        written += isinstance(got, bytes)
        refused += isinstance(got, str)
    assert written > 60 and refused > 15, (written, refused)
