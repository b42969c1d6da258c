"""inert.torch.load_tensors: a checkpoint's tensors read without dcp.load, under the reader's checks.

Exact round trips (new tensors and in place, through both read paths), the chunks of
a sharded tensor assembled, destinations checked before any byte is copied, and
damaged or forged files refused with an InertError before a tensor is allocated
for bytes that are not there.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

from inert import ChecksumError, ForeignFormatError, InertError, InvalidValueError, LimitError, TruncatedError
from inert._audit import no_execution
from inert.codecs import checkpoint_metadata as cm
from inert.torch import FileSystemWriter, ShapeMismatchError, load_tensors
from inert.torch._compat import no_dist_options
from inert.torch._metadata import METADATA_VERSION
from inert.torch._tensors import MAX_TILING_CELLS

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ONE = no_dist_options(dcp.save)


def save(state: dict[str, Any], path: Path) -> None:
    dcp.save(state, storage_writer=FileSystemWriter(path), **ONE)


def raw(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def state() -> dict[str, Any]:
    torch.manual_seed(0)
    return {
        "big": torch.randn(300, 1024),  # 1.2 MiB: read straight into place
        "bf16": torch.randn(3, 77, 513).to(torch.bfloat16),
        "i8": torch.arange(-50, 50, dtype=torch.int8),
        "bool": torch.rand(70_000) > 0.5,  # large, but bytes the codec checks one by one: read whole
        "c64": torch.randn(5, 3, dtype=torch.complex64),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "empty": torch.zeros(0, 4),
        "nested": {"w": torch.arange(12.0).reshape(3, 4)},
        "value": {"lr": 0.1},
        "step": 7,  # a top-level value: PyTorch 2.3's DCP drops nested ones
    }


def flat(s: dict[str, Any]) -> dict[str, torch.Tensor]:
    out = {k: v for k, v in s.items() if isinstance(v, torch.Tensor)}
    out["nested.w"] = s["nested"]["w"]
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("verify", [True, False])
def test_new_tensors_round_trip_exactly(tmp_path: Path, threads: int, verify: bool) -> None:
    s = state()
    save(s, tmp_path)
    with no_execution() as events:
        got = load_tensors(tmp_path, verify_checksums=verify, thread_count=threads)
    assert events == []
    want = flat(s)
    assert sorted(got) == sorted(want)  # every tensor, no value
    for key, tensor in want.items():
        assert got[key].dtype == tensor.dtype and got[key].shape == tensor.shape and raw(got[key]) == raw(tensor), key


def test_in_place_fills_the_given_tensors_only(tmp_path: Path) -> None:
    s = state()
    save(s, tmp_path)
    param = torch.nn.Parameter(torch.zeros(300, 1024))
    column_major = torch.zeros(77, 513, 3).permute(2, 0, 1).to(torch.bfloat16)  # not contiguous: read whole, copied
    into = {"big": param, "bf16": column_major, "nested.w": torch.zeros(3, 4)}
    assert load_tensors(tmp_path, into) is into
    assert into["big"] is param and raw(param) == raw(s["big"]) and param.requires_grad
    assert raw(column_major) == raw(s["bf16"]) and raw(into["nested.w"]) == raw(s["nested"]["w"])


def merge(path: Path, parts: list[str], name: str, offsets: list[list[int]], size: list[int]) -> None:
    """Forge one tensor ``name`` out of the saved tensors ``parts`` (the chunks a sharded save writes)."""
    meta = cm.decode((path / ".metadata").read_bytes())
    entries = [next(e for e in meta["tensors"] if e["fqn"] == part) for part in parts]
    merged = dict(entries[0], fqn=name, size=size, chunk_offsets=[x for o in offsets for x in o],
                  chunk_sizes=[x for e in entries for x in e["chunk_sizes"]])
    for column in ("chunk_files", "chunk_byte_offsets", "chunk_byte_lengths", "chunk_crcs"):
        merged[column] = [x for e in entries for x in e[column]]
    meta["tensors"] = [e for e in meta["tensors"] if e["fqn"] not in parts] + [merged]
    meta["planner_data"] = {name: (name,)}
    (path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))


def test_chunks_are_assembled(tmp_path: Path) -> None:
    torch.manual_seed(1)
    whole = torch.randn(64, 600)  # four chunks: rows 0-31 in two column halves (read whole), rows 32-63 in two bands
    parts = {"p0": whole[:32, :300], "p1": whole[:32, 300:], "p2": whole[32:48], "p3": whole[48:]}
    save({k: v.contiguous() for k, v in parts.items()}, tmp_path)
    merge(tmp_path, list(parts), "w", [[0, 0], [0, 300], [32, 0], [48, 0]], [64, 600])
    for into in (None, {"w": torch.zeros(64, 600)}):
        got = load_tensors(tmp_path, into)
        assert list(got) == ["w"] and torch.equal(got["w"], whole)


@pytest.mark.parametrize(("offsets", "reason"), [
    ([[0, 0], [0, 300], [32, 0], [40, 0]], "overlaps another"),  # the last part drawn over the third
    ([[0, 0], [0, 300], [32, 0], [48, 0], [0, 0]], "hold"),  # one chunk twice: more elements than the tensor
])
def test_chunks_that_do_not_tile_are_refused(tmp_path: Path, offsets: list[list[int]], reason: str) -> None:
    torch.manual_seed(1)
    whole = torch.randn(64, 600)
    parts = {"p0": whole[:32, :300], "p1": whole[:32, 300:], "p2": whole[32:48], "p3": whole[48:], "p4": whole[:32, :300]}
    save({k: v.contiguous() for k, v in list(parts.items())[: len(offsets)]}, tmp_path)
    merge(tmp_path, list(parts)[: len(offsets)], "w", offsets, [64, 600])
    dest = torch.full((64, 600), 7.0)
    with pytest.raises(InvalidValueError, match=reason):
        load_tensors(tmp_path, {"w": dest})
    assert bool((dest == 7.0).all())  # refused before any byte was copied


def test_a_gap_between_chunks_is_refused(tmp_path: Path) -> None:
    save({"p0": torch.ones(32, 8), "p1": torch.ones(16, 8)}, tmp_path)
    merge(tmp_path, ["p0", "p1"], "w", [[0, 0], [48, 0]], [64, 8])  # rows 32-47 in no chunk
    with pytest.raises(InvalidValueError, match=r"w.chunks: 2 chunks hold 384 elements, the tensor has 512"):
        load_tensors(tmp_path)


def test_a_grid_too_fine_to_check_is_a_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save({"p0": torch.ones(2, 8), "p1": torch.ones(2, 8)}, tmp_path)
    merge(tmp_path, ["p0", "p1"], "w", [[0, 0], [2, 0]], [4, 8])
    monkeypatch.setattr("inert._records.MAX_TILING_CELLS", 1)
    with pytest.raises(LimitError, match=r"draw 2 cells, exceeds max_cells\(1\)"):
        load_tensors(tmp_path)
    assert MAX_TILING_CELLS >= 1 << 20


def test_destinations_are_checked_before_any_byte_is_copied(tmp_path: Path) -> None:
    s = state()
    save(s, tmp_path)
    first = torch.zeros(300, 1024)
    cases = [
        ({"big": first, "bf16": torch.zeros(3, 77, 512, dtype=torch.bfloat16)},
         r"bf16: destination is \(3, 77, 512\) torch.bfloat16, the checkpoint holds \(3, 77, 513\) torch.bfloat16"),
        ({"big": first, "i8": torch.zeros(100, dtype=torch.int16)},
         r"i8: destination is \(100,\) torch.int16, the checkpoint holds \(100,\) torch.int8"),
        ({"big": first, "missing": torch.zeros(1)}, r"missing: the checkpoint has no entry under this name"),
        ({"big": first, "step": torch.zeros(1)}, r"step: the checkpoint has a value, not a tensor"),
    ]
    for into, message in cases:
        with pytest.raises(ShapeMismatchError, match=message):
            load_tensors(tmp_path, into)
        assert not first.any()  # "big" comes first and was not read
    with pytest.raises(TypeError, match="into\\['big'\\] is a list"):
        load_tensors(tmp_path, {"big": [0.0]})  # type: ignore[dict-item]


def data_file(path: Path) -> Path:
    meta = cm.decode((path / ".metadata").read_bytes())
    return path / meta["files"][0]


def test_damaged_and_truncated_files(tmp_path: Path) -> None:
    s = state()
    save(s, tmp_path)
    meta = cm.decode((tmp_path / ".metadata").read_bytes())
    entry = next(e for e in meta["tensors"] if e["fqn"] == "big")
    at, length = entry["chunk_byte_offsets"][0], entry["chunk_byte_lengths"][0]
    shard = data_file(tmp_path)
    good = shard.read_bytes()
    for where in (at + 2, at + 200, at + length - 2):  # header, payload, stored CRC-32
        bad = bytearray(good)
        bad[where] ^= 0x40
        shard.write_bytes(bytes(bad))
        with pytest.raises(InertError):
            load_tensors(tmp_path)
    bad = bytearray(good)
    bad[at + 200] ^= 0x40
    shard.write_bytes(bytes(bad))
    with pytest.raises(ChecksumError, match=r"big\.crc32: stored CRC-32"):
        load_tensors(tmp_path)
    assert load_tensors(tmp_path, verify_checksums=False)["big"].shape == (300, 1024)  # the documented opt-out
    for end in (at + length - 1, at + 100, 0):
        shard.write_bytes(good[:end])
        with pytest.raises(TruncatedError, match="ends beyond"):
            load_tensors(tmp_path)
    shard.write_bytes(good)
    metadata = (tmp_path / ".metadata").read_bytes()
    (tmp_path / ".metadata").write_bytes(metadata[:-10])
    with pytest.raises(InertError):
        load_tensors(tmp_path)


def test_a_forged_size_allocates_nothing(tmp_path: Path) -> None:
    save({"w": torch.ones(4, 4)}, tmp_path)
    meta = cm.decode((tmp_path / ".metadata").read_bytes())
    meta["tensors"][0].update(size=[1 << 20, 1 << 20], chunk_sizes=[1 << 20, 1 << 20])  # 4 TiB in a 64-byte record
    (tmp_path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))
    with pytest.raises(TruncatedError, match=r"w.chunks\[0\]: a record of \d+ bytes for a chunk of 4398046511104"):
        load_tensors(tmp_path)
    meta["tensors"][0].update(size=[4, 4], chunk_sizes=[4, 4], chunk_byte_lengths=[1 << 40])  # a record past the end
    (tmp_path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))
    with pytest.raises(TruncatedError, match="ends beyond"):
        load_tensors(tmp_path)


def test_foreign_checkpoints_are_named(tmp_path: Path) -> None:
    dcp.save({"w": torch.ones(3)}, storage_writer=dcp.FileSystemWriter(tmp_path), **ONE)
    with pytest.raises(ForeignFormatError, match=re.escape("inert migrate")):
        load_tensors(tmp_path)


@pytest.mark.parametrize("target", ["data", "metadata"])
def test_any_flipped_byte_gives_the_tensors_or_an_inert_error(tmp_path: Path, target: str) -> None:
    s = state()
    save(s, tmp_path)
    want = {k: raw(v) for k, v in flat(s).items()}
    path = data_file(tmp_path) if target == "data" else tmp_path / ".metadata"
    good = path.read_bytes()
    rng = random.Random(7)
    outcomes = {"same": 0, "refused": 0}
    for at in [rng.randrange(len(good)) for _ in range(120)]:
        bad = bytearray(good)
        bad[at] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(bad))
        try:
            got = load_tensors(tmp_path)
        except InertError:
            outcomes["refused"] += 1
            continue
        assert {k: raw(v) for k, v in got.items()} == want, at  # a byte no read covers (padding between records)
        outcomes["same"] += 1
    path.write_bytes(good)
    assert outcomes["refused"] > 60
