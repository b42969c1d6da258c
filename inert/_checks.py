"""Value rules shared by both reference codecs.

The grammar in ``inert.spec`` names these rules; the Construct-interpreted codec
and the generated codecs both call them, so a rule is written once.  Each
returns ``None`` when the value is valid, or ``(field, reason)``.  Nothing here
imports numpy: the generated codecs need only the standard library and msgpack.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["dtype_itemsize", "check_array_sample", "check_sample_range", "check_descriptor"]

_U64_MAX = (1 << 64) - 1

# numpy's ``dtype.str`` for the plain numeric kinds: byte order, kind, itemsize.
# '|' is numpy's spelling for 1-byte types, '<'/'>' for wider ones.
_DTYPE_RE = re.compile(r"([<>|])([biufc])([0-9]{1,2})\Z")
_ITEMSIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}
_dtype_cache: dict[str, int | None] = {}


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


def check_array_sample(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """An array's dtype, shape, size and placement agree with each other and the chunk."""
    dtype = value["dtype"]
    itemsize = _dtype_cache.get(dtype) or dtype_itemsize(dtype)  # the cache first: this runs per sample
    if itemsize is None:
        return "dtype", f"unsupported dtype {dtype!r}"
    total = itemsize
    for dim in value["shape"]:
        total *= dim
    if total > _U64_MAX:  # dims are < 2**64 and at most 64 of them: the product stays a small bigint
        return "shape", "element count times itemsize overflows 64 bits"
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


def check_sample_range(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """The rules of DALI's SampleRange: a non-empty-or-empty range with a slice inside it."""
    start, end = value["start"], value["end"]
    if start < 0:
        return "start", f"{start} is negative"
    if end < start:
        return "end", f"{end} is before start {start}"
    if value["iteration"] < 0:
        return "iteration", f"{value['iteration']} is negative"
    if value["epoch"] < 0:
        return "epoch", f"{value['epoch']} is negative"
    slice_start, slice_end = value["slice_start"], value["slice_end"]
    if not 0 <= slice_start <= end - start:
        return "slice_start", f"{slice_start} lies outside 0..{end - start}"
    if not slice_start <= slice_end <= end - start:
        return "slice_end", f"{slice_end} lies outside {slice_start}..{end - start}"
    return None


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
