"""Reading whole files for the tools: mapped, not copied, and closed on every path."""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator

__all__ = ["mapped", "read_head"]


@contextlib.contextmanager
def mapped(path: str) -> Iterator[memoryview]:
    """A read-only view of the whole file (an empty view for an empty file)."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            yield memoryview(b"")
            return
        region = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield memoryview(region)
    finally:
        try:
            region.close()
        except BufferError:  # decoded values still view the mapping: it is unmapped when they are collected
            pass


def read_head(path: str, count: int = 16) -> bytes:
    with open(path, "rb") as handle:
        return handle.read(count)
