"""The shared-memory formats: both reference codecs agree with each other and with pinned bytes."""

from __future__ import annotations

import math
import pickle
import struct
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import inert
from inert import _checks
from inert._interpret import interpret_decode, interpret_encode
from inert.codecs import shm_descriptor, shm_message, shm_samples_meta
from inert.spec import FORMATS

SCHEDULED = {
    "type": "SCHEDULED_TASK",
    "context_i": 1,
    "scheduled_i": 2,
    "epoch_start": 3,
    "minibatch_i": 4,
    "task": {
        "kind": "SAMPLE_RANGE",
        "range": {"start": 10, "end": 20, "iteration": 1, "epoch": 0, "slice_start": 2, "slice_end": 8},
    },
}
COMPLETED = {
    "type": "COMPLETED_TASK",
    "worker_id": 1,
    "context_i": 0,
    "scheduled_i": 5,
    "minibatch_i": 5,
    "meta": {"offset": 4096, "size": 300},
    "exception": {"kind": "RUNTIME_ERROR", "message": "bad sample ü"},
    "traceback": "Traceback ...",
}
META = {
    "samples": [
        {"kind": "ARRAY", "offset": 0, "nbytes": 24, "dtype": "<f4", "shape": [2, 3]},
        {"kind": "TUPLE", "items": [{"kind": "ARRAY", "offset": 128, "nbytes": 1, "dtype": "|b1", "shape": []}]},
        {"kind": "LIST", "items": []},
    ]
}
DESCRIPTOR = {"worker_id": 1, "shm_chunk_id": 3, "shm_capacity": 8192, "offset": 0, "num_bytes": 100}

CASES = [
    (shm_message, SCHEDULED),
    (shm_message, COMPLETED),
    (shm_samples_meta, META),
    (shm_descriptor, {**DESCRIPTOR, "message_crc32": 0xFFFFFFFF, "meta_crc32": 0}),
]


def _same(a: Any, b: Any) -> bool:
    """Equal, with tags compared by name (the two codecs have their own enum classes)."""
    from inert._canonical import to_json

    return to_json(a) == to_json(b)


def check_grammar(module: Any, value: Any) -> bytes:
    """Decode equals the value, encode equals the bytes, both reference codecs agree."""
    fmt = FORMATS[module.FORMAT]
    data = module.encode(value)
    assert interpret_encode(fmt, value) == data
    decoded = module.decode(data)
    assert _same(decoded, interpret_decode(fmt, data))
    assert module.encode(decoded) == data
    for kind in (bytes, bytearray, memoryview):
        assert _same(module.decode(kind(data)), decoded)
    return data


@pytest.mark.parametrize(("module", "value"), CASES)
def test_round_trip(module: Any, value: Any) -> None:
    check_grammar(module, value)


def test_scheduled_task_bytes_follow_the_seed_layout() -> None:
    data = shm_message.encode(SCHEDULED)
    expected = struct.pack("<BqqqqB6q", 1, 1, 2, 3, 4, 0, 10, 20, 1, 0, 2, 8)
    assert data == expected


def test_completed_task_bytes_follow_the_seed_layout() -> None:
    message = "bad sample ü".encode()
    expected = (
        struct.pack("<Bqqqq", 2, 1, 0, 5, 5)
        + b"\x01"
        + struct.pack("<QQ", 4096, 300)
        + b"\x02"
        + struct.pack("<Q", len(message))
        + message
        + b"\x01"
        + struct.pack("<Q", 13)
        + b"Traceback ..."
    )
    assert shm_message.encode(COMPLETED) == expected


def test_descriptor_v1_is_dalis_32_bytes() -> None:
    assert shm_descriptor.encode(DESCRIPTOR, version=1) == struct.pack("<iiQQQ", 1, 3, 8192, 0, 100)
    assert shm_descriptor.decode(struct.pack("<iiQQQ", 1, 3, 8192, 0, 100), version=1) == DESCRIPTOR


def test_descriptor_v2_adds_two_checksums_and_is_the_default() -> None:
    value = {**DESCRIPTOR, "message_crc32": 0xDEADBEEF, "meta_crc32": 7}
    data = shm_descriptor.encode(value)
    assert data == struct.pack("<iiQQQII", 1, 3, 8192, 0, 100, 0xDEADBEEF, 7)
    assert shm_descriptor.decode(data) == value
    with pytest.raises(inert.TruncatedError, match="offset 32: message_crc32"):
        shm_descriptor.decode(data[:32])
    with pytest.raises(inert.TrailingBytesError, match="offset 32"):
        shm_descriptor.decode(data, version=1)
    with pytest.raises(inert.WriteTypeError, match="message_crc32"):
        shm_descriptor.encode(DESCRIPTOR)


