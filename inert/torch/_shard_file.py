"""What every writer of checkpoint-shard files shares: a tensor's bytes, the planner's tensor checked against
its plan, a fresh file in place of an older one, and the 4-byte count and CRC-32 layout."""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path

import torch
from torch.distributed.checkpoint.planner import SavePlanner, WriteItem

__all__ = ["COUNT", "new_file", "resolve_tensor", "tensor_bytes"]

#: A record's CRC-32 and every u32 count (little-endian).
COUNT = struct.Struct("<I")


def tensor_bytes(tensor: torch.Tensor) -> tuple[torch.Tensor, memoryview]:
    """A contiguous CPU copy-if-needed of ``tensor`` and a zero-copy byte view of it."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return flat, memoryview(flat.view(torch.uint8).numpy())  # type: ignore[arg-type]


def resolve_tensor(item: WriteItem, planner: SavePlanner) -> torch.Tensor:
    """The planner's tensor for ``item``, checked to be the dense tensor the plan describes."""
    fqn = item.index.fqn
    tensor = planner.resolve_data(item)
    assert isinstance(tensor, torch.Tensor) and item.tensor_data is not None
    if tensor.layout != torch.strided:
        raise TypeError(f"{fqn}: {tensor.layout} tensors have no checkpoint encoding; densify them first")
    planned = item.tensor_data
    if tensor.dtype != planned.properties.dtype or tensor.size() != planned.chunk.sizes:
        raise ValueError(f"{fqn}: the planner resolved a {tuple(tensor.size())} {tensor.dtype} tensor, "
                         f"the plan has {tuple(planned.chunk.sizes)} {planned.properties.dtype}")
    return tensor


def new_file(path: Path, older: list[int]) -> int:
    """A new file at ``path`` open for writing; a file it replaces goes on ``older``, still open.

    A new file, not the old one truncated: ext4 writes back a file truncated and rewritten
    when it is closed (auto_da_alloc), and a reader that has the old file open keeps it whole.
    The old file is held open past its unlink so that freeing its pages, at the last close,
    runs on a worker while the new records are written.
    """
    with contextlib.suppress(OSError):  # none there, or unreadable: then the unlink frees it
        older.append(os.open(path, os.O_RDONLY))
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
