"""shm-message v1 and shm-samples-meta v1 are the binary layout published for DALI, byte for byte.

Bytes come from ``dali_layout``, a writer and reader of the published layout
written from its description (not from Inert's grammar): what that writer
produces decodes with Inert to the values it was given, and what Inert writes
reads back with that reader.  Where Inert is stricter than the published
reader, the difference is pinned here too.  (The installed DALI, 2.4.0,
still pickles: it has no binary message functions to run instead; see
``test_installed_dali_has_no_binary_message_functions`` in test_dali.py.)
"""

from __future__ import annotations

import math
from typing import Any

import dali_layout as layout
import pytest
from dali_layout import Array, Completed, Scheduled
from hypothesis import given, settings
from hypothesis import strategies as st

import inert
from inert.codecs import shm_message, shm_samples_meta

I64 = (-(1 << 63), (1 << 63) - 1)
U64_MAX = (1 << 64) - 1

# --- the values each side speaks, mapped by hand --------------------------------------------------------


def inert_message(message: Scheduled | Completed) -> dict[str, Any]:
    """The shm-message value a message of the published layout stands for (names as in inert/spec/shm_message.py)."""
    if isinstance(message, Scheduled):
        if message.sample_range is not None:
            names = ("start", "end", "iteration", "epoch", "slice_start", "slice_end")
            task: dict[str, Any] = {"kind": "SAMPLE_RANGE", "range": dict(zip(names, message.sample_range, strict=True))}
        elif not message.batch_args:
            task = {"kind": "BATCH", "args": {"kind": "NONE"}}
        elif isinstance(message.batch_args[0], tuple):
            _, iteration, epoch_idx = message.batch_args[0]
            task = {"kind": "BATCH", "args": {"kind": "BATCH_INFO", "iteration": iteration, "epoch_idx": epoch_idx}}
        else:
            task = {"kind": "BATCH", "args": {"kind": "INT", "value": message.batch_args[0]}}
        return {
            "type": "SCHEDULED_TASK",
            "context_i": message.context_i,
            "scheduled_i": message.scheduled_i,
            "epoch_start": message.epoch_start,
            "minibatch_i": message.minibatch_i,
            "task": task,
        }
    exc = message.exception
    kinds = {"StopIteration": "STOP_ITERATION", "RuntimeError": "RUNTIME_ERROR"}
    return {
        "type": "COMPLETED_TASK",
        "worker_id": message.worker_id,
        "context_i": message.context_i,
        "scheduled_i": message.scheduled_i,
        "minibatch_i": message.minibatch_i,
        "meta": None if message.batch_meta is None else {"offset": message.batch_meta[0], "size": message.batch_meta[1]},
        "exception": {"kind": "NONE"} if exc is None else {"kind": kinds[exc[0]], "message": exc[1]},
        "traceback": message.traceback_str,
    }


def inert_sample(sample: Any) -> dict[str, Any]:
    if isinstance(sample, Array):
        fields = {"offset": sample.offset, "nbytes": sample.nbytes, "dtype": sample.dtype, "shape": list(sample.shape)}
        return {"kind": "ARRAY", **fields}
    return {"kind": "TUPLE" if isinstance(sample, tuple) else "LIST", "items": [inert_sample(s) for s in sample]}


def named(value: Any) -> Any:
    """A decoded value with its enum members spelled by name, as the values above are."""
    if isinstance(value, dict):
        return {k: named(v) for k, v in value.items()}
    if isinstance(value, list):
        return [named(v) for v in value]
    return getattr(value, "name", value)


# --- messages, both directions -------------------------------------------------------------------------

MESSAGES = {
    "SampleRange": Scheduled(1, 2, 3, 4, (10, 20, 1, 0, 0, 10), ()),
    "SlicedSampleRange": Scheduled(0, 5, 0, 1, (10, 20, 1, 0, 2, 8), ()),
    "EmptySampleRange": Scheduled(0, 0, 0, 0, (7, 7, 0, 0, 0, 0), ()),
    "BatchNoArgument": Scheduled(0, 9, 0, 0, None, ()),
    "BatchInt": Scheduled(3, 9, 1, 2, None, (41,)),
    "BatchIntNegative": Scheduled(3, 9, 1, 2, None, (-5,)),
    "BatchInfo": Scheduled(0, 6, 0, 1, None, (("BatchInfo", 7, 2),)),
    "CountersExtreme": Scheduled(I64[0], I64[1], I64[0], I64[1], None, ()),
    "Success": Completed(1, 0, 5, 5, (4096, 300), None, None),
    "SuccessHugeMeta": Completed(0, 0, 0, 0, (U64_MAX - 8, 8), None, None),
    "StopIterationEmpty": Completed(0, 0, 7, 0, None, ("StopIteration", ""), None),
    "StopIterationMessage": Completed(1, 0, 7, 0, None, ("StopIteration", "epoch over"), None),
    "RuntimeErrorTraceback": Completed(1, 0, 5, 5, None, ("RuntimeError", "bad sample ü"), "Traceback (most recent call):\n"),
    "RuntimeErrorNoTraceback": Completed(0, 1, 2, 3, None, ("RuntimeError", "x" * 300), None),
    "Unicode": Completed(0, 0, 0, 0, None, ("RuntimeError", "€ 中 \U0001f600 \x00"), "\u2028\ufeff"),
    "EmptyTraceback": Completed(0, 0, 0, 0, None, ("RuntimeError", "m"), ""),
    "LongTraceback": Completed(2, 0, 0, 0, None, ("RuntimeError", "m"), "t" * 70_000),
    "MetaAndTraceback": Completed(1, 0, 1, 0, (0, 128), None, "kept as written"),
}


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_published_layout_messages_decode_to_their_values(name: str) -> None:
    message = MESSAGES[name]
    data = layout.write_message(message)
    assert named(shm_message.decode(data)) == inert_message(message)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_inert_messages_read_with_the_published_layout(name: str) -> None:
    message = MESSAGES[name]
    data = shm_message.encode(inert_message(message))
    assert data == layout.write_message(message)
    assert layout.read_message(data) == message


