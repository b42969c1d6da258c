"""Vectors of ``dump-shard``: whole shard files of rows, and one row on its own (``dump-shard.record``).

A row's fields hold checkpoint-shard's record bodies: every body vector is repeated here as the one
field of a row, where the tensor padding falls elsewhere.
"""

from __future__ import annotations

import base64
import struct

from ._filelib import Frame, b64, crc, tensor_body
from ._vectorlib import Corpus, Piece
from ._vectors_checkpoint_shard import body_vectors, file_vectors

MAGIC = b"\x89INRTDS\n"
MAX_FIELDS = 4096
MAX_NAME_LEN = 1024
FRAME = Frame((7, "ids"))


def row(global_index: int, fields: list[tuple[bytes, bytes, dict[str, object]]]) -> Piece:
    """A row record of (name, body bytes, body value) fields, sealed by its CRC-32."""
    data = struct.pack("<QI", global_index, len(fields))
    for name, body, _ in fields:
        data += struct.pack("<I", len(name)) + name + body
    checksum = struct.unpack("<I", crc(data))[0]
    value = {"global_index": global_index, "crc32": checksum,
             "fields": [{"name": name.decode("utf-8", "replace"), "body": body_value} for name, _, body_value in fields]}
    return Piece(data + crc(data), value)


def _value_field(name: bytes, document: bytes, decoded: object) -> tuple[bytes, bytes, dict[str, object]]:
    return name, b"\x02" + struct.pack("<I", len(document)) + document, {"kind": "VALUE", "value": decoded}


def build_record() -> Corpus:
    c = Corpus("dump-shard.record", 1)
    rep = body_vectors(c, FRAME)
    c.accept("NoFields", "a row that produced no field", row(2**64 - 1, []))
    two = row(3, [_value_field(b"a", b"\x01", 1), _value_field(b"\xc3\xbc", b"\xa1x", "x")])
    c.accept("TwoFields", "two value fields, one with a non-ASCII name", two)
    c.reject("FieldCountAboveLimit", "4097 fields declared", struct.pack("<QI", 0, MAX_FIELDS + 1), "limit")
    c.reject("FieldCountAtLimitBeyondInput", "4096 fields declared, 6 bytes present: the limit itself, cut short",
             struct.pack("<QI", 0, MAX_FIELDS) + bytes(6), "truncated", rule="grammar.truncated")
    c.reject("FieldCountBeyondInput", "1000 fields declared, 6 bytes present", struct.pack("<QI", 0, 1000) + bytes(6),
             "truncated")
    long_name = b"n" * (MAX_NAME_LEN + 1)
    c.reject("NameAboveLimit", "a field name of 1025 bytes",
             row(0, [_value_field(long_name, b"\x01", 1)]).data, "limit")
    c.accept("NameAtLimit", "a field name of 1024 bytes", row(0, [_value_field(long_name[:-1], b"\xc0", None)]))
    c.reject("NameBadUtf8", "a field name that is not UTF-8", row(0, [_value_field(b"\xc3\x28", b"\x01", 1)]).data,
             "invalid-value")
    c.reject("NameLengthBeyondInput", "a 100-byte name declared, 30 present",
             struct.pack("<QII", 0, 1, 100) + bytes(30), "truncated")
    big = _value_field(b"a", b"\xc4\x1e" + bytes(30), None)[:2]
    second_cut = struct.pack("<QI", 0, 2) + struct.pack("<I", 1) + big[0] + big[1] + b"\x00\x00"
    c.reject("SecondFieldCut", "two fields declared, 2 bytes left after the first", second_cut, "truncated")
    c.reject("BodyMissing", "a field name that takes every byte left: no body", struct.pack("<QII", 0, 1, 20) + bytes(20),
             "truncated")
    # 8 + 4 + 4 + 29 bytes of row and name, 19 of tensor header: the payload starts at 64 with no padding.
    c.accept("TensorNeedsNoPadding", "a tensor whose header ends on a multiple of 64",
             Frame((0, "x" * 29)).tensor("UINT8", [3], b"abc"))
    c.truncations("Representative", "the representative row record", rep)
    c.truncations("TwoFields", "a row of two value fields", two)
    c.refuse_write("BoolByte", "a bool field holding the byte 2", {"global_index": 0, "fields": [
        {"name": "m", "body": {"kind": "TENSOR", "dtype": "BOOL", "shape": [1], "data": b64(b"\x02")}}]}, "write-value")
    c.refuse_write("GlobalIndexNegative", "global index -1", {"global_index": -1, "fields": []}, "write-value")
    c.refuse_write("NameAboveLimit", "a field name of 513 characters in 1026 bytes (the limit is 1024 bytes)",
                   {"global_index": 0, "fields": [{"name": "\u00e9" * 513, "body": {"kind": "VALUE", "value": 1}}]},
                   "write-value")
    return c


def build() -> Corpus:
    c = Corpus("dump-shard", 1)
    ids = Frame((7, "ids"))
    first = ids.tensor("INT64", [2], struct.pack("<2q", 5, -5))
    # A row of a 47-byte document: 8 + 4 + 4 + 1 + 1 + 4 + 38 + 4 = 64 bytes, so the next row needs no padding.
    filler = row(1, [_value_field(b"v", b"\xc4\x24" + bytes(36), b64(bytes(36)))])
    assert len(filler.data) == 64
    file_vectors(c, MAGIC, "rows", "row", first, row(8, [_value_field(b"note", b"\xa2ok", "ok")]), (filler, row(2, [])),
                 ids.wrap(tensor_body(ids.start, "INT64", [2], bytes(8))))
    # Found by the dump-shard fuzz target (a decode past its time bound on an overloaded machine, not
    # reproduced): a bfloat16 tensor whose padding holds the byte 0xc1, a second row after it.
    found = base64.b64decode(
        "iUlOUlREUwoBAAEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAcAAAAAAAAAAgAAAAMAAABpZHMBCQEC"
        "AAAAAAAAAAAQAAAAAAAAAAAAAMEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAQAABAAAAG5nAHQBAmUAAAkAAAChgWHHAwcAAQIxiJ0l"
    )
    c.reject("FuzzPaddingByteC1", "a fuzzer's input: a non-zero byte in a tensor's padding", found, "invalid-value")
    return c
