"""inert.dali against the real NVIDIA DALI: pipelines run, errors arrive, hostile workers get InertError.

Skipped only when DALI is not installed and ``INERT_REQUIRE_DALI`` is unset;
an installed but broken DALI fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def _dali_installed() -> bool:
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:
        return False


if not _dali_installed() and not os.environ.get("INERT_REQUIRE_DALI"):
    pytest.skip("nvidia.dali is not installed (INERT_REQUIRE_DALI=1 makes this a failure)", allow_module_level=True)

import dali_callbacks as cb  # noqa: E402  (imports nvidia.dali: a broken install fails here)
import nvidia.dali  # noqa: E402
from nvidia.dali._multiproc import pool, shared_batch, worker  # noqa: E402

import inert.dali  # noqa: E402
from inert import (  # noqa: E402
    InertError,
    InvalidValueError,
    LimitError,
    UnknownTagError,
    WriteValueError,
    _audit,  # noqa: E402
)
from inert.codecs import shm_message  # noqa: E402

HERE = Path(__file__).resolve().parent

# The parent's readers of worker bytes join the suite's no-execution guard (see conftest).
_audit.watch_readers(inert.dali._receive_chunk, inert.dali._deserialize_batch, inert.dali._read_result)
SECONDS = 60  # any single pipeline test; a hang fails instead of blocking the suite


@pytest.fixture(autouse=True)
def dalis_own_path_first() -> None:
    """Each test starts from DALI's own functions, whatever ran before it in this process."""
    inert.dali.disable()


@pytest.fixture
def adapter() -> Iterator[None]:
    """The adapter enabled for one test, with a watchdog against hangs."""
    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"DALI pipeline test exceeded {SECONDS} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(SECONDS)
    try:
        with inert.dali.enabled():
            yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --- enabling -------------------------------------------------------------------------------------


def test_import_inert_does_not_import_dali() -> None:
    code = "import sys, inert, inert.codecs.shm_message, inert.dali; print('nvidia.dali' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_enable_patches_and_disable_restores() -> None:
    original = (shared_batch.read_shm_message, worker.write_shm_message, pool.worker, pool.WorkerPool._receive_chunk)
    with inert.dali.enabled():
        assert inert.dali.is_enabled()
        assert worker.read_shm_message is inert.dali._read_task
        assert pool.worker is inert.dali._worker_entry
        with inert.dali.enabled():  # nested: the outer block keeps it on
            pass
        assert inert.dali.is_enabled()
        with pytest.raises(RuntimeError, match="unpickle"):
            shared_batch.restricted_pickle_loads(b"\x80\x04N.")
    assert not inert.dali.is_enabled()
    assert (shared_batch.read_shm_message, worker.write_shm_message, pool.worker, pool.WorkerPool._receive_chunk) == original


def test_refuses_an_unknown_dali_version(monkeypatch: pytest.MonkeyPatch) -> None:
    assert nvidia.dali.__version__ in inert.dali.SUPPORTED_VERSIONS
    monkeypatch.setattr(nvidia.dali, "__version__", "2.3.0")
    with pytest.raises(RuntimeError, match=r"supports NVIDIA DALI 2\.4\.0; the installed nvidia.dali is 2\.3\.0"):
        inert.dali.enable()
    assert not inert.dali.is_enabled()


def test_refuses_a_build_without_the_functions_it_replaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(pool.WorkerPool, "_receive_chunk")
    with pytest.raises(RuntimeError, match=r"WorkerPool lacks _receive_chunk; this nvidia.dali 2\.4\.0 build differs"):
        inert.dali.enable()
    assert not inert.dali.is_enabled()


def test_text_limit_matches_the_spec() -> None:
    from inert.spec import shm_message as spec  # the dev extra installs Construct: a failure here is one
    assert spec.MAX_TEXT_LEN == inert.dali._MAX_TEXT_LEN


