"""The formats the property tests and the fuzzers cover: adding a format is one entry in ``FORMATS``.

Each entry names the format (its codec is ``inert.codecs.<module>``, its
grammar ``inert.spec.FORMATS[name]``) or one part of a file format decoded on
its own (``checkpoint-shard.record``: ``decode_record``/``encode_record`` and
the grammar's ``part="record"``), gives a Hypothesis strategy for valid
values (dicts as the writers take them, tags by name or member), fixed example
values for seed corpora, the ``decode`` keyword arguments worth trying, and
byte tokens for the fuzzers' dictionaries.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any

from hypothesis import strategies as st

from inert import _checks
from inert._value_types import ARRAY_DTYPES, ArrayValue, DeviceValue, DTypeValue, ObjectValue, SizeValue

__all__ = ["FormatUnderTest", "FORMATS", "codec", "spec", "spec_kwargs", "cases", "DUMP_MANIFEST", "DUMP_SHARD"]

U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
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
    def format(self) -> str:
        """The format's name (``checkpoint-shard`` for ``checkpoint-shard.record``)."""
        return self.name.partition(".")[0]

    @property
    def part(self) -> str | None:
        """The part decoded on its own (``record``), or None for a whole file or message."""
        return self.name.partition(".")[2] or None

    @property
    def module_name(self) -> str:
        return self.format.replace("-", "_")


def codec(entry: FormatUnderTest) -> ModuleType | SimpleNamespace:
    """What reads and writes ``entry``: its generated module, or for a part that part's ``decode``/``encode``."""
    module = importlib.import_module(f"inert.codecs.{entry.module_name}")
    if entry.part is None:
        return module
    return SimpleNamespace(decode=getattr(module, f"decode_{entry.part}"), encode=getattr(module, f"encode_{entry.part}"))


def spec(entry: FormatUnderTest) -> Any:
    """The grammar of ``entry``'s format (needs Construct); ``spec_kwargs`` selects the part."""
    from inert.spec import FORMATS as SPEC_FORMATS

    return SPEC_FORMATS[entry.format]


def spec_kwargs(entry: FormatUnderTest) -> dict[str, str]:
    """The keyword arguments that make the interpreted grammar read or write ``entry`` (its part)."""
    return {"part": entry.part} if entry.part else {}


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
def _array_sample(draw: Callable[..., Any], dtype: str | None = None, rank: int | None = None) -> dict[str, Any]:
    """An array sample; of ``dtype`` and ``rank`` if given, else of any."""
    dtype = draw(st.sampled_from(sorted(DTYPES))) if dtype is None else dtype
    itemsize = DTYPES[dtype]
    # The dims times the itemsize, each 0 counted as 1, stay within 2**63 - 1 (numpy's limit), as the reader requires.
    budget = _checks.MAX_ARRAY_SPAN // itemsize
    shape = []
    for _ in range(draw(st.integers(0, 6)) if rank is None else rank):
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

@st.composite
def _alike_arrays(draw: Callable[..., Any]) -> dict[str, Any]:
    """A batch of 8 to 20 arrays of one dtype and one rank, as a data loader sends them."""
    dtype, rank = draw(st.sampled_from(sorted(DTYPES))), draw(st.integers(0, 6))
    return {"samples": draw(st.lists(_array_sample(dtype, rank), min_size=8, max_size=20))}


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
        "message_crc32": draw(st.integers(0, U32_MAX)),
        "meta_crc32": draw(st.integers(0, U32_MAX)),
    }


_DESCRIPTOR_EXAMPLES = (
    {"worker_id": 1, "shm_chunk_id": 3, "shm_capacity": 8192, "offset": 0, "num_bytes": 100, "message_crc32": 0x1C291CA3,
     "meta_crc32": 0},
    {"worker_id": 0, "shm_chunk_id": 0, "shm_capacity": 1 << 20, "offset": 4096, "num_bytes": (1 << 20) - 4096,
     "message_crc32": 0, "meta_crc32": U32_MAX},
)


# --- file formats: shared pieces -------------------------------------------------------------

#: Bytes per element of every tensor dtype of the file formats (checkpoint and dump records).
ITEMSIZES: dict[str, int] = {
    "BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "UINT32": 4, "INT32": 4, "UINT64": 8, "INT64": 8,
    "FLOAT16": 2, "BFLOAT16": 2, "FLOAT32": 4, "FLOAT64": 8, "COMPLEX64": 8, "COMPLEX128": 16,
    "FLOAT8_E4M3FN": 1, "FLOAT8_E5M2": 1, "FLOAT8_E4M3FNUZ": 1, "FLOAT8_E5M2FNUZ": 1, "FLOAT8_E8M0FNU": 1,
}
_FILE_DTYPES = tuple(ITEMSIZES)

