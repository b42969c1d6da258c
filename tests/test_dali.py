"""inert.dali against the real NVIDIA DALI: pipelines run, errors arrive, hostile workers get InertError.

Skipped only when DALI is not installed and ``INERT_REQUIRE_DALI`` is unset;
an installed but broken DALI fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
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
from inert.codecs import shm_message  # noqa: E402
from nvidia.dali._multiproc import pool, shared_batch, worker  # noqa: E402

import inert.dali  # noqa: E402
from inert import (  # noqa: E402
    InertError,
    InvalidValueError,
    UnknownTagError,
    WriteValueError,
    _audit,  # noqa: E402
)

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


@pytest.mark.parametrize(
    ("mode", "error", "where"),
    [
        ("pickle", UnknownTagError, "shm-message: offset 0: type"),
        ("garbage", InertError, "shm-message"),
        ("meta-outside", InvalidValueError, "shm-samples-meta: offset 9: samples[0].nbytes: bytes 1099511627776.."),
        ("descriptor", InvalidValueError, "shm-descriptor: offset 4: shm_chunk_id: 10000 names no chunk"),
        ("capacity", InvalidValueError, "shm-descriptor: offset 8: shm_capacity: 1074790400 declared, the chunk holds 1048576"),
    ],
)
def test_hostile_worker_gets_inert_error_in_the_parent(
    adapter: None, tmp_path: Path, mode: str, error: type[InertError], where: str
) -> None:
    marker = tmp_path / "executed"
    hostile = cb.Hostile(mode, str(marker))
    with cb.running(cb.make_pipeline([{"source": hostile, "batch": False}])) as pipe:
        with pytest.raises(error) as info:
            for _ in range(3):
                pipe.run()
    assert str(info.value).startswith(where)
    assert not marker.exists()


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
