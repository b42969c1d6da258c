"""Format ``checkpoint-metadata``: the ``.metadata`` file of a checkpoint (DCP's ``Metadata``).

The file header (magic ``\\x89INRTMD\\n``, then ``format_version`` as
``Int16ul``), then one document holding everything DCP's ``Metadata`` carries,
then a CRC-32 of the document.  The whole file is at most 64 MiB (a reader
may set a lower limit); value documents nest at most 64 levels.

* ``dcp_version``: DCP's version string (``"1.0.0"``), absent before 2.9.
* ``storage_meta``: checkpoint, save and load ids and module names.
* ``planner_data``: the planner's value (a MessagePack document of Inert's
  value subset; the default planner stores ``{fqn: (key, key, ...)}``).
* ``files``: the data files, plain names inside the checkpoint directory
  (rule ``checkpoint-metadata.file-name`` gives the characters); entries
  refer to them by index.
* ``tensors``: per tensor its fqn, ``TensorProperties`` (dtype, layout,
  memory format, requires_grad, pin_memory), size, and its chunks as
  columns: chunk offsets and sizes (``ndim`` values per chunk, flattened), and
  per chunk the file index, byte offset and length of its shard record and
  the record's CRC-32.  Columns keep 140,000 chunks to a few ``unpack_from``
  calls.
* ``values``: per non-tensor entry its fqn and the location and CRC-32 of
  its record.

Version 2 adds to each tensor entry the strides DCP records from PyTorch 2.15 on
(``TensorProperties.strides``, ``tensor.stride()`` when saved): ``strides_recorded``
(1 when the release that wrote the file recorded strides, else 0) and ``strides``
(``ndim`` values when recorded, none otherwise; each at most 2**63 - 1).  A flag and
an array rather than an ``Optional`` array: a 0-dim tensor's strides are ``()``, not
absent, and the rules compare only parameters with None.  Writers write version 1
on releases that record no strides.

Every chunk must lie inside its tensor; fqns are unique (rules
``checkpoint-metadata.*``).  Nothing else restricts them: an fqn may be the
empty string or any UTF-8 (a state dict key like any other); a chunk may be
zero-size (a 0 among its sizes, at any offset inside its tensor); the chunks
of a tensor are not checked for overlap nor for covering it; the columns of
a tensor with no chunk are all empty.  Whether records lie inside their files and overlap
is checked by the storage reader, which knows the file sizes, before it reads
a record.
"""

import enum

from ._grammar import Array, Bool8, Crc32, Format, Int8ul, Int32ul, Int64ul, MsgPack, Optional, Record, Tag, Utf8
from ._rules import FILE_NAME_SENTENCE, SpecRule
from .checkpoint_shard import DType

#: The file's name in a checkpoint directory (DCP's); a rank-local metadata file is ``__{rank}`` then it.
METADATA_NAME = ".metadata"
MAGIC = b"\x89INRTMD\n"
MAX_SIZE = 64 << 20
MAX_DEPTH = 64
MAX_NDIM = 64
MAX_FQN_LEN = 1 << 16
MAX_ENTRIES = 1 << 22
MAX_CHUNK_VALUES = 1 << 26
MAX_FILES = 1 << 20


class Layout(enum.IntEnum):
    STRIDED = 0
    SPARSE_COO = 1
    SPARSE_CSR = 2
    SPARSE_CSC = 3
    SPARSE_BSR = 4
    SPARSE_BSC = 5
    JAGGED = 6


class MemoryFormat(enum.IntEnum):
    CONTIGUOUS = 0
    CHANNELS_LAST = 1
    CHANNELS_LAST_3D = 2
    PRESERVE = 3


Text = Utf8(Int32ul, MAX_FQN_LEN)

StorageMeta = Record(
    "StorageMeta",
    "checkpoint_id" / Optional(Text),
    "save_id" / Optional(Text),
    "load_id" / Optional(Text),
    "modules" / Array(Int32ul, Text, MAX_ENTRIES),
)

