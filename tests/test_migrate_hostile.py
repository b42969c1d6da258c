"""``inert migrate`` of hostile legacy DCP checkpoints: every malformed one is one InertError line, exit 1.

Each case is a real legacy checkpoint written by DCP's own ``FileSystemWriter``
whose ``.metadata`` (or one value record) is then rewritten: sizes outside
int64, negative or non-int dims, chunks outside the tensor or not tiling it, a
chunk repeated a hundred thousand times by memo references, truncated and
malformed pickles, planner data and values nested 3,000 deep, a dict key of
nested tuples that would overflow the C stack when hashed.  Also: SRC is
identified before trust is asked for, and a legacy migration is read back.
"""

from __future__ import annotations

import copy
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

from inert._errors import InertError, TruncatedError
from inert.cli.main import main
from inert.cli.migrate import MAX_DEPTH, migrate
from inert.cli.support import CommandError
from inert.torch import TORCH_VERSION, FileSystemWriter
from inert.torch._compat import dcp_save

pytestmark = [pytest.mark.filterwarnings("ignore:torch.distributed is disabled", "ignore::UserWarning"),
              pytest.mark.skipif(TORCH_VERSION < (2, 4), reason="inert migrate needs PyTorch 2.4 or later (by design)")]


def _save_legacy(state: dict[str, Any], path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_save(state, dcp.FileSystemWriter(path))
    return path


@pytest.fixture(scope="module")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save_legacy({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "step": 3, "opt": {"lr": 0.5}},
                        tmp_path_factory.mktemp("legacy") / "src")


def _metadata(path: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dcp.FileSystemReader(path).read_metadata()  # our own file: safe to unpickle


def _variant(legacy: Path, tmp_path: Path, change: Any) -> Path:
    src = tmp_path / "src"
    shutil.copytree(legacy, src)
    metadata = copy.deepcopy(_metadata(legacy))
    change(metadata)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # pickling 3,000 levels recurses in the pickler
    try:
        (src / ".metadata").write_bytes(pickle.dumps(metadata))
    finally:
        sys.setrecursionlimit(old)
    return src


def _refused(src: Path, tmp_path: Path, capsys: Any, *parts: str) -> str:
    """``inert migrate --trust-source SRC`` ends in one line naming SRC and the legacy format, exit 1, no output."""
    out_dir = tmp_path / "out"
    code = main(["migrate", "--trust-source", str(src), str(out_dir)])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"inert: migrate: {src}: legacy-dcp-checkpoint: offset "), err
    assert "Exception raised from" not in err and "Traceback" not in err
    for part in parts:
        assert part in err, err
    assert not out_dir.exists()
    return err


def _last_line(stderr: str) -> str:
    """The command's line (a warning of the environment, such as a stale accelerator, may come first)."""
    return stderr.splitlines()[-1] if stderr else ""


def _size(dims: Any) -> Any:
    def change(metadata: Any) -> None:
        metadata.state_dict_metadata["w"].size = dims
    return change


def _chunks(chunks: list[Any]) -> Any:
    def change(metadata: Any) -> None:
        metadata.state_dict_metadata["w"].chunks = chunks
    return change


def test_legacy_size_past_int64_is_one_inert_line_without_cpp_frames(legacy: Path, tmp_path: Path) -> None:
    # Before: torch.empty's TypeError "Overflow when unpacking long long" and its C++ frames.
    src = _variant(legacy, tmp_path, _size(torch.Size([0, 2**63])))
    result = subprocess.run([sys.executable, "-m", "inert", "migrate", "--trust-source", str(src), str(tmp_path / "o")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert "Traceback" not in result.stderr and "Exception raised from" not in result.stderr
    assert _last_line(result.stderr) == (f"inert: migrate: {src}: legacy-dcp-checkpoint: offset -1: .metadata.w.size[1]: "
                                         f"{2**63} is not an int from 0 to 2**63-1")


@pytest.mark.parametrize(("dims", "field"), [
    ([0, 2**70], ".metadata.w.size[1]"),
    (torch.Size([-1, 3]), ".metadata.w.size[0]"),
    ([2, True], ".metadata.w.size[1]"),
    ("abc", ".metadata.w.size"),
    ([1] * 65, ".metadata.w.size"),
])
def test_legacy_sizes_that_are_not_dims_are_refused(legacy: Path, tmp_path: Path, capsys: Any, dims: Any,
                                                   field: str) -> None:
    _refused(_variant(legacy, tmp_path, _size(dims)), tmp_path, capsys, f": {field}: ")


def test_legacy_tensor_of_more_bytes_than_int64_is_refused(legacy: Path, tmp_path: Path, capsys: Any) -> None:
    _refused(_variant(legacy, tmp_path, _size([2**62, 2**62])), tmp_path, capsys, ".metadata.w.size", "above 2**63-1")


@pytest.mark.parametrize(("chunks", "field", "reason"), [
    ([ChunkStorageMetadata(torch.Size([0, -5]), torch.Size([2, 3]))], "chunks[0].offsets[1]", "not an int"),
    ([ChunkStorageMetadata(torch.Size([0, 2**63]), torch.Size([2, 2**64]))], "chunks[0].offsets[1]", "not an int"),
    ([ChunkStorageMetadata(torch.Size([0, 1]), torch.Size([2, 3]))], "chunks[0]", "reach outside the tensor"),
    ([ChunkStorageMetadata(torch.Size([0]), torch.Size([2]))], "chunks[0].offsets", "has 1 dims, the tensor has 2"),
    # before: converted, the missing column left as torch.empty's bytes of memory
    ([ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([2, 2]))], "chunks", "hold 4 elements, the tensor has 6"),
    (["not a chunk"], "chunks[0]", "not DCP's ChunkStorageMetadata"),
])
def test_legacy_chunks_outside_the_tensor_or_not_tiling_it_are_refused(legacy: Path, tmp_path: Path, capsys: Any,
                                                                       chunks: list[Any], field: str,
                                                                       reason: str) -> None:
    _refused(_variant(legacy, tmp_path, _chunks(chunks)), tmp_path, capsys, f".metadata.w.{field}: ", reason)


def test_legacy_chunk_repeated_by_memo_references_is_refused_at_once(legacy: Path, tmp_path: Path,
                                                                    capsys: Any) -> None:
    # 100,000 references to one empty chunk: 300 KB of pickle; before, each became a read item of DCP's plan.
    empty = ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([0, 0]))
    src = _variant(legacy, tmp_path, _chunks([empty] * 100_000))
    _refused(src, tmp_path, capsys, ".metadata.w.chunks[1]: the same chunk object as chunks[0]")


def test_legacy_chunk_without_a_storage_record_is_refused(legacy: Path, tmp_path: Path, capsys: Any) -> None:
    def change(metadata: Any) -> None:
        metadata.state_dict_metadata["w"].chunks = [ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([1, 3])),
                                                    ChunkStorageMetadata(torch.Size([1, 0]), torch.Size([1, 3]))]
    _refused(_variant(legacy, tmp_path, change), tmp_path, capsys, ".metadata.w.chunks[1]: ", "no storage record")


