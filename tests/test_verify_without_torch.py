"""``inert verify`` of a checkpoint imports no torch: it runs, and finds damage, where torch cannot be imported.

Each check runs ``python -m inert verify`` in a child whose import system refuses ``torch`` (as
tests/test_package.py's ``_BLOCK`` does): the saved checkpoints of every release in
tests/fixtures/checkpoints, and checkpoints saved here with a large record (checked a block at a
time) and compressed records (inflated a block at a time), whole and damaged.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._extension import ZStandard

from inert.codecs import checkpoint_metadata as cm
from inert.torch import FileSystemWriter

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
_BLOCK = """
import sys, runpy
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'torch':
            raise ImportError(f"No module named {name!r} (blocked by the test)")
sys.meta_path.insert(0, _Block())
sys.argv = ['inert', 'verify', *sys.argv[1:]]
runpy.run_module('inert', run_name='__main__')
"""


def _verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCK, str(path)], capture_output=True, text=True, timeout=60)


def _fixture(release: str, tmp_path: Path) -> Path:
    path = tmp_path / release
    shutil.copytree(FIXTURES / release, path)
    (path / "expected.json").unlink()  # the test's own file: not part of the checkpoint
    return path


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def _record(path: Path, fqn: str) -> tuple[Path, int, int]:
    """The data file, offset and length of ``fqn``'s first record."""
    meta = cm.decode((path / ".metadata").read_bytes())
    entry = next(e for e in meta["tensors"] if e["fqn"] == fqn)
    return path / meta["files"][entry["chunk_files"][0]], entry["chunk_byte_offsets"][0], entry["chunk_byte_lengths"][0]


@pytest.mark.parametrize("release", sorted(p.name for p in FIXTURES.iterdir()))
def test_verify_of_each_releases_checkpoint_needs_no_torch(release: str, tmp_path: Path) -> None:
    path = _fixture(release, tmp_path)
    result = _verify(path)
    assert result.returncode == 0 and result.stdout.startswith("inert: verify: OK: "), result.stderr
    assert result.stderr == ""


def test_verify_without_torch_names_a_damaged_record(tmp_path: Path) -> None:
    path = _fixture("torch-2.13.0", tmp_path)
    meta = cm.decode((path / ".metadata").read_bytes())
    entry = meta["tensors"][0]
    data_file, offset, length = _record(path, entry["fqn"])
    _flip(data_file, offset + length - 8)  # in the payload
    result = _verify(path)
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert "Traceback" not in result.stderr and "CRC-32" in result.stderr, result.stderr
    assert f"{entry['fqn']}.crc32" in result.stderr, result.stderr


@pytest.mark.parametrize("compressed", [False, True])
def test_verify_without_torch_checks_large_and_compressed_records(tmp_path: Path, compressed: bool) -> None:
    """A 4 MiB record (streamed a block at a time), a bool tensor and a value; compressed or not."""
    path = tmp_path / "ckpt"
    state = {"big": torch.arange(1 << 20, dtype=torch.float32), "mask": torch.ones(3000, dtype=torch.bool), "v": [1, "x"]}
    extensions = [ZStandard()] if compressed else None
    dcp.save(state, storage_writer=FileSystemWriter(path, _extensions=extensions), no_dist=True)
    result = _verify(path)
    assert result.returncode == 0 and "OK: 2 files, 3 records" in result.stdout, result.stderr
    data_file, offset, length = _record(path, "big")
    _flip(data_file, offset + length // 2)
    result = _verify(path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "checkpoint-shard" in result.stderr and "big" in result.stderr, result.stderr


def test_every_problem_names_its_file_relative_to_the_directory(tmp_path: Path) -> None:
    """One spelling of a file in every problem: ``FILE:field`` (``FILE`` for the file as a whole), the
    metadata's as the data files'."""
    from inert.cli.verify import verify_path

    path = _fixture("torch-2.13.0", tmp_path)
    (path / "extra.bin").write_bytes(b"x")
    data_file, offset, length = _record(path, cm.decode((path / ".metadata").read_bytes())["tensors"][0]["fqn"])
    _flip(data_file, 0)  # the data file's magic
    problems = verify_path(str(path), keep_going=True, show_progress=False).problems
    assert problems[0] == "extra.bin: stray file: the metadata names no such file", problems
    assert problems[1].startswith("checkpoint-shard: offset 0: __0_0.distcp:magic: "), problems
    metadata = path / ".metadata"
    metadata.write_bytes(metadata.read_bytes()[:-9])
    [problem] = verify_path(str(path), keep_going=True, show_progress=False).problems
    assert problem.startswith("checkpoint-metadata: offset ") and ": .metadata:" in problem, problem
    assert str(tmp_path) not in problem, problem
