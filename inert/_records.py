"""What a reader checks of ``checkpoint-shard`` records against the ``checkpoint-metadata``, without torch.

The rules both ``inert.torch``'s readers and ``inert verify`` (which imports no torch) apply: records lie
inside their files without overlapping, the chunks of a tensor tile it, a record's declared length is
bounded by what its kind can hold, its CRC-32 matches, its kind, dtype and shape are the metadata's,
and a compressed body inflates to exactly the bytes its chunk takes.  Dtypes are the format's names
(``FLOAT32``); messages spell them as PyTorch does (``torch.float32``), whoever reads.
"""

from __future__ import annotations

import itertools
import math
import mmap
import struct
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from inert._checks import MAX_INFLATED
from inert._errors import ChecksumError, InertError, InvalidValueError, LimitError, TruncatedError
from inert._payload import BLOCK
from inert._zstd import Inflation
from inert.codecs import checkpoint_shard as shard
from inert.codecs._tables import CHECKPOINT_ALIGN as ALIGN
from inert.codecs._tables import CHECKPOINT_MAX_VALUE_LEN as MAX_VALUE_LEN

__all__ = [
    "ALIGN", "HEAD_MAX", "LENGTH_CHECKED", "MAX_TILING_CELLS", "MAX_VALUE_LEN", "NAMED_DAMAGE_MAX", "SCRATCH",
    "Chunk", "HeaderBuffers", "ShapeMismatchError", "block", "check_crc", "check_kind", "check_length",
    "check_placement", "check_tiling",
    "decode_inflated", "decode_record", "dtype_text", "inflation", "tensor_header",
]

#: Longest tensor record header: kind, dtype, rank, 64 dims, length, padding to 64 bytes.
HEAD_MAX = 576
#: The longest value record: its kind, the document's length, the document (at most ``MAX_VALUE_LEN``), the CRC-32.
VALUE_RECORD_MAX = 1 + 4 + MAX_VALUE_LEN + 4
#: The longest a VALUE body may inflate to: its kind, its document's length and the document.
VALUE_INFLATED_MAX = 5 + MAX_VALUE_LEN
#: Records the metadata declares longer than this are checked against what their kind can hold before reading.
LENGTH_CHECKED = 1 << 20
#: A record whose header is refused is read whole for its CRC-32 (damage is named as such) up to this length.
NAMED_DAMAGE_MAX = 64 << 20
#: Most cells of the grid that a tensor's chunk boundaries draw (one byte each while tiling is checked).
MAX_TILING_CELLS = 1 << 24
#: Linux's MAP_NORESERVE (the mmap module does not name it).
_NORESERVE = 0x4000 if sys.platform.startswith("linux") else 0


class ShapeMismatchError(InvalidValueError):
    """A record's dtype or shape differs from what the read plan expects."""


class Chunk(NamedTuple):
    """A chunk of a tensor: where it starts and its sizes (attributes as DCP's ``ChunkStorageMetadata`` has them)."""

    offsets: Sequence[int]
    sizes: Sequence[int]


def dtype_text(name: str) -> str:
    """A format dtype name (``BFLOAT16``) as PyTorch spells the dtype (``torch.bfloat16``)."""
    return f"torch.{name.lower()}"


def tensor_header(dtype: str, shape: Sequence[int], nbytes: int) -> bytes:
    """A tensor record's bytes before its payload: kind, dtype, rank, dims, byte length, zero padding.

    The generated codec encodes the same bytes (a test holds the two together); building them
    here lets the payload go from tensor memory to the file once, checksummed on the way,
    where the codec would take its CRC-32 over the whole payload before any byte is written.
    """
    head = struct.pack(f"<BBB{len(shape)}QQ", shard.RecordKind.TENSOR, shard.DType[dtype], len(shape), *shape, nbytes)
    return head + bytes(-len(head) % ALIGN)


def check_placement(per_file: Mapping[str, Sequence[Any]], size_of: Callable[[str], int]) -> None:
    """Records (``offset`` and ``length`` each, listed once) lie inside their files (``size_of(name)``) and do
    not overlap."""
    for name, infos in per_file.items():
        size = size_of(name)
        end = 0
        for info in sorted(infos, key=lambda i: i.offset):
            if info.offset < end:
                reason = f"record at {info.offset} overlaps the one ending at {end}"
                raise InvalidValueError("checkpoint-shard", info.offset, name, reason)
            end = info.offset + info.length
            if end > size:
                reason = f"record of {info.length} bytes at {info.offset} ends beyond the {size}-byte file"
                raise TruncatedError("checkpoint-shard", info.offset, name, reason)


