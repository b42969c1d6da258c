"""Format ``shm-descriptor``: which shared-memory chunk holds a message, and where.

Version 1 is 32 bytes: the worker and chunk ids, the chunk's capacity, and the
offset and size of the message in it.  DALI declares this native-order; Inert
declares it little-endian, which is the same bytes on every platform DALI runs
on.  When the caller passes ``chunk_size``, the declared capacity must equal it.

Version 2 (40 bytes) adds the CRC-32 of the message's bytes and of the samples
meta the message points to (0, the CRC-32 of nothing, when it points to none).
The descriptor travels over the channel's socket, not through the shared
memory, so a byte damaged in the chunk after the worker wrote it is caught
before the parent decodes anything: neither the DALI-compatible message nor
the samples meta layout has room for a checksum of its own.
"""

from ._grammar import Format, Int32sl, Int32ul, Int64ul, Record
from ._rules import SpecRule

_PLACE = (
    "worker_id" / Int32sl,
    "shm_chunk_id" / Int32sl,
    "shm_capacity" / Int64ul,
    "offset" / Int64ul,
    "num_bytes" / Int64ul,
)

DescriptorV1 = Record("Descriptor", *_PLACE)

DescriptorV2 = Record(
    "DescriptorV2",
    *_PLACE,
    "message_crc32" / Int32ul,
    "meta_crc32" / Int32ul,
)

FORMAT = Format(
    name="shm-descriptor",
    versions={1: DescriptorV1, 2: DescriptorV2},
    doc=__doc__ or "",
    params=("chunk_size",),
)

#: Checked after the descriptor's fields, in this order.
RULES = (
    SpecRule("shm-descriptor.ids", "The worker_id and shm_chunk_id are not negative.", "invalid-value",
             "worker_id|shm_chunk_id", "worker_id >= 0 and shm_chunk_id >= 0", r"is negative$", on="Descriptor|DescriptorV2",
             message=('{worker_id} is negative', '{shm_chunk_id} is negative')),
    SpecRule("shm-descriptor.inside", "The message lies inside the chunk: offset + num_bytes <= shm_capacity.",
             "invalid-value", "num_bytes", "offset + num_bytes <= shm_capacity", r"lie beyond the capacity",
             on="Descriptor|DescriptorV2",
             message='bytes {offset}..{offset + num_bytes} lie beyond the capacity {shm_capacity}'),
    SpecRule("shm-descriptor.capacity", "When the caller passes chunk_size, shm_capacity equals it.",
             "invalid-value", "shm_capacity", "chunk_size is None or shm_capacity == chunk_size",
             r"declared, the chunk holds", on="Descriptor|DescriptorV2",
             message='{shm_capacity} declared, the chunk holds {chunk_size}'),
)
