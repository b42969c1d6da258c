"""Lightning Fabric's sharded checkpoint (lightning-fabric 2.6.6, ModelParallelStrategy) with Inert's switch.

tests/frameworks/fabric_ckpt.py runs under ``torchrun`` on CPU with gloo: 2 ranks save a DTensor-sharded
model and its AdamW state with ``fabric.save`` and load them into a fresh model with ``fabric.load``;
then 1 rank loads the same directory (resharded), switched on by ``INERT_TORCH_ENABLE=1`` alone.

Fabric's DCP part (``_distributed_checkpoint_save``/``_load``: ``dcp.save``/``dcp.load`` with
``checkpoint_id``) becomes Inert's.  The state that is neither module nor optimizer Fabric writes to
``meta.pt`` with ``torch.save`` on rank 0, always (an empty dict when there is none), and reads back with
``torch.load`` (``weights_only`` defaults to True on torch >= 2.6): a pickle file the switch cannot
reach, which ``inert verify`` names as a stray file.  The tests assert exactly that.

Skipped only when lightning_fabric is not installed and ``INERT_REQUIRE_FRAMEWORKS`` is unset.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

if importlib.util.find_spec("lightning_fabric") is None and not os.environ.get("INERT_REQUIRE_FRAMEWORKS"):
    pytest.skip("lightning_fabric is not installed (INERT_REQUIRE_FRAMEWORKS=1 makes this a failure)", allow_module_level=True)

from frameworks.runs import assert_inert_metadata, assert_only_unpicklers, assert_pickled_metadata, run, verify  # noqa: E402

# Rank-to-rank collectives, and Fabric's torch.load of its own meta.pt.
ALLOWED_UNPICKLERS = ("torch/distributed/distributed_c10d.py", "lightning_fabric/strategies/model_parallel.py")


def assert_loaded(results: list[dict[str, object]]) -> None:
    for result in results:
        assert result["model"] is True and result["optimizer"] is True and result["step"] is True, result
        assert_only_unpicklers(result, ALLOWED_UNPICKLERS)
        assert result["inert_imported"] is True
        # Fabric's meta.pt is the one torch.load of the load.
        assert any(str(c).startswith("torch.load from ") for c in result["unpickle_calls"])  # type: ignore[attr-defined]


def test_fabric_sharded_checkpoint_is_pickle_free_but_meta_pt(tmp_path: Path) -> None:
    results = run("fabric_ckpt.py", "api", ["both"], tmp_path, 2)
    directory = tmp_path / "fabric-ckpt"
    assert_inert_metadata(directory)
    assert_loaded(results)
    proc = verify(directory)
    assert proc.returncode != 0 and "meta.pt: stray file" in proc.stdout + proc.stderr
    # Without Fabric's meta.pt the directory is a whole Inert checkpoint.
    dcp_only = tmp_path / "dcp-only"
    shutil.copytree(directory, dcp_only, ignore=shutil.ignore_patterns("meta.pt"))
    proc = verify(dcp_only)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (resharded,) = run("fabric_ckpt.py", "env", ["load"], tmp_path, 1)
    assert resharded["world"] == 1
    assert_loaded([resharded])


def test_fabric_without_the_switch_pickles(tmp_path: Path) -> None:
    results = run("fabric_ckpt.py", "off", ["both"], tmp_path, 2)
    assert_pickled_metadata(tmp_path / "fabric-ckpt")
    for result in results:
        assert result["inert_imported"] is False
        assert any("metadata.Metadata from" in str(e) for e in result["find_class"])  # type: ignore[attr-defined]
