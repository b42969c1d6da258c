"""``load_tensors``: an Inert checkpoint's tensors read into tensors directly, without DCP's planning.

``dcp.load`` plans a read for any state dict, any sharding and any process
group: for a few dozen large tensors its planning costs about as much as
reading a tenth of their bytes.  ``load_tensors`` covers the common case
outside DCP (one process reading tensors by their checkpoint names) with the
same reader and the same checks as ``FileSystemReader``: the metadata decoded
by the codec, records inside their files without overlap, each record's dtype
and shape equal to the metadata's before any payload byte is read, every
CRC-32 unless turned off, and nothing unpickled.

Before any byte is copied it also checks what DCP leaves to the planner: every
destination has the checkpoint's dtype and shape, and the chunks of every
tensor (one per saving rank that held a part) tile it exactly, so that a new
tensor has no byte the file did not give.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

from inert._errors import LimitError, TruncatedError
from inert._records import MAX_TILING_CELLS, check_tiling
from inert._source import open_source
from inert._zstd import MAX_RATIO as ZSTD_MAX_RATIO
from inert.codecs import checkpoint_metadata as metadata_codec

from ._metadata import InertStorageInfo
from ._reader import FileSystemReader, ShapeMismatchError, _Buffers, _narrow

__all__ = ["load_tensors", "check_tiling", "MAX_TILING_CELLS"]



def load_tensors(
    path: str | os.PathLike[str],
    into: dict[str, torch.Tensor] | None = None,
    *,
    verify_checksums: bool = True,
    thread_count: int = 2,
    max_metadata_size: int = metadata_codec.MAX_SIZE,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, torch.Tensor]:
    """Read the tensors of the Inert checkpoint at ``path``, in one process, without ``dcp.load``.

    Keys are the checkpoint's names (DCP's flattened ones: ``"model.fc.weight"``).
    ``into`` None: every tensor of the checkpoint, in new CPU tensors.  Otherwise the
    tensors of ``into``'s keys, read in place (``into`` is returned); the checkpoint's other
    entries are not read.  Destinations are plain tensors: a ``DTensor`` or ``ShardedTensor``
    takes its local part through ``dcp.load``.  A key the checkpoint lacks, holds as a value, or holds with
    another dtype or shape is a ``ShapeMismatchError`` naming the key and both, raised
    before any byte is copied; bad bytes are ``InertError``s as with ``FileSystemReader``,
    whose options the keyword arguments are.  A URL (``s3://bucket/ckpt``) is read by
    ``FsspecReader``, with ``storage_options`` for its filesystem.
    """
    options: dict[str, Any] = {"storage_options": storage_options} if storage_options else {}
    reader = reader_for(path, verify_checksums=verify_checksums, thread_count=thread_count,
                        max_metadata_size=max_metadata_size, **options)
    metadata = reader.read_metadata()
    reader.set_up_storage_reader(metadata, True)
    entries = metadata.state_dict_metadata
    if into is None:
        wanted = {fqn: md for fqn, md in entries.items() if isinstance(md, TensorStorageMetadata)}
    else:
        wanted = {fqn: _entry_for(fqn, tensor, entries.get(fqn)) for fqn, tensor in into.items()}
    items = [item for fqn, md in wanted.items() for item in _read_items(fqn, md, reader.storage_data, reader.file_version)]
    if into is None:
        # Records inside their files, and each one's header what the metadata says, before a tensor is
        # allocated: a sparse file places any length at no cost on disk, its header is its first bytes.
        reader.check_headers(reader._placed(items))
        into = {fqn: _new_tensor(fqn, md) for fqn, md in wanted.items()}
    dest = into

    def resolve(item: ReadItem) -> torch.Tensor:
        return _narrow(dest[item.dest_index.fqn], item.dest_offsets, item.lengths)

    for _ in reader._records(items, _Buffers(keep=2 * reader.thread_count), resolve):
        pass
    return dest


def reader_for(path: str | os.PathLike[str], **options: Any) -> FileSystemReader:
    """The reader of ``path``: ``FsspecReader`` for a URL, ``FileSystemReader`` for a local path (``inert._source``)."""
    reader: FileSystemReader = open_source(path, options.get("storage_options")).checkpoint_reader(**options)
    return reader


def _entry_for(fqn: str, tensor: Any, md: Any) -> TensorStorageMetadata:
    """``fqn``'s tensor entry, which must match the destination's dtype and shape."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"into[{fqn!r}] is a {type(tensor).__name__}, not a torch.Tensor")
    if not isinstance(md, TensorStorageMetadata):
        what = "no entry" if md is None else "a value, not a tensor"
        raise ShapeMismatchError("checkpoint-metadata", -1, fqn, f"the checkpoint has {what} under this name")
    if tensor.dtype != md.properties.dtype or tensor.shape != md.size:
        reason = (f"destination is {tuple(tensor.shape)} {tensor.dtype}, "
                  f"the checkpoint holds {tuple(md.size)} {md.properties.dtype}")
        raise ShapeMismatchError("checkpoint-metadata", -1, fqn, reason)
    return md


def _read_items(fqn: str, md: TensorStorageMetadata, storage: dict[Any, InertStorageInfo],
                file_version: Callable[[str], int]) -> list[ReadItem]:
    """One read item per chunk, each reading its whole record into its place in the tensor."""
    check_tiling(fqn, md.size, md.chunks)
    itemsize = md.properties.dtype.itemsize
    whole = torch.Size([0] * len(md.size))  # each record is read whole
    items = []
    for index, chunk in enumerate(md.chunks):
        key = MetadataIndex(fqn, chunk.offsets, index)
        info = storage[key]
        nbytes = math.prod(chunk.sizes) * itemsize
        # A version 2 file's record may be a ZSTD body, which inflates by at most zstd's own ratio.
        # (Placement is checked later: then a new tensor's bytes are all in the files.)
        if info.length < nbytes and not (info.length >= -(-nbytes // ZSTD_MAX_RATIO) and file_version(info.relative_path) >= 2):
            reason = f"a record of {info.length} bytes for a chunk of {nbytes}"
            raise TruncatedError("checkpoint-metadata", -1, f"{fqn}.chunks[{index}]", reason)
        items.append(ReadItem(type=LoadItemType.TENSOR, dest_index=key, dest_offsets=chunk.offsets, storage_index=key,
                              storage_offsets=whole, lengths=chunk.sizes))
    return items


def _new_tensor(fqn: str, md: TensorStorageMetadata) -> torch.Tensor:
    try:
        return torch.empty(md.size, dtype=md.properties.dtype)
    except (RuntimeError, MemoryError, TypeError, OverflowError):  # the files hold these bytes; memory may not
        nbytes = math.prod(md.size) * md.properties.dtype.itemsize
        raise LimitError("checkpoint-metadata", -1, fqn, f"a tensor of {nbytes} bytes cannot be allocated") from None
