"""The ``ZSTD`` record bodies of ``checkpoint-shard`` version 2: deflated by writers, inflated within declared bounds.

Memory is bounded by lengths checked before inflating, never by what a frame
inflates to: the record's ``inflated_length`` must equal what the reader
expects (or stay within its limit), and the frame's own content size must
equal it, before one byte is inflated.  A frame without a content size, with
a dictionary, with bytes after it, or inflating to another length is refused.
A value's frame (``value=True``) may inflate to at most
``VALUE_MAX_RATIO`` times its stored bytes: a value document's decoding costs
up to 73 bytes of memory per byte, so only the bytes stored can bound it
(a tensor's inflated bytes are the destination its metadata declares, which
zstd's own ceiling, ``MAX_RATIO``, relates to the stored bytes).
``zstandard`` is needed only here: the ``zstd`` extra (``inert._extras.install_hint``).
"""

from __future__ import annotations

import threading
from typing import Any

from inert._errors import InvalidValueError, LimitError
from inert._extras import install_hint

__all__ = ["LEVEL", "MAX_RATIO", "MAX_WINDOW", "VALUE_MAX_RATIO", "Inflation", "deflate", "frame_size", "inflate", "zstd_module"]

FORMAT = "checkpoint-shard"
#: zstd's default level, the one DCP's ``ZStandard`` extension uses.
LEVEL = 3
_local = threading.local()


def zstd_module() -> Any:
    """The ``zstandard`` module, or an ``ImportError`` naming the extra that installs it."""
    try:
        import zstandard
    except ImportError:
        raise ImportError(f"compressed checkpoint records need zstandard: {install_hint('zstd')}") from None
    return zstandard


def deflate(parts: list[Any]) -> bytes:
    """One zstd frame of the bytes of ``parts`` in order, declaring its content size (readers require it)."""
    compressor = getattr(_local, "compressor", None)
    if compressor is None:  # a compression context is not shared between threads
        compressor = _local.compressor = zstd_module().ZstdCompressor(level=LEVEL, write_content_size=True)
    # Streamed in blocks rather than in one call: the one-call form allocates the whole bound of
    # the output at once (a fresh mapping per large record), measured about 1.3x slower here.
    stream = compressor.compressobj(size=sum(len(part) for part in parts))
    out = [stream.compress(part) for part in parts]
    out.append(stream.flush())
    return b"".join(out)


#: zstd's block size limit: a block's content is at most 128 KiB.
_BLOCK_MAX = 128 << 10
#: The largest window a frame may ask of the decoder: libzstd's own default limit (2**27), stated
#: here so that the memory inflating costs beyond its destination is bounded by this, whatever the frame.
MAX_WINDOW = 1 << 27
#: The most a zstd frame inflates per stored byte: a block holds at most 128 KiB and takes at least
#: 4 bytes (an RLE block: its 3-byte header and the byte repeated).  A real save of zeros reaches it
#: (512 MiB of zeros deflate to 16,406 bytes, 32,724x), so a tensor's frame is not held to less.
MAX_RATIO = _BLOCK_MAX // 4
#: The most a value's frame inflates per stored byte.  Decoding a value document costs up to 73 bytes
#: of memory and 0.4 s of CPU per MiB of document (a list of empty maps), within the readers' promise
#: of 100 bytes and 1 s per MiB of input only if the document is no longer than what is stored; a
#: 1,055-byte frame inflating to 32 MiB of nils made 33 million items.  Writers store values as they are.
VALUE_MAX_RATIO = 1
#: Output asked of the decoder per call when inflating into a destination.
_STEP = 1 << 20


def frame_size(data: Any, offset: int, field: str) -> int:
    """The length of the zstd frame at the start of ``data``, from its header and block headers alone
    (RFC 8878 3.1.1): a frame cut short is refused here, before anything is inflated."""
    zstandard = zstd_module()
    view = memoryview(data).cast("B")
    try:
        pos = zstandard.frame_header_size(view)
    except zstandard.ZstdError as exc:
        raise InvalidValueError(FORMAT, offset, f"{field}.data", f"not a zstd frame: {exc}") from None
    while True:
        if pos + 3 > len(view):
            raise InvalidValueError(FORMAT, offset, f"{field}.data",
                                    f"the frame does not inflate: cut short in the block header at {pos}")
        header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
        last, kind, size = header & 1, header >> 1 & 3, header >> 3
        if kind == 3 or size > _BLOCK_MAX:
            raise InvalidValueError(FORMAT, offset, f"{field}.data",
                                    f"the frame does not inflate: block header at {pos} is not a valid block")
        pos += 3 + (1 if kind == 1 else size)  # an RLE block stores its byte once
        if last:
            break
    pos += 4 if view[4] & 0x04 else 0  # the content checksum
    if pos > len(view):
        raise InvalidValueError(FORMAT, offset, f"{field}.data", f"the frame does not inflate: cut short, {pos} bytes needed")
    return pos


