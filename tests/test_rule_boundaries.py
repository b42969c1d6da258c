"""Each rule's compiled Python and C against the rule's sentence, on vectors at its boundary.

The verdicts below are written from the rules' sentences (spec/*.py), not computed from the compiled
rules: for each rule, a value just inside its boundary and one just outside.  Each value is checked by
the codec's compiled rule function (``_rules_<Typename>``) and, as bytes (written with that function
skipped, as a hostile writer would), by the generated C reader through the C testee; both must accept
the one inside and refuse the one outside naming the rule's field.  The C runtime's saturating product
is checked against exact products too.
"""

from __future__ import annotations

import ctypes
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest

from inert.codecs import checkpoint_shard, shm_descriptor, shm_samples_meta
from inert.conformance._protocol import Request
from inert.conformance._testee import Testee as CTestee
from inert.spec import _rule_expr

C_DIR = Path(__file__).resolve().parent.parent / "c"
U64 = (1 << 64) - 1
I64 = (1 << 63) - 1
DESCRIPTOR = {"worker_id": 1, "shm_chunk_id": 3, "shm_capacity": 100, "offset": 50, "num_bytes": 50}
ARRAY = {"kind": "ARRAY", "offset": 8, "nbytes": 24, "dtype": "<f4", "shape": [2, 3]}
TENSOR = {"kind": "TENSOR", "dtype": "FLOAT32", "shape": [2, 3], "data": bytes(24)}