def check_tiling(fqn: str, size: Sequence[int], chunks: Sequence[Any]) -> None:
    """The chunks (``offsets`` and ``sizes`` each) cover the tensor and none overlaps another (the metadata
    codec has put each inside it).

    As many elements as the tensor, and no two chunks sharing a cell of the grid their
    boundaries draw: then they cover it exactly.  The grid costs a byte a cell, bounded
    by ``MAX_TILING_CELLS``, and a step per run of cells along the last dimension; chunks laid
    out as a grid (any DCP sharding) make one cell each.  numpy, where installed, marks a chunk in one slice;
    without it (verify needs none) a run of cells at a time.
    """
    numel = math.prod(size)
    held = sum(math.prod(chunk.sizes) for chunk in chunks)
    if held != numel:
        raise InvalidValueError("checkpoint-metadata", -1, f"{fqn}.chunks",
                                f"{len(chunks)} chunks hold {held} elements, the tensor has {numel}")
    if len(chunks) < 2 or numel == 0:  # one chunk inside the tensor with all its elements is the tensor
        return
    cuts = [sorted({0, end, *(c.offsets[d] for c in chunks), *(c.offsets[d] + c.sizes[d] for c in chunks)})
            for d, end in enumerate(size)]
    cells = math.prod(len(c) - 1 for c in cuts)
    if cells > MAX_TILING_CELLS:
        raise LimitError("checkpoint-metadata", -1, f"{fqn}.chunks",
                         f"chunk boundaries draw {cells} cells, exceeds max_cells({MAX_TILING_CELLS})")
    where = [{at: i for i, at in enumerate(c)} for c in cuts]
    extents = [len(c) - 1 for c in cuts]
    try:
        import numpy
    except ImportError:  # verify runs without numpy: the same grid, a run of cells at a time
        _mark_runs(fqn, chunks, where, extents, cells)
        return
    # With numpy, a chunk's cells are one slice of the grid: the cost is the cells, not a Python step per
    # run (chunks one cell wide along the last dimension would make millions of steps).
    grid = numpy.zeros(extents, dtype=numpy.bool_)
    for index, chunk in enumerate(chunks):
        block = grid[tuple(slice(w[o], w[o + n]) for w, o, n in zip(where, chunk.offsets, chunk.sizes, strict=True))]
        if block.any():
            raise InvalidValueError("checkpoint-metadata", -1, f"{fqn}.chunks[{index}]",
                                    f"the chunk at {tuple(chunk.offsets)} overlaps another")
        block[...] = True


def _mark_runs(fqn: str, chunks: Sequence[Any], where: list[dict[int, int]], extents: list[int], cells: int) -> None:
    """:func:`check_tiling`'s grid without numpy: each chunk marked run by run along the last dimension."""
    taken = bytearray(cells)  # the grid, row-major: a chunk is runs along the last dimension, one per outer cell
    for index, chunk in enumerate(chunks):
        spans = [range(w[o], w[o + n]) for w, o, n in zip(where, chunk.offsets, chunk.sizes, strict=True)]
        inner = spans[-1]
        run = len(inner)
        for outer in itertools.product(*spans[:-1]):
            at = 0
            for cell, extent in zip(outer, extents, strict=False):
                at = at * extent + cell
            at = at * extents[-1] + inner.start
            if any(taken[at : at + run]):
                where_at = tuple(chunk.offsets)
                raise InvalidValueError("checkpoint-metadata", -1, f"{fqn}.chunks[{index}]",
                                        f"the chunk at {where_at} overlaps another")
            taken[at : at + run] = b"\x01" * run


def check_length(fqn: str, length: int, tensor: tuple[str, Sequence[int], int] | None) -> None:
    """A record the metadata declares longer than its kind can be is refused before a buffer is allocated:
    a value record (``tensor`` None) holds at most the spec's 64 MiB document, a tensor record (``tensor``:
    its dtype name, chunk shape and chunk bytes) its chunk's bytes and a header.  (A sparse file makes any
    length cheap to place; only records above ``LENGTH_CHECKED`` are bounded, so that a small one says what
    is wrong with its bytes.)"""
    if length <= LENGTH_CHECKED:
        return
    if tensor is None:
        longest, what = VALUE_RECORD_MAX, f"a value record holds at most {MAX_VALUE_LEN} bytes of document"
    else:
        dtype, shape, nbytes = tensor
        # A compressed (ZSTD) record of incompressible bytes: 3 bytes a 128 KiB block and a frame header more.
        longest = HEAD_MAX + nbytes + nbytes // 1024 + 4096
        what = f"its {tuple(shape)} {dtype_text(dtype)} chunk takes {nbytes} bytes, a header and a compressed frame's overhead"
    if length > longest:
        raise LimitError("checkpoint-metadata", -1, f"storage_data[{fqn}].length",
                         f"record of {length} bytes exceeds max_len({longest}): {what}")


