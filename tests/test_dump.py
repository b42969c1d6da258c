"""inert.dump: round trips across owner counts, what survives, publication, read-only loading, views."""

from __future__ import annotations

import doctest
import os
import pickle
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import inert.dump._read
import inert.dump._write
from inert import _audit
from inert.dump import DENSE, NESTED, VALUE, KeyInfo, Row, dump, load, open_dump, read_manifest
from inert.dump._frames import Frame
from inert.dump._read import DumpReader

_audit.watch_readers(read_manifest, DumpReader._batch, DumpReader._row, DumpReader._open_shard, Frame.payloads)


def sample_rows(count: int = 12) -> list[Row]:
    """Rows with everything a rollout holds: dense and jagged tensors, values, tags, rows with no fields."""
    batch = torch.arange(count * 6, dtype=torch.int64).reshape(count, 6)
    rows = []
    for i in range(count):
        fields: dict[str, Any] = {"ids": batch[i], "jagged": torch.full((i % 4 + 1, 3), float(i)), "text": f"sample {i}"}
        if i % 3 == 0:
            fields["reward"] = torch.tensor(0.5 * i, dtype=torch.float64)
        if i % 5 == 4:
            fields = {}
        rows.append(Row(f"key-{i}", 1000 + 7 * i, fields, {"step": i, "status": ("partial", i % 2 == 0), "score": i / 7}))
    return rows


def assert_same_rows(expected: list[Row], got: list[Row]) -> None:
    by_key = {row.key: row for row in got}
    assert sorted(by_key) == sorted(row.key for row in expected)
    for row in expected:
        other = by_key[row.key]
        assert other.global_index == row.global_index
        assert other.tag == row.tag
        assert list(other.fields) == sorted(row.fields, key=list(other.fields).index) and set(other.fields) == set(row.fields)
        for name, value in row.fields.items():
            if isinstance(value, torch.Tensor):
                assert other.fields[name].dtype == value.dtype
                assert torch.equal(other.fields[name], value), (row.key, name)
            else:
                assert other.fields[name] == value


@pytest.mark.parametrize(("dumped", "loaded"), [(3, 2), (2, 3), (1, 3), (3, 3)])
def test_rows_survive_a_change_of_owner_count(tmp_path: Path, dumped: int, loaded: int) -> None:
    rows = sample_rows()
    report = dump(rows, tmp_path / "d", partition_id="train", owners=dumped)
    assert (report.keys, report.shards, report.rows_with_data) == (12, dumped, 10)
    assert sorted(os.listdir(tmp_path / "d")) == ["MANIFEST"] + [f"shard-{o:05d}.bin" for o in range(dumped)]
    result = load(tmp_path / "d", owners=loaded)
    assert result.partition_id == "train"
    assert len(result.rows_by_owner) == loaded
    assert_same_rows(rows, result.rows)
    # Default route: the row's position in the dump modulo the owner count.
    order = [row.key for row in rows]
    for owner, owned in enumerate(result.rows_by_owner):
        assert all(order.index(row.key) % loaded == owner for row in owned)


def test_schema_is_inferred_from_the_values(tmp_path: Path) -> None:
    dump(sample_rows(), tmp_path / "d")
    with open_dump(tmp_path / "d") as reader:
        schema = {spec.name: spec for spec in reader.schema}
        keys = reader.keys
    assert (schema["ids"].layout, schema["ids"].dtype, schema["ids"].shape) == (DENSE, torch.int64, (6,))
    assert (schema["jagged"].layout, schema["jagged"].dtype, schema["jagged"].ndim) == (NESTED, torch.float32, 2)
    assert schema["text"].layout == VALUE
    assert (schema["reward"].layout, schema["reward"].shape) == (DENSE, ())
    assert keys[4] == KeyInfo(4, "key-4", 1028, (), {"step": 4, "status": ("partial", True), "score": 4 / 7})
    assert keys[0].fields == ("ids", "jagged", "text", "reward")


def test_route_and_bounded_batches(tmp_path: Path) -> None:
    rows = sample_rows(40)
    dump(rows, tmp_path / "d", owners=3)
    seen: list[tuple[int, list[str]]] = []

    def consume(owner: int, batch: list[Row]) -> None:
        seen.append((owner, [row.key for row in batch]))

    result = load(tmp_path / "d", owners=2, route=lambda info: info.global_index % 2, batch_rows=7, consume=consume)
    assert result.rows_by_owner == [[], []]  # handed to consume, not kept
    assert all(len(keys) <= 7 for _, keys in seen)
    by_owner: dict[int, list[str]] = {0: [], 1: []}
    for owner, keys in seen:
        by_owner[owner].extend(keys)
    assert sorted(by_owner[0] + by_owner[1]) == sorted(row.key for row in rows)
    assert all(row.global_index % 2 == 0 for row in rows if row.key in by_owner[0])
    with pytest.raises(ValueError, match="route"):
        load(tmp_path / "d", owners=2, route=lambda info: 2)


ALL_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
    torch.float32, torch.float64, torch.complex64, torch.complex128,
] + [getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name)]  # from PyTorch 2.3 on


