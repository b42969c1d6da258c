"""A run of records read into private memory with each record's CRC-32 taken on the way: one pass over the bytes.

The run is read in blocks of :data:`BLOCK` bytes, and each block is checksummed
right after ``pread`` put it in, while it is still in the core's cache; the
bytes cross main memory once (a read then a CRC-32 of 12 MiB would cross it
twice).  The accelerator (``inert._accel.pread_crc32``) does the whole run in C
with the GIL released; the pure-Python path does the same with ``os.preadv``
and the fastest ``crc32`` installed (inert/torch/_payload.py), which release the
GIL too.  Both give the same bytes and CRC-32s.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from inert import _accelerator
from inert.torch._payload import crc32

__all__ = ["BLOCK", "pread_crc32", "pread_crc32_python"]

#: Bytes per read: checksummed while in the core's cache (1 MiB of L2 here; the page cache's copy and the CRC
#: each see it once).
BLOCK = 256 << 10


def pread_crc32_python(fd: int, memory: memoryview, offset: int, spans: list[int]) -> tuple[int, list[int]]:
    """Fill ``memory`` from ``fd`` at ``offset``; the CRC-32 of each span of it (``spans``: start, end, start, end...,
    offsets in ``memory``, in order) taken block by block.  Returns the bytes read (fewer where the file ends
    first: the CRC-32s then cover what was read) and the CRC-32s."""
    if len(spans) % 2 or any(b < a for a, b in zip(spans, spans[1:], strict=False)) or (spans and spans[-1] > len(memory)):
        raise ValueError("pread_crc32: spans are start, end pairs in order, inside the buffer")
    crcs = [0] * (len(spans) // 2)
    size, filled, span = len(memory), 0, 0
    while filled < size:
        got = os.preadv(fd, [memory[filled : filled + BLOCK]], offset + filled)
        if got == 0:
            break
        lo, hi = filled, filled + got
        while span < len(crcs) and spans[2 * span] < hi:
            a, b = max(spans[2 * span], lo), min(spans[2 * span + 1], hi)
            if a < b:
                crcs[span] = crc32(memory[a:b], crcs[span])
            if spans[2 * span + 1] > hi:
                break  # continued by the next block
            span += 1
        filled = hi
    return filled, crcs


_accelerated: Callable[[int, memoryview, int, list[int]], tuple[int, list[int]]] | None = _accelerator.builder(
    "pread_crc32"
)

#: The accelerator's one-pass reader where it is built, else the pure-Python one (the same results).
pread_crc32 = _accelerated or pread_crc32_python
