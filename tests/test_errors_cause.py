"""``inert.torch.load`` raises the cause (the reader's InertError, or a ShapeMismatchError naming the key and
both shapes), with DCP's CheckpointException as its ``__cause__``; DCP's fallback after a failed metadata read
prints no traceback (none at all inside ``inert.torch.load``, one line through ``dcp.load`` itself)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ranks
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import inert.torch
from inert._errors import ForeignFormatError, TruncatedError
from inert.torch import FileSystemReader, ShapeMismatchError
from inert.torch._compat import TORCH_VERSION, dcp_load

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "ckpt"
    inert.torch.save({"model": {"w": torch.arange(16.0).reshape(4, 4)}, "step": 3}, path)
    return path


def test_a_shape_that_differs_is_a_shape_mismatch_naming_the_key_and_both_shapes(saved: Path) -> None:
    into = torch.zeros(3, 3)
    state = {"model": {"w": into}, "step": 0}
    with pytest.raises(ShapeMismatchError) as info:
        inert.torch.load(state, saved)
    assert str(info.value) == ("checkpoint-metadata: offset -1: model.w: destination is (3, 3) torch.float32, "
                               "the checkpoint holds (4, 4) torch.float32")
    assert info.value.field == "model.w"
    assert isinstance(info.value.__cause__, CheckpointException)
    assert not into.any()


def test_a_key_the_checkpoint_lacks_is_named(saved: Path) -> None:
    with pytest.raises(ShapeMismatchError, match=r"model\.b: the checkpoint has no entry under this name"):
        inert.torch.load({"model": {"w": torch.zeros(4, 4), "b": torch.zeros(4)}}, saved)


def test_a_planner_of_the_callers_own_keeps_dcps_exception(saved: Path) -> None:
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class Own(DefaultLoadPlanner):  # a planner that plans itself: Inert cannot know what its refusal means
        def create_local_plan(self) -> Any:
            raise ValueError("the caller's own refusal")

    with pytest.raises(CheckpointException, match="the caller's own refusal"):
        inert.torch.load({"model": {"w": torch.zeros(3, 3)}}, saved, planner=Own())
    with pytest.raises(ShapeMismatchError):  # a subclass that leaves planning to DCP's: diagnosed as the default
        inert.torch.load({"model": {"w": torch.zeros(3, 3)}}, saved, planner=type("Plain", (DefaultLoadPlanner,), {})())


def _truncate_metadata(path: Path) -> None:
    meta = path / ".metadata"
    meta.write_bytes(meta.read_bytes()[:20])


def test_a_damaged_metadata_logs_nothing_inside_inert_torch_load(saved: Path, caplog: pytest.LogCaptureFixture) -> None:
    _truncate_metadata(saved)
    with caplog.at_level(logging.DEBUG), pytest.raises(TruncatedError) as info:
        inert.torch.load({"model": {"w": torch.zeros(4, 4)}}, saved)
    assert info.value.field == "storage_meta"
    dcp_records = [r for r in caplog.records if "checkpoint" in r.pathname and r.levelno >= logging.WARNING]
    assert dcp_records == [], [r.getMessage() for r in dcp_records]


def test_a_direct_dcp_load_logs_one_line_with_the_cause(saved: Path, caplog: pytest.LogCaptureFixture) -> None:
    _truncate_metadata(saved)
    with caplog.at_level(logging.WARNING), pytest.raises(BaseException) as info:  # DCP's own exception, as DCP raises it
        dcp_load({"model": {"w": torch.zeros(4, 4)}}, FileSystemReader(saved))
    assert not isinstance(info.value, TruncatedError)
    fallback = [r for r in caplog.records if "metadata is not found" in r.getMessage()]
    if TORCH_VERSION >= (2, 9):  # the release that falls back to rank-local metadata and logs it
        assert fallback
    for record in fallback:
        assert record.exc_info is None and "offset 20: storage_meta: 1 byte needed" in record.getMessage()


LEGACY_LOAD = """
import sys, warnings, torch, inert.torch
warnings.simplefilter("ignore")
try:
    inert.torch.load({"w": torch.zeros(4)}, sys.argv[1])
except Exception as exc:
    print(type(exc).__name__)
"""


def test_a_legacy_checkpoint_through_inert_torch_load_prints_no_traceback(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"
    dcp.save({"w": torch.ones(4)}, storage_writer=dcp.FileSystemWriter(legacy), no_dist=True)
    run = subprocess.run([sys.executable, "-c", LEGACY_LOAD, str(legacy)], capture_output=True, text=True, timeout=300)
    assert run.stdout.strip() == "ForeignFormatError", run.stdout + run.stderr
    assert "Traceback" not in run.stderr and "metadata is not found" not in run.stderr, run.stderr
    with pytest.raises(ForeignFormatError, match="inert migrate"):
        inert.torch.load({"w": torch.zeros(4)}, legacy)


def _rank(path: str) -> None:
    """A rank of two: loads a (3, 3) destination from a (4, 4) tensor; prints what it raised."""
    import warnings

    warnings.simplefilter("ignore")
    ranks.init_group()
    try:
        inert.torch.load({"w": torch.zeros(3, 3)}, path)
    except BaseException as exc:  # noqa: BLE001 - the test wants the exact class every rank sees
        print(f"{type(exc).__name__}: {exc}")
    torch.distributed.barrier()
    ranks.leave()


def test_every_rank_of_a_process_group_raises_the_shape_mismatch(tmp_path: Path) -> None:
    inert.torch.save({"w": torch.ones(4, 4)}, tmp_path / "ckpt")
    results = ranks.run_ranks(__file__, [str(tmp_path / "ckpt")], 2)
    ranks.ok(results)
    for result in results:
        assert result.stdout.strip() == ("ShapeMismatchError: checkpoint-metadata: offset -1: w: destination is (3, 3) "
                                         "torch.float32, the checkpoint holds (4, 4) torch.float32"), result.stdout
        assert "Traceback" not in result.stderr, result.stderr


if __name__ == "__main__":
    _rank(sys.argv[1])
