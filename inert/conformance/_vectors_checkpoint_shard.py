"""Vectors of ``checkpoint-shard``: whole shard files, one record on its own (``checkpoint-shard.record``),
and (version 2) what a ZSTD body inflates to (``checkpoint-shard.inflated``)."""

from __future__ import annotations

import math
import struct
from typing import Any

import msgpack

from ._filelib import (
    ALIGN,
    DTYPES,
    MAX_NDIM,
    MAX_TENSOR_BYTES,
    MAX_VALUE_DEPTH,
    MAX_VALUE_LEN,
    PICKLE,
    SAFETENSORS,
    TORCH_ZIP,
    Frame,
    b64,
    record,
    tensor_body,
    tensor_value,
    value_body,
    zstd_body,
    zstd_frame,
    zstd_value,
)
from ._filelib import header as file_header
from ._vectorlib import U64_MAX, Corpus, Piece

MAGIC = b"\x89INRTSH\n"
NO_CHECKSUMS = {"verify_checksums": False}

#: FP8 encodings whose meaning is special (NaN, infinity), by dtype; every byte is a valid element.
FP8_SPECIALS = {
    "FLOAT8_E4M3FN": (0x7F, 0xFF),  # NaN; no infinity
    "FLOAT8_E5M2": (0x7C, 0xFC, 0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF),  # +-inf, NaNs
    "FLOAT8_E4M3FNUZ": (0x80,),  # the one NaN (no negative zero)
    "FLOAT8_E5M2FNUZ": (0x80,),
    "FLOAT8_E8M0FNU": (0xFF,),  # NaN; exponent-only, no sign
}


def tensor(dtype: str, shape: list[int], data: bytes, start: int = 0) -> Piece:
    return record(tensor_body(start, dtype, shape, data), tensor_value(dtype, shape, data))


def value(document: Any) -> Piece:
    return Frame().value(document)


def _nested(depth: int) -> bytes:
    return b"\x91" * (depth - 1) + b"\x90"


def _array(dtype: int, dims: list[int], data: bytes) -> bytes:
    return struct.pack(f"<BB{len(dims)}Q", dtype, len(dims), *dims) + data


def value_extensions() -> list[tuple[str, str, Any, Any]]:
    """Accepted documents of every extension code (1 to 12), as a writer encodes them (a set's members and a
    map's keys in increasing order), with their canonical JSON spellings (a set's members in the order of
    their canonical JSON text)."""
    extensions: list[tuple[str, str, Any, Any]] = [
        ("ValueTuple", "a tuple (extension 1)", msgpack.ExtType(1, msgpack.packb([1, "a"])), {"$tuple": [1, "a"]}),
        ("ValueTupleEmpty", "an empty tuple", msgpack.ExtType(1, msgpack.packb([])), {"$tuple": []}),
        ("ValueComplex", "a complex number (extension 2)", msgpack.ExtType(2, struct.pack("<dd", 1.5, -2.0)),
         {"$complex": [1.5, -2.0]}),
        ("ValueComplexNonFinite", "a complex number of NaN and infinity",
         msgpack.ExtType(2, struct.pack("<dd", math.nan, math.inf)), {"$complex": [{"$float": "nan"}, {"$float": "inf"}]}),
        ("ValueBytearray", "a bytearray (extension 3)", msgpack.ExtType(3, b"\x00\xff"), {"$bytearray": "AP8="}),
        ("ValueSet", "a set (extension 4), members in increasing order: str before bin",
         msgpack.ExtType(4, msgpack.packb(["a", "b", b"a"], use_bin_type=True)), {"$set": ["a", "b", {"$bytes": "YQ=="}]}),
        ("ValueFrozenset", "a frozenset (extension 5)", msgpack.ExtType(5, msgpack.packb(["x"])), {"$frozenset": ["x"]}),
        ("ValueMapBytesKey", "a map with a bin key (spelled as a $map)", {b"k": 1}, {"$map": [[{"$bytes": "aw=="}, 1]]}),
        ("ValueMapDollarKey", "a map whose string key starts with $ (spelled as a $map)", {"$bytes": 1},
         {"$map": [["$bytes", 1]]}),
        ("ValueOptimizerState", "an Adam state: a tuple of betas, an empty set, state by parameter name",
         {"frozen": msgpack.ExtType(4, msgpack.packb([])),
          "param_groups": [{"betas": msgpack.ExtType(1, msgpack.packb([0.9, 0.999])), "params": [0]}],
          "state": {"0": {"step": 3}}},
         {"frozen": {"$set": []}, "param_groups": [{"betas": {"$tuple": [0.9, 0.999]}, "params": [0]}],
          "state": {"0": {"step": 3}}}),
    ]
    return extensions + typed_extensions()


def typed_extensions() -> list[tuple[str, str, Any, Any]]:
    """Accepted documents of the typed extensions 6 to 12, with their canonical JSON spellings."""
    ext, pack = msgpack.ExtType, msgpack.packb
    int32 = DTYPES["INT32"][0]
    return [
        ("ValueBytesIO", "an io.BytesIO (extension 6)", ext(6, b"hi"), {"$bytesio": "aGk="}),
        ("ValueArray", "a 2x2 int32 numpy array (extension 7)", ext(7, _array(int32, [2, 2], struct.pack("<4i", 1, -2, 3, 4))),
         {"$array": {"data": "AQAAAP7///8DAAAABAAAAA==", "dtype": "INT32", "shape": [2, 2]}}),
        ("ValueArrayZeroDims", "a 0-d float64 array", ext(7, _array(DTYPES["FLOAT64"][0], [], struct.pack("<d", 0.5))),
         {"$array": {"data": "AAAAAAAA4D8=", "dtype": "FLOAT64", "shape": []}}),
        ("ValueArrayEmpty", "a (0, 3) uint8 array: no bytes", ext(7, _array(DTYPES["UINT8"][0], [0, 3], b"")),
         {"$array": {"data": "", "dtype": "UINT8", "shape": [0, 3]}}),
        ("ValueArrayEmptyLastDim", "a (2**40, 0) float64 array: a 0 after a large dim, no bytes",
         ext(7, _array(DTYPES["FLOAT64"][0], [1 << 40, 0], b"")),
         {"$array": {"data": "", "dtype": "FLOAT64", "shape": [1099511627776, 0]}}),
        ("ValueArrayScalar", "a numpy int64 scalar (extension 8)", ext(8, bytes([DTYPES["INT64"][0]]) + struct.pack("<q", -1)),
         {"$arrayscalar": {"data": "//////////8=", "dtype": "INT64"}}),
        ("ValueTorchSize", "a torch.Size (extension 9)", ext(9, pack([2, 3])), {"$torch.Size": [2, 3]}),
        ("ValueTorchDtype", "a torch.dtype (extension 10), bfloat16", ext(10, bytes([DTYPES["BFLOAT16"][0]])),
         {"$torch.dtype": "BFLOAT16"}),
        ("ValueTorchDevice", "a torch.device (extension 11) with an index", ext(11, pack(["cuda", 1])),
         {"$torch.device": ["cuda", 1]}),
        ("ValueTorchDeviceNoIndex", "a torch.device without an index", ext(11, pack(["cpu", None])),
         {"$torch.device": ["cpu", None]}),
        ("ValueRegisteredObject", "a registered object (extension 12): its name and its fields",
         ext(12, pack(["train.Config", {"lr": 0.5}])), {"$object": ["train.Config", {"lr": 0.5}]}),
    ]


def _lists(depth: int, inner: Any) -> Any:
    for _ in range(depth):
        inner = [inner]
    return inner


