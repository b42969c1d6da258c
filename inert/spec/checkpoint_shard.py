"""Format ``checkpoint-shard``: the data file of a checkpoint (DCP's ``__{rank}_{n}.distcp``).

A shard file is the file header (magic ``\\x89INRTSH\\n``, then
``format_version`` as ``Int16ul``), a record count, then the records, each
starting at a multiple of 64 bytes from the start of the file.  The
checkpoint's metadata locates every record by (file, offset, length) and
carries its CRC-32, so a reader fetches and decodes only the byte ranges it
needs with ``decode_record``; ``decode`` reads a whole file.

A record is a tensor or a value, then a CRC-32 of every byte of the record
before it (the kind, the header, the padding and the payload):

* a tensor: its dtype (the ``DType`` enum), its shape (at most 64 dims), the
  byte length, zero padding to the next multiple of 64, then the elements as
  raw little-endian bytes in C order.  The length must equal
  ``prod(shape) * itemsize``.  A 0-d tensor has one element, a zero-size one
  no bytes.
* a value: one MessagePack document of Inert's value subset, at most 64 MiB
  and 64 levels deep.

The value subset, its one canonical encoding (the rules ``value.*`` below),
the extension codes 1 to 12 (tuple, complex, bytearray, set, frozenset,
BytesIO, numpy array and scalar, ``torch.Size``, ``torch.dtype``,
``torch.device``, a registered object) with their payloads, and their
canonical JSON are on the page every format with a value document shares:
[value documents](value_documents.md).

Version 2 adds compressed records (written when a save asks for compression:
``_extensions=[ZStandard()]``). A record's body may also be ``ZSTD``: the
codec (``Compression``), ``inflated_length``, then one zstd frame (zero
padding to a multiple of 64 before it, as for tensor bytes). The frame
inflates to exactly ``inflated_length`` bytes, which are a version 1 record
body (a ``TENSOR`` or a ``VALUE``, with offsets counted from the start of the
inflated bytes; never another ``ZSTD`` body). The record's CRC-32 covers what
is stored (the frame), so damage is found before anything is inflated. Before
inflating, a reader checks ``inflated_length`` against ``MAX_INFLATED`` and
against what it expects (for a tensor, the header and bytes its metadata's
dtype and chunk shape give; for a value, at most ``MAX_VALUE_LEN`` and its 5
bytes of header, and at most the length of the stored frame), and the frame's
own content size must equal it: memory is bounded by declared lengths, never
by what a frame inflates to. A tensor's frame may inflate up to zstd's own
ceiling, 32768 times its stored bytes (a block of 128 KiB in 4 bytes: a real
save of zeros reaches 32,724 times), into the destination its metadata
declares; a value's may not inflate at all beyond its stored bytes, because
decoding a document costs memory and CPU per byte of document (up to 73 bytes
of memory per byte), which only stored bytes can bound: writers store every
value as a version 1 ``VALUE`` body. The frame must be a single zstd frame
with nothing after it (its header and block headers, RFC 8878, end exactly
where the stored frame does: a frame cut short is refused before inflating),
asking a window of at most 2**27 bytes (zstd's own default decoding limit,
which bounds the memory inflating costs beyond its destination); output of any
other length is ``invalid-value``. Decoding a record (``decode``,
``decode_record``) does not inflate: a ``ZSTD`` body decodes to its ``codec``,
``inflated_length`` and the stored frame as bytes (``data``), whatever the
frame holds; the frame rules above (one frame, its content size, the inflated
length and what the inflated bytes decode to, as the part ``inflated``) are
the loader's, checked when it inflates. A writer stores a record that does not
shrink as a version 1 body (``TENSOR`` or ``VALUE``), so a version 2 file may
mix both. Version 1 files stay as they were: a reader decodes each record by
its file's version, and a ``ZSTD`` body in a version 1 file is an unknown tag.

Why 64-byte alignment: it is the cache-line size and the widest SIMD vector
(AVX-512) of the CPUs this runs on and a multiple of every itemsize (16 at
most), so a payload mapped or read into a page-aligned buffer is a valid
zero-copy view for torch, numpy and vectorised copies.  A page (4096) would
also serve ``O_DIRECT`` but wastes up to 4 KiB per record, and optimizer state
has thousands of tiny records (the ``step`` scalars).
"""

