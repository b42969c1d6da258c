"""The shared-memory worker channel with real processes, real memfds and real sockets.

Every pool here has two workers; both start methods run the main paths.  Each
receive has a deadline, so a broken channel fails a test instead of hanging it.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import inert
from inert import _audit
from inert.codecs import shm_samples_meta
from inert.shm import (
    BatchInfo,
    ChannelClosedError,
    EndOfData,
    SampleInfo,
    ShmWorkerPool,
    WorkerDiedError,
    WorkerTaskError,
)
from inert.shm._batch import read_result, read_samples
from inert.shm._fdpass import recv_frame
from inert.shm._memory import map_chunk

# The parent's readers of worker bytes join the suite's no-execution guard (see conftest.py).
_audit.watch_readers(read_result, read_samples, recv_frame, map_chunk, ShmWorkerPool._read_frame)

START_METHODS = ["fork", "spawn"]
TIMEOUT = 20.0  # generous for a loaded CI machine; a passing test waits far less

# -- callbacks the workers run (module level: spawn imports them by name) ----

DTYPES = ["|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4", "<f8", "<c8", "<c16", ">i4"]


def sample_for(index: int) -> Any:
    """The sample the per-sample callback returns for ``index``: every dtype, 0-d and zero-size shapes, nesting."""
    dtype = np.dtype(DTYPES[index % len(DTYPES)])
    shape = [(), (3,), (2, 5), (0, 3), (4, 1, 2)][index % 5]
    array = (np.arange(int(np.prod(shape)), dtype=np.int64) + index).reshape(shape)
    array = (array % 2).astype(dtype) if dtype.kind == "b" else array.astype(dtype)
    if index % 7 == 3:
        return (array, [np.full((2,), index, np.uint8), ()])
    return array


def per_sample(info: SampleInfo) -> Any:
    if info.idx_in_epoch < 0:
        raise AssertionError("never")
    return sample_for(info.idx_in_epoch)


def deep_sample(levels: int) -> Any:
    sample: Any = np.zeros(1, np.int8)
    for _ in range(levels):
        sample = [sample]
    return sample


class Scenario:
    """What the batch callback does, by the int it is called with."""

    MIXED = 0
    RAISES = 1
    STOPS = 2
    OBJECT_ARRAY = 3
    TOO_DEEP = 4
    NOT_AN_ARRAY = 5
    LARGE = 6
    SLEEPS_LONG = 7
    SLEEPS_SHORT = 8
    STRUCTURED_WITH_OBJECTS = 9
    EXITS = 10


LARGE_ELEMENTS = 300_000  # 2.4 MB of float64: more than the 64 KiB chunks the growth test starts with


def batch_callback(arg: Any = None) -> Any:
    if arg is None:
        return [np.array(-1, np.int64)]
    if isinstance(arg, BatchInfo):
        return [np.array([arg.iteration, arg.epoch_idx], np.int64)]
    if arg == Scenario.MIXED:
        return [sample_for(i) for i in range(20)]
    if arg == Scenario.RAISES:
        raise ValueError("sample 42 is corrupt on disk")
    if arg == Scenario.STOPS:
        raise StopIteration("epoch over")
    if arg == Scenario.OBJECT_ARRAY:
        return [np.zeros(2), np.array([object()], dtype=object)]
    if arg == Scenario.TOO_DEEP:
        return [deep_sample(65)]
    if arg == Scenario.NOT_AN_ARRAY:
        return [np.zeros(1), "text"]
    if arg == Scenario.LARGE:
        return [np.arange(LARGE_ELEMENTS, dtype=np.float64), np.ones(3, np.int8)]
    if arg == Scenario.SLEEPS_LONG:
        time.sleep(60)
    if arg == Scenario.SLEEPS_SHORT:
        time.sleep(0.6)
        return [np.zeros(1)]
    if arg == Scenario.STRUCTURED_WITH_OBJECTS:
        return [np.zeros(2, dtype=[("a", "i4"), ("b", "O")])]
    if arg == Scenario.EXITS:
        sys.exit(7)
    raise AssertionError(f"no scenario {arg}")


# -- helpers ------------------------------------------------------------------


def assert_same(got: Any, want: Any) -> None:
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
        return
    assert isinstance(got, np.ndarray) and not got.flags.writeable
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def leaves(sample: Any) -> Iterator[np.ndarray]:
    if isinstance(sample, (tuple, list)):
        for item in sample:
            yield from leaves(item)
    else:
        yield sample


@pytest.fixture(scope="module", params=START_METHODS)
def sample_pool(request: pytest.FixtureRequest) -> Iterator[ShmWorkerPool]:
    with ShmWorkerPool(per_sample, num_workers=2, start_method=request.param, timeout=TIMEOUT) as pool:
        yield pool


@pytest.fixture(scope="module", params=START_METHODS)
def batch_pool(request: pytest.FixtureRequest) -> Iterator[ShmWorkerPool]:
    with ShmWorkerPool(
        batch_callback, num_workers=2, batch_mode=True, start_method=request.param, chunk_size=1 << 16, timeout=TIMEOUT
    ) as pool:
        yield pool


# -- round trips --------------------------------------------------------------


def test_sample_ranges_round_trip_as_zero_copy_views(sample_pool: ShmWorkerPool) -> None:
    ranges = [(0, 16), (16, 40), (40, 45), (45, 45)]
    for start, end in ranges:
        sample_pool.schedule_range(start, end, iteration=1)
    workers = set()
    for start, end in ranges:
        with sample_pool.receive() as batch:
            workers.add(batch.worker_id)
            assert_same(batch.samples, [sample_for(i) for i in range(start, end)])
            whole = np.frombuffer(batch.chunk.buffer, np.uint8)
            for leaf in leaves(batch.samples):
                assert leaf.size == 0 or np.shares_memory(leaf, whole)
    assert workers == {0, 1}


def test_slices_of_a_range_reach_the_callback_as_sample_info(sample_pool: ShmWorkerPool) -> None:
    sample_pool.schedule_range(100, 110, slice_start=2, slice_end=5)
    with sample_pool.receive() as batch:
        assert_same(batch.samples, [sample_for(i) for i in range(102, 105)])


def test_batch_arguments_reach_the_callback(batch_pool: ShmWorkerPool) -> None:
    batch_pool.schedule_batch()
    batch_pool.schedule_batch(BatchInfo(iteration=5, epoch_idx=2))
    batch_pool.schedule_batch(Scenario.MIXED)
    with batch_pool.receive() as batch:
        assert_same(batch.samples, [np.array(-1, np.int64)])
    with batch_pool.receive() as batch:
        assert_same(batch.samples, [np.array([5, 2], np.int64)])
    with batch_pool.receive() as batch:
        assert_same(batch.samples, [sample_for(i) for i in range(20)])


def test_a_chunk_grows_when_a_batch_does_not_fit(batch_pool: ShmWorkerPool) -> None:
    batch_pool.schedule_batch(Scenario.LARGE, worker=0)
    with batch_pool.receive() as batch:
        assert batch.chunk.capacity >= LARGE_ELEMENTS * 8 > 1 << 16
        assert_same(batch.samples, [np.arange(LARGE_ELEMENTS, dtype=np.float64), np.ones(3, np.int8)])
    batch_pool.schedule_batch(Scenario.MIXED, worker=0)  # the grown chunk keeps serving
    with batch_pool.receive() as batch:
        assert_same(batch.samples, [sample_for(i) for i in range(20)])


# -- failures reported by a worker that keeps running --------------------------


def test_a_batch_above_max_chunk_size_is_a_failed_task() -> None:
    with ShmWorkerPool(
        batch_callback,
        num_workers=2,
        batch_mode=True,
        start_method="fork",
        chunk_size=1 << 16,
        max_chunk_size=1 << 20,
        timeout=TIMEOUT,
    ) as pool:
        pool.schedule_batch(Scenario.LARGE, worker=0)
        with pytest.raises(WorkerTaskError, match=r"the result needs \d+ bytes, above max_chunk_size\(1048576\)"):
            pool.receive()
        pool.schedule_batch(Scenario.MIXED, worker=0)
        with pool.receive() as batch:
            assert_same(batch.samples, [sample_for(i) for i in range(20)])


def test_a_callback_that_raises_gives_its_message_and_traceback(batch_pool: ShmWorkerPool) -> None:
    batch_pool.schedule_batch(Scenario.RAISES, worker=1)
    with pytest.raises(WorkerTaskError) as caught:
        batch_pool.receive()
    error = caught.value
    assert error.message == "ValueError: sample 42 is corrupt on disk"
    assert error.worker_id == 1
    assert error.traceback_text is not None and "in batch_callback" in error.traceback_text
    assert "sample 42 is corrupt on disk" in str(error) and "in batch_callback" in str(error)
    batch_pool.schedule_batch(None, worker=1)  # the same worker goes on
    with batch_pool.receive() as batch:
        assert batch.worker_id == 1


def test_stop_iteration_is_end_of_data(batch_pool: ShmWorkerPool) -> None:
    batch_pool.schedule_batch(Scenario.STOPS)
    with pytest.raises(EndOfData, match="epoch over"):
        batch_pool.receive()


@pytest.mark.parametrize(
    ("scenario", "reason"),
    [
        (Scenario.OBJECT_ARRAY, "samples[1]: unsupported dtype '|O'"),
        (Scenario.STRUCTURED_WITH_OBJECTS, "samples[0]: unsupported dtype '|V"),
        (Scenario.TOO_DEEP, "nesting exceeds max_depth(64)"),
        (Scenario.NOT_AN_ARRAY, "samples[1]: unsupported sample type str"),
        (Scenario.EXITS, "SystemExit: 7"),
    ],
)
def test_a_batch_that_cannot_be_written_is_a_failed_task(batch_pool: ShmWorkerPool, scenario: int, reason: str) -> None:
    for worker in (0, 1):
        batch_pool.schedule_batch(scenario, worker=worker)
        with pytest.raises(WorkerTaskError) as caught:
            batch_pool.receive()
        assert reason in caught.value.message
        assert caught.value.worker_id == worker
        batch_pool.schedule_batch(None, worker=worker)
        with batch_pool.receive() as batch:
            assert batch.worker_id == worker


def test_receive_times_out_and_then_gets_the_late_result(batch_pool: ShmWorkerPool) -> None:
    batch_pool.schedule_batch(Scenario.SLEEPS_SHORT)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        batch_pool.receive(timeout=0.1)
    assert time.monotonic() - started < 0.5
    with batch_pool.receive() as batch:
        assert_same(batch.samples, [np.zeros(1)])


def test_a_zero_timeout_still_takes_a_result_that_has_arrived(batch_pool: ShmWorkerPool) -> None:
    batch_pool.schedule_batch(None)
    deadline = time.monotonic() + TIMEOUT
    while True:  # a zero timeout that never read what arrived would loop until the deadline
        try:
            batch = batch_pool.receive(timeout=0)
            break
        except TimeoutError:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    with batch:
        assert_same(batch.samples, [np.array(-1, np.int64)])


def test_holding_every_chunk_is_reported_not_waited_on(batch_pool: ShmWorkerPool) -> None:
    held = []
    for _ in range(5):  # 2 workers x 2 chunks, and one more
        batch_pool.schedule_batch(None)
    for _ in range(4):
        held.append(batch_pool.receive())
    with pytest.raises(RuntimeError, match="release"):
        batch_pool.receive(timeout=5.0)
    held[0].release()
    with batch_pool.receive() as batch:
        assert_same(batch.samples, [np.array(-1, np.int64)])
    for batch in held:
        batch.release()


# -- no pickle on the data path ------------------------------------------------

_find_class_events: list[str] = []
_recording = threading.Event()
_hook_installed = False


def _record_find_class(event: str, args: tuple[Any, ...]) -> None:
    if event == "pickle.find_class" and _recording.is_set():
        _find_class_events.append(f"{args[0]}.{args[1]}")


@pytest.mark.parametrize("start_method", START_METHODS)
def test_no_unpickling_in_the_parent_while_batches_flow(start_method: str) -> None:
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_record_find_class)  # hooks cannot be removed: it records only while asked to
        _hook_installed = True
    with ShmWorkerPool(per_sample, num_workers=2, start_method=start_method, timeout=TIMEOUT) as pool:
        _find_class_events.clear()
        _recording.set()
        try:
            with _audit.no_execution():  # no find_class, exec, compile or marshal.loads on this thread either
                for start in range(0, 60, 6):
                    pool.schedule_range(start, start + 6)
                for start in range(0, 60, 6):
                    with pool.receive() as batch:
                        assert_same(batch.samples, [sample_for(i) for i in range(start, start + 6)])
                pool.schedule_range(0, 0)
                pool.receive().release()
        finally:
            _recording.clear()
    assert _find_class_events == []


# -- version agreement -----------------------------------------------------------


@pytest.mark.parametrize("start_method", START_METHODS)
def test_start_refuses_a_worker_that_speaks_another_version(start_method: str) -> None:
    versions = {"shm-message": (1, 2), "shm-samples-meta": (1,), "shm-descriptor": (1,)}
    with pytest.raises(inert.VersionError) as caught:
        ShmWorkerPool(per_sample, num_workers=2, start_method=start_method, timeout=TIMEOUT, _worker_versions=versions)
    assert caught.value.format == "shm-channel"
    assert caught.value.field == "hello.shm-message"
    assert "worker speaks 2, the parent 1" in str(caught.value)


def test_a_callback_spawn_cannot_send_fails_at_start_and_leaks_nothing() -> None:
    import gc
    import warnings

    counts = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        for _ in range(2):  # the first start may open multiprocessing's own lasting descriptors
            with pytest.raises(Exception, match="pickle|attribute lookup"):
                ShmWorkerPool(lambda info: np.zeros(1), num_workers=2, start_method="spawn", timeout=TIMEOUT)
            gc.collect()
            counts.append(len(os.listdir("/proc/self/fd")))
    assert counts[1] == counts[0]
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []  # closed, not collected


# -- a worker that dies --------------------------------------------------------------


@pytest.mark.parametrize("start_method", START_METHODS)
def test_a_worker_killed_mid_task_gives_a_clear_error(start_method: str) -> None:
    pool = ShmWorkerPool(batch_callback, num_workers=2, batch_mode=True, start_method=start_method, timeout=TIMEOUT)
    try:
        pool.schedule_batch(Scenario.SLEEPS_LONG, worker=1)
        pid = pool.pids[1]
        assert pid is not None
        time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(WorkerDiedError, match=r"worker 1 \(pid \d+\) was killed by signal 9") as caught:
            pool.receive()
        assert time.monotonic() - started < 5
        assert caught.value.exitcode == -signal.SIGKILL
        with pytest.raises(ChannelClosedError, match="killed by signal 9"):
            pool.schedule_batch(None)
    finally:
        pool.close()
    assert all(not os.path.exists(f"/proc/{p}") or _is_zombie_free(p) for p in pool.pids if p is not None)


def _is_zombie_free(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_worker_killed_while_idle_is_noticed_on_the_next_task() -> None:
    pool = ShmWorkerPool(batch_callback, num_workers=2, batch_mode=True, start_method="fork", timeout=TIMEOUT)
    try:
        pid = pool.pids[0]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        with pytest.raises(WorkerDiedError, match="worker 0"):
            pool.schedule_batch(None, worker=0)  # the send already finds the channel closed
            pool.receive()
    finally:
        pool.close()


# -- a worker that writes garbage ----------------------------------------------------


def _meta_offset(chunk: memoryview, descriptor: dict[str, int]) -> int:
    # CompletedTask: type byte, four q fields, has_meta byte, then the meta's <QQ offset, size.
    (offset,) = struct.unpack_from("<Q", chunk, descriptor["offset"] + 34)
    return int(offset)


def scribble_dtype(chunk: memoryview, descriptor: dict[str, int]) -> None:
    first_sample = _meta_offset(chunk, descriptor) + 8 + 1
    chunk[first_sample + 16 + 8 : first_sample + 16 + 8 + 3] = b"|O8"  # after offset, nbytes, the u64 length


def scribble_sample_count(chunk: memoryview, descriptor: dict[str, int]) -> None:
    meta = _meta_offset(chunk, descriptor)
    chunk[meta : meta + 8] = struct.pack("<Q", 1 << 40)


def scribble_message_tag(chunk: memoryview, descriptor: dict[str, int]) -> None:
    chunk[descriptor["offset"]] = 0xEE


def scribble_descriptor(chunk: memoryview, descriptor: dict[str, int]) -> None:
    descriptor["shm_capacity"] = 1 << 40  # lies about the chunk it points into


def scribble_bool(chunk: memoryview, descriptor: dict[str, int]) -> None:
    chunk[0] = 7  # the first sample of the batch is a bool array


def scribble_scheduled_i(chunk: memoryview, descriptor: dict[str, int]) -> None:
    chunk[descriptor["offset"] + 17 : descriptor["offset"] + 25] = struct.pack("<q", 12345)


@pytest.mark.parametrize(
    ("hook", "error", "fmt", "field"),
    [
        (scribble_dtype, inert.InvalidValueError, "shm-samples-meta", "samples[0].dtype"),
        (scribble_sample_count, inert.LimitError, "shm-samples-meta", "samples"),
        (scribble_message_tag, inert.UnknownTagError, "shm-message", "type"),
        (scribble_descriptor, inert.InvalidValueError, "shm-descriptor", "shm_capacity"),
        (scribble_scheduled_i, inert.InvalidValueError, "shm-message", "scheduled_i"),
    ],
)
def test_garbage_from_a_worker_is_an_inert_error_in_the_parent(hook: Any, error: type, fmt: str, field: str) -> None:
    pool = ShmWorkerPool(batch_callback, num_workers=2, batch_mode=True, start_method="fork", timeout=TIMEOUT, _after_write=hook)
    try:
        pool.schedule_batch(None)
        started = time.monotonic()
        with pytest.raises(error) as caught:
            pool.receive()
        assert time.monotonic() - started < 5
        exc = caught.value
        assert (exc.format, exc.field) == (fmt, field)
        assert str(exc).startswith(f"{fmt}: offset {exc.offset}: {field}: ")
        assert exc.offset >= 0
        with pytest.raises(ChannelClosedError):
            pool.receive()
    finally:
        pool.close()


def test_garbage_from_a_spawned_worker_names_its_chunk_offset() -> None:
    pool = ShmWorkerPool(per_sample, num_workers=2, start_method="spawn", timeout=TIMEOUT, _after_write=scribble_bool)
    try:
        pool.schedule_range(0, 3)  # sample 0 is a 0-d bool array at chunk offset 0
        with pytest.raises(inert.InvalidValueError) as caught:
            pool.receive()
        assert (caught.value.format, caught.value.offset, caught.value.field) == ("shm-samples-meta", 0, "samples[0]")
        assert "bool byte 7 is not 0 or 1" in str(caught.value)
    finally:
        pool.close()


def test_memory_backend_fallback_round_trips() -> None:
    with ShmWorkerPool(per_sample, num_workers=2, start_method="fork", timeout=TIMEOUT, backend="file") as pool:
        pool.schedule_range(0, 12)
        with pool.receive() as batch:
            assert_same(batch.samples, [sample_for(i) for i in range(12)])


def test_meta_codec_is_the_one_validating_samples() -> None:
    # The channel reads samples meta with the generated codec (same module object).
    from inert.shm import _batch

    assert _batch.shm_samples_meta is shm_samples_meta


# -- a compromised worker that speaks the channel itself ------------------------------


def _own_worker() -> Any:
    """The running worker's state, found the way code running in a compromised worker could."""
    import gc

    from inert.shm._worker import _Worker

    (worker,) = [obj for obj in gc.get_objects() if isinstance(obj, _Worker)]
    return worker