def value_order_vectors() -> list[tuple[str, str, bytes, Any, str]]:
    """Documents where two rules could apply, or where the depth of a typed extension's document is at stake:
    (name, what, document, the canonical JSON accepted or the error kind refused, the rule that decides)."""
    ext, pack = msgpack.ExtType, lambda v: msgpack.packb(v, use_bin_type=True)
    return [
        ("ValueOrderFormBeforeTypedPayload", "an array extension of unknown dtype, then 0xc1: the canonical form "
         "of the whole document is checked before any typed payload", b"\x92" + pack(ext(7, bytes([99, 0]))) + b"\xc1",
         "invalid-value", "value.never-used"),
        ("ValueOrderShortestBeforeCut", "a str8 of 5 bytes (the shortest form is a fixstr), 2 present: the form "
         "before the bytes", b"\xd9\x05ab", "invalid-value", "value.shortest-length"),
        ("ValueOrderCodeBeforePayload", "an ext8 of 100 bytes of code 42, none present: the code before the payload",
         b"\xc7\x64\x2a", "unknown-tag", "value.ext-code"),
        ("ValueOrderKeyTypeBeforeCut", "a map whose key is a uint16 cut short: the key's type before its bytes",
         b"\x81\xcd\x01", "invalid-value", "value.key-type"),
        ("ValueOrderDepthBeforeCount", "an array of 15 at depth 65, no element present: the depth before the count",
         b"\x91" * 64 + b"\x9f", "limit", "value.depth"),
        ("ValueOrderDepthEmpty", "an empty array at depth 65: empty containers count", b"\x91" * 64 + b"\x90", "limit",
         "value.depth"),
        ("ValueArrayOrderNdimBeforeDims", "an array extension of 65 dims, 1 present: ndim before the dims",
         pack(ext(7, bytes([DTYPES["INT32"][0], 65]) + bytes(8))), "limit", "value.typed-array-ndim"),
        ("ValueArrayOrderCodeBeforeNdim", "an array extension of dtype 99 and 65 dims: the dtype first",
         pack(ext(7, bytes([99, 65]))), "unknown-tag", "value.typed-dtype-code"),
        ("ValueTorchSizeAtDepthLimit", "a torch.Size inside lists 62 deep: its array at depth 64 (the lists, "
         "the extension, the array)", pack(_lists(62, ext(9, pack([2, 3])))), _lists(62, {"$torch.Size": [2, 3]}),
         "value.depth"),
        ("ValueTorchSizeOverDepthLimit", "a torch.Size inside lists 63 deep: its array at depth 65",
         pack(_lists(63, ext(9, pack([2, 3])))), "limit", "value.depth"),
        ("ValueObjectStateAtLimit", "a registered object whose document nests 63 levels ([name, state], the state "
         "62 lists deep): max_depth - 1", pack(ext(12, pack(["a", _lists(61, [])]))),
         {"$object": ["a", _lists(61, [])]}, "value.depth"),
        ("ValueObjectStateOverLimit", "a registered object whose document nests 64 levels: one more than "
         "max_depth - 1", pack(ext(12, pack(["a", _lists(62, [])]))), "limit", "value.depth"),
    ]


def _tuples(depth: int) -> Any:
    """Tuples nested ``depth`` deep, the innermost empty."""
    doc = msgpack.ExtType(1, msgpack.packb([]))
    for _ in range(depth - 1):
        doc = msgpack.ExtType(1, msgpack.packb([doc]))
    return doc


def _json_tuples(depth: int) -> Any:
    """The canonical JSON of :func:`_tuples`."""
    doc: Any = {"$tuple": []}
    for _ in range(depth - 1):
        doc = {"$tuple": [doc]}
    return doc


def value_level_vectors() -> list[tuple[str, str, bytes, Any, str]]:
    """Tuples counting one level each (with the array of their payload), and the extensions' payloads checked
    in document order, depth first: (name, what, document, accepted JSON or refused kind, rule)."""
    ext, pack = msgpack.ExtType, lambda v: msgpack.packb(v, use_bin_type=True)
    bad_dtype = ext(7, bytes([99, 0]))  # an array of dtype code 99: unknown-tag
    bad_size = ext(9, pack(["x"]))  # a torch.Size holding a str: invalid-value
    return [
        ("ValueTuplesAtDepthLimit", "tuples nested 64 deep, the innermost empty", pack(_tuples(64)),
         _json_tuples(64), "value.depth"),
        ("ValueTuplesOverDepthLimit", "tuples nested 65 deep", pack(_tuples(65)), "limit", "value.depth"),
        ("ValueTupleInListsAtDepthLimit", "an empty tuple inside lists 63 deep: at depth 64",
         pack(_lists(63, ext(1, pack([])))), _lists(63, {"$tuple": []}), "value.depth"),
        ("ValueTupleInListsOverDepthLimit", "an empty tuple inside lists 64 deep: at depth 65, a tuple counts",
         pack(_lists(64, ext(1, pack([])))), "limit", "value.depth"),
        ("ValuePayloadsInDocumentOrder", "an array of unknown dtype, then a torch.Size holding a str: the first "
         "payload in the document decides", pack([bad_dtype, bad_size]), "unknown-tag", "value.typed-dtype-code"),
        ("ValuePayloadsInDocumentOrderSwapped", "a torch.Size holding a str, then an array of unknown dtype",
         pack([bad_size, bad_dtype]), "invalid-value", "value.typed-size"),
        ("ValuePayloadsDepthFirst", "[[torch.Size holding a str], array of unknown dtype]: depth first, the nested "
         "payload comes first in the bytes", pack([[bad_size], bad_dtype]), "invalid-value", "value.typed-size"),
        ("ValueNoLevelLeftEmptyPayload", "a torch.Size of 0 bytes inside lists 63 deep: no level left for its "
         "document is limit before the empty payload (else truncated)", pack(_lists(63, ext(9, b""))), "limit",
         "value.depth"),
        ("ValueNoLevelLeftNeverUsed", "a torch.device holding 0xc1 inside lists 63 deep: limit before the payload's "
         "own faults", pack(_lists(63, ext(11, b"\xc1"))), "limit", "value.depth"),
        ("ValueNoLevelLeftNotPair", "a registered object holding an int inside lists 63 deep: limit before its row "
         "(value.typed-object)", pack(_lists(63, ext(12, pack(1)))), "limit", "value.depth"),
        ("ValueNoLevelLeftAfterPassOne", "a torch.Size with no level left, then 0xc1 after it: no level left is a "
         "fault of pass 2, the 0xc1 of pass 1 decides", b"\x92" + pack(_lists(62, ext(9, pack([1])))) + b"\xc1",
         "invalid-value", "value.never-used"),
        ("ValueDocumentlessExtensionsDoNotCount", "a torch.dtype, an array, an array scalar, a complex and a "
         "bytearray inside lists 64 deep: extensions holding no document add no level",
         pack(_lists(63, [ext(10, bytes([DTYPES["BFLOAT16"][0]])), ext(7, _array(DTYPES["UINT8"][0], [1], b"\x07")),
                          ext(8, bytes([DTYPES["UINT8"][0], 9])), ext(2, bytes(16)), ext(3, b"\x01"), ext(6, b"")])),
         _lists(63, [{"$torch.dtype": "BFLOAT16"}, {"$array": {"data": "Bw==", "dtype": "UINT8", "shape": [1]}},
                     {"$arrayscalar": {"data": "CQ==", "dtype": "UINT8"}}, {"$complex": [0.0, 0.0]},
                     {"$bytearray": "AQ=="}, {"$bytesio": ""}]), "value.depth"),
        ("ValuePayloadsDepthFirstInTuple", "a tuple holding a torch.Size holding a str, then an array of unknown "
         "dtype: a tuple's payload is searched where it stands", pack([ext(1, pack([bad_size])), bad_dtype]),
         "invalid-value", "value.typed-size"),
    ]


def value_bound_vectors() -> list[tuple[str, str, bytes, Any, str]]:
    """The boundaries of the value documents' own limits and ranges, each side, and orders the canonical JSON
    gives that byte order does not: (name, what, document, the canonical JSON accepted or the error kind
    refused, the rule that decides)."""
    ext, pack = msgpack.ExtType, lambda v: msgpack.packb(v, use_bin_type=True)
    bool_code = DTYPES["BOOL"][0]
    return [
        ("ValueTorchDeviceType32", "a torch.device whose type is 32 characters, the most",
         pack(ext(11, pack(["a" * 32, 0]))), {"$torch.device": ["a" * 32, 0]}, "value.typed-device"),
        ("ValueTorchDeviceType33", "a torch.device whose type is 33 characters", pack(ext(11, pack(["a" * 33, 0]))),
         "invalid-value", "value.typed-device"),
        ("ValueTorchDeviceIndexMax", "a torch.device of index 2**31 - 1, the largest",
         pack(ext(11, pack(["cuda", (1 << 31) - 1]))), {"$torch.device": ["cuda", (1 << 31) - 1]}, "value.typed-device"),
        ("ValueTorchDeviceIndexOver", "a torch.device of index 2**31", pack(ext(11, pack(["cuda", 1 << 31]))),
         "invalid-value", "value.typed-device"),
        ("ValueTorchSize64", "a torch.Size of 64 ints, the most", pack(ext(9, pack([1] * 64))),
         {"$torch.Size": [1] * 64}, "value.typed-size"),
        ("ValueTorchSize65", "a torch.Size of 65 ints", pack(ext(9, pack([1] * 65))), "invalid-value",
         "value.typed-size"),
        ("ValueTorchSizeDimMax", "a torch.Size dim of 2**63 - 1, the largest", pack(ext(9, pack([(1 << 63) - 1]))),
         {"$torch.Size": [(1 << 63) - 1]}, "value.typed-size"),
        ("ValueTorchSizeDimOver", "a torch.Size dim of 2**63 (a uint64)", pack(ext(9, pack([1 << 63]))),
         "invalid-value", "value.typed-size"),
        ("ValueObjectName256", "a registered object whose name is 256 bytes, the most",
         pack(ext(12, pack(["a" * 256, None]))), {"$object": ["a" * 256, None]}, "value.typed-object"),
        ("ValueObjectName257", "a registered object whose name is 257 bytes", pack(ext(12, pack(["a" * 257, None]))),
         "invalid-value", "value.typed-object"),
        ("ValueObjectNameBytesNotChars", "a registered object whose name is 129 characters in 257 bytes: bytes count",
         pack(ext(12, pack(["\u00e9" * 128 + "a", None]))), "invalid-value", "value.typed-object"),
        ("ValueArrayScalarBool", "a bool array scalar holding 1", pack(ext(8, bytes([bool_code, 1]))),
         {"$arrayscalar": {"data": "AQ==", "dtype": "BOOL"}}, "value.typed-array-scalar"),
        ("ValueArrayScalarBoolByte", "a bool array scalar holding the byte 2", pack(ext(8, bytes([bool_code, 2]))),
         "invalid-value", "value.typed-array-scalar"),
        ("ValueExtCode13", "extension code 13, the first past the defined ones", pack(ext(13, b"")), "unknown-tag",
         "value.ext-code"),
        ("ValueExtCode0", "extension code 0", pack(ext(0, b"x")), "unknown-tag", "value.ext-code"),
        ("ValueMapCountTwoPerPair", "a map of 2 pairs with 3 bytes left: a pair needs two bytes, before any key is read",
         b"\x82\x01\x01\x01", "truncated", "value.truncated"),
        ("ValueFloat32FirstByte", "a float32 with 1 of its 4 bytes: refused from its first byte",
         b"\xca\x00", "invalid-value", "value.float64"),
        ("ValueSetJsonOrder", "a set of '\\x01' then '!' (byte order): spelled '!' first (canonical JSON text order)",
         pack(ext(4, pack(["\x01", "!"]))), {"$set": ["!", "\x01"]}, "value.key-order"),
        ("ValueMapKeysAstral", "a map of keys U+E000 and U+10000: code point (and UTF-8 byte) order, which "
         "UTF-16 order reverses", b"\x82\xa3\xee\x80\x80\x01\xa4\xf0\x90\x80\x80\x02",
         {"\ue000": 1, "\U00010000": 2}, "value.key-order"),
        ("ValueMapJsonOrder", "a $map of keys '\\x01', '!', b'k' (byte order): pairs spelled by canonical JSON text",
         b"\x83\xa1\x01\x01\xa1!\x02\xc4\x01k\x03", {"$map": [["!", 2], ["\x01", 1], [{"$bytes": "aw=="}, 3]]},
         "value.key-order"),
    ]


