"""Byte builders shared by the vectors of the file formats (checkpoint and dump files and their records).

Built with ``struct``, ``msgpack.packb`` and ``zlib.crc32`` only, never with the
codecs under test.  The dtype table is copied from the spec on purpose.
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

import msgpack

from ._vectorlib import Piece

#: Every tensor dtype: name -> (tag value, itemsize), as inert/spec/checkpoint_shard.py declares them.
DTYPES: dict[str, tuple[int, int]] = {
    "BOOL": (1, 1), "UINT8": (2, 1), "INT8": (3, 1), "UINT16": (4, 2), "INT16": (5, 2), "UINT32": (6, 4),
    "INT32": (7, 4), "UINT64": (8, 8), "INT64": (9, 8), "FLOAT16": (10, 2), "BFLOAT16": (11, 2), "FLOAT32": (12, 4),
    "FLOAT64": (13, 8), "COMPLEX64": (14, 8), "COMPLEX128": (15, 16), "FLOAT8_E4M3FN": (16, 1),
    "FLOAT8_E5M2": (17, 1), "FLOAT8_E4M3FNUZ": (18, 1), "FLOAT8_E5M2FNUZ": (19, 1), "FLOAT8_E8M0FNU": (20, 1),
}
ALIGN = 64
MAX_NDIM = 64
MAX_TENSOR_BYTES = 1 << 48
MAX_VALUE_LEN = 64 << 20
MAX_VALUE_DEPTH = 64

#: Foreign files a reader must name rather than misread: a pickle, a torch.save zip, a safetensors file.
PICKLE = b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s."
TORCH_ZIP = b"PK\x03\x04\x00\x00\x08\x08\x00\x00" + bytes(20) + b"archive/data.pkl"
SAFETENSORS = struct.pack("<Q", 2) + b"{}"


def b64(data: bytes) -> dict[str, str]:
    """The canonical JSON spelling of bytes."""
    return {"$bytes": base64.b64encode(data).decode("ascii")}


def crc(data: bytes) -> bytes:
    return struct.pack("<I", zlib.crc32(data))


def tensor_body(start: int, dtype: str | int, shape: list[int], data: bytes, nbytes: int | None = None,
                pad: bytes | None = None) -> bytes:
    """A tensor record body at file offset ``start``: kind, dtype, ndim, shape, byte length, zero padding
    to the next multiple of 64, the bytes.  ``nbytes`` and ``pad`` override what is declared."""
    code = DTYPES[dtype][0] if isinstance(dtype, str) else dtype
    head = bytes([1, code, len(shape)]) + struct.pack(f"<{len(shape)}Q", *shape)
    head += struct.pack("<Q", len(data) if nbytes is None else nbytes)
    padding = bytes(-(start + len(head)) % ALIGN) if pad is None else pad
    return head + padding + data


def tensor_value(dtype: str, shape: list[int], data: bytes) -> dict[str, Any]:
    return {"kind": "TENSOR", "dtype": dtype, "shape": shape, "data": b64(data)}


def value_body(document: bytes, length: int | None = None) -> bytes:
    """A value record body: kind 2, the document's u32 length, the MessagePack document."""
    return b"\x02" + struct.pack("<I", len(document) if length is None else length) + document


def record(body: bytes, value: Any) -> Piece:
    """A checkpoint-shard record: the body and the CRC-32 of it, with its canonical JSON."""
    checksum = zlib.crc32(body)
    return Piece(body + struct.pack("<I", checksum), {"body": value, "crc32": checksum})


def zstd_frame(content: bytes, declared: int | None = None, rle: bool = False) -> bytes:
    """A zstd frame of ``content`` built by hand (RFC 8878): single segment, a 4-byte content size
    (``declared`` overrides it), then raw blocks of at most 128 KiB (with ``rle``: one RLE block of
    ``content``'s first byte).  No compressor is involved, so the corpus never changes with one."""
    size = len(content) if declared is None else declared
    frame = struct.pack("<IBI", 0xFD2FB528, 0xA0, size)  # magic; FCS 4 bytes, single segment; content size
    if rle:
        return frame + struct.pack("<I", (len(content) << 3) | (1 << 1) | 1)[:3] + content[:1]
    blocks = [content[at : at + (128 << 10)] for at in range(0, len(content), 128 << 10)] or [b""]
    for index, block in enumerate(blocks):
        last = int(index == len(blocks) - 1)
        frame += struct.pack("<I", (len(block) << 3) | last)[:3] + block
    return frame


def zstd_body(start: int, inflated_length: int, frame: bytes, codec: int = 1, length: int | None = None) -> bytes:
    """A version 2 ZSTD record body at file offset ``start``: kind 3, codec, inflated length, frame length,
    zero padding to the next multiple of 64, the frame."""
    head = bytes([3, codec]) + struct.pack("<QQ", inflated_length, len(frame) if length is None else length)
    return head + bytes(-(start + len(head)) % ALIGN) + frame


def zstd_value(inflated_length: int, frame: bytes) -> dict[str, Any]:
    return {"kind": "ZSTD", "codec": "ZSTD", "inflated_length": inflated_length, "data": b64(frame)}


def header(magic: bytes, version: int = 1) -> bytes:
    return magic + struct.pack("<H", version)


class Frame:
    """Where a record body sits: alone in a checkpoint-shard record, or as the one field of a dump row.

    The body vectors are the same for both formats (dump-shard reuses checkpoint-shard's body);
    only the bytes around the body, and so the tensor padding, differ.
    """

    def __init__(self, row: tuple[int, str] | None = None) -> None:
        self.row = row
        if row is None:
            self.prefix = b""
        else:
            name = row[1].encode("utf-8")
            self.prefix = struct.pack("<QII", row[0], 1, len(name)) + name
        #: Offset of the body from the start of the record (records start on a multiple of 64).
        self.start = len(self.prefix)

    def wrap(self, body: bytes, sealed: bool = True) -> bytes:
        """The record around ``body``, with its CRC-32 unless ``sealed`` is false (a record cut short)."""
        data = self.prefix + body
        return data + crc(data) if sealed else data

    def piece(self, body: bytes, value: Any) -> Piece:
        data = self.wrap(body)
        checksum = struct.unpack("<I", data[-4:])[0]
        if self.row is None:
            return Piece(data, {"body": value, "crc32": checksum})
        fields = [{"name": self.row[1], "body": value}]
        return Piece(data, {"global_index": self.row[0], "fields": fields, "crc32": checksum})

    def tensor(self, dtype: str, shape: list[int], data: bytes) -> Piece:
        return self.piece(tensor_body(self.start, dtype, shape, data), tensor_value(dtype, shape, data))

    def value(self, document: Any) -> Piece:
        """A value record of ``document`` (JSON types and bytes), packed by msgpack."""
        return self.piece(value_body(msgpack.packb(document, use_bin_type=True)), {"kind": "VALUE", "value": as_json(document)})

    def encoded_value(self, document: bytes, spelled: Any) -> Piece:
        """A value record of the MessagePack ``document`` as given, whose canonical JSON is ``spelled``."""
        return self.piece(value_body(document), {"kind": "VALUE", "value": spelled})


def as_json(document: Any) -> Any:
    """The canonical JSON spelling of a document of JSON types and bytes."""
    if isinstance(document, bytes):
        return b64(document)
    if isinstance(document, dict):
        return {k: as_json(v) for k, v in document.items()}
    if isinstance(document, list):
        return [as_json(v) for v in document]
    return document
