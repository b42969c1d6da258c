"""Compressed records chosen for cost: each case measured in a process of its own against the stated bound.

docs/readers.md ("Compressed records") states the bound: a value's ZSTD frame may inflate to at most
its stored bytes (``VALUE_MAX_RATIO`` = 1), checked before inflating, so the readers' promise (about
1 s of CPU per MiB of input, at most 100 bytes of memory per input byte plus 1 MiB) holds; a tensor's
frame inflates into the destination its metadata declares, which costs those bytes and no copy.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint._extension import ZStandard

from inert._zstd import VALUE_MAX_RATIO, deflate
from inert.codecs import checkpoint_metadata as cm
from inert.conformance._filelib import value_body, zstd_body
from inert.torch import FileSystemWriter
from inert.torch._metadata import METADATA_VERSION

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
MIB = 1 << 20

_MEASURE = """
import json, resource, runpy, sys
import fsspec, torch, torch.distributed.checkpoint as dcp
import inert, inert.torch

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

def in_memory(path, name):  # the checkpoint's files copied into fsspec's memory filesystem
    fs = fsspec.filesystem("memory")
    for file in __import__("pathlib").Path(path).iterdir():
        fs.pipe(f"/{name}/{file.name}", file.read_bytes())
    return f"memory://{name}"

def run(entry, path, name):
    try:
        if entry == "verify":
            sys.argv = ["inert", "verify", path]
            runpy.run_module("inert", run_name="__main__", alter_sys=True)
        elif entry == "load_tensors":
            inert.torch.load_tensors(path)
        else:
            url = {"dcp.load": None, "file://": f"file://{path}", "memory://": in_memory(path, name)}[entry]
            reader = inert.torch.FileSystemReader(path) if url is None else inert.torch.FsspecReader(url)
            dcp.load({'w': torch.zeros(4096), 'v': [None]}, storage_reader=reader, no_dist=True)
    except SystemExit as exc:
        return f"exit {exc.code}"
    except BaseException as exc:  # dcp.load wraps the reader's error in its CheckpointException
        return f"{type(exc).__name__}: {exc}"
    return "returned"

entry, warm, hostile = sys.argv[1:4]
run(entry, warm, "warm")  # imports and first-call costs are the program's, not the input's
rss, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, cpu()
outcome = run(entry, hostile, "hostile")
print(json.dumps({"cpu": cpu() - start, "rss": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024,
                  "outcome": outcome}))