def typed_rejects() -> list[tuple[str, str, Any, str]]:
    """Refused documents of the typed extensions: each rule of their payloads broken once."""
    ext, pack = msgpack.ExtType, msgpack.packb
    int32, f32 = DTYPES["INT32"][0], DTYPES["FLOAT32"][0]
    return [
        ("ValueTypedAsKey", "a torch.dtype as a map key: keys are str or bin (rule value.key-type)",
         {ext(10, bytes([f32])): 1}, "invalid-value"),
        ("ValueArrayShort", "an int32 [2] array holding 4 bytes", ext(7, _array(int32, [2], bytes(4))), "invalid-value"),
        ("ValueArrayLong", "an int32 [1] array holding 8 bytes", ext(7, _array(int32, [1], bytes(8))), "invalid-value"),
        ("ValueArrayHugeShape", "an array of 2**62 x 2**62 elements in 20 bytes",
         ext(7, _array(f32, [1 << 62, 1 << 62], b"")), "invalid-value"),
        ("ValueArrayDimsCut", "an array declaring 3 dims, 1 present", ext(7, struct.pack("<BBQ", int32, 3, 1)), "truncated"),
        ("ValueArrayHeaderCut", "an array extension of 1 byte", ext(7, bytes([int32])), "truncated"),
        ("ValueArrayTooManyDims", "an array of 65 dims", ext(7, _array(int32, [1] * 65, bytes(4))), "limit"),
        ("ValueArrayBfloat16", "a bfloat16 array (numpy has no bfloat16)", ext(7, _array(DTYPES["BFLOAT16"][0], [1], bytes(2))),
         "invalid-value"),
        ("ValueArrayUnknownDtype", "an array of dtype code 99", ext(7, _array(99, [1], bytes(1))), "unknown-tag"),
        ("ValueArrayBoolByte", "a bool array holding the byte 2", ext(7, _array(DTYPES["BOOL"][0], [1], b"\x02")),
         "invalid-value"),
        ("ValueArrayScalarShort", "an int64 scalar of 7 bytes", ext(8, bytes([DTYPES["INT64"][0]]) + bytes(7)), "invalid-value"),
        ("ValueArrayScalarEmpty", "an array scalar extension of 0 bytes", ext(8, b""), "truncated"),
        ("ValueTorchSizeEmpty", "a torch.Size extension of 0 bytes (no document)", ext(9, b""), "truncated"),
        ("ValueTorchDeviceEmpty", "a torch.device extension of 0 bytes (no document)", ext(11, b""), "truncated"),
        ("ValueObjectEmpty", "a registered object extension of 0 bytes (no document)", ext(12, b""), "truncated"),
        ("ValueTorchSizeNegative", "a torch.Size with a dim of -1", ext(9, pack([2, -1])), "invalid-value"),
        ("ValueTorchSizeNotArray", "a torch.Size holding a string", ext(9, pack("2x3")), "invalid-value"),
        ("ValueTorchDtypeUnknown", "a torch.dtype of code 0", ext(10, b"\x00"), "unknown-tag"),
        ("ValueTorchDtypeLong", "a torch.dtype extension of 2 bytes", ext(10, bytes([f32, f32])), "invalid-value"),
        ("ValueTorchDtypeEmpty", "a torch.dtype extension of 0 bytes: not exactly 1, invalid-value (no document to "
         "cut short, unlike 9, 11 and 12; code 8's dtype byte is a field, so empty is truncated there)", ext(10, b""),
         "invalid-value"),
        ("ValueTorchDeviceBadType", "a torch.device whose type is not [a-z][a-z0-9_]*", ext(11, pack(["cu da", 0])),
         "invalid-value"),
        ("ValueTorchDeviceNegative", "a torch.device of index -1", ext(11, pack(["cuda", -1])), "invalid-value"),
        ("ValueObjectNoName", "a registered object with an empty name", ext(12, pack(["", {}])), "invalid-value"),
        ("ValueObjectNotPair", "a registered object holding a map", ext(12, pack({"name": "x"})), "invalid-value"),
        ("ValueArrayAsMapKey", "an array scalar as a map key (arrays do not hash)",
         {ext(8, bytes([int32]) + bytes(4)): 1}, "invalid-value"),
        ("ValueArrayInSet", "an array as a set member", ext(4, pack([ext(7, _array(int32, [1], bytes(4)))])), "invalid-value"),
        ("ValueObjectAsMapKey", "a registered object whose state is a map, as a map key",
         {ext(12, pack(["x", {"a": 1}])): 1}, "invalid-value"),
        ("ValueObjectTimestampInside", "a registered object whose state holds a MessagePack timestamp",
         ext(12, pack(["x", msgpack.Timestamp(1, 0)])), "unknown-tag"),
    ]


