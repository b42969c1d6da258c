"""inert.dump's fast paths: record frames (dense rows) agree with the codec byte for byte, and mapped loads.

Rows whose fields are all dense are written and checked through one frame per
field set instead of a codec call per row; every damaged record must still be
refused with the codec's error, and the tensors handed out are copy-on-write
views of the shard files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from inert import ChecksumError, InertError, InvalidValueError
from inert.codecs import dump_manifest, dump_shard
from inert.dump import Row, dump, load
from inert.dump._frames import Frame
from inert.torch._compat import dtype_name

LAYOUTS: list[list[tuple[str, torch.dtype, tuple[int, ...]]]] = [
    [],
    [("ids", torch.int64, (8192,)), ("logprobs", torch.float32, (8192,))],
    [("scalar", torch.float64, ()), ("empty", torch.int32, (0, 5)), ("mask", torch.bool, (3, 7))],
    [("odd", torch.uint8, (13,)), ("half", torch.bfloat16, (2, 3, 5)), ("c", torch.complex64, (4,))],
]


def _values(layout: list[tuple[str, torch.dtype, tuple[int, ...]]], seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _, dtype, shape in layout:
        raw = torch.randint(0, 2 if dtype == torch.bool else 256, shape, generator=gen, dtype=torch.uint8)
        out.append(raw.bool() if dtype == torch.bool else raw.to(dtype))
    return out


def _record(layout: list[tuple[str, torch.dtype, tuple[int, ...]]], index: int, values: list[torch.Tensor]) -> bytes:
    fields = [
        {"name": name, "body": {"kind": "TENSOR", "dtype": dtype_name(dtype, name), "shape": list(shape), "data": _data(v)}}
        for (name, dtype, shape), v in zip(layout, values, strict=True)
    ]
    return dump_shard.encode_record({"global_index": index, "fields": fields})


def _data(value: torch.Tensor) -> memoryview:
    return memoryview(value.contiguous().reshape(-1).view(torch.uint8).numpy())


def _frame(layout: list[tuple[str, torch.dtype, tuple[int, ...]]]) -> Frame:
    return Frame([(name, dtype_name(dtype, name), shape) for name, dtype, shape in layout])


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: "+".join(n for n, _, _ in layout) or "none")
def test_a_frame_writes_what_the_codec_writes(layout: list[tuple[str, torch.dtype, tuple[int, ...]]]) -> None:
    frame = _frame(layout)
    for index in (0, 1, 2**40 + 3, 2**64 - 1):
        values = _values(layout, index % 97)
        parts = frame.parts(index, [_data(v) for v in values])
        assert parts is not None
        assert b"".join(parts) == _record(layout, index, values)
    assert frame.parts(-1, [_data(v) for v in _values(layout, 0)]) is None  # the codec names that fault
    assert frame.parts(2**64, [_data(v) for v in _values(layout, 0)]) is None


@pytest.mark.parametrize("layout", LAYOUTS[1:], ids=lambda layout: "+".join(n for n, _, _ in layout))
def test_a_frame_accepts_only_its_own_whole_records(layout: list[tuple[str, torch.dtype, tuple[int, ...]]]) -> None:
    frame = _frame(layout)
    values = _values(layout, 5)
    record = _record(layout, 77, values)
    views = frame.payloads(memoryview(record))
    assert views is not None and [bytes(v) for v in views] == [bytes(_data(v)) for v in values]
    # Every byte outside the payloads is compared, and the CRC-32 covers the rest: any flip is refused.
    offsets, pos = list(range(8)), 8
    for gap, size in zip(frame.gaps, [*frame.sizes, 4], strict=True):
        offsets += range(pos, pos + len(gap) + min(size, 16))  # the gap and the start of what follows it
        offsets += range(pos + len(gap), pos + len(gap) + size, 509)  # payload bytes, sampled
        pos += len(gap) + size
    assert pos == len(record)
    for offset in offsets:
        damaged = bytearray(record)
        damaged[offset] ^= 0x01
        assert frame.payloads(memoryview(damaged)) is None, offset
    assert frame.payloads(memoryview(record + bytes(4))) is None
    assert frame.payloads(memoryview(record[:-1])) is None
    other = [(name + "x", dtype, shape) for name, dtype, shape in layout]
    assert frame.payloads(memoryview(_record(other, 77, values))) is None


def dense_rows(count: int = 8) -> list[Row]:
    batch = torch.arange(count * 96, dtype=torch.int64).reshape(count, 96)
    return [Row(f"k{i}", 50 + i, {"ids": batch[i], "lp": batch[i].float() / 3}, {"i": i}) for i in range(count)]


@pytest.fixture
def dense(tmp_path: Path) -> Path:
    dump(dense_rows(), tmp_path / "d", owners=2)
    return tmp_path / "d"


def _shard(path: Path) -> dict[str, Any]:
    return dump_manifest.decode((path / "MANIFEST").read_bytes())["shards"][1]


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(data)


@pytest.mark.parametrize("mapped", [False, True])
def test_dense_rows_round_trip(dense: Path, mapped: bool) -> None:
    rows = dense_rows()
    got = {row.key: row for row in load(dense, owners=3, mapped=mapped).rows}
    for row in rows:
        assert got[row.key].global_index == row.global_index and got[row.key].tag == row.tag
        for name, value in row.fields.items():
            assert got[row.key].fields[name].dtype == value.dtype and torch.equal(got[row.key].fields[name], value)


@pytest.mark.parametrize(("where", "kind"), [("payload", ChecksumError), ("crc", ChecksumError), ("count", InertError)])
def test_damaged_dense_record_gets_the_codecs_error(dense: Path, where: str, kind: type[InertError]) -> None:
    shard = _shard(dense)
    offset, length = shard["offsets"][2], shard["lengths"][2]
    target = {"payload": offset + length // 2, "crc": offset + length - 1, "count": offset + 9}[where]
    _flip(dense / shard["file"], target)
    with pytest.raises(kind) as info:
        load(dense, owners=2)
    assert f"{shard['file']}:rows[2]" in str(info.value)
    assert offset <= info.value.offset <= offset + length


def test_dense_record_of_another_row(dense: Path) -> None:
    value = dump_manifest.decode((dense / "MANIFEST").read_bytes())
    value["keys"][3]["global_index"] = 999
    (dense / "MANIFEST").write_bytes(dump_manifest.encode(value))
    with pytest.raises(InvalidValueError, match=r"global_index: record of global index 53, the manifest's key 'k3' has 999"):
        load(dense)


def test_dense_shape_disagrees_with_schema(dense: Path) -> None:
    value = dump_manifest.decode((dense / "MANIFEST").read_bytes())
    value["fields"][1]["layout"]["shape"] = [97]
    (dense / "MANIFEST").write_bytes(dump_manifest.encode(value))
    with pytest.raises(InvalidValueError, match=r"fields\[1\]\.body\.shape: \[96\] where the manifest declares \[97\]"):
        load(dense)


def test_a_huge_declared_shape_builds_no_frame(dense: Path) -> None:
    # A frame costs a pass over its payload size: the one a manifest declares must fit the record first.
    value = dump_manifest.decode((dense / "MANIFEST").read_bytes())
    value["fields"][0]["layout"]["shape"] = [1 << 50]
    (dense / "MANIFEST").write_bytes(dump_manifest.encode(value))
    with pytest.raises(InvalidValueError, match=r"fields\[0\]\.body\.shape"):
        load(dense)


def test_mapped_tensors_are_private_copies_on_write(dense: Path) -> None:
    shard = dense / "shard-00000.bin"
    before = shard.read_bytes()
    rows = load(dense, mapped=True).rows
    for row in rows:
        row.fields["ids"].add_(1)  # writable, and the file does not change
    assert shard.read_bytes() == before
    expected = {row.key: row.fields["ids"] + 1 for row in dense_rows()}
    assert all(torch.equal(row.fields["ids"], expected[row.key]) for row in rows)


def test_tensors_outlive_the_loader_and_copies_outlive_the_files(dense: Path) -> None:
    mapped = load(dense, mapped=True).rows
    copied = load(dense).rows
    shard = dense / "shard-00000.bin"
    # An in-place rewrite (a published dump is never changed so; this is why private memory is the default).
    data = bytearray(shard.read_bytes())
    data[64:] = bytes(len(data) - 64)
    with open(shard, "r+b") as out:
        out.write(data)
    rows = {row.key: row for row in dense_rows()}
    for row in copied:
        assert torch.equal(row.fields["ids"], rows[row.key].fields["ids"])
    assert len(mapped) == len(rows)
    del mapped  # the mappings go with their last tensor
    os.unlink(shard)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (Row("k1", -1, {"ids": torch.arange(4)}), r"dump-shard: row 'k1'\.global_index: -1 is not an int in 0\.\.2\*\*64-1"),
        (Row("k1", 1, {"x" * 1025: torch.arange(4)}), r"row 'k[01]'\.fields\[0\]\.name: string length 1025 exceeds"),
    ],
)
def test_dense_rows_the_codec_refuses_are_named(tmp_path: Path, row: Row, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dump([Row("k0", 0, {name: torch.arange(4) for name in row.fields}), row], tmp_path / "d", owners=2)
    assert os.listdir(tmp_path) == []


def test_rows_above_the_frame_limit_go_through_the_codec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import inert.dump._frames

    monkeypatch.setattr(inert.dump._frames, "MAX_FRAMED_PAYLOAD", 100)  # the dense rows below carry 1152 bytes
    assert inert.dump._frames.frame_for([("ids", "INT64", (96,)), ("lp", "FLOAT32", (96,))]) is None
    rows = dense_rows()
    dump(rows, tmp_path / "d", owners=2)
    got = {row.key: row for row in load(tmp_path / "d", owners=3).rows}
    assert all(torch.equal(got[row.key].fields["lp"], row.fields["lp"]) for row in rows)
    shard = _shard(tmp_path / "d")
    _flip(tmp_path / "d" / shard["file"], shard["offsets"][0] + shard["lengths"][0] // 2)
    with pytest.raises(ChecksumError, match=r"rows\[0\]\.crc32"):
        load(tmp_path / "d")


def test_any_flipped_byte_of_a_dense_shard_is_refused(tmp_path: Path) -> None:
    rows = dense_rows(3)
    dump(rows, tmp_path / "d")
    shard = tmp_path / "d" / "shard-00000.bin"
    original = shard.read_bytes()
    # Every byte outside the payloads, and every 7th byte inside them (each covered by the CRC-32 alike).
    record = dump_manifest.decode((tmp_path / "d" / "MANIFEST").read_bytes())["shards"][0]
    payload = _frame([("ids", torch.int64, (96,)), ("lp", torch.float32, (96,))])
    inside: set[int] = set()
    for offset in record["offsets"]:
        pos = offset + 8
        for gap, size in zip(payload.gaps, payload.sizes, strict=False):
            inside.update(range(pos + len(gap), pos + len(gap) + size))
            pos += len(gap) + size
    for at in range(len(original)):
        if at in inside and at % 7:
            continue
        damaged = bytearray(original)
        damaged[at] ^= 0x01
        shard.write_bytes(damaged)
        with pytest.raises(InertError):
            load(tmp_path / "d")
