"""inert.dump refuses every damaged or inconsistent dump with an InertError naming the file, offset and field."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch

from inert import (
    ChecksumError,
    ForeignFormatError,
    InertError,
    InvalidValueError,
    TrailingBytesError,
    TruncatedError,
    VersionError,
)
from inert.codecs import checkpoint_shard, dump_manifest, dump_shard
from inert.dump import Row, dump, load

ROWS = [
    Row("a", 10, {"ids": torch.arange(64), "jag": torch.ones(2, 3), "note": "x"}, {"t": 1}),
    Row("b", 11, {"ids": torch.arange(64) * 2, "jag": torch.ones(5, 3)}, {"t": 2}),
    Row("c", 12, {}, {}),
    Row("d", 13, {"ids": torch.arange(64) * 3, "note": "y"}, {"t": 4}),
]


@pytest.fixture
def dumped(tmp_path: Path) -> Path:
    dump(ROWS, tmp_path / "d", partition_id="p", owners=2)
    return tmp_path / "d"


def _forged(codec: Any, typename: str) -> Any:
    """A writer that skips the rules of one record (the codec's compiled ``_rules_<Typename>``), as a hostile
    peer's would (honest writers refuse)."""
    return mock.patch.object(codec, f"_rules_{typename}", lambda value, ctx: None)


def _edit_manifest(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the manifest with ``change`` applied (a well-formed file: the checksum is recomputed)."""
    value = dump_manifest.decode((path / "MANIFEST").read_bytes())
    change(value)
    with _forged(dump_manifest, "DumpManifest"):
        (path / "MANIFEST").write_bytes(dump_manifest.encode(value))


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(data)


def _reject(path: Path, kind: type[InertError], *parts: str) -> InertError:
    with pytest.raises(kind) as info:
        load(path, owners=3)
    for part in parts:
        assert part in str(info.value), (part, str(info.value))
    return info.value


def test_missing_manifest(dumped: Path) -> None:
    (dumped / "MANIFEST").unlink()
    _reject(dumped, ForeignFormatError, "dump-manifest", "MANIFEST", "not a dump")


def test_missing_directory_is_a_caller_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nowhere")


def test_a_pickle_where_the_manifest_belongs(dumped: Path) -> None:
    (dumped / "MANIFEST").write_bytes(pickle.dumps({"keys": []}))
    _reject(dumped, ForeignFormatError, "dump-manifest: offset 0", "a pickle")


def test_missing_shard(dumped: Path) -> None:
    (dumped / "shard-00001.bin").unlink()
    _reject(dumped, TruncatedError, "dump-shard", "shard-00001.bin", "missing")


def test_truncated_shard(dumped: Path) -> None:
    shard = dumped / "shard-00000.bin"
    size = shard.stat().st_size
    os.truncate(shard, size - 10)
    _reject(dumped, TruncatedError, f"offset {size - 10}", "shard-00000.bin", f"records end at {size}")


def test_bytes_after_the_last_record(dumped: Path) -> None:
    with open(dumped / "shard-00001.bin", "ab") as out:
        out.write(b"\0" * 3)
    _reject(dumped, TrailingBytesError, "shard-00001.bin", "3 bytes after the last record")


@pytest.mark.parametrize("where", ["payload", "header", "crc"])
def test_corrupt_record(dumped: Path, where: str) -> None:
    manifest = dump_manifest.decode((dumped / "MANIFEST").read_bytes())
    shard = manifest["shards"][1]  # rows b and d: tensors and values
    offset, length = shard["offsets"][1], shard["lengths"][1]
    target = {"payload": offset + length // 2, "header": offset + 2, "crc": offset + length - 1}[where]
    _flip(dumped / shard["file"], target)
    error = _reject(dumped, InertError, "dump-shard", f"{shard['file']}:rows[1]")
    if where != "header":  # a flipped header byte may make a count or a tag wrong before the checksum is reached
        assert isinstance(error, ChecksumError)
    assert offset <= error.offset <= offset + length  # file offsets, not offsets inside the record


def test_corrupt_manifest(dumped: Path) -> None:
    _flip(dumped / "MANIFEST", 40)
    _reject(dumped, InertError, "dump-manifest")


def test_unknown_manifest_version(dumped: Path) -> None:
    data = bytearray((dumped / "MANIFEST").read_bytes())
    data[8:10] = (2).to_bytes(2, "little")
    (dumped / "MANIFEST").write_bytes(data)
    _reject(dumped, VersionError, "dump-manifest: offset 8: format_version", "version 2")


def test_unknown_shard_version(dumped: Path) -> None:
    shard = dumped / "shard-00000.bin"
    data = bytearray(shard.read_bytes())
    data[8:10] = (9).to_bytes(2, "little")
    shard.write_bytes(data)
    _reject(dumped, VersionError, "dump-shard", "shard-00000.bin", "version 9")


def test_record_dtype_disagrees_with_schema(dumped: Path) -> None:
    def change(value: dict[str, Any]) -> None:
        value["fields"][0]["layout"]["dtype"] = "INT32"

    _edit_manifest(dumped, change)
    _reject(dumped, InvalidValueError, "dump-shard", "fields[0].body.dtype", "INT64 where the manifest declares INT32")


def test_record_shape_disagrees_with_schema(dumped: Path) -> None:
    def change(value: dict[str, Any]) -> None:
        value["fields"][0]["layout"]["shape"] = [65]

    _edit_manifest(dumped, change)
    _reject(dumped, InvalidValueError, "fields[0].body.shape", "[64] where the manifest declares [65]")


def test_nested_shape_disagrees_with_the_key(dumped: Path) -> None:
    def change(value: dict[str, Any]) -> None:
        value["keys"][1]["nested_shapes"][0] = [4, 3]

    _edit_manifest(dumped, change)
    _reject(dumped, InvalidValueError, "fields[1].body.shape", "[5, 3] where the manifest declares [4, 3]")


def test_record_of_another_row(dumped: Path) -> None:
    def change(value: dict[str, Any]) -> None:
        value["keys"][0]["global_index"] = 99

    _edit_manifest(dumped, change)
    _reject(dumped, InvalidValueError, "global_index", "global index 10", "has 99")


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (lambda v: v["keys"][1].update(key="a"), "keys[1].key", "'a' appears twice"),
        (lambda v: v["fields"][1].update(name="ids"), "fields[1].name", "'ids' appears twice"),
        (lambda v: v["keys"][0].update(fields=[2, 0]), "keys[0].fields[1]", "not ascending"),
        (lambda v: v["keys"][0].update(fields=[0, 7]), "keys[0].fields[1]", "below 3"),
        (lambda v: v["keys"][0].update(nested_shapes=[]), "keys[0].nested_shapes", "fewer shapes"),
        (lambda v: v["shards"][0].update(file="../escape"), "shards[0].file", "not a plain shard file name"),
        (lambda v: v["shards"][1].update(file=v["shards"][0]["file"]), "shards[1].file", "appears twice"),
        (lambda v: v["shards"][0]["rows"].__setitem__(0, v["shards"][1]["rows"][0]), "rows[0]", "stored twice"),
        (lambda v: v["shards"][0]["rows"].__setitem__(0, 40), "shards[0].rows[0]", "not below the 4 keys"),
        (lambda v: v["shards"][0]["offsets"].__setitem__(1, 200), "shards[0].offsets[1]", "record at 200"),
        (lambda v: v["shards"][0]["lengths"].pop(), "shards[0]", "2 rows, 2 offsets and 1 length"),
    ],
)
def test_inconsistent_manifest(dumped: Path, change: Callable[[dict[str, Any]], Any], field: str, reason: str) -> None:
    _edit_manifest(dumped, change)
    error = _reject(dumped, InvalidValueError, "dump-manifest", reason)
    assert field in error.field


def test_a_shard_of_another_format(dumped: Path) -> None:
    (dumped / "shard-00001.bin").write_bytes(b"PK\x03\x04" + bytes(200))
    _reject(dumped, ForeignFormatError, "shard-00001.bin", "a zip archive")


def test_row_count_in_the_shard_header(dumped: Path) -> None:
    shard = dumped / "shard-00000.bin"
    data = bytearray(shard.read_bytes())
    data[10:14] = (7).to_bytes(4, "little")
    shard.write_bytes(data)
    _reject(dumped, InvalidValueError, "shard-00000.bin:rows", "holds 7 rows, the manifest 2")


def test_nothing_is_handed_out_before_every_row_is_checked(dumped: Path) -> None:
    manifest = dump_manifest.decode((dumped / "MANIFEST").read_bytes())
    shard = manifest["shards"][1]
    _flip(dumped / shard["file"], shard["offsets"][-1] + 20)
    with pytest.raises(InertError):
        load(dumped, owners=1, batch_rows=1)


def test_decoders_accept_what_the_writers_wrote(dumped: Path) -> None:
    for name in ("shard-00000.bin", "shard-00001.bin"):
        value = dump_shard.decode((dumped / name).read_bytes())
        assert len(value["rows"]) == 2


@pytest.mark.parametrize("split", [False, True])
def test_padding_between_records_is_checked_whoever_reads_them(dumped: Path, split: bool) -> None:
    manifest = dump_manifest.decode((dumped / "MANIFEST").read_bytes())
    shard = manifest["shards"][0]
    gap = shard["offsets"][0] + shard["lengths"][0]
    assert shard["offsets"][1] > gap  # there is padding after the first record
    _flip(dumped / shard["file"], gap)
    with pytest.raises(InvalidValueError, match=rf"offset {gap}: shard-00000.bin:rows\[1\].pad: padding bytes are not zero"):
        # Split: the two records of that shard go to different owners; the padding is still read and checked.
        load(dumped, owners=2, route=(lambda info: int(info.key != "a")) if split else None)


def test_padding_before_the_first_record_is_checked(dumped: Path) -> None:
    _flip(dumped / "shard-00000.bin", 30)
    _reject(dumped, InvalidValueError, "offset 14: shard-00000.bin:pad")


def test_a_bool_byte_other_than_0_and_1(tmp_path: Path) -> None:
    dump([Row("k", 0, {"mask": torch.tensor([True, False, True])})], tmp_path / "d")
    manifest = dump_manifest.decode((tmp_path / "d" / "MANIFEST").read_bytes())
    offset = manifest["shards"][0]["offsets"][0]
    shard = tmp_path / "d" / "shard-00000.bin"
    data = bytearray(shard.read_bytes())
    record = dump_shard.decode_record(bytes(data[offset:]))
    payload = bytes(data).index(bytes([1, 0, 1]), offset)
    data[payload] = 2
    # Recompute the record's checksum: the damage must be caught by the value check, not the CRC.
    record["fields"][0]["body"]["data"] = bytes([2, 0, 1])
    with _forged(checkpoint_shard, "TensorRecord"):  # a row field's body is checkpoint-shard's, written by its codec
        data[offset:] = dump_shard.encode_record(record)
    shard.write_bytes(data)
    _reject(tmp_path / "d", InvalidValueError, "rows[0].fields[0].body.data", "byte other than 0 and 1")