_name = st.text(max_size=12)
_shape = st.lists(st.integers(0, 4), max_size=3)
#: Inert's MessagePack value subset: scalars, bytes and bytearrays, complex numbers, lists, tuples, and
#: maps whose keys are any hashable value of the subset.  Sets are left out: their writers encode members
#: in iteration order, so equal sets can encode differently and ``encode(decode(b)) == b`` fails for them.
_keys = st.one_of(st.text(max_size=4), st.binary(max_size=4))  # the value subset's key types
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(I64_MIN, U64_MAX), st.floats(), st.text(max_size=8), st.binary(max_size=8),
    st.binary(max_size=4).map(bytearray), st.complex_numbers(),
)


@st.composite
def _array_value(draw: Callable[..., Any]) -> ArrayValue:
    """A typed array or array scalar (extensions 7 and 8)."""
    dtype = draw(st.sampled_from(sorted(ARRAY_DTYPES)))
    scalar = draw(st.booleans())
    shape = () if scalar else tuple(draw(_shape))
    count = 1
    for dim in shape:
        count *= dim
    size = count * ITEMSIZES[dtype]
    if dtype == "BOOL":
        data = bytes(draw(st.lists(st.integers(0, 1), min_size=size, max_size=size)))
    else:
        data = draw(st.binary(min_size=size, max_size=size))
    return ArrayValue(dtype, shape, data, scalar)


#: The typed extensions 7 to 11 (a BytesIO is left out: it does not compare by value).
_typed = st.one_of(
    _array_value(),
    st.lists(st.integers(0, I64_MAX), max_size=4).map(lambda dims: SizeValue(tuple(dims))),
    st.sampled_from(sorted(ITEMSIZES)).map(DTypeValue),
    st.builds(DeviceValue, st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), st.none() | st.integers(0, I32_MAX)),
)
_values = st.recursive(
    _scalars | _typed,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_keys, inner, max_size=3),
        st.builds(ObjectValue, st.text(min_size=1, max_size=8), inner),  # extension 12
    ),
    max_leaves=8,
)


@st.composite
def _tensor(draw: Callable[..., Any]) -> dict[str, Any]:
    dtype = draw(st.sampled_from(_FILE_DTYPES))
    shape = draw(_shape)
    count = 1
    for dim in shape:
        count *= dim
    size = count * ITEMSIZES[dtype]
    if dtype == "BOOL":  # one spelling of true: only 0 and 1 bytes are valid
        data = bytes(draw(st.lists(st.integers(0, 1), min_size=size, max_size=size)))
    else:
        data = draw(st.binary(min_size=size, max_size=size))
    return {"kind": "TENSOR", "dtype": dtype, "shape": shape, "data": data}


_body = _tensor() | st.fixed_dictionaries({"kind": st.just("VALUE"), "value": _values})

# --- checkpoint-shard / checkpoint-metadata ----------------------------------------------------

_checkpoint_record = st.fixed_dictionaries({"body": _body})
_TENSOR_RECORD = {"body": {"kind": "TENSOR", "dtype": "FLOAT32", "shape": [2, 3], "data": bytes(range(24))}}
_VALUE = {"lr": 0.1, "betas": (0.9, 0.999), "step": 7, "s": {"a", b"b"}, b"k": (1 + 2j, frozenset({"a"}))}
_VALUE_RECORD = {"body": {"kind": "VALUE", "value": _VALUE}}
_FP8_RECORD = {"body": {"kind": "TENSOR", "dtype": "FLOAT8_E4M3FN", "shape": [4], "data": b"\x7f\xff\x00\x80"}}
_BOOL_RECORD = {"body": {"kind": "TENSOR", "dtype": "BOOL", "shape": [], "data": b"\x01"}}

_file_name = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True).filter(lambda n: n not in (".", ".."))


