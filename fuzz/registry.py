"""The formats the property tests and the fuzzers cover: adding a format is one entry in ``FORMATS``.

Each entry names the format (its codec is ``inert.codecs.<module>``, its
grammar ``inert.spec.FORMATS[name]``), gives a Hypothesis strategy for valid
values (dicts as the writers take them, tags by name or member), fixed example
values for seed corpora, the ``decode`` keyword arguments worth trying, and
byte tokens for the fuzzers' dictionaries.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from hypothesis import strategies as st

__all__ = ["FormatUnderTest", "FORMATS", "codec", "spec", "cases"]

U64_MAX = (1 << 64) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
I32_MAX = (1 << 31) - 1


@dataclass(frozen=True)
class FormatUnderTest:
    """One format as the property tests and fuzzers see it."""

    name: str
    #: Valid values: ``encode`` accepts every one and ``decode(encode(v))`` gives it back.
    values: st.SearchStrategy[Any]
    #: A few valid values for seed corpora and benchmarks.
    examples: tuple[Any, ...]
    #: Keyword arguments for ``decode`` worth fuzzing (``{}`` always comes first).
    decode_kwargs: tuple[Mapping[str, Any], ...] = ({},)
    #: Byte strings a mutator should know (magic, tags, well-formed small fields).
    tokens: tuple[bytes, ...] = field(default=())

    @property
    def module_name(self) -> str:
        return self.name.replace("-", "_")


def codec(entry: FormatUnderTest) -> ModuleType:
    """The generated codec module of ``entry``."""
    return importlib.import_module(f"inert.codecs.{entry.module_name}")


def spec(entry: FormatUnderTest) -> Any:
    """The grammar of ``entry`` (needs Construct)."""
    from inert.spec import FORMATS as SPEC_FORMATS

    return SPEC_FORMATS[entry.name]


def cases() -> list[tuple[FormatUnderTest, Mapping[str, Any]]]:
    """Every (format, ``decode`` keyword set) pair, in registry order."""
    return [(entry, kwargs) for entry in FORMATS.values() for kwargs in entry.decode_kwargs]


def _tag(enum_name: str, module: str, names: tuple[str, ...]) -> st.SearchStrategy[Any]:
    """A tag spelled as writers accept it: by name or as the generated module's member."""

    def member(name: str) -> Any:
        return getattr(importlib.import_module(f"inert.codecs.{module}"), enum_name)[name]

    return st.sampled_from(names) | st.sampled_from(names).map(member)


def _i64(low: int = I64_MIN) -> st.SearchStrategy[int]:
    return st.integers(low, I64_MAX)


_text = st.text(max_size=64) | st.text(st.characters(codec="utf-8"), max_size=300)


# --- shm-message -------------------------------------------------------------------------------


@st.composite
def _sample_range(draw: Callable[..., Any]) -> dict[str, Any]:
    start = draw(st.integers(0, I64_MAX))
    end = draw(st.integers(start, I64_MAX))
    width = end - start
    slice_start = draw(st.integers(0, width))
    slice_end = draw(st.integers(slice_start, width))
    return {
        "start": start,
        "end": end,
        "iteration": draw(st.integers(0, I64_MAX)),
        "epoch": draw(st.integers(0, I64_MAX)),
        "slice_start": slice_start,
        "slice_end": slice_end,
    }


def _message_tag(enum_name: str, *names: str) -> st.SearchStrategy[Any]:
    return _tag(enum_name, "shm_message", names)


_batch_args = st.one_of(
    st.fixed_dictionaries({"kind": _message_tag("BatchArgKind", "NONE")}),
    st.fixed_dictionaries({"kind": _message_tag("BatchArgKind", "INT"), "value": _i64()}),
    st.fixed_dictionaries(
        {"kind": _message_tag("BatchArgKind", "BATCH_INFO"), "iteration": _i64(), "epoch_idx": _i64()}
    ),
)

_task = st.one_of(
    st.fixed_dictionaries({"kind": _message_tag("TaskKind", "SAMPLE_RANGE"), "range": _sample_range()}),
    st.fixed_dictionaries({"kind": _message_tag("TaskKind", "BATCH"), "args": _batch_args}),
)


