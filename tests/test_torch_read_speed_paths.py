"""inert.torch's reading threads: a large payload read in parts by whichever thread is free.

The part size is lowered so that a tensor of about a MiB is read in many parts, the
last one short.  The parts are held to the record's checks: exact bytes, the CRC-32
combined from the parts' (or the payload read whole where no combining CRC-32 is at
hand), and a file that shrinks while its parts are read is a TruncatedError.
"""

from __future__ import annotations

import faulthandler
import functools
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

import inert.torch
from inert import ChecksumError, TruncatedError
from inert.codecs import checkpoint_metadata as cm
from inert.torch import FileSystemWriter, _reader, load_tensors
from inert.torch._compat import no_dist_options
from inert.torch._threads import SharedTasks

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ONE = no_dist_options(dcp.save)
PART = 64 << 10


@pytest.fixture
def parts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Parts of 64 KiB; yields the list of the parts read (their byte offsets in the file)."""
    monkeypatch.setattr(_reader, "_PART", PART)
    monkeypatch.setattr(_reader, "_TAIL_PART", PART)
    monkeypatch.setattr(_reader, "_THREADED_MIN", 0)
    seen: list[int] = []
    read = _reader._Parts.read

    def counted(self: Any, index: int) -> Any:
        seen.append(self.at + self.spans[index][0])
        return read(self, index)

    monkeypatch.setattr(_reader._Parts, "read", counted)
    return seen


def raw(t: torch.Tensor) -> bytes:
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {"w": torch.randn(300, 1000), "h": torch.randn(9, 1000).to(torch.bfloat16), "b": torch.randn(5)}


def saved(path: Path) -> dict[str, torch.Tensor]:
    s = state()
    dcp.save(s, storage_writer=FileSystemWriter(path), **ONE)
    return s


def record(path: Path, fqn: str) -> tuple[Path, int, int]:
    meta = cm.decode((path / ".metadata").read_bytes())
    entry = next(e for e in meta["tensors"] if e["fqn"] == fqn)
    return path / meta["files"][entry["chunk_files"][0]], entry["chunk_byte_offsets"][0], entry["chunk_byte_lengths"][0]


@pytest.mark.parametrize("verify", [True, False])
def test_parts_round_trip_through_both_entry_points(tmp_path: Path, parts: list[int], verify: bool) -> None:
    s = saved(tmp_path)
    got = load_tensors(tmp_path, verify_checksums=verify)
    assert all(torch.equal(got[k], v) for k, v in s.items())
    file, at, length = record(tmp_path, "w")
    payload = 300 * 1000 * 4
    start = at + length - 4 - payload
    assert sorted(parts) == list(range(start, start + payload, PART))  # 19 parts, each once, the last one short
    parts.clear()
    into = {k: torch.zeros_like(v) for k, v in s.items()}
    inert.torch.load(into, tmp_path, verify_checksums=verify)
    assert all(torch.equal(into[k], v) for k, v in s.items()) and len(parts) == 19


def test_damage_in_any_part_is_a_checksum_fault(tmp_path: Path, parts: list[int]) -> None:
    saved(tmp_path)
    file, at, length = record(tmp_path, "w")
    good = file.read_bytes()
    for where in (at + length - 4 - 300 * 1000 * 4 + 5 * PART + 7, at + length - 5):  # a middle part, the last
        bad = bytearray(good)
        bad[where] ^= 0x01
        file.write_bytes(bytes(bad))
        with pytest.raises(ChecksumError, match=r"w\.crc32: stored CRC-32"):
            load_tensors(tmp_path)
        with pytest.raises(ChecksumError, match="stored CRC-32") as info:
            inert.torch.load({"w": torch.zeros(300, 1000)}, tmp_path)
        assert isinstance(info.value.__cause__, CheckpointException)
    file.write_bytes(good)


def test_without_a_combining_crc32_a_checked_payload_is_read_whole(
    tmp_path: Path, parts: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = saved(tmp_path)
    monkeypatch.setattr(_reader, "crc32_combine", None)
    assert torch.equal(load_tensors(tmp_path)["w"], s["w"]) and parts == []
    assert torch.equal(load_tensors(tmp_path, verify_checksums=False)["w"], s["w"]) and len(parts) == 19


def test_a_file_cut_short_while_its_parts_are_read(tmp_path: Path, parts: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    saved(tmp_path)
    file, at, length = record(tmp_path, "w")
    good = file.read_bytes()
    read = _reader._Parts.read

    def cut_first(self: Any, index: int) -> Any:
        if os.path.getsize(file) > at + length // 2:
            os.truncate(file, at + length // 2)  # another process truncates the file after the checks
        return read(self, index)

    monkeypatch.setattr(_reader._Parts, "read", cut_first)
    for verify in (True, False):
        with pytest.raises(TruncatedError, match=r"bytes needed, 0 present"):
            load_tensors(tmp_path, verify_checksums=verify)
        file.write_bytes(good)  # whole again: the next round cuts it anew


@pytest.mark.parametrize("verify", [True, False])
def test_the_last_records_are_read_in_parts(tmp_path: Path, verify: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(2)
    s = {f"t{i}": torch.randn(640, 1024) for i in range(5)}  # 2.5 MiB each: parts only near the end
    dcp.save(s, storage_writer=FileSystemWriter(tmp_path), **ONE)
    spans: list[int] = []
    read = _reader._Parts.read

    def counted(self: Any, index: int) -> Any:
        spans.append(self.spans[index][1] - self.spans[index][0])
        return read(self, index)

    monkeypatch.setattr(_reader._Parts, "read", counted)
    got = load_tensors(tmp_path, verify_checksums=verify)
    assert all(torch.equal(got[k], v) for k, v in s.items())
    if verify and _reader.crc32_combine is None:
        assert spans == []
    else:  # the last record at least, in three parts of 1 MiB or less
        assert len(spans) >= 3 and max(spans) == 1 << 20 and sum(spans) % (640 * 1024 * 4) == 0


def test_a_small_read_stays_on_the_calling_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = {f"t{i}": torch.randn(8, 8) for i in range(64)}  # 17 KiB: Python work, not copying
    dcp.save(s, storage_writer=FileSystemWriter(tmp_path), **ONE)
    names: set[str] = set()
    load = _reader.FileSystemReader._load

    def recorded(self: Any, *args: Any) -> Any:
        names.add(threading.current_thread().name)
        if _reader._THREADED_MIN == 0:
            time.sleep(0.002)  # the control: long enough records that the helper surely takes some
        return load(self, *args)

    monkeypatch.setattr(_reader.FileSystemReader, "_load", recorded)
    got = load_tensors(tmp_path)
    assert all(torch.equal(got[k], v) for k, v in s.items()) and names == {threading.current_thread().name}
    names.clear()
    monkeypatch.setattr(_reader, "_THREADED_MIN", 0)
    load_tensors(tmp_path)
    assert len(names) == 2  # the control: both threads take records


def test_shared_tasks_spill_and_fail() -> None:
    shared = SharedTasks()

    def spiller(n: int) -> int:
        shared.spill([functools.partial(lambda k: k, 100 + k) for k in range(n)])
        return n

    shared.spill([functools.partial(spiller, 3), functools.partial(spiller, 2)])
    assert sorted(shared.run(2)) == [2, 3, 100, 100, 101, 101, 102]
    failing = SharedTasks()
    ran: list[int] = []

    def task(k: int) -> int:
        if k == 1:
            raise OSError("disk gone")
        ran.append(k)
        return k

    failing.spill([functools.partial(task, k) for k in range(1000)])
    with pytest.raises(OSError, match="disk gone"):
        failing.run(2)
    assert len(ran) < 999  # the others stopped at their next task


def test_reads_on_two_threads_at_once_and_in_a_forked_child(tmp_path: Path, parts: list[int]) -> None:
    s = saved(tmp_path)
    results: list[bool] = []

    def read() -> None:
        for _ in range(5):
            got = load_tensors(tmp_path)
            results.append(all(torch.equal(got[k], v) for k, v in s.items()))

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 10
    want = {k: raw(v) for k, v in s.items()}
    pid = os.fork()  # the helpers stay behind: the child reads on its own thread
    if pid == 0:  # (torch's own thread pool does not survive a fork either: the child compares bytes)
        faulthandler.dump_traceback_later(60, exit=True)
        try:
            got = load_tensors(tmp_path)
            os._exit(0 if {k: raw(v) for k, v in got.items()} == want else 1)
        except BaseException:
            os._exit(2)
    assert os.waitpid(pid, 0)[1] == 0


def test_a_custom_planner_gets_its_calls_on_the_calling_thread_in_a_threaded_read(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    s = {f"t{i}": torch.randn(400, 1000) for i in range(4)} | {f"s{i}": torch.randn(10) for i in range(40)}  # 2 batches
    dcp.save(s, storage_writer=FileSystemWriter(tmp_path), **ONE)
    calls: set[int] = set()
    reads: set[str] = set()
    load = _reader.FileSystemReader._load

    def recorded(self: Any, *args: Any) -> Any:
        reads.add(threading.current_thread().name)
        time.sleep(0.001)  # long enough records that both threads take some
        return load(self, *args)

    class Planner(DefaultLoadPlanner):
        def resolve_tensor(self, read_item: Any) -> torch.Tensor:
            calls.add(threading.get_ident())
            return super().resolve_tensor(read_item)

    target = {k: torch.zeros_like(v) for k, v in s.items()}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_reader.FileSystemReader, "_load", recorded)
        inert.torch.load(target, tmp_path, thread_count=2, planner=Planner())
    assert all(torch.equal(target[k], v) for k, v in s.items())
    assert calls == {threading.get_ident()}  # the planner's calls, in plan order on this thread
    assert len(reads) == 2 and threading.current_thread().name not in reads  # the reading, by the pool


def test_no_thread_unpickles_during_threaded_reads(tmp_path: Path) -> None:
    s = saved(tmp_path)  # 1.2 MiB: read on two threads
    found: list[str] = []
    watching = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if watching[0] and event in ("pickle.find_class", "marshal.loads", "exec", "compile"):
            found.append(event)

    load_tensors(tmp_path)  # warm: imports are exec events
    inert.torch.load({k: torch.zeros_like(v) for k, v in s.items()}, tmp_path)
    sys.addaudithook(hook)
    try:
        got = load_tensors(tmp_path)
        into = {k: torch.zeros_like(v) for k, v in s.items()}
        inert.torch.load(into, tmp_path, thread_count=2)
    finally:
        watching[0] = False  # audit hooks cannot be removed
    assert found == []
    assert all(torch.equal(got[k], v) and torch.equal(into[k], v) for k, v in s.items())