def _send_raw(data: bytes, fds: tuple[int, ...] = ()) -> None:
    import socket

    sock = _own_worker().sock
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def _descriptor_bytes(chunk_id: int, capacity: int, offset: int = 0, num_bytes: int = 0) -> bytes:
    return struct.pack("<iiQQQII", 0, chunk_id, capacity, offset, num_bytes, 0, 0)  # shm-descriptor v2


def rogue_callback(arg: int) -> Any:
    from inert.shm._fdpass import FrameKind

    if arg == 0:  # a RESULT record cut short
        _send_raw(bytes((FrameKind.RESULT,)) + b"\x00" * 5)
    elif arg == 1:  # a record kind that does not exist
        _send_raw(b"\x63")
    elif arg == 2:  # a chunk the worker could still shrink under the parent's mapping
        fd = os.memfd_create("unsealed")
        os.ftruncate(fd, 4096)
        _send_raw(bytes((FrameKind.CHUNK,)) + _descriptor_bytes(0, 4096), (fd,))
    elif arg == 3:  # a CHUNK record without its descriptor
        _send_raw(bytes((FrameKind.CHUNK,)) + _descriptor_bytes(0, 4096))
    elif arg == 4:  # a descriptor slipped into the parent with a RESULT
        _send_raw(bytes((FrameKind.RESULT,)) + _descriptor_bytes(0, 1 << 20, 0, 10), (os.memfd_create("extra"),))
    elif arg == 5:  # a result for a chunk the worker never sent
        _send_raw(bytes((FrameKind.RESULT,)) + _descriptor_bytes(1 << 20, 1 << 20, 0, 10))
    elif arg == 6:  # a chunk far above max_chunk_size
        _send_raw(bytes((FrameKind.CHUNK,)) + _descriptor_bytes(0, 1 << 50), (os.memfd_create("huge"),))
    elif arg == 9:  # a sealed hugetlb memfd: no huge page to back it here, so the parent's mmap fails
        import fcntl

        fd = os.memfd_create("hugetlb", os.MFD_HUGETLB | os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, 2 << 20)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        _send_raw(bytes((FrameKind.CHUNK,)) + _descriptor_bytes(0, 2 << 20), (fd,))
    elif arg == 7:  # try to shrink a chunk the parent has mapped: the seal refuses
        worker = _own_worker()
        refused = []
        for chunk in worker.chunks:
            try:
                os.ftruncate(chunk.fd, 0)
            except PermissionError:
                refused.append(True)
        return [np.array(refused)]
    return [np.zeros(1)]