@pytest.mark.parametrize(("data", "kind"), [
    (b"\x80\x04a.", "IndexError"),  # APPEND on an empty stack
    (b"\x80\x04}K\x01s.", "IndexError"),  # SETITEM with one item on the stack
    (b"\x80\x04]\x94h\x05.", "Memo value not found"),  # a memo GET of nothing stored
])
def test_legacy_malformed_metadata_pickle_is_an_inert_error(legacy: Path, tmp_path: Path, capsys: Any, data: bytes,
                                                            kind: str) -> None:
    src = tmp_path / "src"
    shutil.copytree(legacy, src)
    (src / ".metadata").write_bytes(data)
    _refused(src, tmp_path, capsys, ": .metadata: not a DCP Metadata pickle: ", kind)


def test_legacy_truncated_metadata_is_a_truncated_error_at_its_offset(legacy: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(legacy, src)
    whole = (src / ".metadata").read_bytes()
    (src / ".metadata").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TruncatedError) as caught:
        migrate(str(src), str(tmp_path / "out"), show_progress=False)
    assert caught.value.format == "legacy-dcp-checkpoint" and caught.value.field == ".metadata"
    assert 0 < caught.value.offset <= len(whole) // 2


def _nested_dict(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"x": value}
    return value


def test_legacy_planner_data_nested_3000_deep_is_refused_at_the_stated_bound(legacy: Path, tmp_path: Path,
                                                                            capsys: Any) -> None:
    def change(metadata: Any) -> None:
        metadata.planner_data = _nested_dict(3000)
    _refused(_variant(legacy, tmp_path, change), tmp_path, capsys,
             f".metadata.planner_data: nests containers more than {MAX_DEPTH} deep")


def test_legacy_planner_data_at_the_bound_is_taken(legacy: Path, tmp_path: Path, capsys: Any) -> None:
    def change(metadata: Any) -> None:
        metadata.planner_data = _nested_dict(MAX_DEPTH - 1)  # MAX_DEPTH dicts in all
    src = _variant(legacy, tmp_path, change)
    assert main(["migrate", "--trust-source", str(src), str(tmp_path / "out")]) == 0, capsys.readouterr().err


def test_legacy_value_nested_3000_deep_is_refused_naming_its_file(tmp_path: Path, capsys: Any) -> None:
    # Before: "cannot be written in Inert's format: maximum recursion depth exceeded".
    deep: list[Any] = []
    for _ in range(3000):
        deep = [deep]
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        src = _save_legacy({"w": torch.ones(2), "v": deep}, tmp_path / "src")
    finally:
        sys.setrecursionlimit(old)
    err = _refused(src, tmp_path, capsys, f"v: nests containers more than {MAX_DEPTH} deep")
    assert ".distcp" in err