@st.composite
def _tensor_entry(draw: Callable[..., Any], fqn: str, files: int) -> dict[str, Any]:
    size = draw(st.lists(st.integers(0, 1 << 12), max_size=4))  # element count within 64 bits
    offsets: list[int] = []
    sizes: list[int] = []
    chunks = draw(st.integers(0, 3))
    recorded = draw(st.booleans())
    for _ in range(chunks):
        for dim in size:
            start = draw(st.integers(0, dim))
            offsets.append(start)
            sizes.append(draw(st.integers(0, dim - start)))
    return {
        "fqn": fqn,
        "dtype": draw(st.sampled_from(_FILE_DTYPES)),
        "layout": draw(_tag("Layout", "checkpoint_metadata", ("STRIDED", "SPARSE_COO", "JAGGED"))),
        "memory_format": draw(st.sampled_from(("CONTIGUOUS", "CHANNELS_LAST", "CHANNELS_LAST_3D", "PRESERVE"))),
        "requires_grad": draw(st.booleans()),
        "pin_memory": draw(st.booleans()),
        "size": size,
        "chunk_offsets": offsets,
        "chunk_sizes": sizes,
        "chunk_files": [draw(st.integers(0, files - 1)) for _ in range(chunks)],
        "chunk_byte_offsets": [draw(st.integers(0, U64_MAX)) for _ in range(chunks)],
        "chunk_byte_lengths": [draw(st.integers(0, U64_MAX)) for _ in range(chunks)],
        "chunk_crcs": [draw(st.integers(0, 0xFFFFFFFF)) for _ in range(chunks)],
        # version 2 (the latest): strides as PyTorch 2.15 records them, one per dim, or none recorded
        "strides_recorded": recorded,
        "strides": [draw(st.integers(0, I64_MAX)) for _ in size] if recorded else [],
    }


@st.composite
def _checkpoint_metadata(draw: Callable[..., Any]) -> dict[str, Any]:
    """Metadata whose parts agree (check_metadata, check_tensor_entry): plain unique file names, unique fqns,
    chunks inside their tensors, file indexes below the file count."""
    files = draw(st.lists(_file_name, min_size=1, max_size=3, unique=True))
    # Sometimes many fqns of one length (an optimizer's states, say): the readers' sweep over alike entries.
    fqns = draw(st.lists(_name, max_size=5, unique=True) | st.integers(8, 12).map(lambda k: [f"opt.{i:03d}" for i in range(k)]))
    split = draw(st.integers(0, len(fqns)))
    optional_text = st.none() | _name
    storage = st.none() | st.fixed_dictionaries(
        {"checkpoint_id": optional_text, "save_id": optional_text, "load_id": optional_text,
         "modules": st.lists(_name, max_size=3)}
    )
    return {
        "dcp_version": draw(st.none() | st.just("1.0.0")),
        "storage_meta": draw(storage),
        "planner_data": draw(_values),
        "files": files,
        "tensors": [draw(_tensor_entry(fqn, len(files))) for fqn in fqns[:split]],
        "values": [
            {"fqn": fqn, "file": draw(st.integers(0, len(files) - 1)), "byte_offset": draw(st.integers(0, U64_MAX)),
             "byte_length": draw(st.integers(0, U64_MAX)), "crc": draw(st.integers(0, 0xFFFFFFFF))}
            for fqn in fqns[split:]
        ],
    }


_TENSOR_ENTRY = {
    "fqn": "w", "dtype": "BFLOAT16", "layout": "STRIDED", "memory_format": "CONTIGUOUS", "requires_grad": False,
    "pin_memory": False, "size": [8, 3], "chunk_offsets": [0, 0, 4, 0], "chunk_sizes": [4, 3, 4, 3],
    "chunk_files": [0, 1], "chunk_byte_offsets": [64, 64], "chunk_byte_lengths": [96, 96], "chunk_crcs": [7, 8],
    "strides_recorded": True, "strides": [3, 1],
}
_METADATA_EXAMPLES: tuple[dict[str, Any], ...] = (
    {
        "dcp_version": "1.0.0",
        "storage_meta": {"checkpoint_id": "/tmp/ckpt", "save_id": "s", "load_id": None, "modules": []},
        "planner_data": {"w": ("w",), "opt.step": ("opt", "step")},
        "files": ["__0_0.distcp", "__1_0.distcp"],
        "tensors": [_TENSOR_ENTRY],
        "values": [{"fqn": "opt.step", "file": 0, "byte_offset": 512, "byte_length": 20, "crc": 1}],
    },
    {"dcp_version": None, "storage_meta": None, "planner_data": None, "files": [], "tensors": [], "values": []},
)

# --- dump-manifest / dump-shard ----------------------------------------------------------------