@pytest.mark.parametrize(
    ("module", "data", "error", "where"),
    [
        (shm_message, b"\x03", inert.UnknownTagError, "offset 0: type"),
        (shm_message, b"\x01" + b"\x00" * 10, inert.TruncatedError, "offset 9: scheduled_i"),
        (shm_message, shm_message.encode(SCHEDULED) + b"\x00", inert.TrailingBytesError, "offset 82"),
        (
            shm_message,
            struct.pack("<BqqqqB6q", 1, 0, 0, 0, 0, 0, 5, 4, 0, 0, 0, 0),
            inert.InvalidValueError,
            "task.range.end",
        ),
        (shm_message, struct.pack("<BqqqqB", 2, 0, 0, 0, 0, 2), inert.InvalidValueError, "offset 33: meta"),
        (
            shm_message,
            struct.pack("<BqqqqBBQ", 2, 0, 0, 0, 0, 0, 2, 2) + b"\xff\xfe" + b"\x00",
            inert.InvalidValueError,
            "exception.message: invalid UTF-8",
        ),
        (
            shm_samples_meta,
            struct.pack("<QBQQQ", 1, 0, 0, 4, 2) + b"|O" + struct.pack("<IQ", 1, 1),
            inert.InvalidValueError,
            "samples[0].dtype",
        ),
        (shm_samples_meta, struct.pack("<Q", 1 << 40), inert.LimitError, "samples: count"),
        (shm_samples_meta, struct.pack("<Q", 1000), inert.TruncatedError, "samples: 1000 elements"),
        (
            shm_samples_meta,
            struct.pack("<QBQQQ", 1, 0, 0, 16, 3) + b"<f4" + struct.pack("<IQ", 1, 1),
            inert.InvalidValueError,
            "samples[0].nbytes: 16 declared, shape and dtype give 4",
        ),
        (
            shm_samples_meta,
            struct.pack("<QBQQQ", 1, 0, 2, 4, 3) + b"<f4" + struct.pack("<IQ", 1, 1),
            inert.InvalidValueError,
            "samples[0].offset",
        ),
        (
            shm_samples_meta,
            struct.pack("<QBQQQ", 1, 0, 0, 8, 3) + b"<f8" + struct.pack("<I3Q", 3, 1 << 62, 1 << 62, 4),
            inert.InvalidValueError,
            "samples[0].shape: [4611686018427387904, 4611686018427387904, 4] of <f8 spans more than 2",
        ),
        (shm_descriptor, struct.pack("<iiQQQII", 0, 0, 100, 50, 51, 0, 0), inert.InvalidValueError, "num_bytes"),
    ],
)
def test_rejections_agree(module: Any, data: bytes, error: type, where: str) -> None:
    with pytest.raises(error, match=where.replace("[", r"\[").replace("]", r"\]")) as generated:
        module.decode(data)
    with pytest.raises(error) as interpreted:
        interpret_decode(FORMATS[module.FORMAT], data)
    assert str(generated.value) == str(interpreted.value)


def _nested(depth: int) -> dict[str, Any]:
    sample: dict[str, Any] = {"kind": "ARRAY", "offset": 0, "nbytes": 1, "dtype": "|u1", "shape": [1]}
    for _ in range(depth - 1):
        sample = {"kind": "TUPLE", "items": [sample]}
    return {"samples": [sample]}


def test_nesting_limit_is_64_levels() -> None:
    check_grammar(shm_samples_meta, _nested(64))
    with pytest.raises(inert.WriteValueError, match="max_depth"):
        shm_samples_meta.encode(_nested(65))
    data = shm_samples_meta.encode(_nested(64))
    # Wrap the whole thing once more by hand: a 65th level.
    deeper = struct.pack("<QBQ", 1, 1, 1) + data[8:]
    with pytest.raises(inert.LimitError, match="max_depth"):
        shm_samples_meta.decode(deeper)


def test_chunk_bound_is_checked_when_known() -> None:
    data = shm_samples_meta.encode(META)
    shm_samples_meta.decode(data, chunk_size=129)
    with pytest.raises(inert.InvalidValueError, match=r"samples\[1\]\.items\[0\]\.nbytes: bytes 128\.\.129"):
        shm_samples_meta.decode(data, chunk_size=128)


@pytest.mark.parametrize(
    ("value", "error", "where"),
    [
        ({**SCHEDULED, "context_i": True}, inert.WriteTypeError, "context_i: expected int, got bool"),
        (
            {**SCHEDULED, "task": {"kind": "BATCH", "args": {"kind": "INT", "value": True}}},
            inert.WriteTypeError,
            "task.args.value: expected int, got bool",
        ),
        ({**SCHEDULED, "context_i": 1 << 63}, inert.WriteValueError, "context_i"),
        ({**SCHEDULED, "type": "NOPE"}, inert.WriteValueError, "type: unknown MessageType"),
        ({**COMPLETED, "traceback": b"x"}, inert.WriteTypeError, "traceback: expected str, got bytes"),
        ({k: v for k, v in COMPLETED.items() if k != "meta"}, inert.WriteTypeError, "meta: missing"),
    ],
)
def test_writers_name_the_bad_field(value: Any, error: type, where: str) -> None:
    with pytest.raises(error, match=where):
        shm_message.encode(value)
    with pytest.raises(error, match=where):
        interpret_encode(FORMATS["shm-message"], value)


