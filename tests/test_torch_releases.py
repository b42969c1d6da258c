"""Checkpoints saved by each PyTorch release in the range, loaded by the running one.

``tests/fixtures/checkpoints/torch-<version>/`` holds a small checkpoint that that release
saved through ``inert.torch.save`` (``tools/compat --fixtures`` remakes them) and the saved
values as JSON.  ``tools/compat`` runs this module under every release, which fills the
saved-by x loaded-by table of docs/compatibility.md.  Keys differ between releases: 2.2 and
2.3 save a value holding no tensor (``optim.param_groups``, ``extra``) under one key, 2.4+
one key per leaf; ``inert.torch.load`` reads both through ``CrossReleaseLoadPlanner``.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

import inert.torch
from inert.codecs import checkpoint_metadata as metadata_codec
from inert.torch import CrossReleaseLoadPlanner, FileSystemReader, load_tensors
from inert.torch._compat import TORCH_VERSION, dcp_load, torch_dtype
from tests.fixtures.release_checkpoint import EXPECTED, release_dirs, template, to_json

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled", "ignore:.*load_state_dict.*deprecated")
RELEASES = release_dirs()


def holds(loaded: Any, saved: Any, where: str = "") -> list[str]:
    """Where ``loaded`` differs from ``saved`` (JSON forms): every saved value the loading state has a place for.

    A loaded dict may have keys the saving release did not have (a newer optimizer's param_groups),
    and may lack keys the loading release does not have (the state dict says what is read).
    """
    if isinstance(saved, dict) and "tensor" not in saved:
        if not isinstance(loaded, dict):
            return [f"{where}: {type(loaded).__name__}, saved a dict"]
        return [d for key, item in saved.items() if key in loaded for d in holds(loaded[key], item, f"{where}.{key}")]
    if isinstance(saved, list) and isinstance(loaded, list) and len(saved) == len(loaded):
        return [d for i, (a, b) in enumerate(zip(loaded, saved, strict=True)) for d in holds(a, b, f"{where}.{i}")]
    return [] if loaded == saved else [f"{where}: {str(loaded)[:80]}, saved {str(saved)[:80]}"]


def loaded_state(path: Path, expected: dict[str, Any], planner: Any = None) -> dict[str, Any]:
    """The template after a load through ``planner``, checked against the saved values."""
    state = template()
    dcp_load(state, FileSystemReader(path), planner=planner)
    assert holds(to_json(state), expected) == []
    return state


@pytest.fixture(params=RELEASES, ids=[p.name for p in RELEASES])
def saved(request: pytest.FixtureRequest) -> tuple[Path, dict[str, Any]]:
    path: Path = request.param
    return path, json.loads((path / EXPECTED).read_text())["state"]


def compat_releases() -> list[str]:
    """The releases tools/compat runs (its ``RELEASES``): the rows and columns of the cross-release table."""
    script = ast.parse((Path(__file__).resolve().parent.parent / "tools" / "compat").read_text())
    found = next(node.value for node in script.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "RELEASES" for t in node.targets))
    return list(ast.literal_eval(found))


def test_every_release_of_the_table_has_a_fixture() -> None:
    # Each loads with the running torch in the tests below: together they are this release's column.
    assert [p.name.removeprefix("torch-") for p in RELEASES] == compat_releases()
    for path in RELEASES:  # saved by that release itself
        assert json.loads((path / EXPECTED).read_text())["torch"].split("+")[0] == path.name.removeprefix("torch-")


def test_releases_that_record_strides_saved_metadata_v2() -> None:
    # 2.15's TensorProperties records strides, so its row is what every column makes of checkpoint-metadata v2.
    for path in RELEASES:
        saved_by = tuple(int(p) for p in path.name.removeprefix("torch-").split(".")[:2])
        tensors = metadata_codec.decode((path / ".metadata").read_bytes())["tensors"]
        assert tensors and all(("strides_recorded" in t) == (saved_by >= (2, 15)) for t in tensors), path.name


def test_load_reads_every_saved_value(saved: tuple[Path, dict[str, Any]]) -> None:
    path, expected = saved
    state = template()
    inert.torch.load(state, path)
    assert holds(to_json(state), expected) == []
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    model.register_buffer("seen", torch.zeros(2, dtype=torch.int64))
    model.load_state_dict(state["model"])
    optim = torch.optim.Adam(model.parameters())
    optim.load_state_dict(state["optim"])  # the running release's optimizer takes what the load produced
    assert optim.param_groups[0]["betas"] == (0.8, 0.99) and optim.param_groups[0]["lr"] == 1e-2
    assert state["extra"] == {"epoch": 3, "note": expected["extra"]["note"], "sizes": [4, 3, 2]}


def test_load_tensors_reads_every_saved_tensor(saved: tuple[Path, dict[str, Any]]) -> None:
    path, expected = saved
    tensors = load_tensors(path)
    want = {f"model.{k}": v for k, v in expected["model"].items()}
    want.update({f"optim.state.{p}.{k}": v for p, slots in expected["optim"]["state"].items() for k, v in slots.items()})
    assert {fqn: to_json(t) for fqn, t in tensors.items()} == want


def test_dcp_planner_and_cross_release_planner(saved: tuple[Path, dict[str, Any]]) -> None:
    """The table's notes: where DCP's own planner stops at the other layout, CrossReleaseLoadPlanner reads it."""
    path, expected = saved
    older_layout = "optim.param_groups" in FileSystemReader(path).read_metadata().state_dict_metadata  # 2.2/2.3
    new_fields = set(to_json(template())["optim"]["param_groups"][0]) - set(expected["optim"]["param_groups"][0])
    if older_layout == (TORCH_VERSION < (2, 4)):  # the same layout: Adam's fields may differ
        stop = "" if older_layout or not new_fields else "Missing key in checkpoint state_dict: optim.param_groups.0."
    elif older_layout:  # saved by 2.2/2.3: 2.4 stops at the leaves, 2.8+ reads the whole value itself
        stop = "Missing key in checkpoint state_dict: optim" if TORCH_VERSION < (2, 5) else ""
    else:  # saved by 2.4+, loaded by 2.2/2.3
        stop = "KeyError('optim.param_groups')"
    if stop:
        with pytest.raises(CheckpointException) as info:
            dcp_load(template(), FileSystemReader(path), planner=DefaultLoadPlanner())
        assert stop in repr(info.value.failures)
    elif TORCH_VERSION < (2, 5) or TORCH_VERSION >= (2, 8):  # 2.5 to 2.7 are not in the compatibility run
        loaded_state(path, expected, DefaultLoadPlanner())
    loaded_state(path, expected, CrossReleaseLoadPlanner())


def test_a_dtype_this_release_lacks_is_named_with_the_release_that_has_it() -> None:
    if hasattr(torch, "uint16"):  # 2.3 and later
        assert torch_dtype("UINT16", "w") is torch.uint16
    else:
        with pytest.raises(RuntimeError, match=r"w: the checkpoint holds uint16, which PyTorch 2\.2.* \(it has: PyTorch 2\.3\)"):
            torch_dtype("UINT16", "w")