_TENSOR_FIELDS = (
    "fqn" / Text,
    "dtype" / Tag(DType),
    "layout" / Tag(Layout),
    "memory_format" / Tag(MemoryFormat),
    "requires_grad" / Bool8(),
    "pin_memory" / Bool8(),
    "size" / Array(Int8ul, Int64ul, MAX_NDIM),
    "chunk_offsets" / Array(Int32ul, Int64ul, MAX_CHUNK_VALUES),
    "chunk_sizes" / Array(Int32ul, Int64ul, MAX_CHUNK_VALUES),
    "chunk_files" / Array(Int32ul, Int32ul, MAX_CHUNK_VALUES),
    "chunk_byte_offsets" / Array(Int32ul, Int64ul, MAX_CHUNK_VALUES),
    "chunk_byte_lengths" / Array(Int32ul, Int64ul, MAX_CHUNK_VALUES),
    "chunk_crcs" / Array(Int32ul, Int32ul, MAX_CHUNK_VALUES),
)
TensorEntry = Record("TensorEntry", *_TENSOR_FIELDS)
TensorEntryV2 = Record(
    "TensorEntryV2",
    *_TENSOR_FIELDS,
    "strides_recorded" / Bool8(),
    "strides" / Array(Int8ul, Int64ul, MAX_NDIM),
)

ValueEntry = Record(
    "ValueEntry",
    "fqn" / Text,
    "file" / Int32ul,
    "byte_offset" / Int64ul,
    "byte_length" / Int64ul,
    "crc" / Int32ul,
)

_HEAD = (
    "dcp_version" / Optional(Utf8(Int32ul, 64)),
    "storage_meta" / Optional(StorageMeta),
    "planner_data" / MsgPack(Int32ul, MAX_SIZE, MAX_DEPTH),
    "files" / Array(Int32ul, Utf8(Int32ul, 255), MAX_FILES),
)
_TAIL = (
    "values" / Array(Int32ul, ValueEntry, MAX_ENTRIES),
    "crc32" / Crc32(),
)
MetadataV1 = Record("CheckpointMetadata", *_HEAD, "tensors" / Array(Int32ul, TensorEntry, MAX_ENTRIES), *_TAIL)
MetadataV2 = Record("CheckpointMetadataV2", *_HEAD, "tensors" / Array(Int32ul, TensorEntryV2, MAX_ENTRIES), *_TAIL)

FORMAT = Format(
    name="checkpoint-metadata",
    versions={1: MetadataV1, 2: MetadataV2},
    doc=__doc__ or "",
    params=("verify_checksums",),
    magic=MAGIC,
    max_size=MAX_SIZE,
)