def test_a_string_is_a_u64_length_then_utf8() -> None:
    data = shm_message.encode(inert_message(MESSAGES["StopIterationMessage"]))
    le = lambda n: n.to_bytes(8, "little")  # noqa: E731
    expected = (
        b"\x02" + le(1) + le(0) + le(7) + le(0)  # type, worker_id, context_i, scheduled_i, minibatch_i
        + b"\x00"  # no meta
        + b"\x01" + le(10) + b"epoch over"  # StopIteration, u64 length, UTF-8
        + b"\x00"  # no traceback
    )
    assert data == expected


def test_samples_meta_layout_pinned() -> None:
    meta = [Array(0, 24, "<f4", (2, 3)), (Array(128, 1, "|b1", ()),), []]
    expected = (
        b"\x03\x00\x00\x00\x00\x00\x00\x00"  # Q count
        + b"\x00" + (0).to_bytes(8, "little") + (24).to_bytes(8, "little")  # array: offset, nbytes
        + (3).to_bytes(8, "little") + b"<f4"  # str dtype: Q length, UTF-8
        + (2).to_bytes(4, "little") + (2).to_bytes(8, "little") + (3).to_bytes(8, "little")  # I ndim, Q dims
        + b"\x01" + (1).to_bytes(8, "little")  # tuple of one
        + b"\x00" + (128).to_bytes(8, "little") + (1).to_bytes(8, "little") + (3).to_bytes(8, "little") + b"|b1"
        + (0).to_bytes(4, "little")
        + b"\x02" + (0).to_bytes(8, "little")  # empty list
    )
    assert layout.write_samples_meta(meta) == expected
    value = {"samples": [inert_sample(s) for s in meta]}
    assert shm_samples_meta.encode(value) == expected
    assert named(shm_samples_meta.decode(expected)) == value


SAMPLES = {
    "Empty": [],
    "OneArray": [Array(0, 24, "<f4", (2, 3))],
    "Scalar": [Array(0, 8, "<f8", ())],
    "ZeroSize": [Array(0, 0, "<i4", (0, 5))],
    "BigEndian": [Array(256, 40, ">i8", (5,))],
    "Complex": [Array(128, 32, "<c16", (2,))],
    "Nested": [(Array(0, 3, "|u1", (3,)), [Array(128, 2, "<f2", (1,)), ()]), [[Array(256, 1, "|b1", (1,))]]],
    "Batch": [Array(128 * i, 12, "|u1", (2, 2, 3)) for i in range(16)],
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_samples_meta_both_directions(name: str) -> None:
    samples = SAMPLES[name]
    data = layout.write_samples_meta(samples)
    value = {"samples": [inert_sample(s) for s in samples]}
    assert named(shm_samples_meta.decode(data)) == value
    assert shm_samples_meta.encode(value) == data
    assert layout.read_samples_meta(data) == samples


def test_deepest_nesting_both_sides_accept() -> None:
    sample: Any = Array(0, 1, "|u1", (1,))
    for _ in range(layout.MAX_NESTING - 1):
        sample = (sample,)
    data = layout.write_samples_meta([sample])
    assert layout.read_samples_meta(data) == [sample]
    assert shm_samples_meta.decode(data)["samples"][0]["kind"] == shm_samples_meta.SampleKind.TUPLE
    with pytest.raises(RuntimeError, match="nesting"):
        layout.read_samples_meta(layout.write_samples_meta([(sample,)]))
    with pytest.raises(inert.LimitError, match="max_depth"):
        shm_samples_meta.decode(layout.write_samples_meta([(sample,)]))


# --- random values, both directions --------------------------------------------------------------------

_i64 = st.integers(*I64)
_nat = st.integers(0, I64[1])
_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@st.composite
def _sample_range(draw: Any) -> tuple[int, int, int, int, int, int]:
    start = draw(_nat)
    end = draw(st.integers(start, I64[1]))
    slice_start = draw(st.integers(0, end - start))
    slice_end = draw(st.integers(slice_start, end - start))
    return (start, end, draw(_nat), draw(_nat), slice_start, slice_end)


_args = st.one_of(st.just(()), st.tuples(_i64), st.tuples(st.tuples(st.just("BatchInfo"), _i64, _i64)))
_scheduled = st.builds(
    Scheduled, _i64, _i64, _i64, _i64, st.none(), _args
) | st.builds(Scheduled, _i64, _i64, _i64, _i64, _sample_range(), st.just(()))


@st.composite
def _meta(draw: Any) -> tuple[int, int]:
    offset = draw(st.integers(0, U64_MAX))
    return offset, draw(st.integers(0, U64_MAX - offset))


_completed = st.builds(
    Completed,
    _i64,
    _i64,
    _i64,
    _i64,
    st.none() | _meta(),
    st.none() | st.tuples(st.sampled_from(["StopIteration", "RuntimeError"]), _text),
    st.none() | _text,
)

DTYPES = {"|b1": 1, "|i1": 1, "|u1": 1, "<i2": 2, ">u4": 4, "<i8": 8, "<f2": 2, ">f4": 4, "<f8": 8, "<c8": 8, ">c16": 16}


@st.composite
def _array(draw: Any) -> Array:
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 50), max_size=4)))
    return Array(draw(st.integers(0, 1 << 40)) * DTYPES[dtype], math.prod(shape) * DTYPES[dtype], dtype, shape)


