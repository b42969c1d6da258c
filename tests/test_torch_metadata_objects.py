"""loads_metadata builds the very objects DCP's own unpickling gives, field by field (accelerated and pure Python)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def _sharded(ranks: int = 16) -> Metadata:
    """The 70B benchmark's shape, scaled down: FSDP on dim 0, Adam's state, 0-dim steps, uneven last chunks."""
    from torch.distributed.checkpoint.metadata import TensorProperties

    from inert.torch._metadata import InertStorageInfo

    shapes = {"embed": (1000, 64), "norm": (64,), **{f"l{i}.{p}": s for i in range(3)
                                                      for p, s in (("q", (64, 64)), ("up", (200, 64)))}}
    state: dict[str, object] = {}
    storage: dict[object, object] = {}
    at = [0] * ranks
    for name, shape in shapes.items():
        for fqn, size, dtype in ((f"model.{name}", shape, torch.bfloat16), (f"optim.{name}.exp_avg", shape, torch.float32),
                                 (f"optim.{name}.step", (), torch.float32)):
            rows = -(-size[0] // ranks) if size else 0
            chunks = [ChunkStorageMetadata(torch.Size([min(r * rows, size[0]), *[0] * (len(size) - 1)]),
                                           torch.Size([max(0, min(rows, size[0] - r * rows)), *size[1:]]))
                      for r in range(ranks)] if size else [ChunkStorageMetadata(torch.Size([]), torch.Size([]))]
            for index, chunk in enumerate(chunks):
                length = 64 + chunk.sizes.numel() * dtype.itemsize
                storage[MetadataIndex(fqn, chunk.offsets, index)] = InertStorageInfo(
                    f"__{index % ranks}_0.distcp", at[index % ranks], length, crc32=(index * 7919 + length) & 0xFFFFFFFF)
                at[index % ranks] += length
            state[fqn] = TensorStorageMetadata(TensorProperties(dtype=dtype), torch.Size(size), chunks)
    return Metadata(state_dict_metadata=state, planner_data={"x": ("a", "b")}, storage_data=storage)  # type: ignore[arg-type]


def test_sharded_shape_both_paths_and_pickle(tmp_path: Path) -> None:
    from inert.torch import dumps_metadata

    original = _sharded()
    (tmp_path / "m").write_bytes(dumps_metadata(original))
    ours = loads_metadata((tmp_path / "m").read_bytes())
    assert ours == original
    _check_equal(ours, pickle.loads(pickle.dumps(original)))
    code = ("import pickle, sys; from inert.torch import loads_metadata; "
            "sys.stdout.buffer.write(pickle.dumps(loads_metadata(open(sys.argv[1], 'rb').read())))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m")], env=dict(os.environ, INERT_PURE_PYTHON="1"),
                         check=True, capture_output=True).stdout
    _check_equal(pickle.loads(out), ours)
    def located(md: Metadata) -> list[tuple[object, ...]]:  # pickling drops a None transform_descriptors
        return [(k.fqn, k.offset, k.index, v.relative_path, v.offset, v.length, v.crc32, v.transform_descriptors)
                for k, v in md.storage_data.items()]

    assert located(pickle.loads(out)) == located(ours) == located(original)


def _builders() -> tuple[Any, Any]:
    from inert.torch import _metadata

    accel = pytest.importorskip("inert._accel")
    return accel.dcp_chunks, _metadata._python_chunks


def _columns() -> tuple[Any, ...]:
    size = torch.Size
    grid = [(size([0, 0]), size([300, 4])), (size([300, 0]), size([300, 4])), (size([600, 0]), size([1, 4]))]
    return "w", grid, [1, 0, 1], [0, 2**40, 64], [4800, 4800, 80], [0, 2**32 - 1, 5], ["a.distcp", "b.distcp"]


@pytest.mark.parametrize("key_type", ["MetadataIndex", "rehashed"])
def test_c_builder_makes_the_python_builders_objects(key_type: str) -> None:
    """Attribute for attribute, the same insertions (a repeated offset too); a key class hashing otherwise
    than hash((fqn, offset)) is hashed by its own __hash__ (the C hash is used only where it agrees)."""
    from inert.torch._metadata import InertStorageInfo

    class Rehashed(MetadataIndex):
        def __hash__(self) -> int:
            return hash(self.fqn)

    keys = MetadataIndex if key_type == "MetadataIndex" else Rehashed
    c_chunks, py_chunks = _builders()
    fqn, grid, *rest = _columns()
    grid = [*grid, grid[0]]  # the same offset again: the later location wins in both
    rest = [column + [extra] for column, extra in zip(rest[:4], (0, 7, 9, 11), strict=True)] + rest[4:]
    made = []
    for build in (c_chunks, py_chunks):
        storage: dict[Any, Any] = {}
        chunks = build((ChunkStorageMetadata, keys, InertStorageInfo), fqn, grid, *rest, storage)
        made.append((chunks, storage))
    (c_list, c_store), (p_list, p_store) = made
    assert [type(c) for c in c_list] == [ChunkStorageMetadata] * 4 and [vars(c) for c in c_list] == [vars(c) for c in p_list]
    assert [(type(k), vars(k), hash(k)) for k in c_store] == [(type(k), vars(k), hash(k)) for k in p_store]
    assert [(type(v), vars(v)) for v in c_store.values()] == [(type(v), vars(v)) for v in p_store.values()]
    assert len(c_store) == 3 and c_store[keys("w", torch.Size([0, 0]))].offset == 7
    assert all(c_store[key] is value for key, value in c_store.items())  # every key found by its own hash


def test_c_builder_refuses_what_python_refuses() -> None:
    from inert.torch._metadata import _CLASSES

    c_chunks, py_chunks = _builders()
    fqn, grid, files, *columns, paths = _columns()
    for build in (c_chunks, py_chunks):
        with pytest.raises(IndexError):
            build(_CLASSES, fqn, grid, [0, 2, 0], *columns, paths, {})
    with pytest.raises(TypeError, match="dcp_chunks"):
        c_chunks(_CLASSES, fqn, tuple(grid), files, *columns, paths, {})
    with pytest.raises(TypeError, match="classes"):
        c_chunks((1, 2, 3), fqn, grid, files, *columns, paths, {})
    with pytest.raises(TypeError, match="pair"):
        c_chunks(_CLASSES, fqn, [(1, 2, 3)], files, *columns, paths, {})


def test_accelerated_when_required() -> None:
    """Under INERT_ACCEL=require the chunk objects are the accelerator's (the benchmarks' figures are of it)."""
    from inert.torch import _metadata

    if os.environ.get("INERT_ACCEL") != "require":
        pytest.skip("INERT_ACCEL=require runs only")
    assert _metadata._chunks is pytest.importorskip("inert._accel").dcp_chunks
