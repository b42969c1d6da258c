"""Value rules shared by both reference codecs.

The grammar in ``inert.spec`` names these rules; the Construct-interpreted codec
and the generated codecs both call them, so a rule is written once.  Each
returns ``None`` when the value is valid, or ``(field, reason)``.  Nothing here
imports numpy: the generated codecs need only the standard library and msgpack.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "fast_accept",
    "ITEMSIZE",
    "prod",
    "span",
    "MAX_ARRAY_SPAN",
    "dtype_itemsize",
    "check_array_sample",
    "check_sample_range",
    "check_descriptor",
    "check_tensor_record",
    "check_compressed_record",
    "check_tensor_entry",
    "check_metadata",
    "check_dump_manifest",
]

_U64_MAX = (1 << 64) - 1
_I64_MAX = (1 << 63) - 1
#: Largest span of an array (see :func:`span`): numpy's limit, a signed 64-bit byte count.
MAX_ARRAY_SPAN = (1 << 63) - 1

# numpy's ``dtype.str`` for the plain numeric kinds: byte order, kind, itemsize.
# '|' is numpy's spelling for 1-byte types, '<'/'>' for wider ones.
_DTYPE_RE = re.compile(r"([<>|])([biufc])([1-9][0-9]?)\Z")  # no leading zero: one spelling per dtype
_ITEMSIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}
_dtype_cache: dict[str, int | None] = {}

_Check = TypeVar("_Check", bound=Callable[..., Any])

prod = math.prod


def fast_accept(expression: str) -> Callable[[_Check], _Check]:
    """Give a rule the Python expression of a quick test that holds exactly for the values it accepts.

    The generated readers evaluate the expression inline and call the rule only when it is false,
    for its error: a call per record costs more than the test.  ``this.<field>`` names a field,
    ``ctx`` the caller's context and ``_checks.<name>`` a name of this module.  The interpreted
    grammar runs the rule alone, so a quick test that accepts more than its rule makes the two
    reference codecs disagree, and one that refuses more makes the generated reader fail outside
    the error family: the differential fuzz targets and the property tests catch both.
    """

    def attach(check: _Check) -> _Check:
        check.accept = expression  # type: ignore[attr-defined]
        return check

    return attach


def dtype_itemsize(text: str) -> int | None:
    """Itemsize of a numpy dtype string Inert accepts, or None.

    Accepted: bool, signed and unsigned integers, float16/32/64 and
    complex64/128, in numpy's canonical ``dtype.str`` spelling.  Object,
    structured, string, datetime and platform-dependent (float128) dtypes are
    refused: they either carry references or have no portable layout.
    """
    try:
        return _dtype_cache[text]
    except KeyError:
        pass
    size: int | None = None
    match = _DTYPE_RE.match(text)
    if match is not None:
        order, kind, digits = match.groups()
        n = int(digits)
        if n in _ITEMSIZES[kind] and (order == "|") == (n == 1):
            size = n
    if len(_dtype_cache) < 256:  # bounded: hostile input cannot grow it
        _dtype_cache[text] = size
    return size


#: Every dtype spelling :func:`dtype_itemsize` accepts, with its itemsize.
ITEMSIZE: dict[str, int] = {
    f"{order}{kind}{size}": size
    for kind, sizes in _ITEMSIZES.items()
    for size in sizes
    for order in ("|" if size == 1 else "<>")
}


def span(shape: list[int], itemsize: int) -> int:
    """``itemsize`` times the dimensions, each 0 counted as 1: the size numpy checks even for an empty array."""
    total = itemsize
    for dim in shape:
        total *= dim or 1
    return total


# The nbytes test first: when it holds with nbytes > 0 no dimension is 0 and the span is nbytes.
@fast_accept(
    "(itemsize := _checks.ITEMSIZE.get(this.dtype)) is not None and this.nbytes == _checks.prod(this.shape) * itemsize"
    " and (this.nbytes or _checks.span(this.shape, itemsize)) <= _checks.MAX_ARRAY_SPAN"
    " and not this.offset % itemsize and ((chunk := ctx.get('chunk_size')) is None or this.offset + this.nbytes <= chunk)"
)
def check_array_sample(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """An array's dtype, shape, size and placement agree with each other and the chunk.

    The shape's span (the itemsize times every dimension, a 0 counted as 1) is
    at most 2**63 - 1, the largest array numpy can describe, empty ones included;
    ``nbytes`` equals the itemsize times every dimension; the offset is a
    multiple of the itemsize; with ``chunk_size``, the bytes lie in the chunk.
    """
    dtype = value["dtype"]
    itemsize = _dtype_cache.get(dtype) or dtype_itemsize(dtype)  # the cache first: this runs per sample
    if itemsize is None:
        return "dtype", f"unsupported dtype {dtype!r}"
    shape = value["shape"]
    # dims are < 2**64 and at most 64 of them: the products stay small bigints
    if span(shape, itemsize) > MAX_ARRAY_SPAN:
        return "shape", f"{shape} of {dtype} spans more than 2**63 - 1 bytes (a 0 counted as 1), more than numpy can describe"
    total = itemsize
    for dim in shape:
        total *= dim
    nbytes = value["nbytes"]
    if total != nbytes:
        return "nbytes", f"{nbytes} declared, shape and dtype give {total}"
    offset = value["offset"]
    if offset % itemsize:
        return "offset", f"{offset} is not a multiple of the itemsize {itemsize}"
    chunk_size = ctx.get("chunk_size")
    if chunk_size is not None and offset + nbytes > chunk_size:
        return "nbytes", f"bytes {offset}..{offset + nbytes} lie beyond the {chunk_size}-byte chunk"
    return None


@fast_accept(
    "0 <= this.start <= this.end and this.iteration >= 0 and this.epoch >= 0"
    " and 0 <= this.slice_start <= this.slice_end <= this.end - this.start"
)
def check_sample_range(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """The rules of DALI's SampleRange: a non-empty-or-empty range with a slice inside it."""
    start, end = value["start"], value["end"]
    for name in ("start", "iteration", "epoch"):  # the order of rule shm-message.range-non-negative
        if value[name] < 0:
            return name, f"{value[name]} is negative"
    if end < start:
        return "end", f"{end} is before start {start}"
    slice_start, slice_end = value["slice_start"], value["slice_end"]
    if not 0 <= slice_start <= end - start:
        return "slice_start", f"{slice_start} lies outside 0..{end - start}"
    if not slice_start <= slice_end <= end - start:
        return "slice_end", f"{slice_end} lies outside {slice_start}..{end - start}"
    return None


