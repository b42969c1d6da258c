"""loads_metadata builds the very objects DCP's own unpickling gives, field by field (accelerated and pure Python)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.metadata import (  # noqa: E402
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorStorageMetadata,
)

from inert.torch import FileSystemWriter, loads_metadata  # noqa: E402
from inert.torch._compat import dcp_save  # noqa: E402


def _state() -> dict[str, object]:
    """Several dtypes, 0-dim and 3-dim tensors, equal shapes (shared chunkings), and bytes entries."""
    return {
        "a": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(3, 4, dtype=torch.bfloat16),
        "c": torch.tensor(7, dtype=torch.int64), "d": torch.zeros(2, 3, 5, dtype=torch.float16),
        "e": torch.ones(3, 4, dtype=torch.float32), "flag": True, "cfg": {"lr": 0.1, "name": "x"},
    }


def _check_equal(ours: Metadata, theirs: Metadata) -> None:
    assert type(ours) is Metadata and ours == theirs
    assert list(ours.state_dict_metadata) == list(theirs.state_dict_metadata)
    for fqn, md in theirs.state_dict_metadata.items():
        got = ours.state_dict_metadata[fqn]
        assert type(got) is type(md)
        if isinstance(md, BytesStorageMetadata):
            continue
        assert isinstance(got, TensorStorageMetadata)
        assert type(got.size) is torch.Size and got.size == md.size
        assert vars(got.properties) == vars(md.properties)
        for mine, chunk in zip(got.chunks, md.chunks, strict=True):
            assert type(mine) is ChunkStorageMetadata and vars(mine) == vars(chunk)
            assert type(mine.offsets) is torch.Size and type(mine.sizes) is torch.Size
    assert set(ours.storage_data) == set(theirs.storage_data)
    for key, info in theirs.storage_data.items():
        assert type(key) is MetadataIndex
        got = ours.storage_data[key]
        assert (got.relative_path, got.offset, got.length) == (info.relative_path, info.offset, info.length)
    for key in ours.storage_data:
        assert type(key) is MetadataIndex and (key.offset is None or type(key.offset) is torch.Size)
    # Shared torch.Size objects are immutable; a chunk's object is its own (mutating one changes no other).
    chunks = [c for md in ours.state_dict_metadata.values() if isinstance(md, TensorStorageMetadata) for c in md.chunks]
    assert len({id(c) for c in chunks}) == len(chunks)


def test_fields_match_dcp_unpickling(tmp_path: Path) -> None:
    dcp_save(_state(), FileSystemWriter(tmp_path, sync_files=False))
    ours = loads_metadata((tmp_path / ".metadata").read_bytes())
    theirs = pickle.loads(pickle.dumps(ours))  # DCP's own unpickling of this Metadata
    _check_equal(ours, theirs)
    # torch's own writer on the same state: the same entries, chunks and properties.
    dcp.save(_state(), storage_writer=dcp.FileSystemWriter(tmp_path / "torch", sync_files=False))
    with open(tmp_path / "torch" / ".metadata", "rb") as f:
        native = pickle.load(f)
    assert native.state_dict_metadata == ours.state_dict_metadata
    assert {(k.fqn, k.offset) for k in native.storage_data} == {(k.fqn, k.offset) for k in ours.storage_data}


def test_pure_python_path_builds_the_same(tmp_path: Path) -> None:
    dcp_save(_state(), FileSystemWriter(tmp_path, sync_files=False))
    ours = loads_metadata((tmp_path / ".metadata").read_bytes())
    code = ("import pickle, sys; from inert.torch import loads_metadata; "
            "sys.stdout.buffer.write(pickle.dumps(loads_metadata(open(sys.argv[1], 'rb').read())))")
    env = dict(os.environ, INERT_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / ".metadata")], env=env, check=True,
                         capture_output=True).stdout
    _check_equal(pickle.loads(out), ours)