import enum

from ._grammar import Array, Bytes, Crc32, Format, Int8ul, Int32ul, Int64ul, MsgPack, Padding, Record, Tag, Union
from ._rules import SpecRule

#: Alignment of every record and every tensor payload, in bytes.
ALIGN = 64
MAX_NDIM = 64
#: Largest tensor payload (256 TiB): the file itself bounds what is read.
MAX_TENSOR_BYTES = 1 << 48
MAX_VALUE_LEN = 64 << 20
MAX_VALUE_DEPTH = 64
MAX_RECORDS = 1 << 24
#: Largest inflated body of a compressed record (version 2): the largest tensor and the longest header.
MAX_INFLATED = MAX_TENSOR_BYTES + 1024
MAGIC = b"\x89INRTSH\n"


class DType(enum.IntEnum):
    BOOL = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    UINT32 = 6
    INT32 = 7
    UINT64 = 8
    INT64 = 9
    FLOAT16 = 10
    BFLOAT16 = 11
    FLOAT32 = 12
    FLOAT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    FLOAT8_E4M3FN = 16
    FLOAT8_E5M2 = 17
    FLOAT8_E4M3FNUZ = 18
    FLOAT8_E5M2FNUZ = 19
    FLOAT8_E8M0FNU = 20


#: Bytes per element of each ``DType`` (``itemsize(dtype)`` of the rules): 1 for BOOL, the 8-bit ints and
#: floats; 2 for 16-bit, 4 for 32-bit, 8 for 64-bit types and COMPLEX64; 16 for COMPLEX128.
DTYPE_ITEMSIZES: dict[DType, int] = {
    DType.BOOL: 1, DType.UINT8: 1, DType.INT8: 1, DType.UINT16: 2, DType.INT16: 2, DType.UINT32: 4, DType.INT32: 4,
    DType.UINT64: 8, DType.INT64: 8, DType.FLOAT16: 2, DType.BFLOAT16: 2, DType.FLOAT32: 4, DType.FLOAT64: 8,
    DType.COMPLEX64: 8, DType.COMPLEX128: 16, DType.FLOAT8_E4M3FN: 1, DType.FLOAT8_E5M2: 1, DType.FLOAT8_E4M3FNUZ: 1,
    DType.FLOAT8_E5M2FNUZ: 1, DType.FLOAT8_E8M0FNU: 1,
}
#: The shortest body a compressed record may inflate to: a VALUE holding one byte (nil).
MIN_INFLATED = 6


class RecordKind(enum.IntEnum):
    TENSOR = 1
    VALUE = 2


class RecordKindV2(enum.IntEnum):
    """Version 2's record kinds: version 1's and a compressed body."""

    TENSOR = 1
    VALUE = 2
    ZSTD = 3


class Compression(enum.IntEnum):
    ZSTD = 1


TensorRecord = Record(
    "TensorRecord",
    "dtype" / Tag(DType),
    "shape" / Array(Int8ul, Int64ul, MAX_NDIM),
    "data" / Bytes(Int64ul, MAX_TENSOR_BYTES, align=ALIGN),
)

ValueRecord = Record("ValueRecord", "value" / MsgPack(Int32ul, MAX_VALUE_LEN, MAX_VALUE_DEPTH))

#: A tensor or a value: what a record holds (dump-shard's row fields hold the same).
RecordBody = Union("RecordBody", "kind", Tag(RecordKind), {RecordKind.TENSOR: TensorRecord, RecordKind.VALUE: ValueRecord})

ShardRecordV1 = Record("ShardRecord", "body" / RecordBody, "crc32" / Crc32())

ShardFileV1 = Record(
    "ShardFile",
    "records" / Array(Int32ul, Record("AlignedRecord", "pad" / Padding(ALIGN), "record" / ShardRecordV1), MAX_RECORDS),
)