def test_legacy_dict_key_of_nested_tuples_is_refused_before_it_is_hashed(legacy: Path, tmp_path: Path) -> None:
    # Hashing a million nested tuples overflows the C stack (a segfault); the unpickler refuses the key first.
    src = tmp_path / "src"
    shutil.copytree(legacy, src)
    (src / ".metadata").write_bytes(b"\x80\x04}" + b")" + b"\x85" * 1_000_000 + b"Ns.")
    result = subprocess.run([sys.executable, "-m", "inert", "migrate", "--trust-source", str(src), str(tmp_path / "o")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    line = _last_line(result.stderr)
    assert line.startswith(f"inert: migrate: {src}: legacy-dcp-checkpoint: offset ")
    assert line.endswith(": .metadata: not a DCP Metadata pickle: a dict key nested more than 16 deep")


def test_legacy_metadata_of_the_wrong_types_is_an_inert_error(legacy: Path, tmp_path: Path) -> None:
    def change(metadata: Any) -> None:
        metadata.state_dict_metadata["w"].properties.dtype = "float32"
    with pytest.raises(InertError) as caught:
        migrate(str(_variant(legacy, tmp_path, change)), str(tmp_path / "out"), show_progress=False)
    assert caught.value.field == ".metadata.w.properties"


# -- what SRC is, first; the read back --------------------------------------------------------------------------

def test_migrate_says_what_src_is_before_asking_for_trust(legacy: Path, tmp_path: Path, capsys: Any) -> None:
    inert_ckpt = tmp_path / "inert"
    dcp_save({"w": torch.ones(2)}, FileSystemWriter(inert_ckpt))
    empty = tmp_path / "empty"
    empty.mkdir()
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    cases = [(inert_ckpt, 1, "already an Inert checkpoint: nothing to migrate"),
             (empty, 1, "nothing migrate converts"), (text, 1, "nothing migrate converts"),
             (tmp_path / "absent", 2, "no such file or directory")]
    for src, want, part in cases:
        for trust in ([], ["--trust-source"]):
            code = main(["migrate", *trust, str(src), str(tmp_path / "out")])
            err = capsys.readouterr().err
            assert code == want and err.startswith(f"inert: migrate: {src}: "), err
            assert part in err.splitlines()[0] and "--trust-source" not in err, err
    assert not (tmp_path / "out").exists()
    rank_local = tmp_path / "rank_local"
    shutil.copytree(legacy, rank_local)
    (rank_local / ".metadata").rename(rank_local / "__0.metadata")
    code = main(["migrate", str(rank_local), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and "only rank-local metadata" in err and "--trust-source" not in err, err
    code = main(["migrate", str(legacy), str(tmp_path / "out")])  # a legacy checkpoint: trust asked for, nothing read
    assert code == 2 and "without --trust-source" in capsys.readouterr().err


def test_legacy_migration_is_read_back_and_compared(legacy: Path, tmp_path: Path, capsys: Any) -> None:
    from inert.cli.migrate import _check_readback

    out_dir = tmp_path / "out"
    assert main(["migrate", "--trust-source", str(legacy), str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "1 tensors and 2 values read back equal to the source" in out
    same = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "step": 3, "opt.lr": 0.5}
    _check_readback(str(out_dir), same)
    for key, other in (("w", torch.zeros(2, 3)), ("step", 4), ("opt.lr", 0.25), ("step", 3.0)):
        with pytest.raises(CommandError, match=f"read back, '{key}' differs from the source's"):
            _check_readback(str(out_dir), {**same, key: other})
    assert os.path.isdir(out_dir)


# -- torch.save sources (--trust-source) --------------------------------------------------------------------------

def test_torch_save_value_nested_3000_deep_is_an_inert_error(tmp_path: Path, capsys: Any) -> None:
    # Before: a RecursionError traceback from DCP's flattening.
    deep: list[Any] = []
    for _ in range(3000):
        deep = [deep]
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        torch.save({"w": torch.ones(2), "v": deep}, tmp_path / "deep.pt")
    finally:
        sys.setrecursionlimit(old)
    code = main(["migrate", "--trust-source", str(tmp_path / "deep.pt"), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1 and len(err.splitlines()) == 1, err
    assert f"torch-save: offset -1: {tmp_path / 'deep.pt'}: nests containers more than {MAX_DEPTH} deep" in err


@pytest.mark.parametrize("zipped", [False, True])
def test_torch_save_dict_key_of_nested_tuples_is_refused_before_torch_hashes_it(tmp_path: Path, zipped: bool) -> None:
    # torch.load(weights_only=True) hashes the key: a million nested tuples overflow the C stack (a segfault).
    pickled = b"\x80\x02}" + b")" + b"\x85" * 1_000_000 + b"Ns."
    path = tmp_path / "key.pt"
    if zipped:
        import zipfile

        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("key/data.pkl", pickled)
            archive.writestr("key/version", "3\n")
    else:
        path.write_bytes(pickled)
    result = subprocess.run([sys.executable, "-m", "inert", "migrate", "--trust-source", str(path), str(tmp_path / "o")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert _last_line(result.stderr) == (f"inert: migrate: {path}: torch-save: offset -1: {path}: nests objects more "
                                         f"than {MAX_DEPTH} deep")
