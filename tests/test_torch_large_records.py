"""inert.torch's block paths: records larger than a block go straight between the file and tensor memory.

Records of a few MiB take the paths that read into the destination (and write from
the tensor) block by block with the CRC-32 taken on the way; these tests hold them to
the same checks as the whole-record path: dtype and shape before any byte is copied,
a damaged byte anywhere named as a checksum fault, a truncated file, and a file the
generated codec decodes whole.
"""

from __future__ import annotations

import math
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

import inert.torch
from inert import ChecksumError, InertError, InvalidValueError, TruncatedError
from inert.codecs import checkpoint_metadata as cm
from inert.codecs import checkpoint_shard as cs
from inert.torch import FileSystemWriter, ShapeMismatchError
from inert.torch._compat import TORCH_DTYPES, no_dist_options
from inert.torch._metadata import METADATA_VERSION
from inert.torch._payload import BLOCK, CRC32_IMPLEMENTATION, crc32
from inert.torch._writer import UNCOMPRESSED_VERSION, tensor_header

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ONE = no_dist_options(dcp.save)


def save(state: dict[str, Any], path: Path, **kw: Any) -> None:
    dcp.save(state, storage_writer=FileSystemWriter(path, **kw), **ONE)


def failure(state: dict[str, Any], path: Path, **kw: Any) -> BaseException:
    """What ``inert.torch.load`` raises: the reader's InertError, DCP's CheckpointException as its cause."""
    with pytest.raises(InertError) as info:
        inert.torch.load(state, path, **kw)
    assert isinstance(info.value.__cause__, CheckpointException)
    return info.value


def big_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {
        "f32": torch.randn(700, 1024),  # 2.7 MiB: three blocks, the last one short
        "bf16": torch.randn(3, 5, 7, 1031).to(torch.bfloat16),
        "i64": torch.arange(20_000, dtype=torch.int64).reshape(100, 200),
        "c64": torch.randn(9000, dtype=torch.complex64),
        "bool": torch.rand(100_000) > 0.5,
        "small": torch.ones(3),
    }


def zeros_like(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: torch.zeros_like(v) for k, v in state.items()}


def location(path: Path, fqn: str) -> tuple[Path, int, int]:
    meta = cm.decode((path / ".metadata").read_bytes())
    entry = next(e for e in meta["tensors"] if e["fqn"] == fqn)
    return path / meta["files"][entry["chunk_files"][0]], entry["chunk_byte_offsets"][0], entry["chunk_byte_lengths"][0]


def flip(file: Path, at: int) -> None:
    with open(file, "r+b") as handle:
        handle.seek(at)
        byte = handle.read(1)[0]
        handle.seek(at)
        handle.write(bytes([byte ^ 0x10]))


def test_crc32_is_zlibs() -> None:
    data = os.urandom(3 * BLOCK + 77)
    assert crc32(data) == zlib.crc32(data)
    assert crc32(data[1000:], crc32(data[:1000])) == zlib.crc32(data)
    assert CRC32_IMPLEMENTATION in ("zlib", "zlib-ng", "isal")