def body_vectors(c: Corpus, f: Frame, unknown_kinds: tuple[int, ...] = (0, 3, 0xFF)) -> Piece:
    """The vectors of a record body (tensor or value) framed by ``f``; the representative record."""
    rep = f.tensor("FLOAT32", [2, 3], bytes(range(24)))
    c.accept("Representative", "a 2x3 float32 tensor", rep)
    for name, (_code, itemsize) in DTYPES.items():
        data = bytes([1, 0] * itemsize) if name != "BOOL" else b"\x01\x00"
        c.accept(f"Dtype{name.title().replace('_', '')}", f"two {name} elements", f.tensor(name, [2], data[: 2 * itemsize]))
    for name, specials in FP8_SPECIALS.items():
        label = name.title().replace("_", "")
        c.accept(f"{label}AllBitPatterns", f"every byte as a {name} element, NaN and infinity encodings included",
                 f.tensor(name, [256], bytes(range(256))))
        c.accept(f"{label}Specials", f"the NaN/infinity encodings of {name} alone",
                 f.tensor(name, [len(specials)], bytes(specials)))
    c.accept("ZeroD", "a 0-d int64 tensor: one element", f.tensor("INT64", [], struct.pack("<q", -7)))
    c.accept("ZeroSize", "a 0x3 float64 tensor: no bytes", f.tensor("FLOAT64", [0, 3], b""))
    c.accept("ZeroSizeLargestDims", "a zero-size tensor whose other dims are 2**63 - 1, the largest torch holds",
             f.tensor("FLOAT32", [0, (1 << 63) - 1], b""))
    c.reject("ZeroSizeHugeDims", "a zero-size tensor with a dim of 2**63, which torch and numpy cannot hold",
             f.wrap(tensor_body(f.start, "FLOAT32", [0, 1 << 63], b"")), "invalid-value")
    c.accept("MaxNdim", "64 dims of 1", f.tensor("UINT8", [1] * MAX_NDIM, b"\x2a"))
    c.reject("NdimAboveLimit", "65 dims", f.wrap(tensor_body(f.start, "UINT8", [1] * (MAX_NDIM + 1), b"\x2a")), "limit")
    c.accept("BoolZeroOne", "bool bytes 0 and 1", f.tensor("BOOL", [2], b"\x00\x01"))
    for byte in (2, 0x80, 0xFF):
        c.reject(f"BoolByte{byte:02X}", f"a bool byte {byte}", f.wrap(tensor_body(f.start, "BOOL", [2], bytes([1, byte]))),
                 "invalid-value")
    for kind in unknown_kinds:
        c.reject(f"Kind{kind:02X}Unknown", f"record kind {kind}", f.wrap(bytes([kind]) + bytes(8)), "unknown-tag")
    for code in (0, len(DTYPES) + 1, 0xFF):
        c.reject(f"Dtype{code:02X}Unknown", f"dtype {code}", f.wrap(tensor_body(f.start, code, [1], b"\x00")), "unknown-tag")
    # The first rule broken is the dtype (offset 1), before the input ends where ndim belongs (offset 2).
    c.reject("DtypeUnknownThenCut", "an unknown dtype 0, then the input ends", f.prefix + b"\x01\x00", "unknown-tag")
    c.reject("DtypeKnownThenCut", "a known dtype, then the input ends", f.prefix + b"\x01\x0c", "truncated")
    c.reject("LengthShort", "shape and dtype give 24 bytes, 20 declared and present",
             f.wrap(tensor_body(f.start, "FLOAT32", [2, 3], bytes(20))), "invalid-value")
    c.reject("LengthLong", "shape and dtype give 24 bytes, 28 declared and present",
             f.wrap(tensor_body(f.start, "FLOAT32", [2, 3], bytes(28))), "invalid-value")
    c.reject("ShapeProductOverflow", "2**32 x 2**32 elements: the byte count overflows 64 bits",
             f.wrap(tensor_body(f.start, "UINT8", [1 << 32, 1 << 32], b"", nbytes=0)), "invalid-value")
    c.reject("ShapeTimesItemsizeOverflow", "2**62 float32 elements: 2**64 bytes",
             f.wrap(tensor_body(f.start, "FLOAT32", [1 << 62], b"", nbytes=0)), "invalid-value")
    # Two rules of a tensor broken at once: the one listed first decides.
    c.reject("DimensionBeforeOverflow", "dims 2**63 and 2**63: too large a dim, and a byte count past 64 bits",
             f.wrap(tensor_body(f.start, "UINT8", [1 << 63, 1 << 63], b"", nbytes=0)), "invalid-value",
             rule="tensor.dimension")
    c.reject("OverflowBeforeLength", "2**62 float32 elements and 4 bytes: the byte count overflows, and is not 4",
             f.wrap(tensor_body(f.start, "FLOAT32", [1 << 62], bytes(4))), "invalid-value", rule="tensor.shape-overflow")
    c.reject("LengthBeforeBoolElements", "a bool [3] holding 2 bytes, one of them 2", f.wrap(tensor_body(
             f.start, "BOOL", [3], b"\x01\x02")), "invalid-value", rule="tensor.length")
    c.reject("LengthBeyondInput", "a 1 MiB payload declared, 4 bytes present",
             f.wrap(tensor_body(f.start, "UINT8", [1 << 20], bytes(4), nbytes=1 << 20), sealed=False), "truncated")
    c.reject("LengthAboveLimit", "a payload of 2**48 + 1 bytes declared",
             f.wrap(tensor_body(f.start, "UINT8", [(1 << 48) + 1], b"", nbytes=MAX_TENSOR_BYTES + 1), sealed=False), "limit")
    c.reject("LengthAtLimitBeyondInput", "a payload of 2**48 bytes declared, none present: the limit itself, cut "
             "short", f.wrap(tensor_body(f.start, "UINT8", [1 << 48], b"", nbytes=MAX_TENSOR_BYTES), sealed=False),
             "truncated", rule="grammar.truncated")
    c.reject("LengthU64Max", "a payload of 2**64 - 1 bytes declared",
             f.wrap(tensor_body(f.start, "UINT8", [1], b"", nbytes=U64_MAX), sealed=False), "limit")
    c.reject("PaddingNonZero", "a non-zero byte in the padding before the payload",
             f.wrap(tensor_body(f.start, "FLOAT32", [1], bytes(4), pad=bytes(-(f.start + 19) % ALIGN - 1) + b"\x01")),
             "invalid-value")
    c.reject("PaddingShort", "the payload starts right after the header: its bytes stand where padding belongs",
             f.wrap(tensor_body(f.start, "UINT8", [60], b"\x01" * 60, pad=b"")), "invalid-value")
    bad = bytearray(rep.data)
    bad[-1] ^= 0x01
    c.reject("ChecksumMismatch", "the stored CRC-32 differs in one bit", bytes(bad), "checksum")
    # The record's CRC-32 ends it; the rules of the body inside ran after the body's last field, before it.
    def damaged(body: bytes) -> bytes:
        data = bytearray(f.wrap(body))
        data[-1] ^= 0x01
        return bytes(data)

    for name, what, body, rule in (
        ("LengthBeforeChecksum", "a float32 [2] holding 4 bytes, and a damaged CRC-32",
         tensor_body(f.start, "FLOAT32", [2], bytes(4)), "tensor.length"),
        ("BoolBeforeChecksum", "a bool byte 2, and a damaged CRC-32", tensor_body(f.start, "BOOL", [2], b"\x00\x02"),
         "tensor.bool-elements"),
        ("DimensionBeforeChecksum", "a dim of 2**63, and a damaged CRC-32",
         tensor_body(f.start, "FLOAT32", [1 << 63], b"", nbytes=0), "tensor.dimension"),
        ("ValueBeforeChecksum", "a value document holding 0xc1, and a damaged CRC-32", value_body(b"\xc1"),
         "value.never-used"),
    ):
        c.reject(name, what, damaged(body), "invalid-value", rule=rule)
    payload_flip = bytearray(rep.data)
    payload_flip[-5] ^= 0x80
    c.reject("PayloadFlipped", "one payload bit flipped after the CRC-32 was taken", bytes(payload_flip), "checksum")
    c.accept("ChecksumNotVerified", "a wrong CRC-32 when the caller opts out of verification",
             Piece(bytes(bad), {**rep.value, "crc32": rep.value["crc32"] ^ (1 << 24)}), NO_CHECKSUMS)
    c.reject("TrailingByte", "a byte after the CRC-32", rep.data + b"\x00", "trailing-bytes")
    c.reject("Empty", "no bytes", b"", "truncated")

    # Values: MessagePack documents of the value subset.
    documents: list[tuple[str, str, Any]] = [
        ("ValueNil", "None", None),
        ("ValueTrue", "True", True),
        ("ValueInt", "a negative int", -3),
        ("ValueIntOne", "the int 1: the fixint 01 (JSON 1, no fraction)", 1),
        ("ValueU64Max", "2**64 - 1", U64_MAX),
        ("ValueI64Min", "-2**63", -(1 << 63)),
        ("ValueFloat", "a float64", 0.1),
        ("ValueFloatWhole", "the float 1.0: a float64, never an int (JSON 1.0 is a float)", 1.0),
        ("ValueStr", "a UTF-8 string", "\u00fc\u20ac"),
        ("ValueBin", "bytes", b"\x00\xff"),
        ("ValueList", "a list", [1, "a", None]),
        ("ValueMap", "a map of optimizer settings (keys in code point order: canonical JSON sorts them)",
         {"betas": [0.9, 0.999], "lr": 0.001, "step": 7}),
        ("ValueNestedAtLimit", "lists nested 64 deep", None),
    ]
    for name, what, doc in documents:
        if name == "ValueNestedAtLimit":
            nested: Any = []
            for _ in range(MAX_VALUE_DEPTH - 1):
                nested = [nested]
            c.accept(name, what, f.value(nested))
        else:
            c.accept(name, what, f.value(doc))
    for name, what, document, spelled in value_extensions():
        c.accept(name, what, f.encoded_value(msgpack.packb(document, use_bin_type=True), spelled))
    c.reject("ValueNestedOverLimit", "lists nested 65 deep", f.wrap(value_body(_nested(MAX_VALUE_DEPTH + 1))), "limit",
             rule="value.depth")
    c.reject("ValueNestedFar", "lists nested 2000 deep (beyond msgpack's own recursion limit)",
             f.wrap(value_body(_nested(2000))), "limit", rule="value.depth")
    tuples = b"\x90"
    for _ in range(MAX_VALUE_DEPTH):
        tuples = msgpack.packb(msgpack.ExtType(1, b"\x91" + tuples))
    c.reject("ValueNestedTuples", "tuples nested 65 deep through extension payloads", f.wrap(value_body(tuples)), "limit",
             rule="value.depth")
    ext_rejects: list[tuple[str, str, bytes, str, str]] = [
        ("ValueExtUnknown", "extension code 42", msgpack.packb(msgpack.ExtType(42, b"")), "unknown-tag", "value.ext-code"),
        ("ValueExtTimestamp", "a MessagePack timestamp (extension -1)", msgpack.packb(msgpack.Timestamp(1, 0)),
         "unknown-tag", "value.ext-code"),
        ("ValueExtComplexShort", "a complex extension of 15 bytes", msgpack.packb(msgpack.ExtType(2, bytes(15))),
         "invalid-value", "value.complex-size"),
        ("ValueExtTupleNotArray", "a tuple extension holding an int",
         msgpack.packb(msgpack.ExtType(1, msgpack.packb(1))), "invalid-value", "value.ext-array"),
    ]
    for name, what, doc, error, rule in ext_rejects:
        c.reject(name, what, f.wrap(value_body(doc)), error, rule=rule)
    for name, what, document, error in typed_rejects():
        c.reject(name, what, f.wrap(value_body(msgpack.packb(document, use_bin_type=True))), error)
    for name, what, doc, outcome, rule in value_order_vectors() + value_bound_vectors() + value_level_vectors():
        if isinstance(outcome, str):
            c.reject(name, what, f.wrap(value_body(doc)), outcome, rule=rule)
        else:
            c.accept(name, what, f.encoded_value(doc, outcome), rule=rule)
    canonical_form_vectors(c, f)
    c.reject("ValueStrBadUtf8", "a string that is not UTF-8", f.wrap(value_body(b"\xa2\xc3\x28")), "invalid-value",
             rule="value.utf8")
    c.reject("ValueNeverUsed", "the never-used MessagePack byte 0xc1", f.wrap(value_body(b"\xc1")), "invalid-value",
             rule="value.never-used")
    c.reject("ValueDocumentCut", "a list of 2 with 1 element present", f.wrap(value_body(b"\x92\x01")), "truncated",
             rule="value.truncated")
    c.reject("ValueDocumentTrailing", "two documents where one belongs", f.wrap(value_body(b"\x01\x02")), "trailing-bytes",
             rule="value.one-document")
    c.reject("ValueEmptyDocument", "a document of 0 bytes", f.wrap(value_body(b"")), "truncated", rule="value.truncated")
    c.reject("ValueLengthBeyondInput", "a 1000-byte document declared, 1 present",
             f.wrap(value_body(b"\x01", length=1000), sealed=False),
             "truncated")
    c.reject("ValueLengthAtLimitBeyondInput", "a document of 64 MiB declared, 1 byte present: the limit itself, cut "
             "short", f.wrap(value_body(b"\x01", length=MAX_VALUE_LEN), sealed=False), "truncated",
             rule="grammar.truncated")
    c.reject("ValueLengthAboveLimit", "a document of 64 MiB + 1 declared",
             f.wrap(value_body(b"\x01", length=MAX_VALUE_LEN + 1), sealed=False),
             "limit")
    for name, what, doc in (("ValueArrayCountBeyondInput", "an array of 2**32-1 elements in 5 bytes", b"\xdd\xff\xff\xff\xff"),
                            ("ValueMapCountBeyondInput", "a map of 2**32-1 pairs in 5 bytes", b"\xdf\xff\xff\xff\xff")):
        c.reject(name, what, f.wrap(value_body(doc)), "truncated", rule="value.truncated")
    c.reject("ValueStrLengthBeyondInput", "a string of 2**32-1 bytes in 5 bytes",
             f.wrap(value_body(b"\xdb\xff\xff\xff\xff")), "truncated", rule="value.truncated")
    return rep