@st.composite
def _batch_meta(draw: Callable[..., Any]) -> dict[str, int]:
    offset = draw(st.integers(0, U64_MAX))
    return {"offset": offset, "size": draw(st.integers(0, U64_MAX - offset))}


_exception = st.one_of(
    st.fixed_dictionaries({"kind": _message_tag("ExceptionKind", "NONE")}),
    st.fixed_dictionaries({"kind": _message_tag("ExceptionKind", "STOP_ITERATION", "RUNTIME_ERROR"), "message": _text}),
)

_shm_message = st.one_of(
    st.fixed_dictionaries(
        {
            "type": _message_tag("MessageType", "SCHEDULED_TASK"),
            "context_i": _i64(),
            "scheduled_i": _i64(),
            "epoch_start": _i64(),
            "minibatch_i": _i64(),
            "task": _task,
        }
    ),
    st.fixed_dictionaries(
        {
            "type": _message_tag("MessageType", "COMPLETED_TASK"),
            "worker_id": _i64(),
            "context_i": _i64(),
            "scheduled_i": _i64(),
            "minibatch_i": _i64(),
            "meta": st.none() | _batch_meta(),
            "exception": _exception,
            "traceback": st.none() | _text,
        }
    ),
)

_RANGE = {"start": 10, "end": 20, "iteration": 1, "epoch": 0, "slice_start": 2, "slice_end": 8}
_SCHEDULED = {"type": "SCHEDULED_TASK", "context_i": 1, "scheduled_i": 2, "epoch_start": 3, "minibatch_i": 4}
_COMPLETED = {"type": "COMPLETED_TASK", "worker_id": 1, "context_i": 0, "scheduled_i": 5, "minibatch_i": 5}
_MESSAGE_EXAMPLES = (
    {**_SCHEDULED, "task": {"kind": "SAMPLE_RANGE", "range": _RANGE}},
    {**_SCHEDULED, "task": {"kind": "BATCH", "args": {"kind": "BATCH_INFO", "iteration": 7, "epoch_idx": 2}}},
    {**_SCHEDULED, "task": {"kind": "BATCH", "args": {"kind": "INT", "value": -3}}},
    {**_SCHEDULED, "task": {"kind": "BATCH", "args": {"kind": "NONE"}}},
    {**_COMPLETED, "meta": {"offset": 4096, "size": 300}, "exception": {"kind": "NONE"}, "traceback": None},
    {**_COMPLETED, "meta": None, "exception": {"kind": "STOP_ITERATION", "message": ""}, "traceback": None},
    {
        **_COMPLETED,
        "meta": None,
        "exception": {"kind": "RUNTIME_ERROR", "message": "bad sample \u00fc"},
        "traceback": 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: bad sample',
    },
)

# --- shm-samples-meta --------------------------------------------------------------------------

#: Every dtype string the readers accept, with its itemsize.
DTYPES: dict[str, int] = {"|b1": 1, "|i1": 1, "|u1": 1}
DTYPES.update({f"{order}{kind}{size}": size for order in "<>" for kind in "iu" for size in (2, 4, 8)})
DTYPES.update({f"{order}f{size}": size for order in "<>" for size in (2, 4, 8)})
DTYPES.update({f"{order}c{size}": size for order in "<>" for size in (8, 16)})


def _sample_kind(*names: str) -> st.SearchStrategy[Any]:
    return _tag("SampleKind", "shm_samples_meta", names)


