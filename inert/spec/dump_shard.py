"""Format ``dump-shard``: the rows one owner wrote into a row dump.

A shard file is the file header (magic ``\\x89INRTDS\\n``, then
``format_version`` as ``Int16ul``), a row count, then the row records, each
starting at a multiple of 64 bytes from the start of the file.  The dump's
manifest (format ``dump-manifest``) locates every record by (file, offset,
length), so a reader fetches and decodes only its own byte ranges with
``decode_record``; ``decode`` reads a whole file.

A row record is the row's global index at dump time (it only identifies the
record; a loader gives the row a new index), its produced fields in the
order the manifest lists them, each a name then a tensor or a value, then a
CRC-32 of every byte of the record before it.  Tensors and values are encoded
exactly as in ``checkpoint-shard`` records: a tensor is its dtype, its shape,
the byte length, zero padding to the next multiple of 64 and the raw
little-endian elements in C order (``prod(shape) * itemsize`` bytes); a value
is one MessagePack document of Inert's value subset.  A row with no produced
fields is a record with no fields.
"""

from ._grammar import Array, Crc32, Format, Int32ul, Int64ul, Padding, Record, Utf8
from .checkpoint_shard import ALIGN, TENSOR_RULES, RecordBody

MAGIC = b"\x89INRTDS\n"
#: Most fields one row holds.
MAX_FIELDS = 4096
#: Longest field name, in UTF-8 bytes.
MAX_NAME_LEN = 1024
#: Most rows in one shard.
MAX_ROWS = 1 << 24


RowField = Record(
    "RowField",
    "name" / Utf8(Int32ul, MAX_NAME_LEN),
    "body" / RecordBody,
)

RowRecordV1 = Record(
    "RowRecord",
    "global_index" / Int64ul,
    "fields" / Array(Int32ul, RowField, MAX_FIELDS),
    "crc32" / Crc32(),
)

ShardFileV1 = Record(
    "DumpShardFile",
    "rows" / Array(Int32ul, Record("AlignedRow", "pad" / Padding(ALIGN), "row" / RowRecordV1), MAX_ROWS),
)

FORMAT = Format(
    name="dump-shard",
    versions={1: ShardFileV1},
    doc=__doc__ or "",
    params=("verify_checksums",),
    magic=MAGIC,
    parts={"record": {1: RowRecordV1}},
)

#: A row's fields are tensor and value records: their rules are checkpoint-shard's.
RULES = TENSOR_RULES