_samples = st.lists(
    st.recursive(_array(), lambda kids: st.lists(kids, max_size=3) | st.lists(kids, max_size=3).map(tuple), max_leaves=8),
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(_scheduled | _completed)
def test_random_messages_both_directions(message: Scheduled | Completed) -> None:
    data = layout.write_message(message)
    assert named(shm_message.decode(data)) == inert_message(message)
    assert shm_message.encode(inert_message(message)) == data
    assert layout.read_message(data) == message


@settings(max_examples=150, deadline=None)
@given(_samples)
def test_random_samples_meta_both_directions(samples: list[Any]) -> None:
    data = layout.write_samples_meta(samples)
    value = {"samples": [inert_sample(s) for s in samples]}
    assert named(shm_samples_meta.decode(data)) == value
    assert shm_samples_meta.encode(value) == data
    assert layout.read_samples_meta(data) == samples


# --- where Inert is stricter than the published reader (docs/spec says so) ------------------------------------


def _completed_head() -> bytes:
    return layout.write_message(Completed(0, 0, 0, 0, None, None, None))[:-3]  # up to the meta flag


STRICTER = {
    "BadUtf8Replaced": (
        _completed_head() + b"\x00\x02" + (2).to_bytes(8, "little") + b"\xff\xfe" + b"\x00",
        inert.InvalidValueError,
        "exception.message: invalid UTF-8",
    ),
    "FlagByteTwo": (
        _completed_head() + b"\x02" + bytes(16) + b"\x00\x00",
        inert.InvalidValueError,
        "meta: boolean byte is 2",
    ),
    "TracebackFlagByteFF": (
        _completed_head() + b"\x00\x00\xff" + bytes(8),
        inert.InvalidValueError,
        "traceback: boolean byte is 255",
    ),
}


@pytest.mark.parametrize("name", sorted(STRICTER))
def test_inert_refuses_what_the_published_reader_lets_through(name: str) -> None:
    data, error, where = STRICTER[name]
    layout.read_message(data)  # the published reader takes it (replacing, or reading any non-zero byte as true)
    with pytest.raises(error, match=where):
        shm_message.decode(data)


@pytest.mark.parametrize(
    ("samples", "where"),
    [
        ([Array(0, 25, "<f4", (2, 3))], "samples[0].nbytes: 25 declared, shape and dtype give 24"),
        ([Array(2, 4, "<f4", (1,))], "samples[0].offset: 2 is not a multiple of the itemsize 4"),
        ([Array(0, 0, "|u1", (0, 1 << 63))], "samples[0].shape"),
        ([Array(0, 0, "|u1", (1 << 62, 0, 4))], "samples[0].shape"),
        ([Array(0, 16, "<U4", (1,))], "samples[0].dtype: unsupported dtype '<U4'"),
    ],
)
def test_inert_refuses_arrays_the_published_reader_lets_through(samples: list[Any], where: str) -> None:
    data = layout.write_samples_meta(samples)
    assert layout.read_samples_meta(data) == samples
    with pytest.raises(inert.InvalidValueError) as info:
        shm_samples_meta.decode(data)
    assert where in str(info.value)


def test_a_32_bit_string_length_is_refused_not_misread() -> None:
    """Bytes of the layout Inert v1 wrongly wrote before (a u32 length) are refused, on both sides."""
    old = _completed_head() + b"\x00\x02" + (4).to_bytes(4, "little") + b"okay" + b"\x00"
    with pytest.raises(RuntimeError, match="Malformed"):
        layout.read_message(old)
    with pytest.raises(inert.LimitError, match="exception.message: string length"):
        shm_message.decode(old)
