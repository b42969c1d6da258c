"""DCP's key layouts across releases: a checkpoint saved by one release, loaded by another.

DCP flattens a nested state dict into keys.  2.2 and 2.3 stop at any container that holds
no tensor, saving it as one value (``optim.param_groups``: the whole list of dicts); 2.4
and later save one key per leaf (``optim.param_groups.0.lr``) and record each key's path
in the metadata's ``planner_data``.  DCP's own ``DefaultLoadPlanner`` stops at a key of the
other layout: on 2.2 and 2.3 at the folded key (``KeyError: 'optim.param_groups'``), on 2.4
at the leaves (``Missing key in checkpoint state_dict: optim.param_groups.0.lr``); from 2.8 on
(not 2.4) it reads the older layout itself.  ``CrossReleaseLoadPlanner`` is that planner with
both directions handled before the plan is made:

* a key of the state dict that the checkpoint lacks, whose leaves it holds as values under
  that key with their paths in ``planner_data`` (saved by 2.4+, loaded by 2.2/2.3), is read
  leaf by leaf, each put at its path;
* keys of the state dict under a value the checkpoint holds whole (saved by 2.2/2.3, loaded
  by 2.4+) are read as that one value, put at its path, replacing what the state dict held
  there;
* a non-tensor value of the state dict that the checkpoint lacks while it holds the value's
  siblings (a field the saving release's object did not have: Adam's
  ``decoupled_weight_decay``, new in 2.5+, in a checkpoint saved by 2.4) keeps the state
  dict's value.  A missing tensor, or a missing value without siblings, still fails as in DCP.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata

from ._planning import whole_tensor_plan

__all__ = ["CrossReleaseLoadPlanner", "unfold_keys", "fold_keys", "new_fields"]


def unfold_keys(keys: list[str], metadata: Metadata) -> dict[str, dict[str, tuple[Any, ...]]]:
    """For each of ``keys`` the checkpoint lacks, its leaves' keys and paths, where the checkpoint has them all.

    A key qualifies when every checkpoint key under its prefix is a value (not a tensor: the
    2.2/2.3 state dict had none there) and has a path in ``planner_data``.
    """
    entries = metadata.state_dict_metadata
    paths = metadata.planner_data if isinstance(metadata.planner_data, dict) else {}
    found: dict[str, dict[str, tuple[Any, ...]]] = {}
    for key in keys:
        if key in entries:
            continue
        leaves = {fqn: md for fqn, md in entries.items() if fqn.startswith(key + ".")}
        if leaves and all(isinstance(md, BytesStorageMetadata) and fqn in paths for fqn, md in leaves.items()):
            found[key] = {fqn: tuple(paths[fqn]) for fqn in leaves}
    return found


def fold_keys(mappings: dict[str, tuple[Any, ...]], metadata: Metadata) -> dict[str, tuple[Any, ...]]:
    """Keys of the state dict the checkpoint lacks that lie under a value it holds whole: key -> that value's path.

    ``mappings`` are the planner's (key -> path in the nested state dict).  The value's key is
    a prefix of the path joined as DCP joins it, so a key with dots of its own is not cut inside.
    """
    entries = metadata.state_dict_metadata
    found: dict[str, tuple[Any, ...]] = {}
    for key, path in mappings.items():
        if key in entries:
            continue
        for end in range(1, len(path)):
            head = ".".join(str(part) for part in path[:end])
            if isinstance(entries.get(head), BytesStorageMetadata):
                found[key] = tuple(path[:end])
                break
    return found


def new_fields(state_dict: dict[str, Any], mappings: dict[str, tuple[Any, ...]], metadata: Metadata) -> list[str]:
    """Non-tensor keys of the (flat) state dict the checkpoint lacks, whose parent holds other keys in it."""
    parents = {fqn.rpartition(".")[0] for fqn in metadata.state_dict_metadata}
    return [key for key, path in mappings.items()
            if key not in metadata.state_dict_metadata and key in state_dict and not isinstance(state_dict[key], torch.Tensor)
            and len(path) > 1 and ".".join(str(part) for part in path[:-1]) in parents]


class CrossReleaseLoadPlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` that also reads the other release family's key layout (see the module).

    ``inert.torch.load`` uses it when no planner is given; with ``dcp.load`` or
    ``dcp.load_state_dict`` pass ``planner=CrossReleaseLoadPlanner()``.  Where the keys
    match it plans exactly as ``DefaultLoadPlanner``; where every tensor was saved whole it makes that
    same plan without DCP's resharding search (:mod:`inert.torch._planning`).
    """

    def create_local_plan(self) -> Any:
        plan = whole_tensor_plan(self.state_dict, self.metadata)
        return plan if plan is not None else super().create_local_plan()

    def set_up_planner(self, state_dict: Any, metadata: Any = None, is_coordinator: bool = False, *args: Any,
                       **kwargs: Any) -> None:
        super().set_up_planner(state_dict, metadata, is_coordinator, *args, **kwargs)
        if not self.flatten_state_dict or metadata is None:
            return
        # A value's read item needs no destination in the flat state dict: load_bytes puts it at its path.
        for key, leaves in unfold_keys(list(self.state_dict), metadata).items():
            del self.state_dict[key]
            del self.mappings[key]
            for fqn, path in leaves.items():
                self.state_dict[fqn] = None
                self.mappings[fqn] = path
        for key, path in fold_keys(dict(self.mappings), metadata).items():
            del self.state_dict[key]
            del self.mappings[key]
            head = ".".join(str(part) for part in path)
            self.state_dict[head] = None
            self.mappings[head] = path
        for key in new_fields(self.state_dict, self.mappings, metadata):
            del self.state_dict[key]  # not read: the state dict keeps its value
