"""Writers write the oldest version that holds the data: an uncompressed save is ``checkpoint-shard`` v1,
so a reader that knows only version 1 reads it; compression alone asks for v2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from inert import VersionError
from inert.codecs import checkpoint_shard as cs
from inert.torch import FileSystemReader, FileSystemWriter

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def test_uncompressed_save_is_read_by_a_v1_only_reader(tmp_path: Path) -> None:
    s = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "step": torch.tensor(7), "lr": 0.25}
    dcp.save(s, storage_writer=FileSystemWriter(tmp_path), no_dist=True)
    files = sorted(tmp_path.glob("*.distcp"))
    assert files
    for data_file in files:
        data = data_file.read_bytes()
        assert data[:10] == cs.MAGIC + b"\x01\x00"
        records = cs.decode(data, version=1)["records"]  # the generated v1 reader: VersionError on a v2 file
        kinds = {r["record"]["body"]["kind"].name for r in records}
        assert kinds <= {"TENSOR", "VALUE"}
    into = {"w": torch.zeros(3, 4), "step": torch.tensor(0), "lr": 0.0}
    dcp.load(into, storage_reader=FileSystemReader(tmp_path), no_dist=True)
    assert torch.equal(into["w"], s["w"]) and int(into["step"]) == 7 and into["lr"] == 0.25


def test_a_v1_only_reader_refuses_a_v2_file() -> None:
    """The check above could fail: the v1 reader does refuse a v2 file."""
    v2 = cs.encode({"records": []}, version=2)
    with pytest.raises(VersionError):
        cs.decode(v2, version=1)