def check_crc(crc: int, stored: int, name: str, fqn: str, offset: int, length: int) -> None:
    """The CRC-32 a record's bytes give (``crc``) is the one it stores."""
    if crc != stored:
        raise ChecksumError("checkpoint-shard", offset + length - 4, f"{name}:{fqn}.crc32",
                            f"stored CRC-32 {stored:#010x}, bytes give {crc:#010x}")


def check_kind(body: Mapping[str, Any], kind: Any, fqn: str, offset: int) -> None:
    """The record is of the kind (``RecordKind.TENSOR`` or ``VALUE``) the metadata has under ``fqn``."""
    if body["kind"] != kind:
        found, wanted = ("tensor", "value") if kind == shard.RecordKind.VALUE else ("value", "tensor")
        raise InvalidValueError("checkpoint-shard", offset, fqn, f"a {found} record where the metadata has a {wanted}")


def decode_record(view: memoryview, version: int, name: str, fqn: str, offset: int) -> Any:
    """The record decoded by the codec of its file's ``version`` (its CRC-32 not checked: callers check it first,
    so that damage is named as such); errors located in the file ``name`` at the record's ``offset``."""
    try:
        return shard.decode_record(view, version=version, verify_checksums=False)
    except InertError as exc:
        raise exc._replace(offset=offset + exc.offset, field=f"{name}:{fqn}.{exc.field}") from None


def inflation(body: Any, name: str, fqn: str, offset: int, tensor: tuple[Sequence[int], int] | None
              ) -> Inflation:
    """A ZSTD body's frame ready to inflate, once its declared length is what the record can hold: a value's
    (``tensor`` None) document, or a tensor's header and its chunk's bytes (``tensor``: shape and bytes)."""
    field = f"{name}:{fqn}.body"
    if tensor is None:
        return Inflation(body, offset, field, limit=VALUE_INFLATED_MAX, value=True)
    shape, nbytes = tensor
    header = 3 + 8 * len(shape) + 8
    return Inflation(body, offset, field, expected=header + -header % ALIGN + nbytes, limit=MAX_INFLATED)


def decode_inflated(view: memoryview, name: str, fqn: str, offset: int) -> Any:
    """What a ZSTD body inflated to, decoded as the version 1 body it must be (offsets: into those bytes)."""
    try:
        return shard.decode_inflated(view, verify_checksums=False)
    except InertError as exc:
        reason = f"at {exc.offset} of the inflated bytes: {exc.reason}"
        raise exc._replace(offset=offset, field=f"{name}:{fqn}.inflated.{exc.field}", reason=reason) from None


class HeaderBuffers:
    """Per thread, an anonymous mapping as long as the longest record seen, for decoding headers.

    The codec decodes a record whole; a large tensor record's header is read into the start of
    this buffer and decoded from a view of the record's length.  Only the first page is ever
    written, so the rest costs address space, not memory; what lies past the header is never
    read as payload (the payload goes straight into its destination, or is checksummed a block at a
    time, and a bool record, whose bytes the codec checks one by one, takes the whole-record path).
    One instance serves every reader: a thread reads one record at a time, and the reading threads
    outlive reads.
    """

    def __init__(self, keep: int) -> None:
        self._local = threading.local()
        self._keep = keep

    def view(self, length: int) -> memoryview | None:
        """``length`` bytes of this thread's buffer (None: no address space for them)."""
        buffer = getattr(self._local, "buffer", None)
        if buffer is None or len(buffer) < length:
            size = max(length, 2 * len(buffer) if buffer is not None else length)
            try:  # no swap reserved for pages never written: a 100 GiB tensor's header costs one page
                buffer = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE)
            except OSError:
                return None
            if size <= self._keep:  # a larger one is unmapped after its record: it would hold address space
                self._local.buffer = buffer
        return memoryview(buffer)[:length]


SCRATCH = HeaderBuffers(keep=1 << 30)
_BLOCKS = threading.local()


def block() -> memoryview:
    """This thread's ``BLOCK``-long buffer, for payloads checked and dropped a block at a time."""
    found = getattr(_BLOCKS, "block", None)
    if found is None:
        found = _BLOCKS.block = memoryview(bytearray(BLOCK))
    return found
