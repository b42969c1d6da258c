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

The value subset: nil, bool, int (-2**63 to 2**64-1), float, str (UTF-8),
bin, array, and map (keys of the subset that hash: str, int, a tuple, ...),
plus these extension types; any other extension code (msgpack's timestamp -1
included) is an unknown tag:

* 1 tuple, 4 set, 5 frozenset: the payload is one document holding an array
  of the members.  A writer orders a set's members by their encoded bytes,
  so equal sets encode to equal bytes.
* 2 complex: the real then the imaginary part, two ``Float64l`` (16 bytes).
* 3 bytearray: the raw bytes.
* 6 BytesIO (an in-memory file): its bytes.
* 7 array (a numpy array): ``dtype`` (``Int8ul``, a ``DType`` numpy has: not
  BFLOAT16 nor the FLOAT8 types), ``ndim`` (``Int8ul``, at most 64), ``ndim``
  dims (``Int64ul``), then exactly ``prod(dims) * itemsize`` bytes, little-endian,
  C order; BOOL elements are the bytes 0 and 1 only.
* 8 array scalar (a numpy scalar): ``dtype`` as in 7, then ``itemsize`` bytes.
* 9 ``torch.Size``: a document holding an array of at most 64 ints, each 0 to 2**63-1.
* 10 ``torch.dtype``: one byte, a ``DType`` value.
* 11 ``torch.device``: a document holding ``[type, index]``, ``type`` a string
  matching ``[a-z][a-z0-9_]{0,31}``, ``index`` nil or an int 0 to 2**31-1.
* 12 registered object: a document holding ``[name, state]``, ``name`` a string
  of 1 to 256 bytes, ``state`` a value of the subset.  The name is only a key
  into the reading program's own registry of classes: nothing is imported.

An array, an array scalar, or a registered object whose state is not
hashable, is not a map key nor a set member (an invalid value).

Why 64-byte alignment: it is the cache-line size and the widest SIMD vector
(AVX-512) of the CPUs this runs on and a multiple of every itemsize (16 at
most), so a payload mapped or read into a page-aligned buffer is a valid
zero-copy view for torch, numpy and vectorised copies.  A page (4096) would
also serve ``O_DIRECT`` but wastes up to 4 KiB per record, and optimizer state
has thousands of tiny records (the ``step`` scalars).
"""

import enum

from inert._checks import check_tensor_record

from ._grammar import Array, Bytes, Crc32, Format, Int8ul, Int32ul, Int64ul, MsgPack, Padding, Record, Tag, Union, Validate

#: Alignment of every record and every tensor payload, in bytes.
ALIGN = 64
MAX_NDIM = 64
#: Largest tensor payload (256 TiB): the file itself bounds what is read.
MAX_TENSOR_BYTES = 1 << 48
MAX_VALUE_LEN = 64 << 20
MAX_VALUE_DEPTH = 64
MAX_RECORDS = 1 << 24
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


class RecordKind(enum.IntEnum):
    TENSOR = 1
    VALUE = 2


TensorRecord = Record(
    "TensorRecord",
    "dtype" / Tag(DType),
    "shape" / Array(Int8ul, Int64ul, MAX_NDIM),
    "data" / Bytes(Int64ul, MAX_TENSOR_BYTES, align=ALIGN),
    Validate(check_tensor_record),
)

ValueRecord = Record("ValueRecord", "value" / MsgPack(Int32ul, MAX_VALUE_LEN, MAX_VALUE_DEPTH))

#: A tensor or a value: what a record holds (dump-shard's row fields hold the same).
RecordBody = Union("RecordBody", "kind", Tag(RecordKind), {RecordKind.TENSOR: TensorRecord, RecordKind.VALUE: ValueRecord})

ShardRecordV1 = Record("ShardRecord", "body" / RecordBody, "crc32" / Crc32())

ShardFileV1 = Record(
    "ShardFile",
    "records" / Array(Int32ul, Record("AlignedRecord", "pad" / Padding(ALIGN), "record" / ShardRecordV1), MAX_RECORDS),
)

FORMAT = Format(
    name="checkpoint-shard",
    versions={1: ShardFileV1},
    doc=__doc__ or "",
    params=("verify_checksums",),
    magic=MAGIC,
    parts={"record": {1: ShardRecordV1}},
)