@st.composite
def _array_sample(draw: Callable[..., Any]) -> dict[str, Any]:
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    itemsize = DTYPES[dtype]
    # Each running product of the dims times the itemsize stays within 64 bits, as the reader requires.
    budget = U64_MAX // itemsize
    shape = []
    for _ in range(draw(st.integers(0, 6))):
        dim = draw(st.integers(0, min(budget, 1 << 10)) | st.integers(0, budget))
        shape.append(dim)
        budget //= max(dim, 1)
    nbytes = itemsize
    for dim in shape:
        nbytes *= dim
    offset = draw(st.integers(0, U64_MAX // itemsize)) * itemsize
    return {"kind": draw(_sample_kind("ARRAY")), "offset": offset, "nbytes": nbytes, "dtype": dtype, "shape": shape}


_sample = st.recursive(
    _array_sample(),
    lambda children: st.fixed_dictionaries(
        {"kind": _sample_kind("TUPLE", "LIST"), "items": st.lists(children, max_size=4)}
    ),
    max_leaves=12,
)

_ARRAY = {"kind": "ARRAY", "offset": 0, "nbytes": 24, "dtype": "<f4", "shape": [2, 3]}
_META_EXAMPLES: tuple[dict[str, Any], ...] = (
    {"samples": []},
    {"samples": [_ARRAY]},
    {
        "samples": [
            _ARRAY,
            {"kind": "TUPLE", "items": [{"kind": "ARRAY", "offset": 128, "nbytes": 1, "dtype": "|b1", "shape": []}]},
            {"kind": "LIST", "items": [{"kind": "ARRAY", "offset": 256, "nbytes": 0, "dtype": ">i8", "shape": [0, 5]}]},
        ]
    },
    {
        "samples": [
            {"kind": "ARRAY", "offset": 128 * i, "nbytes": 12288, "dtype": "|u1", "shape": [64, 64, 3]}
            for i in range(8)
        ]
    },
)

# --- shm-descriptor ----------------------------------------------------------------------------


@st.composite
def _descriptor(draw: Callable[..., Any]) -> dict[str, int]:
    capacity = draw(st.integers(0, U64_MAX))
    offset = draw(st.integers(0, capacity))
    return {
        "worker_id": draw(st.integers(0, I32_MAX)),
        "shm_chunk_id": draw(st.integers(0, I32_MAX)),
        "shm_capacity": capacity,
        "offset": offset,
        "num_bytes": draw(st.integers(0, capacity - offset)),
    }


_DESCRIPTOR_EXAMPLES = (
    {"worker_id": 1, "shm_chunk_id": 3, "shm_capacity": 8192, "offset": 0, "num_bytes": 100},
    {"worker_id": 0, "shm_chunk_id": 0, "shm_capacity": 1 << 20, "offset": 4096, "num_bytes": (1 << 20) - 4096},
)

# --- tokens ------------------------------------------------------------------------------------


def _ints(*codes: str) -> tuple[bytes, ...]:
    """Boundary values of each ``struct`` code, little-endian."""
    values = {"B": (0, 1, 2, 3, 0xFF), "I": (0, 1, 16, 17, 64, 65, 1 << 20, (1 << 20) + 1, 0xFFFFFFFF)}
    values["Q"] = (0, 1, 1 << 24, (1 << 24) + 1, 1 << 63, U64_MAX)
    values["q"] = (-1, I64_MIN, I64_MAX)
    values["i"] = (-1, I32_MAX)
    return tuple(struct.pack("<" + code, v) for code in codes for v in values[code])


_DTYPE_TOKENS = tuple(struct.pack("<I", len(d)) + d.encode() for d in sorted(DTYPES)) + (b"|O", b"<f16", b"<U8")

FORMATS: dict[str, FormatUnderTest] = {
    entry.name: entry
    for entry in (
        FormatUnderTest(
            "shm-message",
            _shm_message,
            _MESSAGE_EXAMPLES,
            tokens=_ints("B", "I", "q") + (b"\xc3\xbc", b"\xff\xfe", b"\xed\xa0\x80"),
        ),
        FormatUnderTest(
            "shm-samples-meta",
            st.fixed_dictionaries({"samples": st.lists(_sample, max_size=6)}),
            _META_EXAMPLES,
            decode_kwargs=({}, {"chunk_size": 4096}, {"chunk_size": 0}),
            tokens=_ints("B", "I", "Q") + _DTYPE_TOKENS,
        ),
        FormatUnderTest(
            "shm-descriptor",
            _descriptor(),
            _DESCRIPTOR_EXAMPLES,
            decode_kwargs=({}, {"chunk_size": 8192}),
            tokens=_ints("i", "Q"),
        ),
    )
}
