"""Callbacks and pipelines for the DALI adapter tests, importable by ``spawn`` workers.

A ``spawn`` worker unpickles its callback by reference, so callbacks live here
rather than in the test module.  Hostile callbacks run in the worker and
corrupt what the worker sends, the way a compromised worker would.
"""

from __future__ import annotations

import functools
import os
import pickle
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from nvidia.dali import Pipeline, fn

BATCH = 4
EPOCH_SAMPLES = 10


def sample(info: Any) -> np.ndarray:
    """Sample mode: the sample's index in the epoch, in the epoch, three times."""
    return np.array([info.idx_in_epoch, info.iteration, info.epoch_idx], dtype=np.int64)


def sample_pair(info: Any) -> tuple[np.ndarray, np.ndarray]:
    """Sample mode, two outputs of different dtypes and shapes."""
    return np.full((2, 3), info.idx_in_epoch, np.float32), np.array([info.idx_in_batch], np.uint8)


def batch_info(info: Any) -> list[np.ndarray]:
    """Batch mode with BatchInfo."""
    return [np.array([info.iteration, info.epoch_idx, i], np.int32) for i in range(BATCH)]


def batch_nested(info: Any) -> tuple[list[np.ndarray], tuple[np.ndarray, ...]]:
    """Batch mode, two outputs: a list of samples and a tuple of samples (nested in the batch)."""
    first = [np.full((i + 1,), info.iteration, np.int16) for i in range(BATCH)]
    second = tuple(np.array(float(i) / 2, np.float64) for i in range(BATCH))
    return first, second


def batch_iteration(iteration: int) -> list[np.ndarray]:
    """Batch mode without BatchInfo: DALI passes the iteration as an int."""
    assert type(iteration) is int
    return [np.array([iteration, i], np.int64) for i in range(BATCH)]


def batch_generator() -> Iterator[list[np.ndarray]]:
    """A generator function: its batches are scheduled with no argument at all."""
    for iteration in range(1000):
        yield [np.array([-iteration, i], np.int32) for i in range(BATCH)]


def finite(info: Any) -> np.ndarray:
    """Sample mode over an epoch of EPOCH_SAMPLES samples."""
    if info.idx_in_epoch >= EPOCH_SAMPLES:
        raise StopIteration
    return np.array([info.idx_in_epoch, info.epoch_idx], np.int64)


def failing(info: Any) -> np.ndarray:
    if info.idx_in_epoch == 2:
        raise ValueError(f"sample {info.idx_in_epoch} is corrupt ü")
    return np.zeros(1, np.int8)


def returns_dict(info: Any) -> Any:
    return {"not": "an array"}


def returns_text_array(info: Any) -> np.ndarray:
    return np.array(["text"])


class Hostile:
    """A callback that, in its worker, corrupts what the worker sends back.

    ``mode`` picks the corruption: ``pickle`` replaces every result message by
    a pickle that would create ``marker`` (a file) if unpickled; ``garbage``
    replaces it by random bytes; ``meta-outside`` declares a sample beyond the
    chunk; ``descriptor`` names a chunk the pool does not have; ``capacity``
    declares a chunk larger than its file; ``message-size`` grows the chunk
    and declares a message longer than any shm-message; ``bool-bytes`` writes
    2 and 255 into a bool sample; ``shape:<dims>`` writes a samples meta (with
    the published layout's writer) whose first array has those dims and no
    bytes; ``queue:<field>=<value>`` writes that into the result queue's
    shared header when it puts a result.
    """

    def __init__(self, mode: str, marker: str = "") -> None:
        self.mode = mode
        self.marker = marker

    def __call__(self, info: Any) -> np.ndarray:
        _corrupt_once(self.mode, self.marker)
        if self.mode == "bool-bytes":
            return np.array([True, False, True])
        return np.arange(4, dtype=np.int32)


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


_corrupted: list[str] = []