_field = st.fixed_dictionaries({"name": _name, "body": _body})
_row_record = st.fixed_dictionaries({"global_index": st.integers(0, U64_MAX), "fields": st.lists(_field, max_size=3)})
_layout = st.one_of(
    st.fixed_dictionaries({"kind": st.just("DENSE"), "dtype": st.sampled_from(_FILE_DTYPES), "shape": _shape}),
    st.fixed_dictionaries({"kind": st.just("NESTED"), "dtype": st.sampled_from(_FILE_DTYPES), "ndim": st.integers(0, 64)}),
    st.fixed_dictionaries({"kind": st.just("VALUE")}),
)
_field_schema = st.fixed_dictionaries({"name": _name, "layout": _layout})


@st.composite
def _dump_manifest(draw: Callable[..., Any]) -> dict[str, Any]:
    """A manifest whose parts agree with each other (check_dump_manifest): unique names, keys and files,
    ascending field indexes with one shape per nested field, every key in one shard, records in file order."""
    fields = draw(st.lists(_field_schema, max_size=3, unique_by=lambda f: f["name"]))
    keys = []
    for key in draw(st.lists(_name, max_size=3, unique=True)):
        chosen = sorted(draw(st.sets(st.integers(0, len(fields) - 1), max_size=len(fields)))) if fields else []
        shapes = [
            draw(st.lists(st.integers(0, 4), min_size=fields[i]["layout"]["ndim"], max_size=fields[i]["layout"]["ndim"]))
            for i in chosen
            if fields[i]["layout"]["kind"] == "NESTED"
        ]
        keys.append({"key": key, "global_index": draw(st.integers(0, U64_MAX)), "fields": chosen, "nested_shapes": shapes,
                     "tag": draw(st.dictionaries(st.text(max_size=4), _values, max_size=3))})
    shard_count = draw(st.integers(1 if keys else 0, 2))
    owners = [draw(st.integers(0, shard_count - 1)) for _ in keys] if shard_count else []
    shards = []
    for index in range(shard_count):
        rows = [row for row, owner in enumerate(owners) if owner == index]
        offsets, lengths, end = [], [], 64
        for _ in rows:
            offset = end + (-end % 64)
            length = draw(st.integers(16, 1 << 20))
            offsets.append(offset)
            lengths.append(length)
            end = offset + length
        shards.append({"file": f"shard-{index:05d}.bin", "owner": draw(st.integers(0, (1 << 32) - 1)),
                       "rows": rows, "offsets": offsets, "lengths": lengths})
    return {"partition_id": draw(_name), "fields": fields, "keys": keys, "shards": shards}


_EXAMPLE_ROW = {"global_index": 7, "fields": [
    {"name": "ids", "body": {"kind": "TENSOR", "dtype": "INT64", "shape": [2], "data": bytes(16)}},
    {"name": "note", "body": {"kind": "VALUE", "value": {"a": (1, 2)}}},
]}
_EXAMPLE_MANIFEST = {
    "partition_id": "train",
    "fields": [
        {"name": "ids", "layout": {"kind": "DENSE", "dtype": "INT64", "shape": [2]}},
        {"name": "note", "layout": {"kind": "VALUE"}},
    ],
    "keys": [{"key": "k", "global_index": 7, "fields": [0, 1], "nested_shapes": [], "tag": {"step": 3}}],
    "shards": [{"file": "shard-00000.bin", "owner": 0, "rows": [0], "offsets": [64], "lengths": [160]}],
}

# --- tokens ------------------------------------------------------------------------------------


def _ints(*codes: str) -> tuple[bytes, ...]:
    """Boundary values of each ``struct`` code, little-endian."""
    values = {"B": (0, 1, 2, 3, 0xFF), "I": (0, 1, 16, 17, 64, 65, 1 << 20, (1 << 20) + 1, 0xFFFFFFFF)}
    values["Q"] = (0, 1, 1 << 24, (1 << 24) + 1, 1 << 63, U64_MAX)
    values["q"] = (-1, I64_MIN, I64_MAX)
    values["i"] = (-1, I32_MAX)
    return tuple(struct.pack("<" + code, v) for code in codes for v in values[code])


def _u64s(*values: int) -> tuple[bytes, ...]:
    """``Int64ul`` string lengths around the limits (DALI's layout writes every length as u64)."""
    return tuple(struct.pack("<Q", v) for v in values)


_DTYPE_TOKENS = tuple(struct.pack("<Q", len(d)) + d.encode() for d in sorted(DTYPES)) + (b"|O", b"<f16", b"<U8")


