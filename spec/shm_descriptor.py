"""Format ``shm-descriptor``: which shared-memory chunk holds a message, and where.

32 bytes: the worker and chunk ids, the chunk's capacity, and the offset and
size of the message in it.  DALI declares this native-order; Inert declares it
little-endian, which is the same bytes on every platform DALI runs on.  When
the caller passes ``chunk_size``, the declared capacity must equal it.
"""

from inert._checks import check_descriptor

from ._grammar import Format, Int32sl, Int64ul, Record, Validate

DescriptorV1 = Record(
    "Descriptor",
    "worker_id" / Int32sl,
    "shm_chunk_id" / Int32sl,
    "shm_capacity" / Int64ul,
    "offset" / Int64ul,
    "num_bytes" / Int64ul,
    Validate(check_descriptor),
)

FORMAT = Format(
    name="shm-descriptor",
    versions={1: DescriptorV1},
    doc=__doc__ or "",
    params=("chunk_size",),
)