def _corrupt_once(mode: str, marker: str) -> None:
    """Replace, in this worker process, the writer the adapter installed."""
    if _corrupted:
        return
    _corrupted.append(mode)
    from nvidia.dali._multiproc import worker

    from inert.codecs import shm_samples_meta

    write = worker.write_shm_message

    def write_hostile(worker_id: int, shm_chunk: Any, message: Any, offset: int, resize: bool = True) -> Any:
        desc = write(worker_id, shm_chunk, message, offset, resize)
        if mode == "pickle":
            data = pickle.dumps(_Payload(marker))
        elif mode == "garbage":
            data = np.random.default_rng(7).integers(0, 256, desc.num_bytes, dtype=np.uint8).tobytes()
        else:
            if mode == "descriptor":
                desc.shm_chunk_id = 10_000
            elif mode == "capacity":  # mapping this much and reading its end would be SIGBUS
                desc.shm_capacity += 1 << 30
                desc.offset = desc.shm_capacity - 4096
            elif mode == "message-size":  # a chunk grown as DALI grows them, a message as long as it
                from nvidia.dali._multiproc import shared_batch

                shared_batch.resize_shm_chunk(shm_chunk, 8 << 20)
                desc.shm_capacity, desc.offset, desc.num_bytes = shm_chunk.capacity, 0, 3 << 20
            return desc
        shm_chunk.buf[offset : offset + len(data)] = data
        desc.num_bytes = len(data)
        return desc

    if mode == "meta-outside":
        encode = shm_samples_meta.encode

        def encode_outside(value: Any) -> bytes:
            value["samples"][0]["offset"] = 1 << 40
            return encode(value)

        shm_samples_meta.encode = encode_outside  # type: ignore[assignment]
    elif mode.startswith("shape:"):
        _write_shape(tuple(int(dim) for dim in mode[len("shape:") :].split(",")))
    elif mode == "bool-bytes":
        _write_bool_bytes()
    elif mode.startswith("queue:"):
        field, value = mode[len("queue:") :].split("=")
        _write_queue_header(field, int(value))
    else:
        worker.write_shm_message = write_hostile


def _write_shape(dims: tuple[int, ...]) -> None:
    """Samples meta whose first array has ``dims`` and no bytes: Inert's writer refuses it, so the layout's writes it."""
    import dali_layout

    from inert.codecs import shm_samples_meta

    def encode_shape(value: Any) -> bytes:
        first, *rest = value["samples"]
        arrays = [dali_layout.Array(first["offset"], 0, "|u1", dims)]
        arrays += [dali_layout.Array(s["offset"], s["nbytes"], s["dtype"], tuple(s["shape"])) for s in rest]
        return dali_layout.write_samples_meta(arrays)

    shm_samples_meta.encode = encode_shape  # type: ignore[assignment]


def _write_bool_bytes() -> None:
    """After each batch is written, its first sample's bytes become 2, 0, 255 (the samples are bool arrays)."""
    from nvidia.dali._multiproc import shared_batch

    write_batch = shared_batch.SharedBatchWriter._write_batch

    def write_then_spoil(self: Any, batch: Any) -> None:
        write_batch(self, batch)
        self.shm_chunk.buf[0:3] = bytes([2, 0, 255])  # DALI places the first sample at offset 0

    shared_batch.SharedBatchWriter._write_batch = write_then_spoil  # type: ignore[method-assign]


def _write_queue_header(field: str, value: int) -> None:
    """Each result this worker puts leaves ``value`` in the result queue's shared header field ``field``."""
    from nvidia.dali._multiproc import shared_queue

    put = shared_queue.ShmQueue.put

    def put_hostile(self: Any, msgs: Any) -> Any:
        def write_meta() -> None:
            setattr(self.meta, field, value)
            self.meta.pack_into(self.shm.buf, 0)

        self._write_meta = write_meta
        return put(self, msgs)

    shared_queue.ShmQueue.put = put_hostile  # type: ignore[method-assign]


