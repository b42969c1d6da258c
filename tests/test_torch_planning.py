"""The whole-tensor load plan (inert/torch/_planning.py) is DCP's own plan, item for item, or it steps aside.

Each case is planned twice on the running release: by DCP's ``DefaultLoadPlanner`` and by
``CrossReleaseLoadPlanner`` (which ``inert.torch.load`` uses); the plans must be equal, and the fast
path must have made the plan where it claims the case and left it to DCP elsewhere.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, Metadata, TensorStorageMetadata

import inert.torch
from inert.torch import CrossReleaseLoadPlanner, FileSystemReader
from inert.torch._planning import whole_tensor_plan


def _state() -> dict[str, Any]:
    return {
        "model": {"w": torch.arange(12.0).reshape(3, 4), "b": torch.zeros(4, dtype=torch.bfloat16),
                  "scalar": torch.tensor(7), "empty": torch.zeros(0, 3)},
        "step": 3, "name": "run-1", "lrs": [0.1, 0.01],
    }


def _saved(tmp_path: Path) -> Metadata:
    inert.torch.save(_state(), tmp_path)
    metadata: Metadata = FileSystemReader(tmp_path).read_metadata()
    return metadata


def _plans(state: dict[str, Any], metadata: Metadata) -> tuple[Any, Any, Any]:
    """DCP's plan, Inert's plan, and what the fast path alone gave (None: it stepped aside)."""
    dcp_planner, inert_planner = DefaultLoadPlanner(), CrossReleaseLoadPlanner()
    dcp_planner.set_up_planner(copy.deepcopy(state), metadata, True)
    inert_planner.set_up_planner(copy.deepcopy(state), metadata, True)
    fast = whole_tensor_plan(inert_planner.state_dict, metadata)
    return dcp_planner.create_local_plan(), inert_planner.create_local_plan(), fast


def test_tensors_saved_whole_get_dcps_plan_without_its_search(tmp_path: Path) -> None:
    metadata = _saved(tmp_path)
    theirs, ours, fast = _plans(_state(), metadata)
    assert fast is not None, "the simple case went to DCP's planner"
    assert ours.items == theirs.items  # the same items, in the same order
    assert len(ours.items) == 6  # w, b, scalar, step, name, lrs: the empty tensor has nothing to read, in both plans


def test_the_plan_loads_the_values(tmp_path: Path) -> None:
    _saved(tmp_path)
    into = _state()
    into["model"] = {k: torch.full_like(v, 5) for k, v in into["model"].items()}
    into["step"] = 0
    inert.torch.load(into, tmp_path)
    for key, value in _state()["model"].items():
        assert torch.equal(into["model"][key], value), key
    assert into["step"] == 3


def _resharded(metadata: Metadata) -> Metadata:
    """``metadata`` with model.w recorded as two row chunks, as two ranks would save it."""
    entries = dict(metadata.state_dict_metadata)
    w = entries["model.w"]
    assert isinstance(w, TensorStorageMetadata)
    chunks = [ChunkStorageMetadata(offsets=torch.Size([0, 0]), sizes=torch.Size([2, 4])),
              ChunkStorageMetadata(offsets=torch.Size([2, 0]), sizes=torch.Size([1, 4]))]
    entries["model.w"] = TensorStorageMetadata(w.properties, w.size, chunks)
    return Metadata(state_dict_metadata=entries, planner_data=metadata.planner_data)


def _partial(state: dict[str, Any]) -> dict[str, Any]:
    del state["model"]["b"]
    return state


def _extra(state: dict[str, Any]) -> dict[str, Any]:
    state["model"]["other"] = torch.zeros(2)
    return state


@pytest.mark.parametrize("case", ["resharded", "partial", "extra key", "value for a tensor"])
def test_anything_else_is_dcps_planner(tmp_path: Path, case: str) -> None:
    metadata, state = _saved(tmp_path), _state()
    if case == "resharded":
        metadata = _resharded(metadata)
    elif case == "partial":
        state = _partial(state)
    elif case == "extra key":
        state = _extra(state)
    else:
        state["model"]["w"] = "not a tensor"
    if case in ("extra key", "value for a tensor"):
        with pytest.raises(Exception) as theirs:
            _plans(state, metadata)
        dcp_planner = CrossReleaseLoadPlanner()
        dcp_planner.set_up_planner(copy.deepcopy(state), metadata, True)
        assert whole_tensor_plan(dcp_planner.state_dict, metadata) is None
        with pytest.raises(type(theirs.value)) as ours:
            dcp_planner.create_local_plan()
        assert str(ours.value) == str(theirs.value)  # DCP's own error, unchanged
        return
    theirs_plan, ours_plan, fast = _plans(state, metadata)
    assert fast is None
    assert ours_plan.items == theirs_plan.items


def test_a_shape_mismatch_is_dcps_outcome(tmp_path: Path) -> None:
    """DCP's error where the release checks sizes (2.13: "Size mismatch"); its plan where it does not (2.2)."""
    metadata, state = _saved(tmp_path), _state()
    state["model"]["w"] = torch.zeros(4, 3)
    planner, dcp_planner = CrossReleaseLoadPlanner(), DefaultLoadPlanner()
    planner.set_up_planner(copy.deepcopy(state), metadata, True)
    dcp_planner.set_up_planner(copy.deepcopy(state), metadata, True)
    assert whole_tensor_plan(planner.state_dict, metadata) is None
    try:
        theirs = dcp_planner.create_local_plan()
    except ValueError as error:
        assert "Size mismatch" in str(error)
        with pytest.raises(ValueError) as ours:
            planner.create_local_plan()
        assert str(ours.value) == str(error)
        return
    assert planner.create_local_plan().items == theirs.items
