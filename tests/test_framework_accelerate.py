"""Accelerate's FSDP sharded checkpoint (accelerate 1.16.0) with Inert's switch.

tests/frameworks/accelerate_ckpt.py runs under ``torchrun`` on CPU with gloo: 2 ranks save an FSDP2-sharded
model and its AdamW state with Accelerate's own ``save_fsdp_model``/``save_fsdp_optimizer`` and load them
into a fresh model with ``load_fsdp_model``/``load_fsdp_optimizer``; then 1 rank loads the same directories
(resharded).  Those functions construct ``torch.distributed.checkpoint.FileSystemWriter(dir)`` and
``FileSystemReader(dir)`` by name: with the switch on (``inert.torch.enable()`` in the script, or
``INERT_TORCH_ENABLE=1`` in a script that never imports inert) they are Inert's.

``Accelerator.save_state`` itself cannot reach them without an accelerator: on CPU Accelerate 1.16.0 settles
on ``DistributedType.MULTI_CPU`` whatever ``fsdp_plugin`` it is given and saves through DDP, safetensors and
``torch.save``; the worker records the type and the tests assert it, so a release that lifts this shows here.

Skipped only when accelerate is not installed and ``INERT_REQUIRE_FRAMEWORKS`` is unset.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

if importlib.util.find_spec("accelerate") is None and not os.environ.get("INERT_REQUIRE_FRAMEWORKS"):
    pytest.skip("accelerate is not installed (INERT_REQUIRE_FRAMEWORKS=1 makes this a failure)", allow_module_level=True)

from frameworks.runs import (  # noqa: E402
    assert_inert_metadata,
    assert_only_unpicklers,
    assert_pickled_metadata,
    launch,
    run,
    verify,
)

# The DCP directories Accelerate's functions write under their output directory (model index 0, optimizer index 0).
PARTS = ("pytorch_model_fsdp_0", "optimizer_0")


def assert_loaded(results: list[dict[str, object]], world: int) -> None:
    for result in results:
        assert result["world"] == world and result["model"] is True and result["optimizer"] is True, result
        # Only the ranks' object collectives (their load plans) unpickle; nothing is read from the directory by pickle.
        assert_only_unpicklers(result, ("torch/distributed/distributed_c10d.py",))
        assert result["inert_imported"] is True
        assert result["distributed_type"] == "DistributedType.MULTI_CPU", "Accelerate took another path on CPU: see the docstring"


def assert_pickle_free(base: Path) -> None:
    assert sorted(p.name for p in base.iterdir() if p.is_dir()) == sorted(PARTS)
    for part in PARTS:
        assert_inert_metadata(base / part)
        proc = verify(base / part)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("route", ["api", "env"])
def test_accelerate_fsdp_checkpoint_is_pickle_free(tmp_path: Path, route: str) -> None:
    assert_loaded(run("accelerate_ckpt.py", route, ["both"], tmp_path, 2), 2)
    assert_pickle_free(tmp_path)
    if route == "api":
        # 2 ranks to 1, through the unmodified-program route.
        assert_loaded(run("accelerate_ckpt.py", "env", ["load"], tmp_path, 1), 1)


def test_accelerate_without_the_switch_pickles(tmp_path: Path) -> None:
    """The control: torch's own FileSystemWriter pickles and its reader unpickles (what the assertions above
    detect); with the switch on, that directory is refused by name with the migration hint."""
    for result in run("accelerate_ckpt.py", "off", ["both"], tmp_path, 2):
        assert result["model"] is True and result["inert_imported"] is False
        assert any("metadata.Metadata from" in str(e) for e in result["find_class"])  # type: ignore[attr-defined]
    for part in PARTS:
        assert_pickled_metadata(tmp_path / part)
    proc = launch("accelerate_ckpt.py", "env", ["load"], tmp_path, 2)
    assert proc.returncode != 0
    # With an explicit storage_reader, torch 2.13's dcp.load re-raises the reader's ForeignFormatError as an
    # AssertionError carrying its message ("global metadata read failed: ..."): the message is what survives.
    assert "legacy pickle checkpoint" in proc.stderr and "Inert never unpickles" in proc.stderr, proc.stderr[-4000:]
    assert f"inert migrate {tmp_path / PARTS[0]}" in proc.stderr
    assert not list(tmp_path.glob("result-load-*.json"))
