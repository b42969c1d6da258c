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

The cross references (unique field names, keys and shard file names, field
indexes in range and ascending, nested shapes matching the schema, every key
in exactly one shard, records packed in file order) are rules of the format:
the decoder checks them after the document (rules ``dump-manifest.*``).  Only
whether each record lies inside its file, whose size the manifest does not
carry, is left to the loader, which checks it before reading any record.
"""

import enum

from inert._checks import check_dump_manifest

from ._grammar import Array, Crc32, Format, Int8ul, Int32ul, Int64ul, MsgPack, Record, Tag, Union, Utf8, Validate
from ._rules import FILE_NAME_SENTENCE, SpecRule
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

#: The cross references of the manifest, checked by the decoder after the whole document (fields, then keys,
#: then shards, each in order: the first broken rule is reported).
RULES = (
    SpecRule("dump-manifest.field-name-unique", "A field name appears once in fields.", "invalid-value",
             "fields[i].name", "len(set(names)) == len(names)", r"appears twice$"),
    SpecRule("dump-manifest.dimension", "No dimension of a DENSE field's shape or of a key's nested shape "
             "exceeds 2**63 - 1 (torch and numpy hold sizes as signed 64-bit numbers).", "invalid-value",
             "fields[i].layout.shape[i]|keys[i].nested_shapes[i][i]", "all(d <= 2**63 - 1 for d in shape)",
             r"^dimension \d+ exceeds 2\*\*63 - 1$"),
    SpecRule("dump-manifest.key-unique", "A key appears once in keys.", "invalid-value", "keys[i].key",
             "len(set(keys)) == len(keys)", r"appears twice$"),
    SpecRule("dump-manifest.field-index", "A key's fields are indexes into fields, strictly ascending.",
             "invalid-value", "keys[i].fields[i]", "all(a < b for a, b in pairs(fields)) and max(fields) < len(schema)",
             r"is not ascending below"),
    SpecRule("dump-manifest.nested-shapes", "A key holds one nested shape per field of its fields that is NESTED, "
             "in the same order, each with the field's ndim dims (a shape of more than 64 dims is already "
             "refused as a count, `grammar.count`, when it is read).", "invalid-value",
             "keys[i].nested_shapes|keys[i].nested_shapes[i]",
             "[len(s) for s in nested_shapes] == [schema[f].ndim for f in fields if schema[f].kind == NESTED]",
             r"fewer shapes than nested fields|dims, the field has|shapes for \d+ nested fields"),
    SpecRule("dump-manifest.shard-file-name", "A shard file name is " + FILE_NAME_SENTENCE + ", and not `MANIFEST`.",
             "invalid-value", "shards[i].file",
             "re.fullmatch('[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}', file) and file != 'MANIFEST'",
             r"is not a plain shard file name$"),
    SpecRule("dump-manifest.shard-file-unique", "A shard file name appears once in shards.", "invalid-value",
             "shards[i].file", "len(set(files)) == len(files)", r"appears twice$"),
    SpecRule("dump-manifest.shard-columns", "A shard's rows, offsets and lengths columns are equally long.",
             "invalid-value", "shards[i]", "len(rows) == len(offsets) == len(lengths)", r"rows, \d+ offsets and"),
    SpecRule("dump-manifest.row-index", "A shard's row is an index into keys.", "invalid-value",
             "shards[i].rows[i]", "row < len(keys)", r"is not below the \d+ keys$"),
    SpecRule("dump-manifest.row-once", "No row is stored twice (in one shard or in two).", "invalid-value",
             "shards[i].rows[i]", "rows of all shards are distinct", r"is stored twice$"),
    SpecRule("dump-manifest.record-placement", "A shard's records are listed in file order and packed: the "
             "first at offset 64 (the shard header, row count and padding), each next one at the first multiple "
             "of 64 at or after the end (offset + length) of the one before: no gap but that padding, no "
             "overlap.", "invalid-value", "shards[i].offsets[i]",
             "offsets[k] == align64(offsets[k-1] + lengths[k-1]) (offsets[0] == 64)",
             r"^record at \d+, the previous one ends at"),
    SpecRule("dump-manifest.record-length", "A record is at least 16 bytes (a global index, a field count of 0 "
             "and the CRC-32).", "invalid-value", "shards[i].lengths[i]", "length >= 16",
             r"shorter than any record$"),
    SpecRule("dump-manifest.row-placed", "Every key is stored in some shard (with row-once: in exactly one).",
             "invalid-value", "shards", "every index of keys is in some shard's rows", r"is in no shard$"),
)

#: Over which elements in turn the rules above run (each element gets all of its rules before the next one).
RULE_ORDER = (
    "they run after the whole document and its CRC-32, element by element: each field in order "
    "(`field-name-unique`, then `dimension` over its DENSE shape); then each key in order (`key-unique`; then "
    "for each of its field indexes in order: `field-index`, and for a NESTED field `nested-shapes` (a shape "
    "left for it), `dimension` over that shape, `nested-shapes` (its ndim); then `nested-shapes` (no shape "
    "left over)); then each shard in order (`shard-file-name`, `shard-file-unique`, `shard-columns`, then for "
    "each row in order: `row-index`, `row-once`, `record-placement`, `record-length`); last `row-placed`, "
    "naming the lowest key index in no shard."
)