def test_without_the_faster_crc32_modules_zlib_serves(tmp_path: Path) -> None:
    one = ", no_dist=True" if ONE else ""
    code = (
        "import sys; sys.modules['zlib_ng'] = sys.modules['isal'] = None\n"
        "import torch, torch.distributed.checkpoint as dcp, inert.torch\n"
        "from inert.torch._payload import CRC32_IMPLEMENTATION\n"
        "state = {'w': torch.randn(600, 1024)}\n"
        f"dcp.save(state, storage_writer=inert.torch.FileSystemWriter({str(tmp_path)!r}){one})\n"
        "target = {'w': torch.zeros(600, 1024)}\n"
        f"inert.torch.load(target, {str(tmp_path)!r})\n"
        "print(CRC32_IMPLEMENTATION, torch.equal(target['w'], state['w']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["zlib", "True"], result.stderr


@pytest.mark.parametrize("name", sorted(TORCH_DTYPES))
def test_tensor_header_is_the_codecs(name: str) -> None:
    dtype = TORCH_DTYPES[name]
    for shape in ([], [0], [3], [2, 3, 4], [1] * 64, [5] + [1] * 6):
        # Zero bytes viewed as the dtype: torch before 2.5 cannot fill an FP8 tensor on the CPU.
        data = bytes(math.prod(shape) * dtype.itemsize)
        record = cs.encode_record({"body": {"kind": "TENSOR", "dtype": name, "shape": shape, "data": data}})
        head = tensor_header(name, shape, len(data))
        assert record == head + data + struct.pack("<I", zlib.crc32(head + data))


@pytest.mark.parametrize("threads", [1, 2])
def test_round_trip_and_a_file_the_codec_decodes_whole(tmp_path: Path, threads: int) -> None:
    state = big_state()
    save(state, tmp_path, thread_count=threads)
    for verify in (True, False):
        target = zeros_like(state)
        inert.torch.load(target, tmp_path, thread_count=threads, verify_checksums=verify)
        assert all(torch.equal(target[k], state[k]) for k in state)
    meta = cm.decode((tmp_path / ".metadata").read_bytes())
    for name in meta["files"]:
        blob = (tmp_path / name).read_bytes()
        doc = cs.decode(blob)  # padding, count and every CRC-32
        assert blob[8] == UNCOMPRESSED_VERSION  # an uncompressed save writes the oldest version that holds it
        assert cs.encode(doc, version=UNCOMPRESSED_VERSION) == blob  # byte for byte what the generated codec writes
        records = doc["records"]
        assert len(records) == sum(1 for e in meta["tensors"] for f in e["chunk_files"] if meta["files"][f] == name)


def test_destinations_the_direct_path_does_not_take(tmp_path: Path) -> None:
    state = big_state()
    save(state, tmp_path)
    target = zeros_like(state)
    target["f32"] = torch.zeros(1024, 700).t()  # not contiguous: copied from a checked whole record
    inert.torch.load(target, tmp_path)
    assert all(torch.equal(target[k], state[k]) for k in state)

    class Planner(DefaultLoadPlanner):  # a custom planner: tensors go back to the calling thread
        def resolve_tensor(self, read_item: Any) -> torch.Tensor:
            return super().resolve_tensor(read_item)

    target = zeros_like(state)
    inert.torch.load(target, tmp_path, planner=Planner())
    assert all(torch.equal(target[k], state[k]) for k in state)


def test_damage_in_a_large_record_is_a_checksum_fault(tmp_path: Path) -> None:
    state = big_state()
    save(state, tmp_path)
    file, at, length = location(tmp_path, "f32")
    good = file.read_bytes()
    for where in (at + 64 + BLOCK + 5, at + length - 9, at + 1, at + 3, at + 12):  # payload (2nd block, last), dtype, shape
        flip(file, where)
        err = failure(zeros_like(state), tmp_path)
        assert isinstance(err, ChecksumError), (where - at, err)
        file.write_bytes(good)
    flip(file, at + 64 + BLOCK + 5)
    target = zeros_like(state)
    inert.torch.load(target, tmp_path, verify_checksums=False)  # the documented opt-out reads the damaged byte
    assert not torch.equal(target["f32"], state["f32"]) and torch.equal(target["bf16"], state["bf16"])
    file.write_bytes(good)
    flip(file, at + length - 2)  # the stored CRC-32 itself: it no longer equals the metadata's
    err = failure(zeros_like(state), tmp_path, verify_checksums=False)
    assert isinstance(err, ChecksumError) and "metadata expects" in str(err)


def test_shape_is_checked_before_any_byte_is_copied(tmp_path: Path) -> None:
    state = big_state()
    save(state, tmp_path)
    file, at, length = location(tmp_path, "f32")
    record = cs.decode_record(file.read_bytes()[at : at + length])
    body = dict(record["body"], shape=[1024, 700], data=bytes(record["body"]["data"]))
    forged = cs.encode_record({"body": body})  # a well-formed record with both checksums fixed
    with open(file, "r+b") as handle:
        handle.seek(at)
        handle.write(forged)
    meta = cm.decode((tmp_path / ".metadata").read_bytes())
    entry = next(e for e in meta["tensors"] if e["fqn"] == "f32")
    entry["chunk_crcs"][0] = struct.unpack("<I", forged[-4:])[0]
    (tmp_path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))
    target = {"f32": torch.zeros(700, 1024)}
    err = failure(target, tmp_path)
    assert isinstance(err, ShapeMismatchError) and "(1024, 700)" in str(err)
    assert not target["f32"].any()


def test_truncated_large_record(tmp_path: Path) -> None:
    state = big_state()
    save(state, tmp_path)
    file, at, length = location(tmp_path, "f32")
    with open(file, "r+b") as handle:
        handle.truncate(at + length // 2)
    err = failure(zeros_like(state), tmp_path)
    assert isinstance(err, TruncatedError)


def test_a_save_replaces_data_files_rather_than_truncating_them(tmp_path: Path) -> None:
    state = big_state()
    save(state, tmp_path)
    file, at, length = location(tmp_path, "f32")
    with open(file, "rb") as held:  # a reader still at work on the previous checkpoint
        before = held.read()
        save({k: v + 1 if v.dtype != torch.bool else ~v for k, v in state.items()}, tmp_path)
        held.seek(0)
        assert held.read() == before
    target = zeros_like(state)
    inert.torch.load(target, tmp_path)
    assert torch.equal(target["f32"], state["f32"] + 1) and file.read_bytes() != before


def test_a_tensor_that_differs_from_the_plan_fails_the_save(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    class Planner(DefaultSavePlanner):
        def resolve_data(self, write_item: Any) -> Any:
            data = super().resolve_data(write_item)
            return data[:-1] if write_item.index.fqn == "f32" else data

    with pytest.raises(CheckpointException) as info:
        dcp.save(big_state(), storage_writer=FileSystemWriter(tmp_path), planner=Planner(), **ONE)
    assert "f32: the planner resolved a (699, 1024) torch.float32 tensor, the plan has (700, 1024)" in str(info.value)
    assert not (tmp_path / ".metadata").exists()


def test_a_large_value_record_where_a_tensor_is_expected(tmp_path: Path) -> None:
    save({"w": torch.randn(100_000), "v": b"\x01" * 200_000}, tmp_path)
    meta = cm.decode((tmp_path / ".metadata").read_bytes())
    entry, value = meta["tensors"][0], meta["values"][0]
    for column, key in (("chunk_byte_offsets", "byte_offset"), ("chunk_byte_lengths", "byte_length"), ("chunk_crcs", "crc")):
        entry[column][0] = value[key]
    (tmp_path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))
    for verify in (True, False):
        err = failure({"w": torch.zeros(100_000)}, tmp_path, verify_checksums=verify)
        assert isinstance(err, InvalidValueError) and "a value record where the metadata has a tensor" in str(err)