#: The canonical form of value documents, rule by rule: (name, what, document hex, canonical JSON or error kind, rule).
#: Each boundary of a rule has the shortest encoding accepted beside a longer one refused.
_ACCEPT, _REJECT = "accept", "reject"
CANONICAL_FORM: list[tuple[str, str, str, str, Any, str]] = [
    ("IntFixintMax", "127 as a positive fixint", "7f", _ACCEPT, 127, "value.shortest-int"),
    ("IntUint8Min", "128 as a uint8", "cc80", _ACCEPT, 128, "value.shortest-int"),
    ("IntUint16Min", "256 as a uint16", "cd0100", _ACCEPT, 256, "value.shortest-int"),
    ("IntUint32Min", "65536 as a uint32", "ce00010000", _ACCEPT, 65536, "value.shortest-int"),
    ("IntUint64Min", "2**32 as a uint64", "cf0000000100000000", _ACCEPT, 1 << 32, "value.shortest-int"),
    ("IntNegFixintMin", "-32 as a negative fixint", "e0", _ACCEPT, -32, "value.shortest-int"),
    ("IntInt8Max", "-33 as an int8", "d0df", _ACCEPT, -33, "value.shortest-int"),
    ("IntInt16Max", "-129 as an int16", "d1ff7f", _ACCEPT, -129, "value.shortest-int"),
    ("IntInt32Max", "-32769 as an int32", "d2ffff7fff", _ACCEPT, -32769, "value.shortest-int"),
    ("IntInt64Max", "-2**31-1 as an int64", "d3ffffffff7fffffff", _ACCEPT, -(1 << 31) - 1, "value.shortest-int"),
    ("IntUint8Short", "127 as a uint8 (a fixint holds it)", "cc7f", _REJECT, "invalid-value", "value.shortest-int"),
    ("IntUint16Short", "255 as a uint16", "cd00ff", _REJECT, "invalid-value", "value.shortest-int"),
    ("IntUint32Short", "65535 as a uint32", "ce0000ffff", _REJECT, "invalid-value", "value.shortest-int"),
    ("IntUint64Short", "2**32-1 as a uint64", "cf00000000ffffffff", _REJECT, "invalid-value", "value.shortest-int"),
    ("IntInt8Zero", "0 as an int8 (a non-negative integer is unsigned)", "d000", _REJECT, "invalid-value",
     "value.shortest-int"),
    ("IntInt8Short", "-32 as an int8", "d0e0", _REJECT, "invalid-value", "value.shortest-int"),
    ("IntInt16Short", "-128 as an int16", "d1ff80", _REJECT, "invalid-value", "value.shortest-int"),
    ("IntInt32Short", "-32768 as an int32", "d2ffff8000", _REJECT, "invalid-value", "value.shortest-int"),
    ("IntInt64Short", "-2**31 as an int64", "d3ffffffff80000000", _REJECT, "invalid-value", "value.shortest-int"),
    ("IntInt64Positive", "1 as an int64", "d30000000000000001", _REJECT, "invalid-value", "value.shortest-int"),
    ("Str8Min", "a 32-byte string as a str8", "d920" + "61" * 32, _ACCEPT, "a" * 32, "value.shortest-length"),
    ("Str8Short", "a 31-byte string as a str8 (a fixstr holds it)", "d91f" + "61" * 31, _REJECT, "invalid-value",
     "value.shortest-length"),
    ("Str16Empty", "an empty string as a str16", "da0000", _REJECT, "invalid-value", "value.shortest-length"),
    ("Str32Empty", "an empty string as a str32", "db00000000", _REJECT, "invalid-value", "value.shortest-length"),
    ("Bin8Empty", "empty bytes as a bin8", "c400", _ACCEPT, {"$bytes": ""}, "value.shortest-length"),
    ("Bin16Empty", "empty bytes as a bin16", "c50000", _REJECT, "invalid-value", "value.shortest-length"),
    ("Bin32Empty", "empty bytes as a bin32", "c600000000", _REJECT, "invalid-value", "value.shortest-length"),
    ("Array16Min", "16 elements as an array16", "dc0010" + "00" * 16, _ACCEPT, [0] * 16, "value.shortest-length"),
    ("Array16Short", "15 elements as an array16 (a fixarray holds them)", "dc000f" + "00" * 15, _REJECT, "invalid-value",
     "value.shortest-length"),
    ("Array32Empty", "an empty array as an array32", "dd00000000", _REJECT, "invalid-value", "value.shortest-length"),
    ("Map16Min", "16 pairs as a map16", "de0010" + "".join(f"a1{0x41 + i:02x}00" for i in range(16)), _ACCEPT,
     {chr(0x41 + i): 0 for i in range(16)}, "value.shortest-length"),
    ("Map16Empty", "an empty map as a map16", "de0000", _REJECT, "invalid-value", "value.shortest-length"),
    ("Map32Empty", "an empty map as a map32", "df00000000", _REJECT, "invalid-value", "value.shortest-length"),
    ("Ext8Empty", "an empty bytearray as an ext8", "c70003", _ACCEPT, {"$bytearray": ""}, "value.shortest-length"),
    ("Fixext1", "a 1-byte bytearray as a fixext1", "d40361", _ACCEPT, {"$bytearray": "YQ=="}, "value.shortest-length"),
    ("Ext8Length3", "a 3-byte bytearray as an ext8", "c70303616263", _ACCEPT, {"$bytearray": "YWJj"},
     "value.shortest-length"),
    ("Ext8Length1", "a 1-byte bytearray as an ext8 (a fixext1 holds it)", "c7010361", _REJECT, "invalid-value",
     "value.shortest-length"),
    ("Ext8Complex", "a complex number as an ext8 of 16 bytes (a fixext16 holds it)", "c71002" + "00" * 16, _REJECT,
     "invalid-value", "value.shortest-length"),
    ("Ext16Empty", "an empty bytearray as an ext16", "c8000003", _REJECT, "invalid-value", "value.shortest-length"),
    ("Ext32Empty", "an empty bytearray as an ext32", "c90000000003", _REJECT, "invalid-value", "value.shortest-length"),
    ("TupleArray16Short", "a tuple whose array of 1 element is an array16", "d601dc000101", _REJECT, "invalid-value",
     "value.shortest-length"),
    ("Float32", "a float32 (0xca) where writers write float64", "ca3fc00000", _REJECT, "invalid-value", "value.float64"),
    ("FloatNaN", "NaN as 7ff8000000000000", "cb7ff8000000000000", _ACCEPT, {"$float": "nan"}, "value.nan"),
    ("FloatNaNPayload", "a NaN with a payload bit", "cb7ff8000000000001", _REJECT, "invalid-value", "value.nan"),
    ("FloatNaNNegative", "a NaN with the sign bit set", "cbfff8000000000000", _REJECT, "invalid-value", "value.nan"),
    ("FloatNaNSignaling", "a signaling NaN", "cb7ff0000000000001", _REJECT, "invalid-value", "value.nan"),
    ("FloatInfinity", "infinity (not a NaN)", "cb7ff0000000000000", _ACCEPT, {"$float": "inf"}, "value.nan"),
    ("FloatNegativeZero", "-0.0 (a value of its own)", "cb8000000000000000", _ACCEPT, -0.0, "value.float64"),
    ("ComplexNaNPayload", "a complex number whose imaginary part is a NaN with a payload",
     "d802" + "00" * 8 + "010000000000f87f", _REJECT, "invalid-value", "value.nan"),
    ("MapKeysByBytes", "keys 'aa' then 'b': ordered by their UTF-8 bytes, not by their encodings",
     "82a2616101a16202", _ACCEPT, {"aa": 1, "b": 2}, "value.key-order"),
    ("MapKeysByEncoding", "keys 'b' then 'aa': the order of their encodings, not of their bytes",
     "82a16202a2616101", _REJECT, "invalid-value", "value.key-order"),
    ("MapKeyRepeated", "the key 'a' twice", "82a16101a16102", _REJECT, "invalid-value", "value.key-order"),
    ("MapKeyRepeatedSameValue", "the key 'a' twice with equal values", "82a16101a16101", _REJECT, "invalid-value",
     "value.key-order"),
    ("MapKeysNonAscii", "keys 'z' then 'é' (UTF-8 c3 a9 after 7a)", "82a17a01a2c3a902", _ACCEPT, {"z": 1, "\u00e9": 2},
     "value.key-order"),
    ("MapKeysNonAsciiReversed", "keys 'é' then 'z'", "82a2c3a902a17a01", _REJECT, "invalid-value", "value.key-order"),
    ("MapKeyStrThenBin", "a str key then a bin key", "82a16101c4016102", _ACCEPT,
     {"$map": [["a", 1], [{"$bytes": "YQ=="}, 2]]}, "value.key-order"),
    ("MapKeyBinThenStr", "a bin key then a str key", "82c4016102a16101", _REJECT, "invalid-value", "value.key-order"),
    ("MapKeyInt", "an int key", "810101", _REJECT, "invalid-value", "value.key-type"),
    ("MapKeyNil", "a nil key", "81c001", _REJECT, "invalid-value", "value.key-type"),
    ("MapKeyFloat", "a float key", "81cb3ff000000000000001", _REJECT, "invalid-value", "value.key-type"),
    ("MapKeyTuple", "a tuple key", "81d501910101", _REJECT, "invalid-value", "value.key-type"),
    ("MapKeyComplex", "a complex key", "81d802" + "00" * 16 + "01", _REJECT, "invalid-value", "value.key-type"),
    ("SetMembersOrdered", "a set of 'a' and 'b'", "c7050492a161a162", _ACCEPT, {"$set": ["a", "b"]}, "value.key-order"),
    ("SetMembersReversed", "a set of 'b' then 'a'", "c7050492a162a161", _REJECT, "invalid-value", "value.key-order"),
    ("SetMemberRepeated", "a set holding 'a' twice", "c7050492a161a161", _REJECT, "invalid-value", "value.key-order"),
    ("FrozensetMemberRepeated", "a frozenset holding 'a' twice", "c7050592a161a161", _REJECT, "invalid-value",
     "value.key-order"),
    ("SetMemberInt", "a set holding an int", "d5049101", _REJECT, "invalid-value", "value.key-type"),
    ("FrozensetMemberComplex", "a frozenset holding a complex number", "c71305" + "91d802" + "00" * 16, _REJECT,
     "invalid-value", "value.key-type"),
    ("StrNotUtf8", "a str of the bytes c3 28 (not UTF-8)", "a2c328", _REJECT, "invalid-value", "value.utf8"),
    ("StrSurrogate", "a str holding the surrogate U+D800 (ed a0 80)", "a3eda080", _REJECT, "invalid-value", "value.utf8"),
    ("StrOverlong", "a str holding '/' in an overlong form (c0 af)", "a2c0af", _REJECT, "invalid-value", "value.utf8"),
    ("StrAboveMaxCodePoint", "a str holding f4 90 80 80 (above U+10FFFF)", "a4f4908080", _REJECT, "invalid-value",
     "value.utf8"),
    ("TupleHoldsInt", "a tuple whose payload is an int, not an array", "d40101", _REJECT, "invalid-value",
     "value.ext-array"),
    ("ComplexOf8Bytes", "a complex extension of 8 bytes", "d702" + "00" * 8, _REJECT, "invalid-value",
     "value.complex-size"),
    ("TupleTrailing", "a tuple payload holding an array and one byte more", "d5019000", _REJECT, "trailing-bytes",
     "value.one-document"),
    ("TupleEmptyPayload", "a tuple extension of no bytes", "c70001", _REJECT, "truncated", "value.truncated"),
    ("TupleArrayBeyondPayload", "a tuple payload whose array of 2 has 1 element (the document goes on)",
     "92d5019201c0", _REJECT, "truncated", "value.truncated"),
]


