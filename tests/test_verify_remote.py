"""``inert verify`` of an object store is the local verify: each hostile checkpoint or dump is verified as a local
directory and, copied object by object, at an ``s3://`` URL of the real S3 API server (``tests/s3_server.py``)
and at a ``memory://`` URL; the verdicts are the same, problem for problem (the location aside)."""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

import fsspec
import pytest
import s3fs
import torch
import torch.distributed.checkpoint as dcp
from s3_server import S3Server
from torch.distributed.checkpoint._extension import ZStandard
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorStorageMetadata

from inert.cli.verify import Report, verify_path
from inert.codecs import checkpoint_metadata as cm
from inert.dump import Row, dump
from inert.torch import FileSystemWriter, dumps_metadata, loads_metadata
from inert.torch._metadata import METADATA_VERSION

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _save(path: Path, state: dict[str, Any], compressed: bool = False) -> Path:
    writer = FileSystemWriter(path, sync_files=False, _extensions=[ZStandard()] if compressed else None)
    dcp.save(state, storage_writer=writer, no_dist=True)
    return path


def _overlapping_chunks(root: Path) -> Path:
    """``x`` of 4 elements as two chunks of 2 at 0 and at 1 (as many elements as the tensor, one drawn over the
    other), each with a record of its own shape: only the tiling check refuses it."""
    path = _save(root / "ckpt", {"p": torch.arange(2.0), "q": torch.arange(2.0) + 2, "y": torch.ones(3)})
    meta = loads_metadata((path / ".metadata").read_bytes())
    entries, storage = meta.state_dict_metadata, meta.storage_data
    p, q = entries.pop("p"), entries.pop("q")
    assert isinstance(p, TensorStorageMetadata)
    chunks = [ChunkStorageMetadata(torch.Size([0]), torch.Size([2])), ChunkStorageMetadata(torch.Size([1]), torch.Size([2]))]
    p.size, p.chunks = torch.Size([4]), chunks
    entries["x"] = p
    storage[MetadataIndex("x", chunks[0].offsets, 0)] = storage.pop(MetadataIndex("p", torch.Size([0]), 0))
    storage[MetadataIndex("x", chunks[1].offsets, 1)] = storage.pop(MetadataIndex("q", torch.Size([0]), 0))
    del q
    (path / ".metadata").write_bytes(dumps_metadata(meta))
    return path


def _stray_file(root: Path) -> Path:
    path = _save(root / "ckpt", {"w": torch.arange(8.0), "v": {"a": 1}})
    (path / "notes.txt").write_bytes(b"left here")
    return path


def _trailing_bytes(root: Path) -> Path:
    path = _save(root / "ckpt", {"w": torch.arange(8.0)})
    [data] = [f for f in path.iterdir() if f.suffix == ".distcp"]
    data.write_bytes(data.read_bytes() + b"\0" * 64)
    return path


def _value_bomb(root: Path) -> Path:
    """A compressed checkpoint whose value record is a ZSTD frame of about 1 KB inflating to a 32 MiB document
    of nils, every CRC-32 right: refused before inflating (a value inflates to at most its stored frame)."""
    from inert._zstd import deflate
    from inert.conformance._filelib import value_body, zstd_body

    path = _save(root / "ckpt", {"w": torch.zeros(4096), "v": [None]}, compressed=True)
    count = (32 << 20) - 5
    body = value_body(b"\xdd" + struct.pack(">I", count) + b"\xc0" * count)
    frame = deflate([body])
    meta = cm.decode((path / ".metadata").read_bytes())
    [entry] = meta["values"]
    data_file = path / meta["files"][entry["file"]]
    at = entry["byte_offset"]
    stored = zstd_body(at, len(body), frame)
    record = stored + struct.pack("<I", zlib.crc32(stored))
    data_file.write_bytes(data_file.read_bytes()[:at] + record)
    entry.update(byte_length=len(record), crc=zlib.crc32(stored))
    (path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))
    return path


def _tensor_reshaped(root: Path) -> Path:
    """64 MiB of zeros in a few KB of ZSTD, its metadata giving the same bytes another shape: the inflated header
    is not the one a writer makes for that shape, named from the header alone (inflated a block at a time)."""
    path = _save(root / "ckpt", {"w": torch.zeros(16 << 20)}, compressed=True)
    meta = cm.decode((path / ".metadata").read_bytes())
    tensor = meta["tensors"][0]
    tensor["size"] = tensor["chunk_sizes"] = [8 << 20, 2]
    tensor["chunk_offsets"] = [0, 0]
    (path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))
    return path