@pytest.mark.parametrize(
    ("arg", "error", "fmt", "field", "reason"),
    [
        (0, inert.TruncatedError, "shm-descriptor", "shm_chunk_id", "4 bytes needed, 1 present"),
        (1, inert.UnknownTagError, "shm-channel", "kind", "unknown FrameKind 99"),
        (2, inert.InvalidValueError, "shm-channel", "chunk.fd", "chunk size is not sealed against shrinking"),
        (3, inert.InvalidValueError, "shm-channel", "fds", "0 descriptors with a CHUNK record, not 1"),
        (4, inert.InvalidValueError, "shm-channel", "fds", "descriptors attached to a RESULT record"),
        (5, inert.InvalidValueError, "shm-descriptor", "shm_chunk_id", "worker 0 has no chunk 1048576"),
        (6, inert.LimitError, "shm-channel", "chunk.capacity", "outside 1..max_chunk_size"),
    ],
)
def test_records_forged_by_a_compromised_worker_are_refused(arg: int, error: type, fmt: str, field: str, reason: str) -> None:
    with ShmWorkerPool(rogue_callback, num_workers=2, batch_mode=True, start_method="fork", timeout=TIMEOUT) as pool:
        pool.schedule_batch(arg, worker=0)
        with pytest.raises(error) as caught:
            pool.receive()
        exc = caught.value
        assert (exc.format, exc.field) == (fmt, field)
        assert reason in exc.reason


