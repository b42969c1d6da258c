"""Format ``dump-manifest``: the index of a row dump (the ``MANIFEST`` file of a dump directory).

The file header (magic ``\\x89INRTDM\\n``, then ``format_version`` as
``Int16ul``), one document, then a CRC-32 of the document.  The whole file is
at most 4 GiB (a reader may set a lower limit).

* ``partition_id``: the partition the rows were dumped from.
* ``fields``: the field schema, one entry per field name any row produced:
  ``DENSE`` (every row holds a tensor of this dtype and shape), ``NESTED``
  (every row holds a tensor of this dtype and number of dims; shapes differ
  per row and are listed per key) or ``VALUE`` (a MessagePack value
  document of Inert's value subset).
* ``keys``: per row its key, its global index at dump time, the fields it
  produced (indexes into ``fields``, ascending), the shape of each of those
  fields that is ``NESTED`` (in the same order) and its tag (a value
  document, usually a map).
* ``shards``: per shard file its plain file name inside the dump directory,
  the owner that wrote it, and its rows as columns: the index of each row in
  ``keys``, and the byte offset and length of its ``dump-shard`` record.

Cross references (indexes in range, every key in exactly one shard, unique
keys, field names and file names, nested shapes matching the schema) are
checked by the loader, which also checks that records lie inside their files.
"""

import enum

from inert._checks import check_dump_manifest

from ._grammar import Array, Crc32, Format, Int8ul, Int32ul, Int64ul, MsgPack, Record, Tag, Union, Utf8, Validate
from .checkpoint_shard import MAX_NDIM, MAX_VALUE_DEPTH, DType
from .dump_shard import MAX_FIELDS, MAX_NAME_LEN, MAX_ROWS

MAGIC = b"\x89INRTDM\n"
MAX_SIZE = 1 << 32
#: Longest key and partition id, in UTF-8 bytes.
MAX_KEY_LEN = 1 << 16
#: Largest tag document of one row.
MAX_TAG_LEN = 1 << 20
#: Longest shard file name.
MAX_FILE_NAME_LEN = 255
#: Most shard files (owners) in one dump.
MAX_SHARDS = 1 << 16


class Layout(enum.IntEnum):
    DENSE = 1
    NESTED = 2
    VALUE = 3


Shape = Array(Int8ul, Int64ul, MAX_NDIM)

FieldSchema = Record(
    "FieldSchema",
    "name" / Utf8(Int32ul, MAX_NAME_LEN),
    "layout"
    / Union(
        "FieldLayout",
        "kind",
        Tag(Layout),
        {
            Layout.DENSE: Record("DenseLayout", "dtype" / Tag(DType), "shape" / Shape),
            Layout.NESTED: Record("NestedLayout", "dtype" / Tag(DType), "ndim" / Int8ul),
            Layout.VALUE: None,
        },
    ),
)

KeyEntry = Record(
    "KeyEntry",
    "key" / Utf8(Int32ul, MAX_KEY_LEN),
    "global_index" / Int64ul,
    "fields" / Array(Int32ul, Int32ul, MAX_FIELDS),
    "nested_shapes" / Array(Int32ul, Shape, MAX_FIELDS),
    "tag" / MsgPack(Int32ul, MAX_TAG_LEN, MAX_VALUE_DEPTH),
)

ShardEntry = Record(
    "ShardEntry",
    "file" / Utf8(Int32ul, MAX_FILE_NAME_LEN),
    "owner" / Int32ul,
    "rows" / Array(Int32ul, Int64ul, MAX_ROWS),
    "offsets" / Array(Int32ul, Int64ul, MAX_ROWS),
    "lengths" / Array(Int32ul, Int64ul, MAX_ROWS),
)

ManifestV1 = Record(
    "DumpManifest",
    "partition_id" / Utf8(Int32ul, MAX_KEY_LEN),
    "fields" / Array(Int32ul, FieldSchema, MAX_FIELDS),
    "keys" / Array(Int32ul, KeyEntry, MAX_ROWS),
    "shards" / Array(Int32ul, ShardEntry, MAX_SHARDS),
    "crc32" / Crc32(),
    Validate(check_dump_manifest),
)

FORMAT = Format(
    name="dump-manifest",
    versions={1: ManifestV1},
    doc=__doc__ or "",
    params=("verify_checksums",),
    magic=MAGIC,
    max_size=MAX_SIZE,
)
