"""The load plan of a state dict whose tensors were saved whole, made without DCP's general search.

DCP's ``DefaultLoadPlanner`` plans every tensor as a resharding problem: it makes the tensor's
chunk list (a ``runtime_checkable`` protocol check per tensor on 2.13+), then compares that chunk
with every saved chunk and computes the overlap dimension by dimension.  For the common case, a
plain ``torch.Tensor`` loaded from a checkpoint that holds it as one chunk of the same size, the
answer is always the same single read item: the whole chunk, at offset 0 on both sides.
:func:`whole_tensor_plan` builds exactly that item with DCP's own constructor, and gives up
(``None``) on anything else, so that the caller falls back to DCP's planner and every other case
(resharding, DTensors, missing or extra keys, a shape mismatch and its error) stays DCP's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, MetadataIndex, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadPlan, ReadItem
from torch.distributed.checkpoint.planner_helpers import _create_read_item_for_byteio, _create_read_item_for_tensor

__all__ = ["whole_tensor_plan"]


def _whole_tensor_items(fqn: str, tensor: torch.Tensor, md: TensorStorageMetadata) -> list[ReadItem] | None:
    """The read items of ``tensor`` when the checkpoint holds it whole (one chunk at offset 0, same size)."""
    if len(md.chunks) != 1:
        return None
    (chunk,) = md.chunks
    size = tensor.size()
    if md.size != size or chunk.sizes != size or any(chunk.offsets):
        return None
    if 0 in size:
        return []  # DCP's overlap test finds nothing to read in a chunk with an empty dimension
    zeros = torch.Size([0] * len(size))
    return [_create_read_item_for_tensor(dest_index=MetadataIndex(fqn, zeros, 0), dest_offsets=zeros,
                                         storage_index=MetadataIndex(fqn, chunk.offsets, 0), storage_offsets=zeros,
                                         lengths=size)]


def whole_tensor_plan(state_dict: dict[str, Any], metadata: Metadata | None) -> LoadPlan | None:
    """The plan DCP's default planner makes for ``state_dict`` (a flat one), or None where it is not that simple case.

    Simple: the state dict and the checkpoint have the same keys, every tensor is a plain
    ``torch.Tensor`` saved whole, every other value was saved as a value.  The items come in the
    state dict's order, as DCP's do.
    """
    if metadata is None:
        return None
    saved = metadata.state_dict_metadata
    if len(saved) != len(state_dict) or saved.keys() != state_dict.keys():
        return None  # missing or extra keys: DCP's planner decides (partial loads, older layouts, its errors)
    items: list[ReadItem] = []
    for fqn, obj in state_dict.items():
        md = saved[fqn]
        if isinstance(md, BytesStorageMetadata):
            if isinstance(obj, torch.Tensor):
                return None  # a tensor where a value was saved: DCP decides
            items.append(_create_read_item_for_byteio(dest_index=MetadataIndex(fqn), dest_offset=0,
                                                      storage_index=MetadataIndex(fqn), storage_offset=0, length=0))
            continue
        if type(obj) is not torch.Tensor or not isinstance(md, TensorStorageMetadata):
            return None  # a DTensor, a sharded or other tensor subclass, a value where a tensor was saved
        whole = _whole_tensor_items(fqn, obj, md)
        if whole is None:
            return None
        items += whole
    return LoadPlan(items)