def test_a_sealed_hugetlb_chunk_is_an_inert_error_and_closes_the_pool() -> None:
    if open("/proc/sys/vm/nr_hugepages").read().strip() != "0":
        pytest.skip("huge pages are reserved here: the hugetlb chunk would map")
    with ShmWorkerPool(rogue_callback, num_workers=2, batch_mode=True, start_method="fork", timeout=TIMEOUT) as pool:
        pool.schedule_batch(9, worker=0)
        with pytest.raises(inert.InvalidValueError, match=r"chunk\.fd: the chunk cannot be mapped"):
            pool.receive()
        with pytest.raises(ChannelClosedError, match="cannot be mapped"):
            pool.schedule_batch(8, worker=0)


def test_a_worker_cannot_shrink_a_chunk_the_parent_has_mapped() -> None:
    with ShmWorkerPool(rogue_callback, num_workers=2, batch_mode=True, start_method="fork", timeout=TIMEOUT) as pool:
        pool.schedule_batch(7, worker=0)
        with pool.receive() as batch:
            assert batch.samples[0].tolist() == [True, True]  # both chunks refused ftruncate
        pool.schedule_batch(8, worker=0)  # and the worker carries on
        with pool.receive() as batch:
            kept = batch.samples[0]
    assert kept.tolist() == [0.0]  # a view outlives the pool: its mapping stays alive