CompressedRecord = Record(
    "CompressedRecord",
    "codec" / Tag(Compression),
    "inflated_length" / Int64ul,
    "data" / Bytes(Int64ul, MAX_TENSOR_BYTES, align=ALIGN),
)

RecordBodyV2 = Union(
    "RecordBodyV2", "kind", Tag(RecordKindV2),
    {RecordKindV2.TENSOR: TensorRecord, RecordKindV2.VALUE: ValueRecord, RecordKindV2.ZSTD: CompressedRecord},
)

ShardRecordV2 = Record("ShardRecordV2", "body" / RecordBodyV2, "crc32" / Crc32())

ShardFileV2 = Record(
    "ShardFileV2",
    "records" / Array(Int32ul, Record("AlignedRecordV2", "pad" / Padding(ALIGN), "record" / ShardRecordV2), MAX_RECORDS),
)

FORMAT = Format(
    name="checkpoint-shard",
    versions={1: ShardFileV1, 2: ShardFileV2},
    doc=__doc__ or "",
    params=("verify_checksums",),
    magic=MAGIC,
    # "inflated": what a version 2 ZSTD body inflates to, a version 1 body (decode_inflated).
    parts={"record": {1: ShardRecordV1, 2: ShardRecordV2}, "inflated": {2: RecordBody}},
)

#: The rules of a tensor record beyond its fields' own (checked after the record's fields, in this order);
#: dump-shard's row fields hold the same records.
TENSOR_RULES = (
    SpecRule("tensor.dimension", "No dimension of shape exceeds 2**63 - 1 (torch and numpy hold sizes as signed "
             "64-bit numbers), even in a zero-size tensor.", "invalid-value", "shape[i]",
             "all(d <= 2**63 - 1 for d in shape)", r"^dimension \d+ exceeds 2\*\*63 - 1$", on="TensorRecord",
             message='dimension {shape[i]} exceeds 2**63 - 1'),
    SpecRule("tensor.shape-overflow", "The element count times the itemsize (the product of shape and the "
             "dtype's bytes: 1 for BOOL, the 8-bit ints and floats; 2 for 16-bit; 4 for 32-bit and 8 for 64-bit "
             "types and COMPLEX64; 16 for COMPLEX128) is below 2**64; a zero-size tensor passes whatever its other "
             "dims.", "invalid-value", "shape", "prod(shape) * itemsize(dtype) < 2**64",
             r"^element count times itemsize overflows 64 bits", on="TensorRecord",
             message='element count times itemsize overflows 64 bits'),
    SpecRule("tensor.length", "The payload holds exactly prod(shape) * itemsize(dtype) bytes (a 0-d tensor one "
             "element).", "invalid-value", "data", "len(data) == prod(shape) * itemsize(dtype)",
             r"bytes? present, shape and dtype give", on="TensorRecord",
             message="{plural(len(data), 'byte')} present, shape and dtype give {prod(shape) * itemsize(dtype)}"),
    SpecRule("tensor.bool-elements", "Every element of a BOOL tensor is the byte 0 or 1.", "invalid-value",
             "data", "dtype != BOOL or all(b in (0, 1) for b in data)", r"^a boolean byte other than 0 and 1",
             on="TensorRecord",
             message='a boolean byte other than 0 and 1: {data[i]} at {i}'),
)

#: Version 2 adds the rule of a compressed body.
RULES = (
    *TENSOR_RULES,
    SpecRule("checkpoint-shard.inflated-length", "A ZSTD body (version 2) declares an inflated_length from 6 (the shortest "
             "body) to MAX_INFLATED (2**48 + 1024), checked before anything is inflated.", "invalid-value",
             "inflated_length", "6 <= inflated_length <= MAX_INFLATED", r"^\d+ outside \d+\.\.\d+$",
             on="CompressedRecord",
             message='{inflated_length} outside {MIN_INFLATED}..{MAX_INFLATED}'),
)
