"""A dump load's one pass: records read in blocks with each one's CRC-32 taken on the way, in C and in Python alike."""

from __future__ import annotations

import os
import random
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from inert import TruncatedError
from inert._accelerator import builder
from inert.dump import Row, _read, dump, load, open_dump
from inert.dump._blocks import BLOCK, pread_crc32_python
from tests.test_dump import assert_same_rows, sample_rows

ACCEL = builder("pread_crc32")
# The pure-Python reader always; the accelerator's where it is built (CI requires it: INERT_ACCEL=require).
READERS = [pytest.param(pread_crc32_python, id="python")] + ([pytest.param(ACCEL, id="accel")] if ACCEL else [])


def _spans(rng: random.Random, size: int, count: int) -> list[int]:
    """``count`` ordered spans of a buffer of ``size`` bytes: odd starts and lengths, some empty, some abutting."""
    cuts = sorted(rng.randrange(size + 1) for _ in range(2 * count))
    cuts[0], cuts[-1] = rng.choice([0, cuts[0]]), rng.choice([size, cuts[-1]])
    return cuts


@pytest.mark.parametrize("read", READERS)
def test_crcs_are_zlibs_over_odd_sizes_and_offsets(tmp_path: Path, read: Callable[..., tuple[int, list[int]]]) -> None:
    rng = random.Random(7)
    data = rng.randbytes(3 * BLOCK + 4099)
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        for offset, size in [(0, len(data)), (1, 3 * BLOCK + 1), (4097, BLOCK - 3), (13, 1), (BLOCK + 5, 2 * BLOCK), (7, 0)]:
            memory = memoryview(bytearray(size))
            spans = _spans(rng, size, 9)
            got, crcs = read(fd, memory, offset, spans)
            assert got == size and bytes(memory) == data[offset : offset + size]
            assert crcs == [zlib.crc32(memory[a:b]) for a, b in zip(spans[::2], spans[1::2], strict=True)]
    finally:
        os.close(fd)


@pytest.mark.parametrize("read", READERS)
def test_a_file_that_ends_first_reads_short(tmp_path: Path, read: Callable[..., tuple[int, list[int]]]) -> None:
    data = random.Random(3).randbytes(BLOCK + 1001)
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        memory = memoryview(bytearray(2 * BLOCK))
        got, crcs = read(fd, memory, 11, [0, 100, 500, BLOCK + 5000])
        assert got == len(data) - 11 and bytes(memory[:got]) == data[11:]
        assert crcs == [zlib.crc32(data[11:111]), zlib.crc32(data[511:])]  # what was read of each span
    finally:
        os.close(fd)


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize("spans", [[0], [5, 3], [0, 11], [4, 8, 6, 9]])
def test_spans_out_of_order_or_outside_are_refused(tmp_path: Path, read: Callable[..., object], spans: list[int]) -> None:
    (tmp_path / "f").write_bytes(b"x" * 20)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="spans"):
            read(fd, memoryview(bytearray(10)), 0, spans)
    finally:
        os.close(fd)


@pytest.mark.skipif(ACCEL is None, reason="the accelerator is not built (CI requires it)")
def test_the_accelerators_crc32_is_zlibs() -> None:
    from inert import _accel  # type: ignore[attr-defined]

    rng = random.Random(11)
    data = rng.randbytes(70_000)
    for start in (0, 1, 5, 15, 16, 33):
        for size in (0, 1, 15, 16, 17, 63, 64, 65, 79, 128, 1000, 4097, 65_537):
            piece = memoryview(data)[start : start + size]
            for value in (0, 1, 0xFFFFFFFF, rng.getrandbits(32)):
                assert _accel.crc32(piece, value) == zlib.crc32(piece, value), (start, size, value)


@pytest.fixture(params=READERS)
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, list[int]]]:
    """The load's one-pass reader, set to the implementation under test."""
    monkeypatch.setattr(_read, "pread_crc32", request.param)
    return request.param  # type: ignore[no-any-return]


def _dense(count: int) -> list[Row]:
    ids = torch.arange(count * 3000, dtype=torch.int64).reshape(count, 3000)
    return [Row(f"r{i}", i, {"ids": ids[i], "lp": torch.full((777,), i / 3)}, {"t": i}) for i in range(count)]


def test_both_readers_load_the_same_rows(tmp_path: Path, reader: object) -> None:
    rows = sample_rows(30) + [Row(f"dense-{r.key}", 5000 + r.global_index, r.fields, r.tag) for r in _dense(40)]
    dump(rows, tmp_path / "d", owners=3)
    for owners in (1, 4):
        assert_same_rows(rows, load(tmp_path / "d", owners=owners, batch_rows=7).rows)


def test_a_shard_truncated_while_loading_is_refused(tmp_path: Path, reader: object) -> None:
    dump(_dense(40), tmp_path / "d", owners=2)
    shard = tmp_path / "d" / "shard-00001.bin"
    size = shard.stat().st_size
    with open_dump(tmp_path / "d") as opened:  # checked whole at opening; cut before any row is read
        os.truncate(shard, size - BLOCK // 3)
        with pytest.raises(TruncatedError, match=rf"offset {size - BLOCK // 3}: shard-00001.bin:rows\[\d+\]: "
                                                 r"\d+ bytes needed, the file ends first"):
            opened.read(owners=2)