def test_message_size_bound_is_the_longest_message() -> None:
    longest = "a" * inert.dali._MAX_TEXT_LEN
    value = {
        "type": "COMPLETED_TASK", "worker_id": 0, "context_i": 0, "scheduled_i": 0, "minibatch_i": 0,
        "meta": {"offset": 0, "size": 0}, "exception": {"kind": "RUNTIME_ERROR", "message": longest}, "traceback": longest,
    }
    assert len(shm_message.encode(value)) == inert.dali._MAX_MESSAGE_BYTES


# --- pipelines ------------------------------------------------------------------------------------

SOURCES = [
    {"source": cb.sample, "batch": False},
    {"source": cb.sample_pair, "batch": False, "num_outputs": 2},
    {"source": cb.batch_info, "batch": True, "batch_info": True},
    {"source": cb.batch_nested, "batch": True, "batch_info": True, "num_outputs": 2},
    {"source": cb.batch_iteration, "batch": True},
    {"source": cb.batch_generator, "batch": True},
]


def _expected(iteration: int) -> list[list[Any]]:
    idx = [iteration * cb.BATCH + i for i in range(cb.BATCH)]
    return [
        [[i, iteration, 0] for i in idx],
        [np.full((2, 3), i, np.float32).tolist() for i in idx],
        [[i] for i in range(cb.BATCH)],
        [[iteration, 0, i] for i in range(cb.BATCH)],
        [[iteration] * (i + 1) for i in range(cb.BATCH)],
        [i / 2 for i in range(cb.BATCH)],
        [[iteration, i] for i in range(cb.BATCH)],
        [[-iteration, i] for i in range(cb.BATCH)],
    ]


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_sample_batch_tuple_and_nested_outputs(adapter: None, start_method: str) -> None:
    with cb.running(cb.make_pipeline(SOURCES, start_method)) as pipe:
        for iteration in range(3):
            assert cb.as_lists(pipe.run()) == _expected(iteration)


def test_same_outputs_as_dalis_own_path() -> None:
    with cb.running(cb.make_pipeline(SOURCES)) as pipe:
        assert cb.as_lists(pipe.run()) == _expected(0)