def start_as(worker_id: int) -> Callable[[Any], None]:
    """A worker entry point that starts the worker under ``worker_id``, as a compromised worker could."""
    return functools.partial(_start_as, worker_id)


def _start_as(worker_id: int, worker_args: Any) -> None:
    import inert.dali

    worker_args.worker_id = worker_id
    inert.dali._worker_entry(worker_args)


# --- pipelines ---------------------------------------------------------------------------------------


def make_pipeline(sources: list[dict[str, Any]], start_method: str = "fork", batch_size: int = BATCH) -> Pipeline:
    """A CPU pipeline whose outputs are the given parallel external sources."""
    pipe = Pipeline(
        batch_size=batch_size,
        num_threads=1,
        device_id=None,
        py_num_workers=2,
        py_start_method=start_method,
        prefetch_queue_depth=2,
    )
    outputs: list[Any] = []
    with pipe:
        for kwargs in sources:
            out = fn.external_source(parallel=True, **kwargs)
            outputs.extend(out if isinstance(out, (list, tuple)) else [out])
        pipe.set_outputs(*outputs)
    return pipe


@contextmanager
def running(pipe: Pipeline) -> Iterator[Pipeline]:
    """Build ``pipe`` and stop its workers on exit, so no pool outlives the test that made it."""
    try:
        pipe.build()
        yield pipe
    finally:
        pool = getattr(pipe, "_py_pool", None)
        if pool is not None:
            pool.close()
        pipe._shutdown()


def as_lists(outputs: Any) -> list[list[Any]]:
    return [[np.array(batch[i]).tolist() for i in range(len(batch))] for batch in outputs]


# --- the audit run (in a fresh interpreter) ----------------------------------------------------------------

_worker_events: list[str] = []


def _record_find_class(event: str, args: tuple[Any, ...]) -> None:
    if event == "pickle.find_class":
        _worker_events.append(f"{args[0]}.{args[1]}")


def counting_find_class(info: Any) -> np.ndarray:
    """Sample mode: how many ``pickle.find_class`` events this worker saw since its first sample."""
    if not _worker_hook_installed:
        _install_worker_hook()
    return np.array([len(_worker_events)], np.int64)


_worker_hook_installed: list[bool] = []


def _install_worker_hook() -> None:
    sys.addaudithook(_record_find_class)
    _worker_hook_installed.append(True)


def audit_run(adapter: bool, iterations: int = 6) -> dict[str, Any]:
    """Run a fork pipeline with an audit hook in the parent; report the find_class events.

    Returns the events the parent saw while batches flowed, how many globals
    DALI's restricted unpickler resolved in the parent, and the largest count
    of events any worker reported for its own process.
    """
    import inert.dali

    parent_events: list[str] = []
    flowing: list[bool] = []

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if flowing and event == "pickle.find_class":
            parent_events.append(f"{args[0]}.{args[1]}")

    sys.addaudithook(hook)
    # DALI's restricted unpickler resolves globals in its own find_class, which
    # raises no audit event: count its calls too, to show the parent's unpickling.
    from nvidia.dali._multiproc import shared_batch

    unpickled: list[str] = []
    restricted = shared_batch._WorkerResultUnpickler
    find_class = restricted.find_class

    def counted_find_class(self: Any, module: str, name: str) -> Any:
        unpickled.append(f"{module}.{name}")
        return find_class(self, module, name)

    restricted.find_class = counted_find_class  # type: ignore[method-assign]
    if adapter:
        inert.dali.enable()
    worker_max = 0
    with running(make_pipeline([{"source": counting_find_class, "batch": False}])) as pipe:
        flowing.append(True)
        for _ in range(iterations):
            (out,) = pipe.run()
            worker_max = max([worker_max] + [int(np.array(out[i])[0]) for i in range(len(out))])
        flowing.clear()
    return {
        "parent": parent_events,
        "parent_restricted_unpickles": len(unpickled),
        "worker_max": worker_max,
        "enabled": inert.dali.is_enabled(),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(audit_run(adapter=sys.argv[1] == "adapter")))
