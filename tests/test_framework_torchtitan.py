"""torchtitan's own DCP checkpointer (torchtitan 0.3.0's CheckpointManager) with Inert's switch.

Each case launches ``torchrun`` on tests/frameworks/titan_ckpt.py: 2 gloo ranks on CPU train a sharded
model a few steps, save model, optimizer, LR scheduler, data loader and train state through the
manager (sync or async) and load them into a fresh model; a 1-rank run then loads the same directory
(resharded).  The switch is on through ``inert.torch.enable()`` in the script or through
``INERT_TORCH_ENABLE=1`` in a script that never imports inert; the control runs without either.

Unpickling seen during a load is allowed only from two places that are not the checkpoint's
storage: ``torch.distributed``'s object collectives (the ranks exchange their load plans as pickles
over the process group) and torchtitan's ``ParallelAwareDataloader``, which stores
``pickle.dumps(StatefulDataLoader.state_dict())`` as a bytes value and ``pickle.loads`` it itself
(Inert stores and returns those bytes as bytes: a torchtitan choice no storage class can change).

Skipped only when torchtitan is not installed and ``INERT_REQUIRE_FRAMEWORKS`` is unset.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

if importlib.util.find_spec("torchtitan") is None and not os.environ.get("INERT_REQUIRE_FRAMEWORKS"):
    pytest.skip("torchtitan is not installed (INERT_REQUIRE_FRAMEWORKS=1 makes this a failure)", allow_module_level=True)

from frameworks.runs import (  # noqa: E402
    assert_inert_metadata,
    assert_only_unpicklers,
    assert_pickled_metadata,
    launch,
    run,
    verify,
)

# Who may unpickle during a load: rank-to-rank collectives and torchtitan's data loader (see above).
ALLOWED_UNPICKLERS = ("torch/distributed/distributed_c10d.py", "torchtitan/components/dataloader.py")
STATE_KEYS = ("model", "optimizer", "lr_scheduler", "last_lr", "dataloader", "train_state")


def step_dir(base: Path) -> Path:
    return base / "ckpt" / "step-3"


def assert_pickle_free_load(results: list[dict[str, object]]) -> None:
    for result in results:
        for key in STATE_KEYS:
            assert result[key] is True, (key, result)
        assert_only_unpicklers(result, ALLOWED_UNPICKLERS)
        # The environment route works in a script that never imports inert: the hook did.
        assert result["inert_imported"] is True


@pytest.mark.parametrize(
    ("route", "async_mode", "reshard"),
    [("api", "disabled", True), ("env", "async", True), ("api", "async", False)],
)
def test_torchtitan_checkpoint_is_pickle_free(tmp_path: Path, route: str, async_mode: str, reshard: bool) -> None:
    results = run("titan_ckpt.py", route, [async_mode, "both"], tmp_path, 2)
    assert_inert_metadata(step_dir(tmp_path))
    proc = verify(step_dir(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_pickle_free_load(results)
    if reshard:
        (resharded,) = run("titan_ckpt.py", route, [async_mode, "load"], tmp_path, 1)
        assert resharded["world"] == 1
        assert_pickle_free_load([resharded])


def test_torchtitan_without_the_switch_pickles(tmp_path: Path) -> None:
    """The control: the same run without the switch writes a pickled .metadata and unpickles it (so the
    assertions above detect what the switch removes); with the switch that directory is refused."""
    results = run("titan_ckpt.py", "off", ["disabled", "both"], tmp_path, 2)
    assert_pickled_metadata(step_dir(tmp_path))
    for result in results:
        assert result["inert_imported"] is False
        assert any("checkpoint/filesystem.py" in str(c) for c in result["unpickle_calls"])  # type: ignore[attr-defined]
        assert any("metadata.Metadata from" in str(e) for e in result["find_class"])  # type: ignore[attr-defined]
    assert verify(step_dir(tmp_path)).returncode != 0
    # That pickled checkpoint, loaded by torchtitan with the switch on, is refused before anything is unpickled.
    proc = launch("titan_ckpt.py", "env", ["disabled", "load"], tmp_path, 2)
    assert proc.returncode != 0
    # the reader's ForeignFormatError, in the one line DCP's own error carries (its logged traceback dropped)
    assert "checkpoint-metadata: offset 0: magic:" in proc.stderr and "legacy pickle checkpoint" in proc.stderr, (
        proc.stderr[-4000:])
    assert f"inert migrate {step_dir(tmp_path)}" in proc.stderr
    assert not list(tmp_path.glob("result-load-*.json"))
