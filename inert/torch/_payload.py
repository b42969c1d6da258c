"""Tensor memory as bytes, for the payload moves of ``inert._payload`` (which needs no torch)."""

from __future__ import annotations

import torch

from inert._payload import BLOCK, CRC32_IMPLEMENTATION, crc32, crc32_combine, pwrite_all, read_into, write_from

__all__ = ["BLOCK", "CRC32_IMPLEMENTATION", "byte_view", "crc32", "crc32_combine", "pwrite_all", "read_into", "write_from"]


def byte_view(tensor: torch.Tensor) -> memoryview:
    """The bytes of a contiguous CPU tensor, as a writable flat view of its memory."""
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]