def test_every_dtype_and_odd_shapes_round_trip(tmp_path: Path) -> None:
    fields: dict[str, Any] = {}
    for dtype in ALL_DTYPES:
        base = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4)
        fields[f"t_{dtype}"] = (base > 5) if dtype == torch.bool else base.to(dtype)
    fields["scalar"] = torch.tensor(3.5)
    fields["empty"] = torch.empty(0, 7)
    fields["transposed"] = torch.arange(12.0).reshape(3, 4).t()  # not contiguous: written in C order
    fields["fp8"] = torch.linspace(-2, 2, 16).to(torch.float8_e4m3fn)
    rows = [Row("only", 0, fields)]
    dump(rows, tmp_path / "d", owners=2)
    (got,) = load(tmp_path / "d").rows
    for name, value in fields.items():
        assert got.fields[name].dtype == value.dtype
        assert got.fields[name].shape == value.shape
        as_bytes = got.fields[name].reshape(-1).view(torch.uint8)  # bitwise: fp8 and NaN-free compare alike
        assert torch.equal(as_bytes, value.contiguous().reshape(-1).view(torch.uint8)), name


def test_values_keep_their_types(tmp_path: Path) -> None:
    value = {"a": [1, 2.5, None, True], "b": (1, "x"), b"3": b"raw", "c": frozenset({"1", "2"}), "z": complex(1, -2)}
    dump([Row("k", 1, {"meta": value}, {"nested": {"tuple": (1, (2, 3))}})], tmp_path / "d")
    (got,) = load(tmp_path / "d").rows
    assert got.fields["meta"] == value and type(got.fields["meta"]["b"]) is tuple
    assert got.tag == {"nested": {"tuple": (1, (2, 3))}}


def test_a_row_view_writes_only_its_own_bytes(tmp_path: Path) -> None:
    batch = torch.zeros(1024, 8192, dtype=torch.int64)  # 64 MiB
    dump([Row("one", 0, {"ids": batch[17]})], tmp_path / "d")
    shard = tmp_path / "d" / "shard-00000.bin"
    assert shard.stat().st_size < 8192 * 8 + 1024


def test_loaded_rows_are_writable_and_own_their_batch_only(tmp_path: Path) -> None:
    rows = sample_rows(5)
    dump(rows, tmp_path / "d")
    got = load(tmp_path / "d").rows
    got[0].fields["ids"] += 1  # a writable, ordinary tensor
    assert torch.equal(got[0].fields["ids"], rows[0].fields["ids"] + 1)


def test_existing_destination_is_refused_and_nothing_is_left_behind(tmp_path: Path) -> None:
    dump(sample_rows(3), tmp_path / "d")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(FileExistsError):
        dump(sample_rows(3), tmp_path / "d")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileExistsError):
        dump(sample_rows(3), tmp_path / "empty")
    assert os.listdir(tmp_path / "empty") == []
    assert sorted(os.listdir(tmp_path)) == sorted(before + ["empty"])


def test_a_failed_dump_publishes_nothing(tmp_path: Path) -> None:
    rows = sample_rows(6)
    rows[5].fields["bad"] = object()
    with pytest.raises(TypeError, match=r"row 'key-5'\.bad: builtins.object is not in the value subset"):
        dump(rows, tmp_path / "d", owners=3)
    assert os.listdir(tmp_path) == []  # neither the dump nor its staging directory


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ([{"x": torch.ones(2)}, {"x": "text"}], "some rows hold a tensor and others a value"),
        ([{"x": torch.ones(2)}, {"x": torch.ones(2, dtype=torch.int32)}], "several dtypes"),
        ([{"x": torch.ones(2)}, {"x": torch.ones(2, 2)}], "dims"),
    ],
)
def test_fields_that_cannot_be_one_column_are_caller_errors(tmp_path: Path, fields: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        dump([Row(f"k{i}", i, f) for i, f in enumerate(fields)], tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_duplicate_keys_are_refused_on_dump(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="appears twice"):
        dump([Row("k", 0), Row("k", 1)], tmp_path / "d")


def test_empty_dump(tmp_path: Path) -> None:
    dump([], tmp_path / "d", partition_id="p", owners=4)
    result = load(tmp_path / "d", owners=2)
    assert (result.partition_id, result.rows) == ("p", [])


def test_loading_needs_no_write_access(tmp_path: Path) -> None:
    rows = sample_rows()
    dump(rows, tmp_path / "d", owners=3)
    opened: list[tuple[str, int]] = []
    target = str(tmp_path / "d")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and isinstance(args[0], str) and args[0].startswith(target):
            opened.append((args[0], args[2] if isinstance(args[2], int) else 0))

    for path in [tmp_path / "d", *(tmp_path / "d").iterdir()]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        sys.addaudithook(hook)  # root ignores permissions: also check every open is read-only
        result = load(tmp_path / "d", owners=2)
    finally:
        opened_now = list(opened)
        opened.clear()
        target = "\0"  # the hook cannot be removed: make it inert
        for path in [tmp_path / "d", *(tmp_path / "d").iterdir()]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    assert_same_rows(rows, result.rows)
    assert len(opened_now) == 4  # the manifest and three shards
    for path, flags in opened_now:
        assert flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND) == 0, path


def test_errors_cross_processes(tmp_path: Path) -> None:
    dump(sample_rows(3), tmp_path / "d")
    data = bytearray((tmp_path / "d" / "MANIFEST").read_bytes())
    data[-1] ^= 0xFF
    (tmp_path / "d" / "MANIFEST").write_bytes(data)
    with pytest.raises(ValueError) as info:
        load(tmp_path / "d")
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is type(info.value) and str(again) == str(info.value)


def test_docstring_examples() -> None:
    for module in (inert.dump._read, inert.dump._write):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, module.__name__