_CHECKSUMS: tuple[Mapping[str, Any], ...] = ({}, {"verify_checksums": False})
_FILE_TOKENS = (b"\x01\x00", b"\x01", b"\x02", b"\x03") + _ints("I", "Q")
#: MessagePack heads of the value subset: nil, bools, ints, floats, str/bin/array/map headers, the extension codes.
_MSGPACK_TOKENS = (b"\xc0", b"\xc2", b"\xc3", b"\xcf", b"\xd3", b"\xcb", b"\xd9", b"\xc4", b"\xdc", b"\xde", b"\x91",
                   b"\x81", b"\xd4\x01", b"\xc7\x10\x02", b"\xd5\x03", b"\xd4\x04", b"\xd4\x05", b"\xd4\x2a", b"\xd6\xff",
                   b"\xd4\x06", b"\xc7\x12\x07", b"\xd5\x08", b"\xd4\x09", b"\xd4\x0a", b"\xd4\x0b", b"\xd4\x0c")

#: The ready-made entries of the dump formats (tests/test_dump_formats.py uses them too).
DUMP_MANIFEST = FormatUnderTest(
    "dump-manifest", _dump_manifest(), (_EXAMPLE_MANIFEST,), _CHECKSUMS, (b"\x89INRTDM\n", *_FILE_TOKENS, *_MSGPACK_TOKENS)
)
DUMP_SHARD = FormatUnderTest(
    "dump-shard",
    st.fixed_dictionaries({"rows": st.lists(st.fixed_dictionaries({"row": _row_record}), max_size=3)}),
    ({"rows": [{"row": _EXAMPLE_ROW}]}, {"rows": []}),
    _CHECKSUMS,
    (b"\x89INRTDS\n", *_FILE_TOKENS, *_MSGPACK_TOKENS),
)
_FILE_ENTRIES = (
    FormatUnderTest(
        "checkpoint-metadata", _checkpoint_metadata(), _METADATA_EXAMPLES, _CHECKSUMS + ({"max_size": 64},),
        (b"\x89INRTMD\n", *_FILE_TOKENS, *_MSGPACK_TOKENS),
    ),
    FormatUnderTest(
        "checkpoint-shard",
        st.fixed_dictionaries({"records": st.lists(st.fixed_dictionaries({"record": _checkpoint_record}), max_size=3)}),
        ({"records": [{"record": _TENSOR_RECORD}, {"record": _VALUE_RECORD}]}, {"records": []}),
        _CHECKSUMS,
        (b"\x89INRTSH\n", *_FILE_TOKENS, *_MSGPACK_TOKENS),
    ),
    FormatUnderTest(
        "checkpoint-shard.record", _checkpoint_record, (_TENSOR_RECORD, _VALUE_RECORD, _FP8_RECORD, _BOOL_RECORD),
        _CHECKSUMS, (*_FILE_TOKENS, *_MSGPACK_TOKENS),
    ),
    DUMP_MANIFEST,
    DUMP_SHARD,
    FormatUnderTest("dump-shard.record", _row_record, (_EXAMPLE_ROW,), _CHECKSUMS, (*_FILE_TOKENS, *_MSGPACK_TOKENS)),
)

FORMATS: dict[str, FormatUnderTest] = {
    entry.name: entry
    for entry in (
        FormatUnderTest(
            "shm-message",
            _shm_message,
            _MESSAGE_EXAMPLES,
            tokens=_ints("B", "Q", "q")
            + _u64s(16, 1 << 20, (1 << 20) + 1, (1 << 32) + 1)
            + (b"\xc3\xbc", b"\xff\xfe", b"\xed\xa0\x80"),
        ),
        FormatUnderTest(
            "shm-samples-meta",
            st.fixed_dictionaries({"samples": st.lists(_sample, max_size=6)}) | _alike_arrays(),
            _META_EXAMPLES,
            decode_kwargs=({}, {"chunk_size": 4096}, {"chunk_size": 0}),
            tokens=_ints("B", "I", "Q") + _u64s(16, 17) + _DTYPE_TOKENS,
        ),
        FormatUnderTest(
            "shm-descriptor",
            _descriptor(),
            _DESCRIPTOR_EXAMPLES,
            # Version 2 by default; version 1 (DALI's) too.
            decode_kwargs=({}, {"chunk_size": 8192}, {"version": 1}, {"version": 1, "chunk_size": 8192}),
            tokens=_ints("i", "Q", "I"),
        ),
        *_FILE_ENTRIES,
    )
}