def _with(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


# (rule id, codec, typename, value, params, the field a refusal names or None for acceptance).  From the sentences:
CASES: list[tuple[str, ModuleType, str, dict[str, Any], dict[str, Any], str | None]] = [
    # "The worker_id and shm_chunk_id are not negative."
    ("shm-descriptor.ids", shm_descriptor, "Descriptor", _with(DESCRIPTOR, worker_id=0, shm_chunk_id=0), {}, None),
    ("shm-descriptor.ids", shm_descriptor, "Descriptor", _with(DESCRIPTOR, worker_id=-1), {}, "worker_id"),
    ("shm-descriptor.ids", shm_descriptor, "Descriptor", _with(DESCRIPTOR, shm_chunk_id=-1), {}, "shm_chunk_id"),
    # "The message lies inside the chunk: offset + num_bytes <= shm_capacity." (exact: no wrap at 2**64)
    ("shm-descriptor.inside", shm_descriptor, "Descriptor", DESCRIPTOR, {}, None),
    ("shm-descriptor.inside", shm_descriptor, "Descriptor", _with(DESCRIPTOR, num_bytes=51), {}, "num_bytes"),
    ("shm-descriptor.inside", shm_descriptor, "Descriptor",
     _with(DESCRIPTOR, shm_capacity=U64, offset=U64, num_bytes=1), {}, "num_bytes"),
    ("shm-descriptor.inside", shm_descriptor, "Descriptor",
     _with(DESCRIPTOR, shm_capacity=U64, offset=U64 - 1, num_bytes=1), {}, None),
    # "When the caller passes chunk_size, shm_capacity equals it."
    ("shm-descriptor.capacity", shm_descriptor, "Descriptor", DESCRIPTOR, {"chunk_size": 100}, None),
    ("shm-descriptor.capacity", shm_descriptor, "Descriptor", DESCRIPTOR, {"chunk_size": 101}, "shm_capacity"),
    ("shm-descriptor.capacity", shm_descriptor, "Descriptor", DESCRIPTOR, {"chunk_size": 99}, "shm_capacity"),
    # "The nbytes field equals prod(shape) * itemsize(dtype)."
    ("shm-samples-meta.nbytes", shm_samples_meta, "ArraySample", ARRAY, {}, None),
    ("shm-samples-meta.nbytes", shm_samples_meta, "ArraySample", _with(ARRAY, nbytes=25), {}, "nbytes"),
    ("shm-samples-meta.nbytes", shm_samples_meta, "ArraySample", _with(ARRAY, nbytes=23), {}, "nbytes"),
    # "The offset is a multiple of the itemsize."
    ("shm-samples-meta.offset-aligned", shm_samples_meta, "ArraySample", _with(ARRAY, offset=4), {}, None),
    ("shm-samples-meta.offset-aligned", shm_samples_meta, "ArraySample", _with(ARRAY, offset=6), {}, "offset"),
    # "When the caller passes chunk_size, offset + nbytes <= chunk_size"
    ("shm-samples-meta.inside-chunk", shm_samples_meta, "ArraySample", ARRAY, {"chunk_size": 32}, None),
    ("shm-samples-meta.inside-chunk", shm_samples_meta, "ArraySample", ARRAY, {"chunk_size": 31}, "nbytes"),
    # "the span, every dimension with a 0 counted as 1, is at most 2**63 - 1 bytes (empty ones included)"
    ("shm-samples-meta.span", shm_samples_meta, "ArraySample", _with(ARRAY, shape=[0, (1 << 61) - 1], nbytes=0), {}, None),
    ("shm-samples-meta.span", shm_samples_meta, "ArraySample", _with(ARRAY, shape=[0, 1 << 61], nbytes=0), {}, "shape"),
    # "offset + nbytes <= chunk_size (the exact sum, never wrapped at 64 bits)"
    ("shm-samples-meta.inside-chunk", shm_samples_meta, "ArraySample", _with(ARRAY, offset=U64 - 7), {"chunk_size": U64},
     "nbytes"),
    # "numpy's dtype.str of a plain numeric type"
    ("shm-samples-meta.dtype", shm_samples_meta, "ArraySample", _with(ARRAY, dtype="<f8", nbytes=48), {}, None),
    ("shm-samples-meta.dtype", shm_samples_meta, "ArraySample", _with(ARRAY, dtype="<f3"), {}, "dtype"),
    # "No dimension of shape exceeds 2**63 - 1, even in a zero-size tensor."
    ("tensor.dimension", checkpoint_shard, "TensorRecord", _with(TENSOR, shape=[I64, 0], data=b""), {}, None),
    ("tensor.dimension", checkpoint_shard, "TensorRecord", _with(TENSOR, shape=[3, I64 + 1, 0], data=b""), {}, "shape[1]"),
    # "The payload holds exactly prod(shape) * itemsize(dtype) bytes (a 0-d tensor one element)."
    ("tensor.length", checkpoint_shard, "TensorRecord", _with(TENSOR, shape=[], data=bytes(4)), {}, None),
    ("tensor.length", checkpoint_shard, "TensorRecord", _with(TENSOR, shape=[], data=b""), {}, "data"),
    ("tensor.length", checkpoint_shard, "TensorRecord", _with(TENSOR, data=bytes(25)), {}, "data"),
    ("tensor.length", checkpoint_shard, "TensorRecord", _with(TENSOR, data=bytes(23)), {}, "data"),
    # "The element count times the itemsize is below 2**64; a zero-size tensor passes whatever its other dims."
    ("tensor.shape-overflow", checkpoint_shard, "TensorRecord",
     _with(TENSOR, dtype="UINT8", shape=[1 << 32, 1 << 32], data=b""), {}, "shape"),
    ("tensor.shape-overflow", checkpoint_shard, "TensorRecord",  # below 2**64: the next rule (length) is the fault
     _with(TENSOR, dtype="UINT8", shape=[1 << 32, (1 << 32) - 1], data=b""), {}, "data"),
    ("tensor.shape-overflow", checkpoint_shard, "TensorRecord", _with(TENSOR, shape=[0, I64, I64], data=b""), {}, None),
    # "Every element of a BOOL tensor is the byte 0 or 1."
    ("tensor.bool-elements", checkpoint_shard, "TensorRecord", _with(TENSOR, dtype="BOOL", shape=[2], data=b"\x00\x01"), {},
     None),
    ("tensor.bool-elements", checkpoint_shard, "TensorRecord", _with(TENSOR, dtype="BOOL", shape=[2], data=b"\x00\x02"), {},
     "data"),
]


def _forged_bytes(codec: ModuleType, value: dict[str, Any], version: int) -> tuple[str, int, bytes]:
    """(format as the testee names it, version, the bytes of ``value``) written with every rule skipped."""
    from inert import _interpret
    from inert.spec import FORMATS

    fmt = FORMATS[codec.FORMAT]
    with mock.patch.object(_interpret, "fault", lambda rules, env: None):
        if codec is checkpoint_shard:
            return "checkpoint-shard.record", version, _interpret.interpret_encode(fmt, {"body": value}, part="record")
        if codec is shm_samples_meta:
            return codec.FORMAT, version, _interpret.interpret_encode(fmt, {"samples": [value]}, version)
        extra = {"message_crc32": 0, "meta_crc32": 0} if version == 2 else {}  # v2 also carries the payload's CRCs
        return codec.FORMAT, version, _interpret.interpret_encode(fmt, {**value, **extra}, version)


def _decoded(codec: ModuleType, value: dict[str, Any]) -> dict[str, Any]:
    """The record as a reader hands it to its rules (tags as members), read with every rule skipped."""
    from inert import _interpret
    from inert.spec import FORMATS

    fmt = FORMATS[codec.FORMAT]
    _name, version, data = _forged_bytes(codec, value, 1)
    with mock.patch.object(_interpret, "fault", lambda rules, env: None):
        if codec is checkpoint_shard:
            return _interpret.interpret_decode(fmt, data, part="record")["body"]  # type: ignore[no-any-return]
        decoded = _interpret.interpret_decode(fmt, data, version)
    return decoded["samples"][0] if codec is shm_samples_meta else decoded  # type: ignore[no-any-return]


def _ids(case: tuple[Any, ...]) -> str:
    return f"{case[0]}-{'accept' if case[5] is None else case[5]}"


def test_every_rule_with_a_case_exists_and_each_has_both_sides() -> None:
    from inert.spec import FORMATS

    declared = {rule.id for fmt in FORMATS.values() for rule in fmt.declared}
    assert {case[0] for case in CASES} <= declared
    refused = {case[0] for case in CASES if case[5] is not None}
    assert refused == {case[0] for case in CASES}, "every rule here has a refused vector"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_the_compiled_python_rule_gives_the_sentence_verdict(case: tuple[Any, ...]) -> None:
    _rule, codec, typename, value, params, field = case
    got = getattr(codec, f"_rules_{typename}")(_decoded(codec, value), params)
    assert (None if got is None else got[0]) == field, got


@pytest.fixture(scope="module")
def c_testee(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CTestee]:
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "the C readers need a C compiler"
    build = tmp_path_factory.mktemp("c-build")
    subprocess.run(["make", "-s", "-C", str(C_DIR), f"BUILD={build}", f"CC={compiler}", f"{build}/testee"],
                   check=True, timeout=300)
    with CTestee([str(build / "testee")], timeout=30) as testee:
        yield testee


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_the_compiled_c_rule_gives_the_sentence_verdict(case: tuple[Any, ...], c_testee: CTestee) -> None:
    _rule, codec, _typename, value, params, field = case
    versions = (1, 2) if codec is shm_descriptor else (1,)
    for version in versions:
        name, version, data = _forged_bytes(codec, value, version)
        response = c_testee.ask(Request("decode", name, version, data, params))
        if field is None:
            assert response.result == "accept", response.message
            continue
        assert (response.result, response.kind) == ("reject", "invalid-value"), response.message
        path = response.message.split(": ")[2]
        assert path == field or path.endswith("." + field), response.message


def test_the_c_runtime_products_saturate_as_the_language_says(tmp_path: Path) -> None:
    """inert_i128_mul_sat against exact products: equal while |a * b| <= 2**100, else +-2**100 (the rules'
    comparisons are exact below that bound); 20,000 pairs around the 32-, 64- and 100-bit edges."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "the C readers need a C compiler"
    subprocess.run(["make", "-s", "-C", str(C_DIR), f"BUILD={tmp_path}", f"CC={compiler}", f"{tmp_path}/libinert_c.so"],
                   check=True, timeout=300)
    lib = ctypes.CDLL(str(tmp_path / "libinert_c.so"))

    class I128(ctypes.Structure):
        _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_int64)]

    lib.inert_i128_mul_sat.restype = I128
    lib.inert_i128_mul_sat.argtypes = [I128, I128]

    def pack(value: int) -> I128:
        bits = value & ((1 << 128) - 1)
        hi = bits >> 64
        return I128(bits & ((1 << 64) - 1), hi - (1 << 64) if hi >= 1 << 63 else hi)

    rng = random.Random(5)
    edges = [0, 1, 2, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, (1 << 64) - 1, 1 << 64, (1 << 100) - 1, 1 << 100, 1 << 110]
    for _ in range(20000):
        a, b = (rng.choice(edges) + rng.randrange(-2, 3) if rng.random() < 0.5 else rng.getrandbits(rng.randrange(1, 120))
                for _ in range(2))
        a, b = (max(-(1 << 120), min(1 << 120, x)) * rng.choice((1, -1)) for x in (a, b))
        exact = a * b
        want = exact if abs(exact) <= _rule_expr.SATURATE else (_rule_expr.SATURATE if exact > 0 else -_rule_expr.SATURATE)
        got = lib.inert_i128_mul_sat(pack(a), pack(b))
        assert (got.hi << 64) + got.lo == want, (a, b)
