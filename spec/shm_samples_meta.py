"""Format ``shm-samples-meta``: where each sample of a batch lies in a shared-memory chunk.

A batch is a list of samples; a sample is an array (offset and size in the
chunk, dtype, shape) or a tuple or list of samples, nested at most
``MAX_DEPTH`` levels (a top-level sample is level 1).  Version 1 is
byte-compatible with the layout proposed for NVIDIA DALI.

The reader checks each array against itself (``nbytes == prod(shape) *
itemsize`` without overflow, offset a multiple of the itemsize, a plain numeric
dtype) and, when the caller passes ``chunk_size``, against the chunk.
"""

import enum

from inert._checks import check_array_sample
from inert._rules import SpecRule

from ._grammar import Array, Format, Int32ul, Int64ul, Record, Recursive, Tag, Union, Utf8, Validate

#: Deepest nesting of tuples and lists (a top-level sample is level 1).
MAX_DEPTH = 64
#: Most samples in one batch, and most items in one tuple or list.
MAX_SAMPLES = 1 << 24
#: Most dimensions of one array (numpy's own limit).
MAX_NDIM = 64
#: Longest dtype string, in bytes.
MAX_DTYPE_LEN = 16


class SampleKind(enum.IntEnum):
    ARRAY = 0
    TUPLE = 1
    LIST = 2


def _sample() -> Union:
    return Sample


Items = "items" / Array(Int64ul, Recursive(_sample, MAX_DEPTH), MAX_SAMPLES)

Sample = Union(
    "Sample",
    "kind",
    Tag(SampleKind),
    {
        SampleKind.ARRAY: Record(
            "ArraySample",
            "offset" / Int64ul,
            "nbytes" / Int64ul,
            "dtype" / Utf8(Int32ul, MAX_DTYPE_LEN),
            "shape" / Array(Int32ul, Int64ul, MAX_NDIM),
            Validate(check_array_sample),
        ),
        SampleKind.TUPLE: Record("TupleSample", Items),
        SampleKind.LIST: Record("ListSample", Items),
    },
)

SamplesMetaV1 = Record("SamplesMeta", "samples" / Array(Int64ul, Recursive(_sample, MAX_DEPTH), MAX_SAMPLES))

FORMAT = Format(
    name="shm-samples-meta",
    versions={1: SamplesMetaV1},
    doc=__doc__ or "",
    params=("chunk_size",),
)

#: Checked after an array sample's fields, in this order.
RULES = (
    SpecRule("shm-samples-meta.dtype", "An array's dtype is numpy's dtype.str of a plain numeric type: `|b1`, "
             "`|i1`, `|u1`, or `<`/`>` then i2, i4, i8, u2, u4, u8, f2, f4, f8, c8 or c16.", "invalid-value",
             "dtype", "check:dtype_itemsize", r"^unsupported dtype"),
    SpecRule("shm-samples-meta.shape-overflow", "The element count times the itemsize is below 2**64.",
             "invalid-value", "shape", "prod(shape) * itemsize(dtype) < 2**64",
             r"^element count times itemsize overflows 64 bits"),
    SpecRule("shm-samples-meta.nbytes", "The nbytes field equals prod(shape) * itemsize(dtype).", "invalid-value",
             "nbytes", "nbytes == prod(shape) * itemsize(dtype)", r"declared, shape and dtype give"),
    SpecRule("shm-samples-meta.offset-aligned", "The offset is a multiple of the itemsize.", "invalid-value",
             "offset", "offset % itemsize(dtype) == 0", r"is not a multiple of the itemsize"),
    SpecRule("shm-samples-meta.inside-chunk", "When the caller passes chunk_size, offset + nbytes <= chunk_size.",
             "invalid-value", "nbytes", "chunk_size is None or offset + nbytes <= chunk_size",
             r"-byte chunk$"),
)