"""


def _measure(entry: str, warm: Path, hostile: Path) -> tuple[dict[str, float], str]:
    result = subprocess.run([sys.executable, "-c", _MEASURE, entry, str(warm), str(hostile)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    cost = json.loads(lines[-1])
    return cost, "\n".join([cost["outcome"], *lines[:-1], result.stderr])


def _size(path: Path) -> int:
    return sum(file.stat().st_size for file in path.iterdir())


def _state() -> dict[str, object]:
    """What the checkpoints hold (and the child loads into): a tensor that compresses, so that the warm
    run inflates too, and a value."""
    return {"w": torch.zeros(4096), "v": [None]}


def _save(path: Path, state: dict[str, object]) -> None:
    dcp.save(state, storage_writer=FileSystemWriter(path, _extensions=[ZStandard()]), no_dist=True)


def _nil_bomb(tmp_path: Path) -> tuple[Path, Path]:
    """An honest compressed checkpoint, and a copy whose value record is a ZSTD frame of 1,055 bytes
    inflating to a 32 MiB document of nils (a list of 33 million items), every CRC-32 right."""
    warm = tmp_path / "warm"
    _save(warm, _state())
    hostile = tmp_path / "hostile"
    shutil.copytree(warm, hostile)
    count = (32 << 20) - 5
    body = value_body(b"\xdd" + struct.pack(">I", count) + b"\xc0" * count)
    frame = deflate([body])
    meta = cm.decode((hostile / ".metadata").read_bytes())
    [entry] = meta["values"]
    data_file = hostile / meta["files"][entry["file"]]
    at = entry["byte_offset"]  # in place of the value's record, the last of its file (the tensor's is first)
    data = data_file.read_bytes()
    assert at + entry["byte_length"] == len(data)
    stored = zstd_body(at, len(body), frame)
    record = stored + struct.pack("<I", zlib.crc32(stored))
    data_file.write_bytes(data[:at] + record)
    entry.update(byte_offset=at, byte_length=len(record), crc=zlib.crc32(stored))
    (hostile / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))
    assert len(frame) < 1100 and _size(hostile) - _size(warm) < 1200
    return warm, hostile


@pytest.mark.parametrize("entry", ["dcp.load", "verify", "file://", "memory://"])
def test_a_value_frame_inflating_to_32_mib_of_nils_is_refused_before_inflating(tmp_path: Path, entry: str) -> None:
    warm, hostile = _nil_bomb(tmp_path)
    size = _size(hostile)
    cost, outcome = _measure(entry, warm, hostile)
    assert "LimitError" in outcome or entry == "verify", outcome
    assert "checkpoint-shard: offset " in outcome and "v.body.inflated_length" in outcome, outcome
    assert f"a value inflates to at most {VALUE_MAX_RATIO}x its stored frame" in outcome, outcome
    if entry == "verify":
        assert outcome.startswith("exit 1"), outcome
    assert cost["cpu"] <= size / MIB + 0.2, (entry, cost, size)
    assert cost["rss"] <= 100 * size + MIB, (entry, cost, size)


def test_values_are_stored_as_they_are_in_a_compressed_checkpoint(tmp_path: Path) -> None:
    """A writer never makes what readers refuse: a value that deflates 18,000-fold is stored whole."""
    from inert.codecs import checkpoint_shard as shard

    state = {"w": torch.zeros(4096), "nils": [None] * 1_000_000, "note": "x" * 500}
    _save(tmp_path, state)
    meta = cm.decode((tmp_path / ".metadata").read_bytes())
    data = (tmp_path / meta["files"][0]).read_bytes()
    for entry in meta["values"]:
        record = data[entry["byte_offset"] : entry["byte_offset"] + entry["byte_length"]]
        assert shard.decode_record(record, version=2)["body"]["kind"] == shard.RecordKindV2.VALUE
    into = {"w": torch.ones(4096), "nils": None, "note": ""}
    dcp.load(into, storage_reader=__import__("inert.torch").torch.FileSystemReader(tmp_path), no_dist=True)
    assert torch.equal(into["w"], state["w"]) and into["nils"] == state["nils"] and into["note"] == state["note"]


def test_512_mib_of_zeros_in_16_kb_loads_into_the_declared_tensor_and_no_more(tmp_path: Path) -> None:
    """A real save of a 512 MiB zero tensor is 16 KB of RLE blocks (32,724x): the bound is the tensor the
    metadata declares, which ``load_tensors`` allocates once and inflates into without a copy."""
    warm = tmp_path / "warm"
    _save(warm, _state())
    hostile = tmp_path / "zeros"
    _save(hostile, {"w": torch.zeros(128 << 20)})
    size = _size(hostile)
    assert size < 17 << 10, size
    cost, outcome = _measure("load_tensors", warm, hostile)
    assert outcome.startswith("returned"), outcome
    declared = 512 << 20
    assert cost["rss"] <= declared + 100 * size + 8 * MIB, cost
    assert cost["cpu"] <= 2.0, cost


def test_verify_of_512_mib_of_zeros_in_16_kb_inflates_a_block_at_a_time(tmp_path: Path) -> None:
    """``inert verify`` loads nothing: a compressed tensor record costs its stored bytes, one block and the
    decoder's window, not the tensor it declares.  An inflated header other than the metadata's is named
    from that header alone."""
    warm = tmp_path / "warm"
    _save(warm, _state())
    hostile = tmp_path / "zeros"
    _save(hostile, {"w": torch.zeros(128 << 20)})
    size = _size(hostile)
    cost, outcome = _measure("verify", warm, hostile)
    assert outcome.startswith("exit 0"), outcome
    assert cost["rss"] <= 100 * size + 8 * MIB, cost
    assert cost["cpu"] <= 2.0, cost
    meta = cm.decode((hostile / ".metadata").read_bytes())
    meta["tensors"][0]["size"] = [64 << 20, 2]  # the same bytes under another shape: the inflated header differs
    meta["tensors"][0]["chunk_sizes"] = [64 << 20, 2]
    meta["tensors"][0]["chunk_offsets"] = [0, 0]
    (hostile / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))
    cost, outcome = _measure("verify", warm, hostile)
    assert outcome.startswith("exit 1") and "w: record holds (134217728,) torch.float32" in outcome, outcome
    assert cost["rss"] <= 100 * size + 8 * MIB, cost
