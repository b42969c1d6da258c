"""inert.dump at fsspec URLs: against a real S3 API server on localhost (moto's server mode in its own process,
through s3fs), and ``memory://`` and ``file://``.  Published without rename: shards first, the MANIFEST last and
only where none exists; a failure part-way (500 replies, a reset upload) leaves no MANIFEST and no shard; damaged
objects are InertErrors; a failing read is a StorageError.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from s3_server import KINDS, NO_RETRIES, FaultProxy, S3Server, location

from inert import ChecksumError, ForeignFormatError, StorageError, TruncatedError
from inert.dump import Row, dump, load, open_dump


@pytest.fixture(params=KINDS)
def where(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[str, dict[str, Any]]:
    server = request.getfixturevalue("s3") if request.param == "s3" else None
    return location(request.param, server, tmp_path, "ckpt/rollout")


def rows(count: int = 40) -> list[Row]:
    out = []
    for i in range(count):
        fields: dict[str, Any] = {"ids": torch.arange(64) + i, "lp": torch.arange(i % 5 + 1, dtype=torch.float32) / 3 + i,
                                  "ok": torch.tensor([i % 2 == 0])}
        if i % 3:
            fields["status"] = {"n": i, "s": "partial"}
        out.append(Row(f"key-{i}", 1000 + i, fields, {"step": i}))
    return out


def same_rows(expected: list[Row], loaded: list[Row]) -> None:
    got = {row.key: row for row in loaded}
    assert got.keys() == {row.key for row in expected}
    for row in expected:
        other = got[row.key]
        assert other.global_index == row.global_index and other.tag == row.tag
        assert other.fields.keys() == row.fields.keys()
        for name, value in row.fields.items():
            if isinstance(value, torch.Tensor):
                assert other.fields[name].dtype == value.dtype and torch.equal(other.fields[name], value), (row.key, name)
            else:
                assert other.fields[name] == value


def _listing(s3: S3Server, url: str) -> list[str]:
    import s3fs

    fs = s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True)
    try:
        return sorted(path.rsplit("/", 1)[-1] for path in fs.ls(url.removeprefix("s3://"), refresh=True))
    except FileNotFoundError:
        return []


def test_dump_and_load_onto_another_number_of_owners(where: tuple[str, dict[str, Any]]) -> None:
    url, options = where
    written = rows()
    report = dump(written, url, partition_id="train", owners=3, storage_options=options)
    assert (report.keys, report.shards) == (40, 3)
    loaded = load(url, owners=2, batch_rows=7, storage_options=options)
    assert loaded.partition_id == "train" and len(loaded.rows_by_owner) == 2
    same_rows(written, loaded.rows)
    with open_dump(url, storage_options=options) as reader:
        assert [info.key for info in reader.keys] == [row.key for row in written]


def test_an_existing_manifest_is_refused(where: tuple[str, dict[str, Any]]) -> None:
    url, options = where
    dump(rows(3), url, storage_options=options)
    with pytest.raises(FileExistsError, match="a dump is already there"):
        dump(rows(5), url, storage_options=options)
    same_rows(rows(3), load(url, storage_options=options).rows)  # the first dump, untouched


def test_a_manifest_appearing_during_the_dump_wins_and_this_one_is_refused(s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/rollout"
    other = f"s3://{s3.new_bucket()}/other"
    dump(rows(2), other, storage_options=s3.options())
    import s3fs

    direct = s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True)

    def fault(method: str, path: str) -> str | None:
        if method == "PUT" and path.split("?")[0].endswith("/MANIFEST"):  # another writer commits first
            for name in _listing(s3, other):
                direct.pipe_file(f"{url.removeprefix('s3://')}/{name}", direct.cat_file(f"{other.removeprefix('s3://')}/{name}"))
        return None

    proxy = FaultProxy(s3.port, fault)
    try:
        with pytest.raises(FileExistsError, match="appeared"):
            dump(rows(6), url, storage_options=s3.options(proxy.endpoint, skip_instance_cache=True))
    finally:
        proxy.close()
    same_rows(rows(2), load(url, storage_options=s3.options()).rows)  # the other writer's dump, whole


@pytest.mark.parametrize("action", ["500", "reset-upload"])
def test_a_shard_upload_failing_leaves_no_dump(s3: S3Server, action: str) -> None:
    url = f"s3://{s3.new_bucket()}/rollout"
    big = [Row(f"k{i}", i, {"x": torch.full((1 << 20,), float(i))}, {}) for i in range(12)]  # 48 MiB: parts
    puts = []

    def fault(method: str, path: str) -> str | None:
        if method == "PUT" and "partNumber=" in path:
            puts.append(path)
            return action if len(puts) >= 2 else None
        return None

    proxy = FaultProxy(s3.port, fault)
    try:
        with pytest.raises(StorageError, match="rollout/shard-0000"):
            dump(big, url, owners=2, storage_options=s3.options(proxy.endpoint, skip_instance_cache=True, **NO_RETRIES))
    finally:
        proxy.close()
    assert len(puts) >= 2
    assert _listing(s3, url) == []  # no MANIFEST, and the shards uploaded were removed
    with pytest.raises(ForeignFormatError, match="not a dump"):
        load(url, storage_options=s3.options())


def test_damaged_cut_and_missing_shards_are_inert_errors(s3: S3Server) -> None:
    import s3fs

    url = f"s3://{s3.new_bucket()}/rollout"
    dump(rows(), url, owners=2, storage_options=s3.options())
    fs = s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True)
    shard = next(name for name in _listing(s3, url) if name.startswith("shard-"))
    path = f"{url.removeprefix('s3://')}/{shard}"
    data = fs.cat_file(path)
    damaged = bytearray(data)
    damaged[64 + 300] ^= 0x01  # inside the first record (its ids)
    fs.pipe_file(path, bytes(damaged))
    with pytest.raises(ChecksumError):
        load(url, storage_options=s3.options())
    fs.pipe_file(path, data[:-10])
    with pytest.raises(TruncatedError, match="the file at"):
        load(url, storage_options=s3.options())
    fs.rm_file(path)
    with pytest.raises(TruncatedError, match="shard object missing"):
        load(url, storage_options=s3.options())


def test_a_read_failing_mid_load_is_a_storage_error(s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/rollout"
    dump(rows(), url, owners=2, storage_options=s3.options())
    gets = []

    def fault(method: str, path: str) -> str | None:
        if method == "GET" and "/shard-" in path:
            gets.append(path)
            return "reset" if len(gets) >= 3 else None
        return None

    proxy = FaultProxy(s3.port, fault)
    try:
        with pytest.raises(StorageError, match="reading bytes"):
            load(url, batch_rows=4, storage_options=s3.options(proxy.endpoint, skip_instance_cache=True, **NO_RETRIES))
    finally:
        proxy.close()
