"""Format ``shm-samples-meta``: where each sample of a batch lies in a shared-memory chunk.

A batch is a list of samples; a sample is an array (offset and size in the
chunk, dtype, shape) or a tuple or list of samples, nested at most
``MAX_DEPTH`` levels (a top-level sample is level 1).  Version 1 is the
layout published for NVIDIA DALI: a ``Int64ul`` sample count; an array is
kind 0, ``Int64ul`` offset and nbytes, the dtype string (numpy's
``dtype.str``) as a ``Int64ul`` byte length then UTF-8, a ``Int32ul`` ndim and
that many ``Int64ul`` dimensions; a tuple (1) or list (2) is a ``Int64ul`` count
then its samples.

Inert reads the same bytes more strictly than DALI's reader, and says so: the
dtype is one of the plain numeric kinds in numpy's canonical spelling (DALI
refuses only object and unparsable dtypes) and is UTF-8, not replaced;
``nbytes`` equals the itemsize times the dimensions, whose span (a 0 counted as
1) is at most 2**63 - 1 bytes, what numpy can describe; the offset is a
multiple of the itemsize (DALI's writer places samples on 128-byte boundaries
and only asserts it); with ``chunk_size``, each array lies inside the chunk;
counts, ndim and the dtype length are checked against their limits before
anything is read.  Every samples meta DALI's writer produces from arrays of
those dtypes passes these checks.
"""

import enum

from ._grammar import Array, Format, Int32ul, Int64ul, Record, Recursive, Tag, Union, Utf8
from ._rules import SpecRule

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
            "dtype" / Utf8(Int64ul, MAX_DTYPE_LEN),
            "shape" / Array(Int32ul, Int64ul, MAX_NDIM),
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
             "dtype", "itemsize(dtype) > 0", r"^unsupported dtype", on="ArraySample",
             message='unsupported dtype {dtype!r}'),
    SpecRule("shm-samples-meta.span", "The array's span, the itemsize times every dimension with a 0 counted as "
             "1, is at most 2**63 - 1 bytes (the largest array numpy can describe, empty ones included).",
             "invalid-value", "shape", "prod(max(d, 1) for d in shape) * itemsize(dtype) <= 2**63 - 1",
             r"spans more than 2\*\*63 - 1 bytes", on="ArraySample",
             message='{shape} of {dtype} spans more than 2**63 - 1 bytes (a 0 counted as 1), more than numpy can describe'),
    SpecRule("shm-samples-meta.nbytes", "The nbytes field equals prod(shape) * itemsize(dtype).", "invalid-value",
             "nbytes", "nbytes == prod(shape) * itemsize(dtype)", r"declared, shape and dtype give",
             on="ArraySample",
             message='{nbytes} declared, shape and dtype give {prod(shape) * itemsize(dtype)}'),
    SpecRule("shm-samples-meta.offset-aligned", "The offset is a multiple of the itemsize.", "invalid-value",
             "offset", "offset % itemsize(dtype) == 0", r"is not a multiple of the itemsize",
             on="ArraySample",
             message='{offset} is not a multiple of the itemsize {itemsize(dtype)}'),
    SpecRule("shm-samples-meta.inside-chunk", "When the caller passes chunk_size, offset + nbytes <= chunk_size (the exact sum, "
             "never wrapped at 64 bits).",
             "invalid-value", "nbytes", "chunk_size is None or offset + nbytes <= chunk_size",
             r"-byte chunk$", on="ArraySample",
             message='bytes {offset}..{offset + nbytes} lie beyond the {chunk_size}-byte chunk'),
)