def one_reject_per_rule() -> list[tuple[str, str, bytes, str, str]]:
    """The first refused document of each rule of the canonical form: (name, what, document, kind, rule), for
    the formats whose value documents sit in a larger file (the record corpora hold them all)."""
    seen: set[str] = set()
    picked = []
    for name, what, doc_hex, outcome, expected, rule in CANONICAL_FORM:
        if outcome == _REJECT and rule not in seen:
            seen.add(rule)
            picked.append((name, what, bytes.fromhex(doc_hex), expected, rule))
    return picked


def canonical_form_vectors(c: Corpus, f: Frame) -> None:
    """Every decision of the value documents' canonical form, accepted and refused (rules ``value.*``)."""
    for name, what, doc_hex, outcome, expected, rule in CANONICAL_FORM:
        body = value_body(bytes.fromhex(doc_hex))
        if outcome == _ACCEPT:
            c.accept(f"Value{name}", what, f.piece(body, {"kind": "VALUE", "value": expected}), rule=rule)
        else:
            c.reject(f"Value{name}", what, f.wrap(body), expected, rule=rule)


#: checkpoint-shard version 2's limits on a ZSTD body, copied from the spec.
MAX_INFLATED = MAX_TENSOR_BYTES + 1024
MIN_INFLATED = 6
#: What the representative ZSTD record inflates to: the body of a float32 [2, 3] tensor.
INFLATED = tensor_body(0, "FLOAT32", [2, 3], bytes(range(24)))


def zstd(inflated_length: int, frame: bytes, start: int = 0) -> Piece:
    return record(zstd_body(start, inflated_length, frame), zstd_value(inflated_length, frame))