# -- the example in the package docstring runs ----------------------------------------


def test_the_package_docstring_example_runs(tmp_path: Any) -> None:
    import subprocess

    import inert.shm

    doc = inert.shm.__doc__ or ""
    block = doc.split("Example::\n", 1)[1].split("\nThis module", 1)[0]
    lines = [line[4:] if line.startswith("    ") else line for line in block.splitlines()]
    script = tmp_path / "example.py"
    script.write_text("\n".join(lines))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0.0, 1.0, 2.0, 3.0]"


ORPHAN_SCRIPT = """
import os, sys
import numpy as np
from inert.shm import ShmWorkerPool

def load(info):
    return np.zeros(1)

if __name__ == "__main__":
    pool = ShmWorkerPool(load, num_workers=2, start_method=sys.argv[1], timeout=20)
    pool.schedule_range(0, 2)
    pool.receive().release()
    print(" ".join(str(pid) for pid in pool.pids), flush=True)
    os._exit(0)  # the parent vanishes without closing anything
"""


def _exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("start_method", START_METHODS)
def test_workers_exit_when_their_parent_vanishes(start_method: str, tmp_path: Any) -> None:
    import subprocess

    script = tmp_path / "orphans.py"
    script.write_text(ORPHAN_SCRIPT)
    result = subprocess.run([sys.executable, str(script), start_method], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    pids = [int(pid) for pid in result.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    try:
        while not all(_exited(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_exited(pid) for pid in pids)
    finally:
        for pid in pids:  # leave no orphan behind when the test fails
            if not _exited(pid):
                os.kill(pid, signal.SIGKILL)