def test_errors_pickle_intact() -> None:
    try:
        shm_message.decode(b"\x09")
    except inert.InertError as exc:
        copy = pickle.loads(pickle.dumps(exc))
        assert type(copy) is type(exc) and str(copy) == str(exc)
        assert (copy.format, copy.offset, copy.field) == ("shm-message", 0, "type")
    err = inert.WriteTypeError("shm-message", "a.b", "expected int")
    assert str(pickle.loads(pickle.dumps(err))) == str(err)
    assert isinstance(err, TypeError) and not isinstance(err, inert.InertError)


def test_truncated_error_is_also_eof_error() -> None:
    with pytest.raises(EOFError):
        shm_message.decode(b"")


# -- the generated readers' quick tests of the value rules -------------------------------------

U64_MAX = (1 << 64) - 1
_DTYPES = st.sampled_from([*_checks.ITEMSIZE, "<f08", "|O", "=f4", "<i3", "", "<f4 "])
_ARRAYS = st.fixed_dictionaries(
    {
        "offset": st.integers(0, U64_MAX),
        "nbytes": st.integers(0, U64_MAX),
        "dtype": _DTYPES,
        "shape": st.lists(st.integers(0, 1 << 40) | st.integers(0, 4), max_size=4),
    }
)


class _Rules:
    """The compiled rules of one record (the codec's ``_rules_<Typename>``) and their inline test (``accept``)."""

    def __init__(self, codec: Any, typename: str) -> None:
        self.codec, self.typename = codec, typename
        self.accept: str = codec._QUICK_TESTS[typename]

    def __call__(self, value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
        return getattr(self.codec, f"_rules_{self.typename}")(value, ctx)  # type: ignore[no-any-return]


_ARRAY_SAMPLE = _Rules(shm_samples_meta, "ArraySample")
_SAMPLE_RANGE = _Rules(shm_message, "SampleRange")
_DESCRIPTOR = _Rules(shm_descriptor, "Descriptor")


def _quick_test(check: _Rules, value: dict[str, Any], ctx: dict[str, Any]) -> bool:
    return bool(eval(check.accept, {"_checks": _checks, "this": SimpleNamespace(**value), "ctx": ctx}))  # noqa: S307


@settings(max_examples=3000, deadline=None)
@given(_ARRAYS, st.none() | st.integers(0, U64_MAX), st.data())
def test_array_quick_test_holds_exactly_when_the_rule_accepts(value: dict[str, Any], chunk: int | None, data: Any) -> None:
    if data.draw(st.booleans()):  # often a consistent array, so that both answers occur
        itemsize = _checks.ITEMSIZE.get(value["dtype"], 1)
        value["nbytes"] = math.prod(value["shape"]) * itemsize
        value["offset"] -= value["offset"] % itemsize
    assume(value["nbytes"] <= U64_MAX)  # the reader reads it as a u64: nothing larger reaches the rule
    ctx = {"chunk_size": chunk}
    assert _quick_test(_ARRAY_SAMPLE, value, ctx) == (_ARRAY_SAMPLE(value, ctx) is None)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.integers(-3, 8), min_size=6, max_size=6))
def test_sample_range_quick_test_holds_exactly_when_the_rule_accepts(fields: list[int]) -> None:
    value = dict(zip(("start", "end", "iteration", "epoch", "slice_start", "slice_end"), fields, strict=True))
    assert _quick_test(_SAMPLE_RANGE, value, {}) == (_SAMPLE_RANGE(value, {}) is None)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.integers(-2, 6), min_size=5, max_size=5), st.none() | st.integers(0, 6))
def test_descriptor_quick_test_holds_exactly_when_the_rule_accepts(fields: list[int], chunk: int | None) -> None:
    value = dict(zip(("worker_id", "shm_chunk_id", "shm_capacity", "offset", "num_bytes"), fields, strict=True))
    ctx = {"chunk_size": chunk}
    assert _quick_test(_DESCRIPTOR, value, ctx) == (_DESCRIPTOR(value, ctx) is None)


def test_short_strings_are_remembered_within_a_bound() -> None:
    from inert import _codec_runtime

    cache = _codec_runtime.TEXT_CACHE_SIZE
    batch = {"samples": [{"kind": "ARRAY", "offset": 0, "nbytes": 0, "dtype": "|u1", "shape": [0]}]}
    data = bytearray(shm_samples_meta.encode(batch))
    for i in range(cache + 50):  # distinct refused dtypes: each is decoded, at most `cache` kept
        data[8 + 1 + 16 + 8 : 8 + 1 + 16 + 8 + 3] = b"%03d" % i  # count, kind, offset and nbytes, u64 length
        with pytest.raises(inert.InvalidValueError, match="unsupported dtype"):
            shm_samples_meta.decode(bytes(data))
    texts = [v for k, v in vars(shm_samples_meta).items() if k.startswith("_TEXT")]
    assert len(texts) == 1 and len(texts[0]) <= cache
