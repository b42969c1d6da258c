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
