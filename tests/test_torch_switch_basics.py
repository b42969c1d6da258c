"""``inert.torch.enable()``: DCP's default path (``checkpoint_id``, no storage object) writes and reads Inert's formats.

In one process with ``no_dist``; the frameworks' own checkpoint code under torchrun is in
tests/test_framework_*.py.
"""

from __future__ import annotations

import inspect
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

from inert.codecs.checkpoint_metadata import MAGIC  # noqa: E402
from inert.torch import TORCH_VERSION  # noqa: E402

if TORCH_VERSION < (2, 3):  # 2.2's dcp.save/load take a storage object only: there is no default path to switch
    pytest.skip("DCP's checkpoint_id resolution starts in PyTorch 2.3", allow_module_level=True)
from torch.distributed.checkpoint import FileSystemWriter as TorchWriterImportedEarly  # noqa: E402

import inert.torch as it  # noqa: E402
from inert._errors import InertError  # noqa: E402


@pytest.fixture(autouse=True)
def _switch_off_afterwards() -> Any:
    yield
    it.disable()


def _save(path: Path, state: dict[str, Any]) -> None:
    dcp.save(state, checkpoint_id=str(path), no_dist=True)


def _state() -> dict[str, Any]:
    return {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "step": 7, "cfg": {"lr": 0.5, "name": "run"}}


def _metadata_head(path: Path) -> bytes:
    return (path / ".metadata").read_bytes()[:len(MAGIC)]


def test_default_path_saves_pickle_free_and_loads_back_without_find_class(tmp_path: Path) -> None:
    it.enable()
    _save(tmp_path / "ckpt", _state())
    assert _metadata_head(tmp_path / "ckpt") == MAGIC
    found: list[Any] = []
    sys.addaudithook(lambda event, args: found.append(args) if event == "pickle.find_class" and watching else None)
    into = {"w": torch.zeros(3, 4), "step": 0, "cfg": {"lr": 0.0, "name": ""}}
    watching = True
    dcp.load(into, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    watching = False
    assert found == []
    assert torch.equal(into["w"], _state()["w"]) and into["step"] == 7 and into["cfg"] == {"lr": 0.5, "name": "run"}


def test_disable_gives_torch_its_own_pickled_metadata_back(tmp_path: Path) -> None:
    with it.enabled():
        assert it.is_enabled()
        _save(tmp_path / "on", _state())
    assert not it.is_enabled()
    _save(tmp_path / "off", _state())
    assert _metadata_head(tmp_path / "on") == MAGIC
    assert _metadata_head(tmp_path / "off")[:1] == b"\x80"  # a pickle protocol opcode: torch's own writer


def test_a_class_imported_before_enable_builds_inert_s(tmp_path: Path) -> None:
    it.enable()
    assert isinstance(TorchWriterImportedEarly(str(tmp_path / "c")), it.FileSystemWriter)
    assert isinstance(dcp.FileSystemReader(str(tmp_path)), it.FileSystemReader)


def test_subclasses_of_torch_s_classes_are_left_alone(tmp_path: Path) -> None:
    class FrameworkWriter(dcp.FileSystemWriter):
        pass

    it.enable()
    writer = FrameworkWriter(str(tmp_path / "sub"))
    assert type(writer) is FrameworkWriter and not isinstance(writer, it.FileSystemWriter)


def test_a_legacy_checkpoint_is_refused_while_enabled_naming_the_directory_and_migrate(tmp_path: Path) -> None:
    _save(tmp_path / "legacy", _state())  # torch's own pickled checkpoint
    found: list[Any] = []
    sys.addaudithook(lambda event, args: found.append(args) if event == "pickle.find_class" else None)
    it.enable()
    with pytest.raises(BaseException) as caught:  # DCP wraps rank failures in CheckpointException (a BaseException)
        dcp.load({"w": torch.zeros(3, 4)}, checkpoint_id=str(tmp_path / "legacy"), no_dist=True)
    text = str(caught.value)  # DCP's CheckpointException carries the reader's InertError text per rank
    assert str(tmp_path / "legacy") in text
    assert "legacy pickle checkpoint" in text and "inert migrate" in text
    assert found == []


def test_a_legacy_checkpoint_through_inert_torch_load_is_the_inert_error_itself(tmp_path: Path) -> None:
    _save(tmp_path / "legacy", _state())
    it.enable()
    with pytest.raises(InertError, match="legacy pickle checkpoint"):
        it.load({"w": torch.zeros(3, 4)}, tmp_path / "legacy")


def test_enable_and_disable_from_many_threads_end_consistent(tmp_path: Path) -> None:
    def flip(n: int) -> None:
        for i in range(200):
            (it.enable if (i + n) % 2 else it.disable)()

    threads = [threading.Thread(target=flip, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    it.enable()
    it.enable()  # idempotent
    _save(tmp_path / "after", _state())
    assert _metadata_head(tmp_path / "after") == MAGIC
    it.disable()
    it.disable()
    assert type(dcp.FileSystemWriter(str(tmp_path / "x"))) is dcp.FileSystemWriter


def test_torch_s_classes_keep_their_own_signature_through_enable_and_disable() -> None:
    before = {cls: inspect.signature(cls) for cls, _ in it._switch.redirected_classes()}
    it.enable()
    assert {cls: inspect.signature(cls) for cls in before} == before
    it.disable()
    assert {cls: inspect.signature(cls) for cls in before} == before


def test_a_pickled_metadata_over_inert_data_files_is_a_mixed_directory(tmp_path: Path) -> None:
    it.enable()
    _save(tmp_path / "mixed", _state())
    it.disable()
    _save(tmp_path / "legacy", _state())
    (tmp_path / "mixed" / ".metadata").write_bytes((tmp_path / "legacy" / ".metadata").read_bytes())
    with pytest.raises(InertError, match="a mixed directory"):
        it.load({"w": torch.zeros(3, 4)}, tmp_path / "mixed")


@pytest.mark.parametrize("case", ["unfinished", "empty", "absent"])
def test_a_missing_metadata_says_what_the_directory_holds(tmp_path: Path, case: str) -> None:
    from inert.torch._reader import MissingMetadataError

    path = tmp_path / "ckpt"
    if case == "unfinished":
        it.enable()
        _save(path, _state())
        (path / ".metadata").unlink()
    elif case == "empty":
        path.mkdir()
    expected = {"unfinished": "a save that did not finish", "empty": "not a checkpoint directory",
                "absent": "no such checkpoint directory"}[case]
    with pytest.raises(MissingMetadataError, match=expected):
        it.load({"w": torch.zeros(3, 4)}, path)