#: The rules of the metadata beyond its fields' own (checked after each entry and after the document, in this order).
RULES = (
    SpecRule("checkpoint-metadata.size-dimension", "No dimension of a tensor's size exceeds 2**63 - 1 (torch "
             "holds sizes as signed 64-bit numbers).", "invalid-value", "tensors[i].size[i]",
             "all(d <= 2**63 - 1 for d in size)", r"^dimension \d+ exceeds 2\*\*63 - 1$", on="TensorEntry|TensorEntryV2",
             message='dimension {size[i]} exceeds 2**63 - 1'),
    SpecRule("checkpoint-metadata.chunk-columns", "A tensor's chunk_files column gives its number of chunks; "
             "chunk_byte_offsets, chunk_byte_lengths and chunk_crcs hold one value per chunk, chunk_offsets and "
             "chunk_sizes ndim values per chunk (ndim: the length of size).", "invalid-value",
             "tensors[i].chunk_byte_offsets|tensors[i].chunk_byte_lengths|tensors[i].chunk_crcs|"
             "tensors[i].chunk_offsets|tensors[i].chunk_sizes",
             "len(chunk_byte_offsets) == len(chunk_files) and len(chunk_byte_lengths) == len(chunk_files) and "
             "len(chunk_crcs) == len(chunk_files) and len(chunk_offsets) == len(chunk_files) * len(size) and "
             "len(chunk_sizes) == len(chunk_files) * len(size)", r"^\d+ values?, \d+ chunks?", on="TensorEntry|TensorEntryV2",
             message=("{plural(len(chunk_byte_offsets), 'value')}, {plural(len(chunk_files), 'chunk')}",
                      "{plural(len(chunk_byte_lengths), 'value')}, {plural(len(chunk_files), 'chunk')}",
                      "{plural(len(chunk_crcs), 'value')}, {plural(len(chunk_files), 'chunk')}",
                      "{plural(len(chunk_offsets), 'value')}, {plural(len(chunk_files), 'chunk')} of "
                      "{plural(len(size), 'dim')} need {len(chunk_files) * len(size)}",
                      "{plural(len(chunk_sizes), 'value')}, {plural(len(chunk_files), 'chunk')} of "
                      "{plural(len(size), 'dim')} need {len(chunk_files) * len(size)}")),
    SpecRule("checkpoint-metadata.size-overflow", "The product of a tensor's size is below 2**64.",
             "invalid-value", "tensors[i].size", "prod(size) < 2**64", r"^element count overflows 64 bits",
             on="TensorEntry|TensorEntryV2",
             message='element count overflows 64 bits'),
    SpecRule("checkpoint-metadata.chunk-inside", "Every chunk lies inside its tensor: in every dim, the chunk's "
             "offset plus its size (the exact sum, never wrapped at 64 bits) is at most the tensor's size.",
             "invalid-value", "tensors[i].chunk_sizes",
             "all(chunk_offsets[c * len(size) + d] + chunk_sizes[c * len(size) + d] <= size[d] "
             "for c in range(len(chunk_files)) for d in range(len(size)))", r"^a chunk ends beyond size",
             on="TensorEntry|TensorEntryV2",
             message='a chunk ends beyond size {size[j]} of dim {j} (chunk {i})'),
    SpecRule("checkpoint-metadata.file-name", "A data file name is " + FILE_NAME_SENTENCE + ".",
             "invalid-value", "files[i]", "all(plain_file_name(name) for name in files)",
             r"is not a plain file name$", on="CheckpointMetadata|CheckpointMetadataV2",
             message='{files[i]!r} is not a plain file name'),
    SpecRule("checkpoint-metadata.file-unique", "A data file name appears once in files.", "invalid-value",
             "files[i]", "distinct(files)", r"is listed twice$", on="CheckpointMetadata|CheckpointMetadataV2",
             message='{files[i]!r} is listed twice'),
    SpecRule("checkpoint-metadata.fqn-unique", "An fqn appears once among all tensors and values (tensors first, "
             "then values, in order: the second occurrence is reported).", "invalid-value",
             "tensors[i].fqn|values[i].fqn", "distinct(tensors.fqn) and distinct(values.fqn, tensors.fqn)",
             r"appears twice$", on="CheckpointMetadata|CheckpointMetadataV2",
             message=('{tensors.fqn[i]!r} appears twice', '{values.fqn[i]!r} appears twice')),
    SpecRule("checkpoint-metadata.file-index", "Every chunk's and every value's file index is below the number "
             "of files.", "invalid-value", "tensors[i]|values[i]",
             "all(all(f < len(files) for f in chunks) for chunks in tensors.chunk_files) and "
             "all(f < len(files) for f in values.file)", r"^file index \d+ is not below the \d+ files?",
             on="CheckpointMetadata|CheckpointMetadataV2",
             message=("file index {tensors.chunk_files[i][j]} is not below the {plural(len(files), 'file')}",
                      "file index {values.file[i]} is not below the {plural(len(files), 'file')}")),
    SpecRule("checkpoint-metadata.strides-ndim", "A tensor entry's strides hold one value per dimension of its "
             "size when strides_recorded is 1, and none when it is 0 (version 2).", "invalid-value",
             "tensors[i].strides", "(strides_recorded == 1 and len(strides) == len(size)) or "
             "(strides_recorded == 0 and len(strides) == 0)", r"^\d+ strides? for \d+ dims?", on="TensorEntryV2",
             message="{plural(len(strides), 'stride')} for {plural(len(size), 'dim')}"),
    SpecRule("checkpoint-metadata.stride-range", "No stride exceeds 2**63 - 1 (torch holds strides as signed 64-bit "
             "numbers, none negative) (version 2).",
             "invalid-value", "tensors[i].strides[i]",
             "all(s <= 2**63 - 1 for s in strides)", r"^stride \d+ exceeds 2\*\*63 - 1$", on="TensorEntryV2",
             message="stride {strides[i]} exceeds 2**63 - 1"),
)