class Inflation:
    """A ``ZSTD`` body's frame, inflated in order into buffers the caller gives, exactly ``inflated_length`` bytes.

    Built only once ``inflated_length`` is what the reader expects (``expected``: a tensor's header
    and bytes) or, for a value (``value``), at most ``VALUE_MAX_RATIO`` times the stored frame,
    and within ``limit``; the frame's content size equals it, it needs no dictionary, and
    its header and block headers end exactly where the stored frame does.  Inflating costs the
    destination and the decoder's window (at most ``MAX_WINDOW``), never a copy of the whole output.
    Errors name ``offset`` (the record's) and ``field``.
    """

    def __init__(self, body: dict[str, Any], offset: int, field: str, *, expected: int | None = None,
                 limit: int, value: bool = False) -> None:
        self.offset, self.field = offset, field
        self.length = length = body["inflated_length"]
        if expected is not None and length != expected:
            raise InvalidValueError(FORMAT, offset, f"{field}.inflated_length",
                                    f"{length} bytes declared, the metadata's dtype and shape give {expected}")
        if length > limit:
            raise LimitError(FORMAT, offset, f"{field}.inflated_length", f"{length} exceeds the limit of {limit} bytes")
        data = body["data"]
        if value and length > VALUE_MAX_RATIO * len(data):
            raise LimitError(FORMAT, offset, f"{field}.inflated_length",
                             f"{length} bytes from a frame of {len(data)}: a value inflates to at most "
                             f"{VALUE_MAX_RATIO}x its stored frame (its decoding costs memory per byte)")
        self._zstd = zstandard = zstd_module()
        try:
            params = zstandard.get_frame_parameters(data)
        except zstandard.ZstdError as exc:
            raise InvalidValueError(FORMAT, offset, f"{field}.data", f"not a zstd frame: {exc}") from None
        if params.content_size != length:
            found = "no content size" if params.content_size == zstandard.CONTENTSIZE_UNKNOWN else params.content_size
            raise InvalidValueError(FORMAT, offset, f"{field}.data", f"the frame declares {found}, the record {length} bytes")
        if params.dict_id:
            raise InvalidValueError(FORMAT, offset, f"{field}.data", f"the frame needs dictionary {params.dict_id}")
        size = frame_size(data, offset, field)
        if size != len(data):
            raise InvalidValueError(FORMAT, offset, f"{field}.data",
                                    f"the frame does not inflate: it ends at {size} of the {len(data)} bytes stored")
        decoder = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
        self._reader = decoder.stream_reader(data, read_across_frames=False)
        self.done = 0

    def _fault(self, reason: str) -> InvalidValueError:
        return InvalidValueError(FORMAT, self.offset, f"{self.field}.data", reason)

    def into(self, out: memoryview) -> None:
        """Fill ``out`` (writable bytes) with the next ``len(out)`` inflated bytes."""
        out = out.cast("B") if out.format != "B" else out
        if self.done + len(out) > self.length:
            raise ValueError(f"{len(out)} bytes asked past the {self.length} declared")  # a caller's mistake
        filled = 0
        while filled < len(out):
            try:
                got = self._reader.readinto(out[filled : filled + _STEP])
            except self._zstd.ZstdError as exc:
                raise self._fault(f"the frame does not inflate: {exc}") from None
            if not got:
                raise self._fault(f"inflates to {self.done + filled} bytes, {self.length} declared")
            filled += got
        self.done += filled

    def end(self) -> None:
        """Every declared byte was inflated and the frame holds no more (its checksum, if any, is checked here)."""
        if self.done != self.length:
            raise ValueError(f"{self.done} of {self.length} bytes inflated")  # a caller's mistake
        try:
            more = self._reader.read(1)
        except self._zstd.ZstdError as exc:
            raise self._fault(f"the frame does not inflate: {exc}") from None
        if more:
            raise self._fault(f"the frame does not inflate to its {self.length} declared bytes: it holds more")


def inflate(body: dict[str, Any], offset: int, field: str, *, expected: int | None = None, limit: int,
            value: bool = False) -> bytearray:
    """The bytes a ``ZSTD`` body's frame inflates to, exactly ``inflated_length`` of them (see ``Inflation``)."""
    inflation = Inflation(body, offset, field, expected=expected, limit=limit, value=value)
    out = bytearray(inflation.length)
    inflation.into(memoryview(out))
    inflation.end()
    return out
