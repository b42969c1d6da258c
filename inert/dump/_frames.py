"""Record frames: the bytes of a row record around its tensor payloads, for rows whose fields are all dense.

Rows with the same dense fields (names, dtypes, shapes) are encoded by the
codec into records that differ only in the global index (the first 8 bytes),
the tensor payloads and the CRC-32 (the last 4 bytes).  A :class:`Frame` holds
the bytes in between once, as the codec wrote them for that field layout, so a
dump of many such rows costs one codec call per layout instead of one per row:

* writing, :meth:`Frame.parts` gives a row's record as buffers (the payloads
  uncopied) with its CRC-32;
* reading, :meth:`Frame.payloads` accepts a record only when every byte but
  the payloads and the global index equals the frame's and its CRC-32 holds.
  The decoder's every decision rests on those bytes (tags, counts, lengths,
  names, padding), so such a record decodes to exactly the frame's fields; any
  other record is left to the codec, which decodes it or says what is wrong.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from typing import Any

from inert._checks import checkpoint_itemsize
from inert._payload import crc32
from inert.codecs import dump_shard as shard_codec

__all__ = ["Frame", "frame_for", "GLOBAL_INDEX_SIZE", "CRC_SIZE", "MAX_FRAMED_PAYLOAD"]

GLOBAL_INDEX_SIZE = 8
CRC_SIZE = 4
#: Records with more payload bytes are left to the codec: beside their bytes a codec call per row is noise, and
#: building a frame costs a pass over that many zero bytes.
MAX_FRAMED_PAYLOAD = 16 << 20
_U64_MAX = (1 << 64) - 1


class CodecCopiedPayload(RuntimeError):
    """The codec's parts do not pass the payloads through, so they cannot be split into a frame."""


def frame_for(fields: Sequence[tuple[str, str, Sequence[int]]], max_payload: int = MAX_FRAMED_PAYLOAD) -> Frame | None:
    """The frame of ``fields`` (``(name, dtype name, shape)`` each), or ``None``: payloads above ``max_payload``,
    or a codec that copies payloads (its records are then encoded and decoded row by row, as correct and slower)."""
    if Frame.payload_size(fields) > min(max_payload, MAX_FRAMED_PAYLOAD):
        return None
    try:
        return Frame(fields)
    except CodecCopiedPayload:
        return None


def _payload_size(dtype: str, shape: Sequence[int]) -> int:
    size = checkpoint_itemsize(dtype)
    for dim in shape:
        size *= dim
    return size


def _zeros(size: int) -> memoryview:
    """``size`` zero bytes that take no memory until written (the mapping reads the zero page)."""
    return memoryview(mmap.mmap(-1, size)) if size else memoryview(b"")


class Frame:
    """The fixed bytes of every record of one dense field layout: ``(name, dtype name, shape)`` per field."""

    def __init__(self, fields: Sequence[tuple[str, str, Sequence[int]]]) -> None:
        sizes = [_payload_size(dtype, shape) for _, dtype, shape in fields]
        payloads = [_zeros(size) for size in sizes]
        value = {
            "global_index": 0,
            "fields": [
                {"name": name, "body": {"kind": "TENSOR", "dtype": dtype, "shape": list(shape), "data": data}}
                for (name, dtype, shape), data in zip(fields, payloads, strict=True)
            ],
        }
        parts = shard_codec.encode_record_parts(value)
        # Split the codec's parts at the payloads it was given (it passes them through uncopied).
        segments: list[bytes] = []
        current: list[bytes] = []
        for part in parts:
            if len(segments) < len(payloads) and part is payloads[len(segments)]:
                segments.append(b"".join(current))
                current = []
            else:
                current.append(bytes(part))
        segments.append(b"".join(current))
        if len(segments) != len(payloads) + 1:
            raise CodecCopiedPayload("the dump-shard codec copied a tensor payload; record frames cannot be built")
        for data in payloads:
            data.release()
        self.length = sum(map(len, segments)) + sum(sizes)
        self.sizes = sizes
        # The bytes after the global index up to the first payload, between payloads, and after the last one up to the CRC.
        segments[0] = segments[0][GLOBAL_INDEX_SIZE:]
        segments[-1] = segments[-1][:-CRC_SIZE]
        self.gaps = segments

    @staticmethod
    def payload_size(fields: Sequence[tuple[str, str, Sequence[int]]]) -> int:
        """The payload bytes of a record of ``fields`` (a frame costs one CRC-32 over that many zero bytes)."""
        return sum(_payload_size(dtype, shape) for _, dtype, shape in fields)

    def parts(self, global_index: int, payloads: Sequence[Any]) -> list[Any] | None:
        """The record of a row: buffers to write in order, the payloads among them uncopied.

        ``None`` when the global index is not a ``UInt64`` or a payload has another
        size: the codec then encodes the row and names the fault.
        """
        if global_index.__class__ is not int or not 0 <= global_index <= _U64_MAX:
            return None
        if [len(data) for data in payloads] != self.sizes:
            return None
        out: list[Any] = [global_index.to_bytes(GLOBAL_INDEX_SIZE, "little") + self.gaps[0]]
        crc = crc32(out[0])
        for data, gap in zip(payloads, self.gaps[1:], strict=True):
            crc = crc32(gap, crc32(data, crc))  # releases the GIL on large payloads
            out += (data, gap)
        out.append(crc.to_bytes(CRC_SIZE, "little"))
        return out

    def payloads(self, record: memoryview, crc: int | None = None) -> list[memoryview] | None:
        """The payload views of ``record`` if it is this frame's record, whole and with its CRC-32; else ``None``.

        ``crc``: the CRC-32 of the record but its last ``CRC_SIZE`` bytes when already taken (as it was read).
        """
        if len(record) != self.length:
            return None
        pos = GLOBAL_INDEX_SIZE
        views = []
        for gap, size in zip(self.gaps, self.sizes, strict=False):
            end = pos + len(gap)
            if record[pos:end].tobytes() != gap:
                return None
            views.append(record[end : end + size])
            pos = end + size
        end = self.length - CRC_SIZE
        if record[pos:end].tobytes() != self.gaps[-1]:
            return None
        if (crc32(record[:end]) if crc is None else crc) != int.from_bytes(record[end:], "little"):
            return None
        return views