@fast_accept(
    "this.worker_id >= 0 and this.shm_chunk_id >= 0 and this.offset + this.num_bytes <= this.shm_capacity"
    " and ((chunk := ctx.get('chunk_size')) is None or this.shm_capacity == chunk)"
)
def check_descriptor(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """A chunk descriptor names bytes inside the chunk it describes."""
    for name in ("worker_id", "shm_chunk_id"):
        if value[name] < 0:
            return name, f"{value[name]} is negative"
    if value["offset"] + value["num_bytes"] > value["shm_capacity"]:
        end = value["offset"] + value["num_bytes"]
        return "num_bytes", f"bytes {value['offset']}..{end} lie beyond the capacity {value['shm_capacity']}"
    capacity = ctx.get("chunk_size")
    if capacity is not None and value["shm_capacity"] != capacity:
        return "shm_capacity", f"{value['shm_capacity']} declared, the chunk holds {capacity}"
    return None


# -- checkpoint formats --------------------------------------------------------

#: Bytes per element of each checkpoint dtype, by the name of its ``DType`` member.
CHECKPOINT_ITEMSIZES = {
    "BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "UINT32": 4, "INT32": 4, "UINT64": 8, "INT64": 8,
    "FLOAT16": 2, "BFLOAT16": 2, "FLOAT32": 4, "FLOAT64": 8, "COMPLEX64": 8, "COMPLEX128": 16,
    "FLOAT8_E4M3FN": 1, "FLOAT8_E5M2": 1, "FLOAT8_E4M3FNUZ": 1, "FLOAT8_E5M2FNUZ": 1, "FLOAT8_E8M0FNU": 1,
}

#: The names in the order of their ``DType`` values (1, 2, ...), for writers given a bare int.
_DTYPE_NAMES = (
    "BOOL", "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "BFLOAT16",
    "FLOAT32", "FLOAT64", "COMPLEX64", "COMPLEX128",
    "FLOAT8_E4M3FN", "FLOAT8_E5M2", "FLOAT8_E4M3FNUZ", "FLOAT8_E5M2FNUZ", "FLOAT8_E8M0FNU",
)


def checkpoint_dtype_name(dtype: Any) -> str:
    """The name of a ``DType`` given as member, name or value (already validated by the tag)."""
    if isinstance(dtype, str):
        return dtype
    name = getattr(dtype, "name", None)
    return name if name is not None else _DTYPE_NAMES[int(dtype) - 1]


def checkpoint_itemsize(dtype: Any) -> int:
    """Itemsize of a ``DType`` given as member, name or value (already validated by the tag)."""
    return CHECKPOINT_ITEMSIZES[checkpoint_dtype_name(dtype)]


# A relative file name inside a checkpoint directory: no separator, no '..', no hidden tricks.
_FILE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}\Z")


