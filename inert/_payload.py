"""Payloads moved between a file and memory in blocks, with the CRC-32 taken on the way (no torch needed).

Each block is checksummed while it is still in the core's cache: right after
``preadv`` put it into the destination (reading), right before ``pwrite``
sends it to the file (writing).  The payload thus crosses main memory once,
and ``preadv``, ``pwrite`` and ``zlib.crc32`` all release the GIL, so a few
threads move several records at once.

The CRC-32 is zlib's (the format's); ``zlib-ng`` or ``isal``, when installed,
compute the same function about four times faster than the zlib that
CPython links (``CRC32_IMPLEMENTATION`` names the one in use).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable

from inert._errors import TruncatedError

__all__ = ["BLOCK", "CRC32_IMPLEMENTATION", "crc32", "crc32_combine", "pwrite_all", "read_into", "write_from"]


def _fastest_crc32() -> tuple[Callable[..., int], Callable[[int, int, int], int] | None, str]:
    try:
        from zlib_ng import zlib_ng

        return zlib_ng.crc32, zlib_ng.crc32_combine, "zlib-ng"
    except ImportError:
        pass
    try:
        from isal import isal_zlib

        return isal_zlib.crc32, isal_zlib.crc32_combine, "isal"
    except ImportError:
        return zlib.crc32, None, "zlib"


#: ``crc32_combine(a, b, len_b)``: the CRC-32 of two parts from theirs (None: the standard library has none).
crc32, crc32_combine, CRC32_IMPLEMENTATION = _fastest_crc32()

#: Half of a core's 2 MiB L2 cache on the machines this is tuned on: a block is still there when it is checksummed.
BLOCK = 1 << 20


def read_into(fd: int, offset: int, dest: memoryview, crc: int | None, name: str) -> int | None:
    """Fill ``dest`` from ``fd`` at ``offset``, continuing ``crc`` over the bytes (None: no checksum).

    A file that ends first is a ``TruncatedError`` at the first byte missing, in the field ``name``.
    """
    size = len(dest)
    step = BLOCK if crc is not None else size  # unchecked bytes need no cache-sized blocks: one call
    done = 0
    while done < size:
        block = dest[done : done + step]
        got = os.preadv(fd, [block], offset + done)
        if got <= 0:
            raise TruncatedError("checkpoint-shard", offset + done, name, f"{size - done} bytes needed, 0 present")
        if crc is not None:
            crc = crc32(block[:got], crc)
        done += got
    return crc


def write_from(fd: int, offset: int, source: memoryview, crc: int) -> int:
    """Write ``source`` to ``fd`` at ``offset``; return ``crc`` continued over it."""
    for done in range(0, len(source), BLOCK):
        block = source[done : done + BLOCK]
        crc = crc32(block, crc)
        pwrite_all(fd, block, offset + done)
    return crc


def pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    """Write all of ``data`` to ``fd`` at ``offset`` (``pwrite`` may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