def test_stop_iteration_ends_the_epoch_then_reset_starts_the_next(adapter: None) -> None:
    with cb.running(cb.make_pipeline([{"source": cb.finite, "batch": False}], batch_size=5)) as pipe:
        for epoch in range(2):
            seen = [cb.as_lists(pipe.run())[0] for _ in range(cb.EPOCH_SAMPLES // 5)]
            assert [row for batch in seen for row in batch] == [[i, epoch] for i in range(cb.EPOCH_SAMPLES)]
            with pytest.raises(StopIteration):
                pipe.run()
            pipe.reset()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_callback_error_reaches_the_user_with_message_and_traceback(adapter: None, start_method: str) -> None:
    with cb.running(cb.make_pipeline([{"source": cb.failing, "batch": False}], start_method)) as pipe:
        with pytest.raises(Exception, match="sample 2 is corrupt ü") as info:
            pipe.run()
    text = str(info.value)
    assert "Traceback (most recent call last)" in text and "in failing" in text and "ValueError" in text
    assert isinstance(info.value.__cause__, RuntimeError)
    assert str(info.value.__cause__) == "sample 2 is corrupt ü"


def test_unsupported_return_type_is_a_clear_error(adapter: None) -> None:
    with cb.running(cb.make_pipeline([{"source": cb.returns_dict, "batch": False}])) as pipe:
        with pytest.raises(Exception, match="Unsupported callback return type"):
            pipe.run()


def test_array_the_format_cannot_carry_is_a_clear_error(adapter: None) -> None:
    # DALI itself would copy the array's bytes; shm-samples-meta refuses the dtype.
    with cb.running(cb.make_pipeline([{"source": cb.returns_text_array, "batch": False}])) as pipe:
        reason = r"cannot be sent through shared memory \(inert.dali\): .*unsupported dtype '<U4'"
        with pytest.raises(Exception, match=reason) as info:
            pipe.run()
    assert "unsupported dtype '<U4'" in str(info.value.__cause__)


# --- hostile workers ----------------------------------------------------------------------------------


SHAPE_AT = "shm-samples-meta: offset 9: samples[0].shape: "


@pytest.mark.parametrize(
    ("mode", "error", "where"),
    [
        ("pickle", UnknownTagError, "shm-message: offset 0: type"),
        ("garbage", InertError, "shm-message"),
        ("meta-outside", InvalidValueError, "shm-samples-meta: offset 9: samples[0].nbytes: bytes 1099511627776.."),
        ("descriptor", InvalidValueError, "shm-descriptor: offset 4: shm_chunk_id: 10000 names no chunk"),
        ("capacity", InvalidValueError, "shm-descriptor: offset 8: shm_capacity: 1074790400 declared, the chunk holds 1048576"),
        ("message-size", LimitError, "shm-descriptor: offset 24: num_bytes: 3145728 declared, no shm-message is longer than"),
        ("bool-bytes", InvalidValueError, "shm-samples-meta: offset 0: samples[0]: bool byte 255 is not 0 or 1"),
        (f"shape:0,{1 << 63}", InvalidValueError, f"{SHAPE_AT}[0, {1 << 63}] of |u1 spans more than 2**63 - 1 bytes"),
        (f"shape:{1 << 62},0,4", InvalidValueError, f"{SHAPE_AT}[{1 << 62}, 0, 4] of |u1 spans more than"),
        (f"shape:0,{(1 << 64) - 1}", InvalidValueError, f"{SHAPE_AT}[0, {(1 << 64) - 1}] of |u1 spans more than"),
    ],
)
def test_hostile_worker_gets_inert_error_in_the_parent(
    adapter: None, tmp_path: Path, mode: str, error: type[InertError], where: str
) -> None:
    marker = tmp_path / "executed"
    hostile = cb.Hostile(mode, str(marker))
    with cb.running(cb.make_pipeline([{"source": hostile, "batch": False}])) as pipe:
        cpu_before = time.process_time()
        with pytest.raises(error) as info:
            for _ in range(3):
                pipe.run()
        cpu = time.process_time() - cpu_before
    assert str(info.value).startswith(where)
    assert not marker.exists()
    assert cpu < 0.5, f"the parent spent {cpu:.2f} s of CPU before refusing"


@pytest.mark.parametrize(
    ("mode", "where"),
    [
        ("queue:size=2000000", "dali-shm-queue: offset 4: size: 2000000 messages declared, the queue has 6 slots"),
        ("queue:size=-1", "dali-shm-queue: offset 4: size: -1 messages declared"),
        ("queue:capacity=0", "dali-shm-queue: offset 0: capacity: 0 in the shared header, the queue has 6 slots"),
        ("queue:capacity=2147483647", "dali-shm-queue: offset 0: capacity: 2147483647 in the shared header"),
        ("queue:begining=1000", "dali-shm-queue: offset 8: begining: slot 1000 outside 0..5"),
        ("queue:begining=-3", "dali-shm-queue: offset 8: begining: slot -3 outside 0..5"),
        ("queue:is_closed=7", "dali-shm-queue: offset 12: is_closed: 7, not 0 or 1"),
    ],
)
def test_hostile_queue_header_costs_the_parent_milliseconds(adapter: None, mode: str, where: str) -> None:
    """DALI loops ``size`` times and divides by ``capacity``, as read from shared memory: both are checked first.

    Without the check a size of 2,000,000 cost the parent 6.3 s of CPU and
    260 MiB before DALI's own error; capacity 0 raised ZeroDivisionError.
    """
    with cb.running(cb.make_pipeline([{"source": cb.Hostile(mode), "batch": False}])) as pipe:
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cpu_before = time.process_time()
        with pytest.raises(InvalidValueError) as info:
            for _ in range(3):
                pipe.run()
        cpu = time.process_time() - cpu_before
        grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert str(info.value).startswith(where)
    assert cpu < 0.5, f"the parent spent {cpu:.2f} s of CPU on a hostile queue header"
    assert grown_kib < 50 * 1024, f"the parent grew by {grown_kib} KiB on a hostile queue header"


@pytest.mark.parametrize("worker_id", [7, -1, 0])
def test_worker_starting_under_another_id_is_refused(adapter: None, monkeypatch: pytest.MonkeyPatch, worker_id: int) -> None:
    """Both workers report their start as ``worker_id`` (0 twice, or ids the pool does not have)."""
    monkeypatch.setattr(pool, "worker", cb.start_as(worker_id))  # ProcPool looks the entry point up here
    where = rf"shm-descriptor: offset 0: worker_id: {worker_id} is not a worker yet to start"
    with pytest.raises(InvalidValueError, match=where):
        with cb.running(cb.make_pipeline([{"source": cb.sample, "batch": False}])):
            pass


def test_hostile_spawn_worker_gets_inert_error_in_the_parent(adapter: None, tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    with cb.running(cb.make_pipeline([{"source": cb.Hostile("pickle", str(marker)), "batch": False}], "spawn")) as pipe:
        with pytest.raises(UnknownTagError):
            pipe.run()
    assert not marker.exists()


def test_no_pickle_find_class_while_batches_flow() -> None:
    def run(mode: str) -> dict[str, Any]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(
            [sys.executable, str(HERE / "dali_callbacks.py"), mode], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    with_adapter = run("adapter")
    assert with_adapter == {"parent": [], "parent_restricted_unpickles": 0, "worker_max": 0, "enabled": True}
    # Control: DALI's own path unpickles every task in the worker (the hook sees it) and
    # every result in the parent (its restricted unpickler raises no audit event).
    dalis_own = run("dali")
    assert dalis_own["worker_max"] > 0 and dalis_own["parent_restricted_unpickles"] > 0
    assert not dalis_own["enabled"]


# --- the adapter's mapping, without processes ------------------------------------------------------------


def _chunk(capacity: int = 1 << 16) -> Any:
    return shared_batch.BufShmChunk.allocate(0, capacity)


def _same(got: Any, want: Any) -> bool:
    """Same nesting (tuple vs list), dtypes, shapes and values."""
    if isinstance(want, (tuple, list)):
        return type(got) is type(want) and len(got) == len(want) and all(map(_same, got, want))
    return bool(got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want))


def test_deep_nesting_round_trips_and_too_deep_is_refused() -> None:
    deep: Any = np.arange(3, dtype=np.int8)
    for level in range(20):
        deep = (deep,) if level % 2 else [deep]
    batch = [deep, (np.zeros((0, 2), np.float32), [np.array(True)])]
    with inert.dali.enabled():
        chunk = _chunk()
        writer = shared_batch.SharedBatchWriter(chunk, batch)
        got = shared_batch.deserialize_batch(chunk, shared_batch.SharedBatchMeta.from_writer(writer))
        assert _same(got, batch)
        too_deep: Any = np.zeros(1)
        for _ in range(70):
            too_deep = [too_deep]
        with pytest.raises(WriteValueError, match="max_depth"):
            shared_batch.SharedBatchWriter(_chunk(), [too_deep])


def test_batches_shaped_alike_reuse_the_layout_and_carry_their_own_data() -> None:
    rng = np.random.default_rng(0)
    batches = [
        [rng.random((2, 3)).astype(np.float32), (np.arange(5, dtype=">i4"), np.asfortranarray(rng.random((3, 2))))]
        for _ in range(3)
    ] + [[np.ones((4,), np.complex64)], [np.ones((2, 3), np.float32)]]
    with inert.dali.enabled():
        for batch in batches:
            chunk = _chunk()
            writer = shared_batch.SharedBatchWriter(chunk, batch)
            got = shared_batch.deserialize_batch(chunk, shared_batch.SharedBatchMeta.from_writer(writer))
            assert _same(got, batch)


def test_messages_map_both_ways() -> None:
    from nvidia.dali._multiproc.messages import CompletedTask, SampleRange, ScheduledTask, TaskArgs
    from nvidia.dali.types import BatchInfo

    with inert.dali.enabled():
        for args in [(), (7,), (BatchInfo(3, 1),)]:
            task = ScheduledTask(1, 2, 3, TaskArgs(0, batch_args=args))
            back = inert.dali._scheduled_task(shm_message.decode(shm_message.encode(inert.dali._message_value(task))))
            assert repr([vars(a) if isinstance(a, BatchInfo) else a for a in back.task.batch_args]) == repr(
                [vars(a) if isinstance(a, BatchInfo) else a for a in args]
            )
        sliced = SampleRange(10, 20, 1, 0)[2:8]
        task = ScheduledTask(0, 5, 0, TaskArgs(1, sample_range=sliced))
        back = inert.dali._scheduled_task(shm_message.decode(shm_message.encode(inert.dali._message_value(task))))
        assert vars(back.task.sample_range) == vars(sliced) and back.task.minibatch_i == 1
        with pytest.raises(TypeError, match="takes no argument, an int or a BatchInfo"):
            inert.dali._message_value(ScheduledTask(0, 0, 0, TaskArgs(0, batch_args=(True,))))
        huge = CompletedTask(0, 0, 0, 0, exception=RuntimeError("é" * (1 << 20)), traceback_str="t\ud800")
        value = shm_message.decode(shm_message.encode(inert.dali._message_value(huge)))
        assert len(value["exception"]["message"].encode()) <= inert.dali._MAX_TEXT_LEN
        assert value["traceback"] == "t?"


def test_a_result_with_both_batch_and_exception_is_refused() -> None:
    with inert.dali.enabled():
        value = inert.dali._message_value(shared_batch.CompletedTask(0, 0, 0, 0, exception=StopIteration()))
        value["meta"] = {"offset": 0, "size": 8}
        with pytest.raises(InvalidValueError, match="either a batch or an exception"):
            inert.dali._completed_task(shm_message.decode(shm_message.encode(value)))


# --- DALI's objects through the published binary layout -----------------------------------------------------


def test_installed_dali_has_no_binary_message_functions() -> None:
    """DALI 2.4.0 still pickles its messages: the published layout's functions are not in it to run.

    The interop tests therefore use ``dali_layout``, a writer and reader of
    that layout kept in tests/ and written from its description.
    """
    published = ("serialize_message", "deserialize_message", "serialize_samples_meta", "deserialize_samples_meta")
    assert [name for name in (*published, "_BinaryWriter", "_BinaryReader") if hasattr(shared_batch, name)] == []
    from nvidia.dali._multiproc.messages import ScheduledTask, TaskArgs

    chunk = _chunk()
    shared_batch.write_shm_message(-1, chunk, ScheduledTask(0, 1, 0, TaskArgs(0, batch_args=())), 0)
    assert bytes(chunk.buf[0:2]) == b"\x80\x04"  # a pickle, protocol 4


def _dali_fields(message: Any) -> Any:
    """A DALI ScheduledTask or CompletedTask as the values ``dali_layout`` reads."""
    from dali_layout import Completed, Scheduled
    from nvidia.dali.types import BatchInfo

    if hasattr(message, "task"):
        r = message.task.sample_range
        rng = None if r is None else (r.sample_start, r.sample_end, r.iteration, r.epoch_idx, r.slice_start, r.slice_end)
        args = tuple(
            ("BatchInfo", a.iteration, a.epoch_idx) if isinstance(a, BatchInfo) else a for a in message.task.batch_args or ()
        )
        return Scheduled(message.context_i, message.scheduled_i, message.epoch_start, message.task.minibatch_i, rng, args)
    meta = message.batch_meta
    exc = message.exception
    return Completed(
        message.worker_id,
        message.context_i,
        message.scheduled_i,
        message.minibatch_i,
        None if meta is None else (meta.meta_offset, meta.meta_size),
        None if exc is None else (type(exc).__name__, str(exc)),
        message.traceback_str,
    )


def _dali_messages() -> list[Any]:
    from nvidia.dali._multiproc.messages import CompletedTask, SampleRange, ScheduledTask, TaskArgs
    from nvidia.dali.types import BatchInfo

    return [
        ScheduledTask(0, 5, 0, TaskArgs(1, sample_range=SampleRange(10, 20, 1, 0)[2:8])),
        ScheduledTask(2, 6, 1, TaskArgs(0, sample_range=SampleRange(0, 4, 3, 2))),
        ScheduledTask(1, 7, 0, TaskArgs(3, batch_args=())),
        ScheduledTask(1, 7, 0, TaskArgs(3, batch_args=(12,))),
        ScheduledTask(1, 8, 0, TaskArgs(0, batch_args=(BatchInfo(4, 1),))),
        CompletedTask(1, 0, 5, 2, batch_meta=shared_batch.SharedBatchMeta(4096, 300)),
        CompletedTask(0, 0, 9, 0, exception=StopIteration("done")),
        CompletedTask(1, 2, 3, 4, exception=RuntimeError("sample 2 is corrupt ü"), traceback_str="Traceback ...\nValueError"),
    ]


def message_worker_id(message: Any) -> int:
    """The worker id DALI writes a message with: -1 for the parent's tasks."""
    return -1 if hasattr(message, "task") else message.worker_id


def test_dali_messages_written_by_the_adapter_read_with_the_published_layout() -> None:
    import dali_layout

    with inert.dali.enabled():
        for message in _dali_messages():
            chunk = _chunk()
            desc = shared_batch.write_shm_message(message_worker_id(message), chunk, message, 64)
            data = bytes(chunk.buf[desc.offset : desc.offset + desc.num_bytes])
            assert dali_layout.read_message(data) == _dali_fields(message)


def test_published_layout_bytes_read_by_the_adapter_as_dali_objects() -> None:
    import dali_layout
    from nvidia.dali._multiproc.messages import ShmMessageDesc

    with inert.dali.enabled():
        for message in _dali_messages():
            data = dali_layout.write_message(_dali_fields(message))
            chunk = _chunk()
            chunk.buf[128 : 128 + len(data)] = data
            desc = ShmMessageDesc(message_worker_id(message), chunk.shm_chunk_id, chunk.capacity, 128, len(data))
            back = shared_batch.read_shm_message(chunk, desc)
            assert type(back) is type(message) and _dali_fields(back) == _dali_fields(message)


def test_samples_meta_written_by_the_adapter_reads_with_the_published_layout_and_back() -> None:
    import dali_layout

    batch = [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        (np.array([True, False]), [np.arange(5, dtype=">i8"), np.zeros((0, 3), np.uint8)]),
        np.array(2.5),
    ]
    with inert.dali.enabled():
        chunk = _chunk()
        writer = shared_batch.SharedBatchWriter(chunk, batch)
        meta = shared_batch.SharedBatchMeta.from_writer(writer)
        data = bytes(chunk.buf[meta.meta_offset : meta.meta_offset + meta.meta_size])
        read = dali_layout.read_samples_meta(data)
        arrays = [read[0], read[1][0], read[1][1][0], read[1][1][1], read[2]]
        for got, want in zip(arrays, [batch[0], batch[1][0], batch[1][1][0], batch[1][1][1], batch[2]], strict=True):
            assert (got.nbytes, got.dtype, got.shape) == (want.nbytes, want.dtype.str, want.shape)
            assert bytes(chunk.buf[got.offset : got.offset + got.nbytes]) == want.tobytes()
        assert isinstance(read[1], tuple) and isinstance(read[1][1], list)

        # The other way: the layout's bytes, placed where DALI's writer would place them, give the same batch.
        other = _chunk()
        other.buf[: meta.meta_offset] = chunk.buf[: meta.meta_offset]
        again = dali_layout.write_samples_meta(read)
        other.buf[meta.meta_offset : meta.meta_offset + len(again)] = again
        got_batch = shared_batch.deserialize_batch(other, shared_batch.SharedBatchMeta(meta.meta_offset, len(again)))
        assert _same(got_batch, batch)