def describe_foreign(head: bytes) -> str:
    """What the first bytes of a file that is not the expected Inert file look like."""
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return f"a pickle (protocol {head[1]}), e.g. a legacy torch.distributed.checkpoint .metadata"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive, e.g. a torch.save file"
    if len(head) >= 9 and head[8:9] == b"{":
        return "a safetensors file (8-byte header length, then a JSON header)"
    if head.startswith(b"\x89INRT"):
        return f"another Inert file ({head[:8]!r})"
    if not head:
        return "no bytes (the input ends here)"
    return f"unknown bytes {head[:8].hex(' ')}"


def _product(dims: list[int], itemsize: int) -> int | None:
    total = itemsize
    for dim in dims:
        total *= dim
    return None if total > _U64_MAX else total


def _dims_fault(dims: list[int], field: str) -> tuple[str, str] | None:
    """A dimension above 2**63 - 1, which torch and numpy (signed 64-bit sizes) cannot hold, even with no element."""
    for index, dim in enumerate(dims):
        if dim > _I64_MAX:
            return f"{field}[{index}]", f"dimension {dim} exceeds 2**63 - 1"
    return None


def check_tensor_record(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """A tensor record holds exactly ``prod(shape) * itemsize`` bytes; no dimension exceeds 2**63 - 1."""
    fault = _dims_fault(value["shape"], "shape")
    if fault is not None:
        return fault
    nbytes = _product(value["shape"], checkpoint_itemsize(value["dtype"]))
    if nbytes is None:
        return "shape", "element count times itemsize overflows 64 bits"
    data = value["data"]
    if nbytes != len(data):
        return "data", f"{len(data)} bytes present, shape and dtype give {nbytes}"
    if nbytes and checkpoint_dtype_name(value["dtype"]) == "BOOL":
        raw = bytes(data)
        if raw.count(0) + raw.count(1) != nbytes:  # one spelling of true: any other byte is refused
            index = next(i for i, b in enumerate(raw) if b > 1)
            return "data", f"a boolean byte other than 0 and 1: {raw[index]} at {index}"
    return None


#: ``MAX_INFLATED`` of checkpoint-shard version 2 (a test holds the two together).
MAX_INFLATED = (1 << 48) + 1024
#: The shortest record body: a VALUE holding one byte (nil).
MIN_INFLATED = 6


def check_compressed_record(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """A compressed record declares between 6 (the shortest body) and ``MAX_INFLATED`` inflated bytes."""
    length = value["inflated_length"]
    if not MIN_INFLATED <= length <= MAX_INFLATED:
        return "inflated_length", f"{length} outside {MIN_INFLATED}..{MAX_INFLATED}"
    return None


def check_tensor_entry(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """A tensor entry's chunk columns agree in length, every chunk lies inside the tensor, and no dimension
    exceeds 2**63 - 1."""
    size = value["size"]
    fault = _dims_fault(size, "size")
    if fault is not None:
        return fault
    ndim = len(size)
    count = len(value["chunk_files"])
    for name in ("chunk_byte_offsets", "chunk_byte_lengths", "chunk_crcs"):
        if len(value[name]) != count:
            return name, f"{len(value[name])} values, {count} chunks"
    for name in ("chunk_offsets", "chunk_sizes"):
        if len(value[name]) != count * ndim:
            return name, f"{len(value[name])} values, {count} chunks of {ndim} dims need {count * ndim}"
    if _product(size, 1) is None:
        return "size", "element count overflows 64 bits"
    offsets, sizes = value["chunk_offsets"], value["chunk_sizes"]
    for dim in range(ndim):
        limit = size[dim]
        ends = map(int.__add__, offsets[dim::ndim], sizes[dim::ndim])
        if max(ends, default=0) > limit:
            return "chunk_sizes", f"a chunk ends beyond size {limit} of dim {dim}"
    return None


def check_metadata(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """File names are plain and listed once; fqns are unique; file indexes are in range."""
    files = value["files"]
    for index, name in enumerate(files):
        if not _FILE_NAME_RE.match(name) or name in (".", ".."):
            return f"files[{index}]", f"{name!r} is not a plain file name"
    if len(set(files)) != len(files):  # str hashes are seeded: no input makes this slow
        first: set[str] = set()
        for index, name in enumerate(files):
            if name in first:
                return f"files[{index}]", f"{name!r} is listed twice"
            first.add(name)
    count = len(files)
    seen: set[str] = set()
    for group in ("tensors", "values"):
        for index, entry in enumerate(value[group]):
            fqn = entry["fqn"]
            if fqn in seen:
                return f"{group}[{index}].fqn", f"{fqn!r} appears twice"
            seen.add(fqn)
    for group in ("tensors", "values"):  # after every fqn: the order of the declared rules
        for index, entry in enumerate(value[group]):
            file_ids = entry["chunk_files"] if group == "tensors" else (entry["file"],)
            if file_ids and max(file_ids) >= count:
                return f"{group}[{index}]", f"file index {max(file_ids)} is not below the {count} files"
    return None


# -- dump-manifest --------------------------------------------------------------------------------

#: Name of a dump's manifest file; no shard may take it.
DUMP_MANIFEST_NAME = "MANIFEST"
#: Offset of the first record in a dump shard: the file header and the row count, padded to 64.
DUMP_FIRST_RECORD = 64
#: The smallest row record: the global index, a field count of 0 and the CRC-32.
DUMP_MIN_RECORD = 16
_LAYOUT_NESTED = 2  # dump-manifest's Layout.NESTED


def _check_dump_fields(fields: list[dict[str, Any]], keys: list[dict[str, Any]]) -> tuple[str, str] | None:
    names: set[str] = set()
    for index, entry in enumerate(fields):
        if entry["name"] in names:
            return f"fields[{index}].name", f"{entry['name']!r} appears twice"
        names.add(entry["name"])
    # After every name (the declared order): the dimensions of every DENSE shape, then of every nested shape.
    for index, entry in enumerate(fields):
        fault = _dims_fault(entry["layout"].get("shape") or [], f"fields[{index}].layout.shape")
        if fault is not None:
            return fault
    for index, entry in enumerate(keys):
        for pos, shape in enumerate(entry["nested_shapes"]):
            fault = _dims_fault(shape, f"keys[{index}].nested_shapes[{pos}]")
            if fault is not None:
                return fault
    return None


def _check_dump_keys(keys: list[dict[str, Any]], fields: list[dict[str, Any]]) -> tuple[str, str] | None:
    # One rule after another over every key (the declared order), each reporting its first fault.
    seen: set[str] = set()
    for index, entry in enumerate(keys):
        key = entry["key"]
        if key in seen:
            return f"keys[{index}].key", f"{key!r} appears twice"
        seen.add(key)
    for index, entry in enumerate(keys):
        previous = -1
        for pos, field_index in enumerate(entry["fields"]):
            if field_index <= previous or field_index >= len(fields):
                return f"keys[{index}].fields[{pos}]", f"field index {field_index} is not ascending below {len(fields)}"
            previous = field_index
    # Writers may name the tag ("NESTED"); readers give the member (equal to its value).
    nested = [entry["layout"]["kind"] in (_LAYOUT_NESTED, "NESTED") for entry in fields]
    ndims = [entry["layout"].get("ndim") for entry in fields]
    # nested-shapes: first as many shapes as nested fields in every key, then each shape with its field's ndim.
    for index, entry in enumerate(keys):
        count, shapes = sum(nested[f] for f in entry["fields"]), len(entry["nested_shapes"])
        if shapes < count:
            return f"keys[{index}].nested_shapes", "fewer shapes than nested fields"
        if shapes > count:
            return f"keys[{index}].nested_shapes", f"{shapes} shapes for {count} nested fields"
    for index, entry in enumerate(keys):
        matched = zip(entry["nested_shapes"], (f for f in entry["fields"] if nested[f]), strict=True)
        for pos, (shape, field_index) in enumerate(matched):
            if len(shape) != ndims[field_index]:
                return f"keys[{index}].nested_shapes[{pos}]", f"{len(shape)} dims, the field has {ndims[field_index]}"
    return None


def _check_dump_shards(shards: list[dict[str, Any]], key_count: int) -> tuple[str, str] | None:
    # One rule after another over every shard and row (the declared order), each reporting its first fault.
    files: set[str] = set()
    for index, shard in enumerate(shards):
        name = shard["file"]
        if not _FILE_NAME_RE.match(name) or name in (DUMP_MANIFEST_NAME, ".", ".."):
            return f"shards[{index}].file", f"{name!r} is not a plain shard file name"
    for index, shard in enumerate(shards):
        if shard["file"] in files:
            return f"shards[{index}].file", f"{shard['file']!r} appears twice"
        files.add(shard["file"])
    for index, shard in enumerate(shards):
        rows, offsets, lengths = shard["rows"], shard["offsets"], shard["lengths"]
        if not len(rows) == len(offsets) == len(lengths):
            return f"shards[{index}]", f"{len(rows)} rows, {len(offsets)} offsets and {len(lengths)} lengths"
    for index, shard in enumerate(shards):
        for pos, row in enumerate(shard["rows"]):
            if row >= key_count:
                return f"shards[{index}].rows[{pos}]", f"row {row} is not below the {key_count} keys"
    placed = bytearray(key_count)
    for index, shard in enumerate(shards):
        for pos, row in enumerate(shard["rows"]):
            if placed[row]:
                return f"shards[{index}].rows[{pos}]", f"row {row} is stored twice"
            placed[row] = 1
    for index, shard in enumerate(shards):
        end = DUMP_FIRST_RECORD
        for pos, (offset, length) in enumerate(zip(shard["offsets"], shard["lengths"], strict=True)):
            # Records follow each other in file order, each at the next multiple of 64.
            if offset != end + (-end % 64):
                return f"shards[{index}].offsets[{pos}]", f"record at {offset}, the previous one ends at {end}"
            end = offset + length
    for index, shard in enumerate(shards):
        for pos, length in enumerate(shard["lengths"]):
            if length < DUMP_MIN_RECORD:
                return f"shards[{index}].lengths[{pos}]", f"record of {length} bytes is shorter than any record"
    if key_count and not all(placed):
        return "shards", f"row {placed.index(0)} is in no shard"
    return None


def check_dump_manifest(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """Unique field names, keys and files; field indexes and nested shapes agree with the schema, no dimension
    exceeds 2**63 - 1;
    every key in exactly one shard; records in file order without overlap."""
    return (
        _check_dump_fields(value["fields"], value["keys"])
        or _check_dump_keys(value["keys"], value["fields"])
        or _check_dump_shards(value["shards"], len(value["keys"]))
    )
