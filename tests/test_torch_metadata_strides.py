"""TensorProperties.strides (PyTorch 2.15 on) through checkpoint-metadata: version 2 keeps them, version 1 has none.

On a release that records strides, Inert's metadata gives exactly the strides torch's own writer and reader
give; on one that does not, Inert writes version 1 and a version 2 file still loads, its strides ignored.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.metadata import TensorStorageMetadata  # noqa: E402

from inert import InertError, WriteValueError  # noqa: E402
from inert.codecs import checkpoint_metadata as codec  # noqa: E402
from inert.torch import FileSystemReader, FileSystemWriter, loads_metadata  # noqa: E402
from inert.torch._compat import dcp_save  # noqa: E402
from inert.torch._metadata import RECORDS_STRIDES, TensorProperties  # noqa: E402

#: The release's own answer, independently of Inert's module.
HAS_FIELD = "strides" in {f.name for f in dataclasses.fields(TensorProperties)}


def _state() -> dict[str, object]:
    """Contiguous, transposed, expanded (stride 0), sliced, 0-dim and 3-dim tensors, and a bytes entry."""
    base = torch.arange(24, dtype=torch.float32)
    return {
        "plain": base.reshape(4, 6).clone(), "transposed": base.reshape(6, 4).t(),
        "expanded": torch.ones(1, 4).expand(3, 4), "sliced": base.reshape(4, 6)[:, ::2],
        "scalar": torch.tensor(7), "cube": torch.zeros(2, 3, 5), "step": 3,
    }


def _strides(metadata: object) -> dict[str, object]:
    return {fqn: md.properties.strides for fqn, md in metadata.state_dict_metadata.items()  # type: ignore[attr-defined]
            if isinstance(md, TensorStorageMetadata)}


def _version(path: Path) -> int:
    return int(struct.unpack_from("<H", path.read_bytes(), len(codec.MAGIC))[0])


def test_records_strides_follows_the_release() -> None:
    assert RECORDS_STRIDES is HAS_FIELD


def test_round_trip_against_torch(tmp_path: Path) -> None:
    """Saved by torch's FileSystemWriter and by Inert's, read back by each one's reader: the same properties."""
    dcp.save(_state(), storage_writer=dcp.FileSystemWriter(tmp_path / "torch", sync_files=False))
    dcp_save(_state(), FileSystemWriter(tmp_path / "inert", sync_files=False))
    theirs = dcp.FileSystemReader(tmp_path / "torch").read_metadata()
    ours = FileSystemReader(tmp_path / "inert").read_metadata()
    for fqn, md in theirs.state_dict_metadata.items():
        if isinstance(md, TensorStorageMetadata):
            mine = ours.state_dict_metadata[fqn]
            assert isinstance(mine, TensorStorageMetadata) and vars(mine.properties) == vars(md.properties), fqn
    assert _version(tmp_path / "inert" / ".metadata") == (2 if HAS_FIELD else 1)
    if HAS_FIELD:
        assert _strides(ours) == _strides(theirs)
        assert _strides(ours)["transposed"] == (1, 4) and _strides(ours)["expanded"] == (0, 1)
        assert _strides(ours)["scalar"] == () and _strides(ours)["plain"] == (6, 1)
    else:
        assert all(not hasattr(md.properties, "strides") for md in ours.state_dict_metadata.values()
                   if isinstance(md, TensorStorageMetadata))


def _doc(tmp_path: Path) -> dict[str, Any]:
    dcp_save(_state(), FileSystemWriter(tmp_path, sync_files=False))
    doc = codec.decode((tmp_path / ".metadata").read_bytes())
    del doc["crc32"]
    return doc


def test_version_2_file_loads_on_every_release(tmp_path: Path) -> None:
    """Strides of a version 2 file: given where the release has the field, ignored where it has not."""
    doc = _doc(tmp_path)
    for entry in doc["tensors"]:
        entry["strides_recorded"] = entry["fqn"] != "cube"
        entry["strides"] = [9] * len(entry["size"]) if entry["strides_recorded"] else []
    metadata = loads_metadata(codec.encode(doc, version=2))
    strides = {fqn: getattr(md.properties, "strides", "absent") for fqn, md in metadata.state_dict_metadata.items()
               if isinstance(md, TensorStorageMetadata)}
    if HAS_FIELD:
        assert strides == {"plain": (9, 9), "transposed": (9, 9), "expanded": (9, 9), "sliced": (9, 9),
                           "scalar": (), "cube": None}
    else:
        assert set(strides.values()) == {"absent"}


def test_version_1_file_gives_no_strides(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    for entry in doc["tensors"]:
        entry.pop("strides_recorded", None)
        entry.pop("strides", None)
    metadata = loads_metadata(codec.encode(doc, version=1))
    for md in metadata.state_dict_metadata.values():
        if isinstance(md, TensorStorageMetadata):
            assert getattr(md.properties, "strides", None) is None
            assert set(vars(md.properties)) == {f.name for f in dataclasses.fields(TensorProperties)}


@pytest.mark.parametrize(("strides", "message"), [
    ([6], r"tensors\[0\]\.strides: 1 stride for 2 dims"),
    ([6, 1, 1], r"tensors\[0\]\.strides: 3 strides for 2 dims"),
    ([6, 1 << 63], r"tensors\[0\]\.strides\[1\]: stride 9223372036854775808 exceeds 2\*\*63 - 1"),
])
def test_bad_strides_refused(tmp_path: Path, strides: list[int], message: str) -> None:
    """The writer refuses bad strides; the same bytes made past it, loads_metadata refuses (InertError)."""
    doc = _doc(tmp_path)
    for entry in doc["tensors"]:
        entry["strides_recorded"], entry["strides"] = True, [1] * len(entry["size"])
    doc["tensors"][0]["strides"] = strides  # "plain", 4 x 6
    with pytest.raises(WriteValueError, match=message):
        codec.encode(doc, version=2)
    doc["tensors"][0]["strides"] = [6, 1]
    data = codec.encode(doc, version=2)
    good = b"\x01\x02" + struct.pack("<2Q", 6, 1)
    assert data.count(good) == 1
    bad = b"\x01" + bytes([len(strides)]) + struct.pack(f"<{len(strides)}Q", *strides)
    document = data[len(codec.MAGIC) + 2 : -4].replace(good, bad)
    hostile = data[: len(codec.MAGIC) + 2] + document + struct.pack("<I", zlib.crc32(document))
    with pytest.raises(InertError, match=r"checkpoint-metadata: offset \d+: " + message):
        loads_metadata(hostile)
