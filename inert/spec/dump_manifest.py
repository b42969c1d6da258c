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

from ._grammar import Array, Crc32, Format, Int8ul, Int32ul, Int64ul, MsgPack, Record, Tag, Union, Utf8
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
#: Offset of the first record in a dump shard: the file header and the row count, padded to 64.
FIRST_RECORD = 64
#: The smallest row record: the global index, a field count of 0 and the CRC-32.
MIN_RECORD = 16
#: Name of a dump's manifest file; no shard may take it (the rule `shard-file-name` spells it).
MANIFEST_NAME = "MANIFEST"


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
             "fields[i].name", "distinct(fields.name)", r"appears twice$", on="DumpManifest",
             message='{fields.name[i]!r} appears twice'),
    SpecRule("dump-manifest.dimension", "No dimension of a DENSE field's shape, nor of any nested shape a key "
             "lists, exceeds 2**63 - 1 (torch and numpy hold sizes as signed 64-bit numbers).", "invalid-value",
             "fields[i].layout.shape[i]|keys[i].nested_shapes[i][i]",
             "all(all(d <= 2**63 - 1 for d in shape) for shape in fields.layout.shape) and "
             "all(all(all(d <= 2**63 - 1 for d in shape) for shape in shapes) for shapes in keys.nested_shapes)",
             r"^dimension \d+ exceeds 2\*\*63 - 1$", on="DumpManifest",
             message=("dimension {fields.layout.shape[i][j]} exceeds 2**63 - 1",
                      "dimension {keys.nested_shapes[i][j][k]} exceeds 2**63 - 1")),
    SpecRule("dump-manifest.key-unique", "A key appears once in keys.", "invalid-value", "keys[i].key",
             "distinct(keys.key)", r"appears twice$", on="DumpManifest",
             message='{keys.key[i]!r} appears twice'),
    SpecRule("dump-manifest.field-index", "A key's fields are indexes into fields, strictly ascending.",
             "invalid-value", "keys[i].fields[i]",
             "all(all(f[k] < len(fields) and (k == 0 or f[k - 1] < f[k]) for k in range(len(f))) for f in keys.fields)",
             r"is not ascending below", on="DumpManifest",
             message='field index {keys.fields[i][j]} is not ascending below {len(fields)}'),
    SpecRule("dump-manifest.nested-shapes", "A key holds one nested shape per field of its fields that is NESTED, "
             "in the same order, each with the field's ndim dims (a shape of more than 64 dims is already refused "
             "as a count, `grammar.count`, when it is read).  The count of shapes is checked for every key before "
             "the dims of any shape.", "invalid-value", "keys[i].nested_shapes|keys[i].nested_shapes[i]",
             "all(len(keys.nested_shapes[k]) == sum(fields.layout.kind[f] == NESTED for f in keys.fields[k]) "
             "for k in range(len(keys))) and "
             "all(all(len(shape) == fields.layout.ndim[f] for shape, f in zip(keys.nested_shapes[k], "
             "(f for f in keys.fields[k] if fields.layout.kind[f] == NESTED))) for k in range(len(keys)))",
             r"fewer shapes than nested fields|dims?, the field has|shapes? for \d+ nested fields?", on="DumpManifest",
             message=("{'fewer shapes than nested fields' if len(keys.nested_shapes[i])"
                      " < sum(fields.layout.kind[f] == NESTED for f in keys.fields[i])"
                      " else plural(len(keys.nested_shapes[i]), 'shape') + ' for '"
                      " + plural(sum(fields.layout.kind[f] == NESTED for f in keys.fields[i]), 'nested field')}",
                      "{plural(len(keys.nested_shapes[i][j]), 'dim')}, the field has another ndim "
                      "(nested shape {j} of key {i})")),
    SpecRule("dump-manifest.shard-file-name", "A shard file name is " + FILE_NAME_SENTENCE + ", and not `MANIFEST`.",
             "invalid-value", "shards[i].file",
             "all(plain_file_name(name) and name != 'MANIFEST' for name in shards.file)",
             r"is not a plain shard file name$", on="DumpManifest",
             message='{shards.file[i]!r} is not a plain shard file name'),
    SpecRule("dump-manifest.shard-file-unique", "A shard file name appears once in shards.", "invalid-value",
             "shards[i].file", "distinct(shards.file)", r"appears twice$", on="DumpManifest",
             message='{shards.file[i]!r} appears twice'),
    SpecRule("dump-manifest.shard-columns", "A shard's rows, offsets and lengths columns are equally long.",
             "invalid-value", "shards[i]",
             "all(len(shards.rows[s]) == len(shards.offsets[s]) == len(shards.lengths[s]) for s in range(len(shards.rows)))",
             r"rows?, \d+ offsets? and", on="DumpManifest",
             message="{plural(len(shards.rows[i]), 'row')}, {plural(len(shards.offsets[i]), 'offset')} and "
             "{plural(len(shards.lengths[i]), 'length')}"),
    SpecRule("dump-manifest.row-index", "A shard's row is an index into keys.", "invalid-value",
             "shards[i].rows[i]", "all(all(row < len(keys) for row in rows) for rows in shards.rows)",
             r"is not below the \d+ keys?$", on="DumpManifest",
             message="row {shards.rows[i][j]} is not below the {plural(len(keys), 'key')}"),
    SpecRule("dump-manifest.row-once", "No row is stored twice (in one shard or in two).", "invalid-value",
             "shards[i].rows[i]", "distinct(shards.rows)", r"is stored twice$", on="DumpManifest",
             message='row {shards.rows[i][j]} is stored twice'),
    SpecRule("dump-manifest.record-placement", "A shard's records are listed in file order and packed: the "
             "first at offset 64 (the shard header, row count and padding), each next one at the first multiple "
             "of 64 at or after the end (offset + length) of the one before: no gap but that padding, no "
             "overlap.", "invalid-value", "shards[i].offsets[i]",
             "all(all((k == 0 and shards.offsets[s][k] == 64) or (k > 0 and shards.offsets[s][k] == "
             "align(shards.offsets[s][k - 1] + shards.lengths[s][k - 1], 64)) for k in range(len(shards.offsets[s]))) "
             "for s in range(len(shards.offsets)))",
             r"^record at \d+, the previous one ends at", on="DumpManifest",
             message="record at {shards.offsets[i][j]}, the previous one ends at {(j == 0) * FIRST_RECORD + (j > 0) * "
             "(shards.offsets[i][max(j, 1) - 1] + shards.lengths[i][max(j, 1) - 1])}"),
    SpecRule("dump-manifest.record-length", "A record is at least 16 bytes (a global index, a field count of 0 "
             "and the CRC-32).", "invalid-value", "shards[i].lengths[i]",
             "all(all(length >= 16 for length in lengths) for lengths in shards.lengths)",
             r"shorter than any record$", on="DumpManifest",
             message="record of {plural(shards.lengths[i][j], 'byte')} is shorter than any record"),
    SpecRule("dump-manifest.row-placed", "Every key is stored in some shard (with row-once: in exactly one).",
             "invalid-value", "shards", "sum(len(rows) for rows in shards.rows) == len(keys)", r"is in no shard$",
             on="DumpManifest",
             message=("{plural(len(keys) - sum(len(rows) for rows in shards.rows), 'key')} of {len(keys)} missing: "
                      "a row is in no shard")),
)