def build_record(version: int = 1) -> Corpus:
    c = Corpus("checkpoint-shard.record", version)
    rep = body_vectors(c, Frame(), (0, 3, 0xFF) if version == 1 else (0, 4, 0xFF))
    c.truncations("Representative", "the representative tensor record", rep)
    c.truncations("Value", "a value record", value({"a": 1}))
    c.refuse_write("BoolByte", "a bool tensor holding the byte 2",
                   {"body": {"kind": "TENSOR", "dtype": "BOOL", "shape": [1], "data": b64(b"\x02")}}, "write-value")
    c.refuse_write("LengthMismatch", "a float32 [2] tensor holding 4 bytes",
                   {"body": {"kind": "TENSOR", "dtype": "FLOAT32", "shape": [2], "data": b64(bytes(4))}}, "write-value")
    c.refuse_write("UnknownDtype", "dtype FLOAT128",
                   {"body": {"kind": "TENSOR", "dtype": "FLOAT128", "shape": [], "data": b64(bytes(16))}}, "write-value")
    c.refuse_write("TorchSizeOverDepthLimit", "a torch.Size inside lists 63 deep: its array would be at depth 65",
                   {"body": {"kind": "VALUE", "value": _lists(63, {"$torch.Size": [2, 3]})}}, "write-value")
    c.refuse_write("ShapeTrue", "a shape holding true: not an integer",
                   {"body": {"kind": "TENSOR", "dtype": "FLOAT32", "shape": [True], "data": b64(bytes(4))}}, "write-type")
    c.refuse_write("ShapeFloat", "a shape holding 1.5: not an integer",
                   {"body": {"kind": "TENSOR", "dtype": "FLOAT32", "shape": [1.5], "data": b64(bytes(4))}}, "write-type")
    c.refuse_write("DtypeByIntegerLengthMismatch", "dtype given by its integer value (12, FLOAT32), then 4 bytes for "
                   "2 elements: a tag by integer is taken, the length is refused",
                   {"body": {"kind": "TENSOR", "dtype": DTYPES["FLOAT32"][0], "shape": [2], "data": b64(bytes(4))}},
                   "write-value")
    base64_write_vectors(c)
    spelling_write_vectors(c)
    if version >= 2:
        zstd_vectors(c)
    return c


def base64_write_vectors(c: Corpus) -> None:
    """Bytes spelled in base64 other than the canonical one (PROTOCOL.md): no value's spelling, ``write-type``."""
    four = {"kind": "TENSOR", "dtype": "FLOAT32", "shape": [1]}  # canonical data: "AAAAAA=="
    for name, what, spelling in (
        ("Unpadded", "without its = padding", "AAAAAA"),
        ("NonZeroPadBits", "with the unused bits of its last character set (AAAAAB== for AAAAAA==)", "AAAAAB=="),
        ("LineBreak", "with a line break inside", "AAAA\nAA=="),
    ):
        c.refuse_write(f"Base64{name}", f"a float32 [1] tensor's 4 bytes in base64 {what}",
                       {"body": {**four, "data": {"$bytes": spelling}}}, "write-type")
    c.refuse_write("Base64UrlAlphabet", "a value's bytes in the URL-safe alphabet (-_8= for +/8=)",
                   {"body": {"kind": "VALUE", "value": {"$bytes": "-_8="}}}, "write-type")


def spelling_write_vectors(c: Corpus) -> None:
    """Objects that are no value's spelling (PROTOCOL.md): ``write-type``; a ``$map`` key or ``$set`` member twice,
    the right type breaking the rule of one key or member: ``write-value``."""
    for name, what, value, kind in (
        ("ComplexIntPart", "a complex number with an integer part (1 for 1.0)", {"$complex": [1, 2.0]}, "write-type"),
        ("ComplexThreeParts", "a complex number of three parts", {"$complex": [1.0, 2.0, 3.0]}, "write-type"),
        ("BytesNotText", "$bytes given a number", {"$bytes": 5}, "write-type"),
        ("FloatNotNamed", "$float given a number's text other than nan, inf, -inf", {"$float": "1.5"}, "write-type"),
        ("DollarKeyNoSpelling", "an object whose one key starts with $ and is no spelling (a str key is spelt in "
         "$map then)", {"$x": 1}, "write-type"),
        ("DollarKeyBesideOthers", "an object of two keys, one a spelling's ($tuple)", {"$tuple": [], "x": 1},
         "write-type"),
        ("MapKeyTwice", "a $map holding the key a twice", {"$map": [["a", 1], ["a", 2]]}, "write-value"),
        ("SetMemberTwice", "a $set holding the member a twice", {"$set": ["a", "a"]}, "write-value"),
        ("FrozensetMemberTwice", "a $frozenset holding the member a twice", {"$frozenset": ["a", "a"]}, "write-value"),
    ):
        c.refuse_write(f"Spelling{name}", what, {"body": {"kind": "VALUE", "value": value}}, kind)


def build_record_v2() -> Corpus:
    """Version 2's records: version 1's bodies, and ZSTD bodies."""
    return build_record(2)


def zstd_vectors(c: Corpus) -> None:
    """A ZSTD body's own rules: what is declared and stored, checked before anything is inflated."""
    frame = zstd_frame(INFLATED)
    rep = zstd(len(INFLATED), frame)
    c.accept("ZstdRepresentative", "a ZSTD body holding a float32 [2, 3] tensor's body", rep)
    c.accept("ZstdRle", "a ZSTD body of one RLE block: 4096 inflated bytes from 4",
             zstd(4096, zstd_frame(b"\x02" * 4096, rle=True)))
    c.accept("ZstdInflatedMin", "the shortest inflated length, 6", zstd(MIN_INFLATED, zstd_frame(value_body(b"\xc0"))))
    c.accept("ZstdInflatedMax", "the longest inflated length, 2**48 + 1024, declared", zstd(MAX_INFLATED, frame))
    c.accept("ZstdFrameNotChecked", "frame bytes that are no zstd frame: the record's grammar does not inflate",
             zstd(64, b"not a frame"))
    for length in (0, MIN_INFLATED - 1, MAX_INFLATED + 1, U64_MAX):
        c.reject(f"ZstdInflated{length}", f"an inflated length of {length}",
                 record(zstd_body(0, length, frame), None).data, "invalid-value")
    damaged = bytearray(record(zstd_body(0, MIN_INFLATED - 1, frame), None).data)
    damaged[-1] ^= 0x01
    c.reject("ZstdInflatedLengthBeforeChecksum", "an inflated length of 5 and a damaged CRC-32: the body's rule "
             "runs before the record's CRC-32", bytes(damaged), "invalid-value", rule="checkpoint-shard.inflated-length")
    for codec in (0, 2, 0xFF):
        c.reject(f"ZstdCodec{codec:02X}Unknown", f"compression codec {codec}",
                 record(zstd_body(0, len(INFLATED), frame, codec=codec), None).data, "unknown-tag")
    c.reject("ZstdFrameBeyondInput", "a frame of 1 MiB declared, 10 bytes present",
             zstd_body(0, len(INFLATED), frame[:10], length=1 << 20), "truncated")
    c.reject("ZstdFrameAtLimitBeyondInput", "a frame of 2**48 bytes declared, none present: the limit itself, cut "
             "short", zstd_body(0, len(INFLATED), b"", length=MAX_TENSOR_BYTES), "truncated", rule="grammar.truncated")
    c.reject("ZstdFrameAboveLimit", "a frame of 2**48 + 1 bytes declared",
             zstd_body(0, len(INFLATED), b"", length=MAX_TENSOR_BYTES + 1), "limit")
    padded = bytearray(rep.data)
    padded[30] = 1
    c.reject("ZstdPaddingNonZero", "a non-zero byte in the padding before the frame", bytes(padded), "invalid-value")
    flipped = bytearray(rep.data)
    flipped[70] ^= 0x01
    c.reject("ZstdFrameFlipped", "one bit of the stored frame flipped: the CRC-32 covers what is stored",
             bytes(flipped), "checksum")
    c.truncations("Zstd", "the representative ZSTD record", rep)


def build_inflated() -> Corpus:
    """What a version 2 ZSTD body inflates to: a version 1 body, offsets counted from its first byte."""
    c = Corpus("checkpoint-shard.inflated", 2)
    tensor_piece = Piece(INFLATED, tensor_value("FLOAT32", [2, 3], bytes(range(24))))
    c.accept("Tensor", "a float32 [2, 3] tensor's body", tensor_piece)
    c.accept("Value", "a value's body", Piece(value_body(b"\x81\xa4step\x07"), {"kind": "VALUE", "value": {"step": 7}}))
    c.reject("ZstdInside", "a ZSTD body inside a ZSTD body: never nested", zstd_body(0, 64, zstd_frame(INFLATED)),
             "unknown-tag")
    c.reject("WithChecksum", "a tensor's body followed by a CRC-32: the inflated bytes carry none",
             record(INFLATED, None).data, "trailing-bytes")
    c.reject("PaddingShort", "the tensor bytes right after the header, not at offset 64",
             tensor_body(0, "UINT8", [60], b"\x01" * 60, pad=b""), "invalid-value")
    # The limits of a body where the inflated bytes are read: each side of each.
    c.accept("MaxNdim", "64 dims of 1", Piece(tensor_body(0, "UINT8", [1] * MAX_NDIM, b"\x2a"),
                                               tensor_value("UINT8", [1] * MAX_NDIM, b"\x2a")))
    c.reject("NdimAboveLimit", "65 dims", tensor_body(0, "UINT8", [1] * (MAX_NDIM + 1), b"\x2a"), "limit")
    for length, kind in ((MAX_TENSOR_BYTES, "truncated"), (MAX_TENSOR_BYTES + 1, "limit")):
        c.reject(f"Length{'AtLimitBeyondInput' if kind == 'truncated' else 'AboveLimit'}",
                 f"a payload of {length} bytes declared, none present", tensor_body(0, "UINT8", [length], b"",
                                                                                   nbytes=length), kind)
    for length, kind in ((MAX_VALUE_LEN, "truncated"), (MAX_VALUE_LEN + 1, "limit")):
        c.reject(f"ValueLength{'AtLimitBeyondInput' if kind == 'truncated' else 'AboveLimit'}",
                 f"a document of {length} bytes declared, 1 present", value_body(b"\x01", length=length), kind)
    c.truncations("Tensor", "a tensor's body", tensor_piece)
    return c