def _tensor_zeros(root: Path) -> Path:
    return _save(root / "ckpt", {"w": torch.zeros(16 << 20)}, compressed=True)


def _dump_stray(root: Path) -> Path:
    path = root / "dump"
    dump([Row(f"k{i}", i, {"x": torch.full((4,), float(i))}, {"i": i}) for i in range(3)], path, owners=2)
    (path / "shard-99999.bin").write_bytes(b"x")
    return path


CASES = {
    "overlapping_chunks": (_overlapping_chunks, "x.chunks[1]: the chunk at (1,) overlaps another"),
    "stray_file": (_stray_file, "notes.txt: stray file"),
    "trailing_bytes": (_trailing_bytes, "64 bytes after the last record"),
    "compressed_value_past_its_bound": (_value_bomb, "a value inflates to at most 1x its stored frame"),
    "compressed_tensor_of_another_shape": (_tensor_reshaped, "w: record holds (16777216,) torch.float32"),
    "compressed_tensor_honest": (_tensor_zeros, None),
    "dump_stray_shard": (_dump_stray, "shard-99999.bin: stray file"),
}


def _upload(local: Path, url: str, fs: Any) -> None:
    root = url.split("://", 1)[1]
    for file in sorted(local.iterdir()):
        fs.pipe_file(f"{root}/{file.name}", file.read_bytes())


def _normal(report: Report, location: str) -> tuple[bool, str, int, int, int, list[str]]:
    problems = [p.replace(location, "<root>") for p in report.problems]
    return report.ok, report.kind, report.files, report.records, report.bytes, problems


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The store configured as a user would: through the environment."""
    for name, value in {"AWS_ENDPOINT_URL_S3": s3.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    return s3


@pytest.mark.parametrize("store", ["s3", "memory"])
@pytest.mark.parametrize("case", list(CASES))
def test_remote_verify_gives_the_local_verdict(case: str, store: str, tmp_path: Path, request: Any) -> None:
    make, expected = CASES[case]
    local = make(tmp_path)
    if store == "s3":
        server = request.getfixturevalue("s3_env")
        url = f"s3://{server.new_bucket()}/{local.name}"
        fs = s3fs.S3FileSystem(**server.options(), skip_instance_cache=True)
    else:
        url = f"memory://verify-{case}/{local.name}"
        fs = fsspec.filesystem("memory")
    _upload(local, url, fs)
    here = verify_path(str(local), show_progress=False)
    there = verify_path(url, show_progress=False)
    assert _normal(there, url) == _normal(here, str(local))
    if expected is None:
        assert here.ok, here.problems
    else:
        assert not here.ok and expected in here.problems[0], here.problems
    # --all: every problem, in the same order
    assert _normal(verify_path(url, keep_going=True, show_progress=False), url) == _normal(
        verify_path(str(local), keep_going=True, show_progress=False), str(local))


def test_a_missing_data_object_is_named_as_a_missing_file(s3_env: S3Server, tmp_path: Path) -> None:
    local = _save(tmp_path / "ckpt", {"w": torch.arange(8.0)})
    url = f"s3://{s3_env.new_bucket()}/ckpt"
    fs = s3fs.S3FileSystem(**s3_env.options(), skip_instance_cache=True)
    _upload(local, url, fs)
    [data] = [f.name for f in local.iterdir() if f.suffix == ".distcp"]
    fs.rm_file(f"{url.removeprefix('s3://')}/{data}")
    os.remove(local / data)
    here, there = verify_path(str(local), show_progress=False), verify_path(url, show_progress=False)
    assert "missing: the metadata has 1 records in it" in there.problems[0], there.problems
    assert _normal(there, url) == _normal(here, str(local))


def test_the_store_listing_more_than_its_bound_is_an_io_error(s3_env: S3Server, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from inert.cli.support import CommandError

    local = _stray_file(tmp_path)
    url = f"s3://{s3_env.new_bucket()}/ckpt"
    _upload(local, url, s3fs.S3FileSystem(**s3_env.options(), skip_instance_cache=True))
    monkeypatch.setenv("INERT_STORAGE_LIST_ENTRIES", "2")
    with pytest.raises(CommandError, match="INERT_STORAGE_LIST_ENTRIES"):
        verify_path(url, show_progress=False)
    shutil.rmtree(local)
