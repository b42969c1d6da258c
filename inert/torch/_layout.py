"""DCP's key layouts across releases: reading a 2.4+ checkpoint on PyTorch 2.2 and 2.3.

DCP flattens a nested state dict into keys.  2.2 and 2.3 stop at any container that holds
no tensor, saving it as one value (``optim.param_groups``: the whole list of dicts); 2.4
and later save one key per leaf (``optim.param_groups.0.lr``) and record each key's path
in the metadata's ``planner_data``.  2.4+'s ``DefaultLoadPlanner`` reads the older layout
by itself; 2.2's and 2.3's stop at the folded key (``KeyError: 'optim.param_groups'``).
``CrossReleaseLoadPlanner`` is their planner with the other direction added: a key of the
state dict that the checkpoint lacks, whose leaves it holds as values under that key's
prefix with their paths in ``planner_data``, is read leaf by leaf, each put at its path.
"""

from __future__ import annotations

from typing import Any

from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata

__all__ = ["CrossReleaseLoadPlanner", "unfold_keys"]


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


class CrossReleaseLoadPlanner(DefaultLoadPlanner):
    """``DefaultLoadPlanner`` that also reads the 2.4+ key layout on PyTorch 2.2 and 2.3.

    ``inert.torch.load`` uses it there when no planner is given; with ``dcp.load_state_dict``
    pass ``planner=CrossReleaseLoadPlanner()``.  On 2.4+ it is ``DefaultLoadPlanner``.
    """

    def set_up_planner(self, state_dict: Any, metadata: Any = None, is_coordinator: bool = False, *args: Any,
                       **kwargs: Any) -> None:
        super().set_up_planner(state_dict, metadata, is_coordinator, *args, **kwargs)
        if not self.flatten_state_dict or metadata is None:
            return
        for key, leaves in unfold_keys(list(self.state_dict), metadata).items():
            del self.state_dict[key]
            del self.mappings[key]
            for fqn, path in leaves.items():
                self.state_dict[fqn] = None  # a value's read item needs no destination; load_bytes puts it at path
                self.mappings[fqn] = path