def shard_file_of(magic: bytes, group: str, item: str, records: list[Piece], version: int = 1) -> Piece:
    """A shard file: header, record count, each record at the next multiple of 64, as ``{group: [{item: ...}]}``."""
    data = file_header(magic, version) + struct.pack("<I", len(records))
    for piece in records:
        data += bytes(-len(data) % ALIGN) + piece.data
    return Piece(data, {group: [{item: piece.value} for piece in records]})


def file_vectors(c: Corpus, magic: bytes, group: str, item: str, first: Piece, second: Piece,
                 back_to_back: tuple[Piece, Piece], broken: bytes, known: tuple[int, ...] = (1,)) -> None:
    """The vectors of a shard file of records (checkpoint-shard, dump-shard): ``first`` a tensor record at
    offset 64, ``second`` a record after it, ``back_to_back`` a record 64 bytes long and another, ``broken`` a
    record for offset 64, its CRC-32 right, whose tensor breaks ``tensor.length``.
    The file is of version ``c.version``; ``known`` are the versions the format registers."""
    version = c.version

    def header(magic: bytes, version: int = version) -> bytes:
        return file_header(magic, version)

    def shard_file(magic: bytes, group: str, item: str, records: list[Piece]) -> Piece:
        return shard_file_of(magic, group, item, records, version)

    rep = shard_file(magic, group, item, [first, second])
    c.accept("Representative", "a tensor record and a value record", rep)
    c.accept("NoRecords", "a file of no records", shard_file(magic, group, item, []))
    c.accept("RecordsBackToBack", "a record ending on a multiple of 64, the next one right after it",
             shard_file(magic, group, item, list(back_to_back)))
    c.reject("PaddingCut", "one record declared, the file ends inside the padding before it",
             header(magic) + struct.pack("<I", 1) + bytes(30), "truncated")
    damaged = rep.data[:-1] + bytes([rep.data[-1] ^ 1])
    c.accept("ChecksumsNotVerified", "a damaged CRC-32 when the caller opts out",
             Piece(damaged, {group: [{item: first.value}, {item: {**second.value, "crc32": second.value["crc32"] ^ (1 << 24)}}]}),
             NO_CHECKSUMS)
    c.reject("ChecksumMismatch", "the last record's CRC-32 differs in one bit", damaged, "checksum")
    pair = shard_file(magic, group, item, [Piece(broken, None), second]).data
    c.reject("RecordRuleBeforeLaterCut", "a tensor holding fewer bytes than its shape gives, then the file ends inside "
             "the next record: a record's rules run before anything after it is read", pair[:-1], "invalid-value",
             rule="tensor.length")
    c.reject("RecordRuleBeforeLaterChecksum", "a tensor holding fewer bytes than its shape gives, then a record with "
             "a damaged CRC-32", pair[:-1] + bytes([pair[-1] ^ 1]), "invalid-value", rule="tensor.length")
    other = b"\x89INRTMD\n" if magic != b"\x89INRTMD\n" else b"\x89INRTSH\n"
    one_off = magic[:6] + bytes([magic[6] ^ 0x20]) + magic[7:]
    for name, what, data in (("Pickle", "a pickle", PICKLE), ("TorchZip", "a torch.save zip archive", TORCH_ZIP),
                             ("Safetensors", "a safetensors file", SAFETENSORS),
                             ("OtherInertFile", "another Inert format's file", other + b"\x01\x00" + bytes(8)),
                             ("MagicOneBitOff", "the magic with one bit flipped", one_off + b"\x01\x00" + bytes(4))):
        c.reject(f"Foreign{name}", f"{what}, not a shard file", data, "foreign-format")
    for unknown in (0, max(known) + 1, 0xFFFF):
        c.reject(f"Version{unknown}", f"format_version {unknown}", header(magic, unknown) + bytes(4), "version")
    c.reject("CountBeyondInput", "1000 records declared, none present", header(magic) + struct.pack("<I", 1000), "truncated")
    c.reject("CountAboveLimit", "2**24 + 1 records declared", header(magic) + struct.pack("<I", (1 << 24) + 1), "limit")
    c.reject("CountAtLimitBeyondInput", "2**24 records declared, none present: the limit itself, cut short",
             header(magic) + struct.pack("<I", 1 << 24), "truncated", rule="grammar.truncated")
    padded = bytearray(rep.data)
    padded[20] = 1
    c.reject("PaddingNonZero", "a non-zero byte in the padding before the first record", bytes(padded), "invalid-value")
    c.reject("TrailingByte", "a byte after the last record", rep.data + b"\x00", "trailing-bytes")
    c.reject("MaxSizeExceeded", "a file longer than the caller's max_size", rep.data, "limit", {"max_size": 64})
    c.reject("MaxSizeBeforeMagic", "a pickle longer than the caller's max_size: the size is checked before the magic",
             PICKLE, "limit", {"max_size": 4}, rule="file.max-size")
    c.reject("PaddingCutNonZero", "one record declared, the file ends inside the padding, a non-zero byte in it: "
             "padding is checked present before zero", header(magic) + struct.pack("<I", 1) + bytes(29) + b"\x01",
             "truncated", rule="grammar.truncated")
    c.accept("MaxSizeExact", "a file exactly as long as the caller's max_size", rep, {"max_size": len(rep.data)})
    empty = header(magic) + struct.pack("<I", 0)
    for cut in range(len(magic)):  # a piece of the magic: cut short, or not this format at all
        c.reject(f"TruncatedMagic{cut}", f"the first {cut} bytes of the magic: not this format", empty[:cut],
                 "foreign-format", rule="file.magic")
    for cut in range(len(magic), len(empty)):
        c.reject(f"TruncatedHeader{cut:02d}", f"the first {cut} bytes of the header and record count", empty[:cut], "truncated")
    for cut in (15, 64, 100, 127, len(rep.data) - 1):
        c.reject(f"Truncated{cut:03d}", f"the first {cut} of the {len(rep.data)} bytes of the representative file",
                 rep.data[:cut], "truncated")
    # A whole file's writer refuses values of the wrong type at the file's own level too.
    c.refuse_write(f"{group.title()}Missing", f"a file without {group}", {}, "write-type")
    c.refuse_write(f"{group.title()}NotList", f"{group} given as an object", {group: {}}, "write-type")
    c.refuse_write(f"{item.title()}NotObject", f"a {item} given as a list", {group: [{item: []}]}, "write-type")


def build(version: int = 1) -> Corpus:
    c = Corpus("checkpoint-shard", version)
    # 9 bytes of framing and a 55-byte document: the record fills 64 bytes, the next one needs no padding.
    file_vectors(c, MAGIC, "records", "record", tensor("FLOAT32", [2, 3], bytes(range(24)), start=64),
                 value({"step": 7}), (value(bytes(53)), value(None)),
                 record(tensor_body(64, "FLOAT32", [2], bytes(4)), None).data, known=(1, 2))
    c.refuse_write("RecordKindUnknown", "a record of kind SPARSE", {"records": [{"record": {"body": {"kind": "SPARSE"}}}]},
                   "write-value")
    # 10 records declared, 59 bytes left: the padding and one record of an unknown kind fit, 10 records of at
    # least 9 bytes do not; the count is checked against the bytes left before any record is read.
    c.reject("CountNineBytesEach", "10 records declared, the padding and one 9-byte record of kind 0xff present",
             file_header(MAGIC, version) + struct.pack("<I", 10) + bytes(50) + b"\xff" + bytes(8), "truncated",
             rule="grammar.truncated")
    zstd_record = zstd(len(INFLATED), zstd_frame(INFLATED))
    if version == 1:
        c.reject("ZstdRecord", "a version 2 ZSTD record in a version 1 file", shard_file_of(MAGIC, "records", "record",
                 [zstd_record], 1).data, "unknown-tag")
    else:
        c.reject("HeaderVersion1ZstdRecord", "a version 1 header holding a ZSTD record, asked as version 2: the "
                 "reader goes by the header", shard_file_of(MAGIC, "records", "record", [zstd_record], 1).data,
                 "unknown-tag")
        c.accept("ZstdRecords", "a ZSTD record beside a tensor and a value record", shard_file_of(
            MAGIC, "records", "record", [tensor("FLOAT32", [2, 3], bytes(range(24)), start=64), zstd_record,
                                         value({"step": 7})], 2))
    return c


def build_v2() -> Corpus:
    """Version 2: version 1's files under a version 2 header, and ZSTD records."""
    return build(2)
