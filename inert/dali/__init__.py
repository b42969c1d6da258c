"""Pickle-free shared memory for NVIDIA DALI's parallel external source.

DALI's parallel external source runs Python callbacks in worker processes and
exchanges three kinds of data with them through shared memory: the task a
worker must compute (parent to worker), the completed task (worker to parent)
and the metadata of the samples in a finished batch.  DALI pickles all three.
:func:`enable` makes DALI encode and decode them with Inert's codecs instead
(``shm-message`` for tasks and results, ``shm-samples-meta`` for the samples,
``shm-descriptor`` to check each descriptor a worker puts in the result
queue), so no pickle is read from shared memory in either direction and a
compromised worker gets an :class:`~inert.InertError` in the parent, not code
execution.

Call it before the pipeline starts its workers (``build()`` or
``start_py_workers()``) and keep it on while the pipeline runs::

    import inert.dali
    inert.dali.enable()
    pipe.build()

Workers started with ``fork`` inherit the patch; workers started with
``spawn`` enable it themselves on start (their entry point is replaced by
:func:`_worker_entry`).  Only the DALI releases in :data:`SUPPORTED_VERSIONS`
are patched: the adapter replaces private functions whose shape it knows.

This is the only module of Inert that imports ``nvidia.dali``, and it does so
only when :func:`enable` is called.
"""

from __future__ import annotations

import os
import struct
import threading
import traceback
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from inert._extras import extra_error

try:
    import numpy as np
except ImportError as _exc:
    raise extra_error("inert.dali", _exc, extra="dali") from None

from inert._errors import InvalidValueError, LimitError, WriteTypeError, WriteValueError
from inert._sample_bytes import BOOL_DTYPE, check_bool_bytes
from inert.codecs import shm_descriptor, shm_message, shm_samples_meta

__all__ = ["SUPPORTED_VERSIONS", "enable", "disable", "enabled", "is_enabled"]

#: DALI releases whose shared-memory internals this adapter knows.
SUPPORTED_VERSIONS: tuple[str, ...] = ("2.4.0",)

#: Longest exception message or traceback ``shm-message`` v1 carries, in UTF-8
#: bytes (``MAX_TEXT_LEN`` in ``inert.spec.shm_message``); longer texts are cut.
_MAX_TEXT_LEN = 1 << 20

#: Largest shm-message a worker can send: a CompletedTask with batch meta, a
#: message and a traceback of ``_MAX_TEXT_LEN`` bytes each.  A descriptor that
#: declares more is refused before any byte is copied.
_MAX_MESSAGE_BYTES = 1 + 4 * 8 + 1 + 2 * 8 + 1 + 8 + _MAX_TEXT_LEN + 1 + 8 + _MAX_TEXT_LEN

# DALI's own alignments (``SharedBatchWriter``): samples start on 128-byte
# boundaries, chunks grow in 4096-byte steps.
_SAMPLE_ALIGNMENT = 128
_BUFFER_ALIGNMENT = 4096

# Byte offsets of fields in a ``shm-message`` CompletedTask, for errors about
# values that are well-formed but do not fit the pool that reads them.
_AT_WORKER_ID, _AT_CONTEXT_I, _AT_SCHEDULED_I, _AT_MINIBATCH_I, _AT_META = 1, 9, 17, 25, 33

# ``ShmMessageDesc`` is DALI's native-order ``iiQQQ``; ``shm-descriptor`` v1 is
# the same 32 bytes little-endian, which is native on every platform DALI ships for.
# (DALI sends no checksum: v2's CRC-32s are for Inert's own channel.)
_DESCRIPTOR_VERSION = 1
_DESCRIPTOR = struct.Struct("<iiQQQ")

# The shared header of DALI's ``ShmQueue`` (``QueueMeta``, native-order ``iiii``).
# Every process that uses a queue rewrites it, so a worker can put anything
# there; it is not an Inert format, but its faults are reported like one.
_QUEUE_FORMAT = "dali-shm-queue"
_QUEUE_FIELDS = {"capacity": 0, "size": 4, "begining": 8, "is_closed": 12}  # DALI's spelling

_SampleKind = shm_samples_meta.SampleKind
_ARRAY = _SampleKind.ARRAY
_ndarray = np.ndarray
_MessageType = shm_message.MessageType
_TaskKind = shm_message.TaskKind
_BatchArgKind = shm_message.BatchArgKind
_ExceptionKind = shm_message.ExceptionKind

_lock = threading.Lock()
# The DALI modules and classes the patches use, filled in by ``enable``.
_dali = SimpleNamespace()
# (owner, attribute name, DALI's original) for every patched attribute.
_originals: list[tuple[Any, str, Any]] = []
_dtypes: dict[str, np.dtype[Any]] = {}
# Samples meta decoded lately, by (bytes, chunk size), with where its bool arrays
# lie; see ``_decode_samples_meta``.
_layouts: dict[tuple[bytes, int], tuple[list[dict[str, Any]], list[tuple[str, int, int]]]] = {}
# Samples meta encoded lately, by batch layout; see ``_encode_layout``.
_encodings: dict[tuple[Any, ...], tuple[bytes, list[int], int]] = {}
_LAYOUT_SLOTS = 8
_LAYOUT_MAX_BYTES = 1 << 16
_LAYOUT_MAX_ARRAYS = 1 << 12


class _RefusedVersion(RuntimeError):
    """The installed DALI is not one whose internals the adapter knows."""


# --- enabling ----------------------------------------------------------------------------------


def is_enabled() -> bool:
    """Whether DALI currently exchanges its shared-memory messages through Inert's codecs."""
    return bool(_originals)


def enable() -> None:
    """Make DALI's parallel external source use Inert's codecs in both directions.

    Idempotent.  Raises ``RuntimeError`` naming the supported releases when the
    installed DALI is not one of :data:`SUPPORTED_VERSIONS`, and ``ImportError``
    when DALI is not installed.

    >>> import inert.dali
    >>> inert.dali.enable()          # doctest: +SKIP
    >>> inert.dali.is_enabled()      # doctest: +SKIP
    True
    """
    with _lock:
        if _originals:
            return
        dali = _load_dali()
        unlike = f"this nvidia.dali {dali.version} build differs from the supported releases {', '.join(SUPPORTED_VERSIONS)}"
        try:
            patches = _patches(dali)
        except AttributeError as exc:
            raise _RefusedVersion(f"inert.dali: {exc}; {unlike}") from None
        for owner, name, _ in patches:
            if name not in vars(owner):  # defined there, not inherited: that is what gets replaced
                raise _RefusedVersion(f"inert.dali: {getattr(owner, '__name__', owner)} lacks {name}; {unlike}")
        for owner, name, replacement in patches:
            _originals.append((owner, name, owner.__dict__[name]))
            setattr(owner, name, replacement)


def disable() -> None:
    """Restore DALI's own (pickle) serialization.  Idempotent.

    Pipelines whose workers started while the adapter was enabled must not run
    after this: their workers keep writing Inert messages.
    """
    with _lock:
        while _originals:
            owner, name, original = _originals.pop()
            setattr(owner, name, original)


@contextmanager
def enabled() -> Iterator[None]:
    """Enable the adapter inside a ``with`` block, then restore the previous state.

    Build and run the pipeline inside the block::

        with inert.dali.enabled():
            pipe.build()
            pipe.run()
    """
    was_enabled = is_enabled()
    enable()
    try:
        yield
    finally:
        if not was_enabled:
            disable()


def _load_dali() -> SimpleNamespace:
    import nvidia.dali as dali

    version = getattr(dali, "__version__", "unknown")
    if version not in SUPPORTED_VERSIONS:
        raise _RefusedVersion(
            f"inert.dali supports NVIDIA DALI {', '.join(SUPPORTED_VERSIONS)}; the installed nvidia.dali is "
            f"{version}, whose shared-memory internals the adapter does not know. "
            f"Install a supported release (pip install nvidia-dali-cuda130=={SUPPORTED_VERSIONS[-1]})."
        )
    from nvidia.dali import types
    from nvidia.dali._multiproc import messages, pool, shared_batch, shared_queue, worker

    _dali.version = version
    _dali.shared_batch = shared_batch
    _dali.shared_queue = shared_queue
    _dali.BatchInfo = types.BatchInfo
    _dali.ScheduledTask = messages.ScheduledTask
    _dali.TaskArgs = messages.TaskArgs
    _dali.SampleRange = messages.SampleRange
    _dali.CompletedTask = messages.CompletedTask
    _dali.ShmMessageDesc = messages.ShmMessageDesc
    _dali.SharedBatchMeta = shared_batch.SharedBatchMeta
    _dali.worker_modules = SimpleNamespace(worker=worker, pool=pool)
    return _dali


def _patches(dali: SimpleNamespace) -> list[tuple[Any, str, Any]]:
    """Every DALI attribute the adapter replaces, with its replacement.

    ``worker.py`` and ``pool.py`` import the shared_batch functions by name, so
    each name is replaced where it is looked up.  The pickle readers left in
    ``shared_batch`` are replaced by a refusal, so a path missed here fails
    loudly instead of unpickling.  ``ShmQueue`` reads its shared header through
    ``_read_meta`` alone, so checking it there covers every queue operation.
    """
    sb, wk, pl = dali.shared_batch, dali.worker_modules.worker, dali.worker_modules.pool
    return [
        (sb, "read_shm_message", _read_message),
        (wk, "read_shm_message", _read_task),
        (pl, "read_shm_message", _read_result),
        (sb, "write_shm_message", _write_message),
        (wk, "write_shm_message", _write_message),
        (pl, "write_shm_message", _write_message),
        (sb, "deserialize_batch", _deserialize_batch),
        (pl, "deserialize_batch", _deserialize_batch),
        (sb, "deserialize_sample_meta", _pickle_refused),
        (sb, "restricted_pickle_loads", _pickle_refused),
        (sb.SharedBatchWriter, "_write_batch", _write_batch),
        (wk.SharedBatchDispatcher, "_serialize_done_task", _serialize_done_task),
        (pl.WorkerPool, "_receive_chunk", _receive_chunk),
        (pl.ProcPool, "_sync_initialized_workers", _sync_initialized_workers),
        (dali.shared_queue.ShmQueue, "_read_meta", _read_queue_meta),
        (dali.shared_queue.ShmQueue, "close", _close_queue),
        (pl.ShmChunkManager, "close_handles", _close_handles),
        (pl, "worker", _worker_entry),
    ]


def _original(owner: Any, name: str) -> Any:
    for patched_owner, patched_name, original in _originals:
        if patched_owner is owner and patched_name == name:
            return original
    raise RuntimeError(f"inert.dali: {name} is not patched")


def _worker_entry(worker_args: Any) -> None:
    """Entry point of a DALI worker process: enable the adapter, then run DALI's worker.

    A ``spawn`` worker imports DALI afresh; this (importable) function is what
    its process unpickles and runs, so the worker speaks the parent's format.
    A ``fork`` worker is already patched (and must not wait on a lock another
    parent thread may have held when it forked).
    """
    if not _originals:
        enable()
    _dali.worker_modules.worker.worker(worker_args)


def _pickle_refused(*args: Any) -> Any:
    raise RuntimeError("inert.dali: DALI tried to unpickle shared memory while the Inert adapter is enabled")


# --- DALI objects <-> shm-message values -----------------------------------------------------------


def _clip(text: str) -> str:
    """``text`` as shm-message carries it: valid UTF-8, cut on a character boundary to the limit."""
    return text.encode("utf-8", "replace")[:_MAX_TEXT_LEN].decode("utf-8", "ignore")


def _batch_args_value(args: tuple[Any, ...]) -> dict[str, Any]:
    if not args:
        return {"kind": _BatchArgKind.NONE}
    if len(args) == 1:
        (arg,) = args
        if isinstance(arg, _dali.BatchInfo):
            return {"kind": _BatchArgKind.BATCH_INFO, "iteration": arg.iteration, "epoch_idx": arg.epoch_idx}
        if type(arg) is int:
            return {"kind": _BatchArgKind.INT, "value": arg}
    raise TypeError(
        f"inert.dali: a batch callback takes no argument, an int or a BatchInfo; DALI scheduled {args!r}"
    )


def _message_value(message: Any) -> dict[str, Any]:
    """The shm-message value of a DALI ScheduledTask or CompletedTask."""
    if isinstance(message, _dali.ScheduledTask):
        task = message.task
        sample_range = task.sample_range
        if sample_range is not None:
            body: dict[str, Any] = {
                "kind": _TaskKind.SAMPLE_RANGE,
                "range": {
                    "start": sample_range.sample_start,
                    "end": sample_range.sample_end,
                    "iteration": sample_range.iteration,
                    "epoch": sample_range.epoch_idx,
                    "slice_start": sample_range.slice_start,
                    "slice_end": sample_range.slice_end,
                },
            }
        else:
            body = {"kind": _TaskKind.BATCH, "args": _batch_args_value(task.batch_args)}
        return {
            "type": _MessageType.SCHEDULED_TASK,
            "context_i": message.context_i,
            "scheduled_i": message.scheduled_i,
            "epoch_start": message.epoch_start,
            "minibatch_i": task.minibatch_i,
            "task": body,
        }
    if isinstance(message, _dali.CompletedTask):
        batch_meta = message.batch_meta
        exception = message.exception
        if exception is None:
            exc_value: dict[str, Any] = {"kind": _ExceptionKind.NONE}
        elif isinstance(exception, StopIteration):
            exc_value = {"kind": _ExceptionKind.STOP_ITERATION, "message": _clip(str(exception))}
        else:
            exc_value = {"kind": _ExceptionKind.RUNTIME_ERROR, "message": _clip(str(exception))}
        traceback_str = message.traceback_str
        return {
            "type": _MessageType.COMPLETED_TASK,
            "worker_id": message.worker_id,
            "context_i": message.context_i,
            "scheduled_i": message.scheduled_i,
            "minibatch_i": message.minibatch_i,
            "meta": None if batch_meta is None else {"offset": batch_meta.meta_offset, "size": batch_meta.meta_size},
            "exception": exc_value,
            "traceback": None if traceback_str is None else _clip(traceback_str),
        }
    raise TypeError(f"inert.dali: DALI sent a {type(message).__name__}, not a ScheduledTask or CompletedTask")


def _scheduled_task(value: dict[str, Any]) -> Any:
    task = value["task"]
    if task["kind"] == _TaskKind.SAMPLE_RANGE:
        r = task["range"]
        sample_range = _dali.SampleRange(
            r["start"], r["end"], r["iteration"], r["epoch"], slice_start=r["slice_start"], slice_end=r["slice_end"]
        )
        task_args = _dali.TaskArgs(value["minibatch_i"], sample_range=sample_range)
    else:
        args = task["args"]
        kind = args["kind"]
        if kind == _BatchArgKind.BATCH_INFO:
            batch_args: tuple[Any, ...] = (_dali.BatchInfo(args["iteration"], args["epoch_idx"]),)
        elif kind == _BatchArgKind.INT:
            batch_args = (args["value"],)
        else:
            batch_args = ()
        task_args = _dali.TaskArgs(value["minibatch_i"], batch_args=batch_args)
    return _dali.ScheduledTask(value["context_i"], value["scheduled_i"], value["epoch_start"], task_args)


def _completed_task(value: dict[str, Any]) -> Any:
    meta = value["meta"]
    exc = value["exception"]
    kind = exc["kind"]
    if (meta is None) == (kind == _ExceptionKind.NONE):
        raise InvalidValueError(
            shm_message.FORMAT, _AT_META, "meta", "a completed task carries either a batch or an exception, not both or neither"
        )
    exception: BaseException | None = None
    if kind == _ExceptionKind.STOP_ITERATION:
        exception = StopIteration(exc["message"])
    elif kind == _ExceptionKind.RUNTIME_ERROR:
        exception = RuntimeError(exc["message"])
    return _dali.CompletedTask(
        value["worker_id"],
        value["context_i"],
        value["scheduled_i"],
        value["minibatch_i"],
        batch_meta=None if meta is None else _dali.SharedBatchMeta(meta["offset"], meta["size"]),
        exception=exception,
        traceback_str=value["traceback"],
    )


# --- reading and writing messages ------------------------------------------------------------------


def _message_bytes(shm_chunk: Any, desc: Any) -> bytes:
    """A copy of the message ``desc`` points at: the peer cannot change it while it is decoded."""
    if desc.shm_capacity != shm_chunk.capacity:
        shm_chunk.resize(desc.shm_capacity, trunc=False)
    return bytes(shm_chunk.buf[desc.offset : desc.offset + desc.num_bytes])


def _decode_expecting(data: bytes, expected: shm_message.MessageType) -> dict[str, Any]:
    value: dict[str, Any] = shm_message.decode(data)
    if value["type"] != expected:
        raise InvalidValueError(shm_message.FORMAT, 0, "type", f"{value['type'].name} where {expected.name} belongs")
    return value


def _read_task(shm_chunk: Any, desc: Any) -> Any:
    """A worker reads the task the parent scheduled (replaces ``read_shm_message`` in worker.py)."""
    return _scheduled_task(_decode_expecting(_message_bytes(shm_chunk, desc), _MessageType.SCHEDULED_TASK))


def _read_result(shm_chunk: Any, desc: Any) -> Any:
    """The parent reads a worker's completed task (replaces ``read_shm_message`` in pool.py)."""
    return _completed_task(_decode_expecting(_message_bytes(shm_chunk, desc), _MessageType.COMPLETED_TASK))


def _read_message(shm_chunk: Any, desc: Any) -> Any:
    """Either message, told apart as DALI does: the parent writes with worker id -1."""
    if desc.worker_id >= 0:
        return _read_result(shm_chunk, desc)
    return _read_task(shm_chunk, desc)


def _write_message(worker_id: int, shm_chunk: Any, message: Any, offset: int, resize: bool = True) -> Any:
    """Encode ``message`` into ``shm_chunk`` at ``offset``; return its ``ShmMessageDesc``.

    Mirrors DALI's ``write_shm_message``, including when the chunk may grow.
    """
    data = shm_message.encode(_message_value(message))
    num_bytes = len(data)
    if num_bytes > shm_chunk.capacity - offset:
        if not resize:
            raise RuntimeError("Could not put message into shared memory region, not enough space in the buffer.")
        _dali.shared_batch.resize_shm_chunk(shm_chunk, offset + num_bytes)
    shm_chunk.buf[offset : offset + num_bytes] = data
    return _dali.ShmMessageDesc(worker_id, shm_chunk.shm_chunk_id, shm_chunk.capacity, offset, num_bytes)


# --- batches ----------------------------------------------------------------------------------------


def _align_up(x: int, alignment: int) -> int:
    return -(-x // alignment) * alignment


def _layout(sample: Any, arrays: list[np.ndarray]) -> tuple[Any, ...]:
    """The hashable layout of one sample; its arrays, converted as DALI converts them, go to ``arrays``.

    An array is ``(ARRAY, dtype string, shape)``, a tuple or list
    ``(TUPLE or LIST, (item layouts...))``.
    """
    if sample.__class__ is np.ndarray:
        array = sample
    elif isinstance(sample, (tuple, list)):
        kind = _SampleKind.TUPLE if isinstance(sample, tuple) else _SampleKind.LIST
        return (kind, tuple([_layout(part, arrays) for part in sample]))
    else:
        sb = _dali.shared_batch
        array = sb._sample_to_numpy(sample, sb._sample_error_msg)
    arrays.append(array)
    return (_SampleKind.ARRAY, array.dtype.str, array.shape)


def _meta_value(
    layout: tuple[Any, ...], arrays: Iterator[np.ndarray], offsets: list[int], end: int
) -> tuple[dict[str, Any], int]:
    """The shm-samples-meta value of one sample laid out from ``end`` (128-byte aligned, as DALI does)."""
    kind = layout[0]
    if kind == _SampleKind.ARRAY:
        offset = _align_up(end, _SAMPLE_ALIGNMENT)
        offsets.append(offset)
        nbytes = next(arrays).nbytes
        return {"kind": kind, "offset": offset, "nbytes": nbytes, "dtype": layout[1], "shape": layout[2]}, offset + nbytes
    items = []
    for child in layout[1]:
        item, end = _meta_value(child, arrays, offsets, end)
        items.append(item)
    return {"kind": kind, "items": items}, end


def _encode_layout(layout: tuple[Any, ...], arrays: list[np.ndarray]) -> tuple[bytes, list[int], int]:
    """The encoded samples meta of a batch, each array's offset, and the end of the data.

    Cached by layout: a batch shaped like a recent one reuses its encoding.
    """
    encoded = _encodings.get(layout)
    if encoded is None:
        offsets: list[int] = []
        samples = []
        end = 0
        remaining = iter(arrays)
        for sample in layout:
            value, end = _meta_value(sample, remaining, offsets, end)
            samples.append(value)
        encoded = (shm_samples_meta.encode({"samples": samples}), offsets, end)
        if len(arrays) <= _LAYOUT_MAX_ARRAYS:
            if len(_encodings) >= _LAYOUT_SLOTS:
                _encodings.clear()
            _encodings[layout] = encoded
    return encoded


def _write_batch(self: Any, batch: Any) -> None:
    """``SharedBatchWriter._write_batch`` with the samples' metadata in shm-samples-meta.

    The chunk layout is DALI's: ``[sample data | samples meta | completed task]``.
    """
    if not batch:
        return
    arrays: list[np.ndarray] = []
    layout = tuple([_layout(sample, arrays) for sample in batch])
    meta, offsets, end = _encode_layout(layout, arrays)
    self.meta_data_size = len(meta)
    self.data_size = _align_up(end, _SAMPLE_ALIGNMENT)
    self.total_size = _align_up(self.data_size + self.meta_data_size, _SAMPLE_ALIGNMENT)
    if self.shm_chunk.capacity < self.total_size:
        _dali.shared_batch.resize_shm_chunk(self.shm_chunk, self.total_size + self.min_trailing_offset)
    view = self.shm_chunk.buf
    for offset, array in zip(offsets, arrays, strict=True):
        nbytes = array.nbytes
        if nbytes and array.flags.c_contiguous:
            view[offset : offset + nbytes] = array.data.cast("B")
        else:
            np.ndarray(array.shape, array.dtype, buffer=view[offset : offset + nbytes])[...] = array
    view[self.data_size : self.data_size + self.meta_data_size] = meta


def _serialize_done_task(self: Any, processed_task: Any) -> Any:
    """A batch the formats cannot carry (an object array, say) fails its task with the reason.

    Without this the writer's error would end the worker's dispatcher thread
    and the parent would only learn that the worker stopped.
    """
    original = _original(_dali.worker_modules.worker.SharedBatchDispatcher, "_serialize_done_task")
    try:
        return original(self, processed_task)
    except (WriteTypeError, WriteValueError) as exc:
        reason = f"the callback's output cannot be sent through shared memory (inert.dali): {exc}"
        processed_task.exception = RuntimeError(reason)
        # DALI shows the user the traceback text: end it with the reason.
        processed_task.traceback_str = f"{traceback.format_exc()}\n{reason}\n"
        return self._serialize_failed_task(processed_task)


def _dtype(text: str) -> np.dtype[Any]:
    # The codec has already restricted ``text`` to a few dozen plain numeric dtypes.
    dtype = _dtypes.get(text)
    if dtype is None:
        dtype = _dtypes[text] = np.dtype(text)
    return dtype


def _build(view: memoryview, samples: list[dict[str, Any]]) -> list[Any]:
    """The arrays (over ``view``), tuples and lists ``samples`` describe.

    Runs once per sample of every batch: array samples are built inline.
    """
    built: list[Any] = []
    for sample in samples:
        kind = sample["kind"]
        if kind == _ARRAY:
            text = sample["dtype"]
            dtype = _dtypes.get(text) or _dtype(text)
            built.append(_ndarray(sample["shape"], dtype, buffer=view, offset=sample["offset"]))
        else:
            items = _build(view, sample["items"])
            built.append(tuple(items) if kind == _SampleKind.TUPLE else items)
    return built


def _deserialize_batch(buffer: Any, batch_meta: Any) -> list[Any]:
    """The samples of a finished batch: arrays over the chunk, as DALI's ``deserialize_batch``.

    shm-samples-meta checks every array against itself and against the chunk
    (dtype, a shape numpy can describe, nbytes, alignment, bounds) and each
    bool array's bytes are checked to be 0 or 1, before any array is built.
    """
    start, size = batch_meta.meta_offset, batch_meta.meta_size
    if size == 0:
        return []
    capacity = buffer.capacity
    if start + size > capacity:
        raise InvalidValueError(
            shm_message.FORMAT, _AT_META, "meta.size", f"bytes {start}..{start + size} lie beyond the {capacity}-byte chunk"
        )
    view = buffer.buf
    samples, bools = _decode_samples_meta(bytes(view[start : start + size]), capacity)
    for path, offset, nbytes in bools:
        try:
            check_bool_bytes(shm_samples_meta.FORMAT, view, offset, nbytes)
        except InvalidValueError as exc:
            raise exc.within(path) from None
    return _build(view, samples)


def _bool_arrays(samples: list[dict[str, Any]], path: str, found: list[tuple[str, int, int]]) -> None:
    """Append (field path, offset, nbytes) of every bool array in ``samples`` to ``found``."""
    for i, sample in enumerate(samples):
        if sample["kind"] == _ARRAY:
            if sample["dtype"] == BOOL_DTYPE:
                found.append((f"{path}[{i}]", sample["offset"], sample["nbytes"]))
        else:
            _bool_arrays(sample["items"], f"{path}[{i}].items", found)


def _decode_samples_meta(data: bytes, chunk_size: int) -> tuple[list[dict[str, Any]], list[tuple[str, int, int]]]:
    """The decoded samples meta and where its bool arrays lie, from a small cache of the latest layouts.

    Pipelines with fixed shapes send the same metadata bytes batch after batch;
    decoding is a pure function of the bytes and the chunk size, so identical
    input reuses the value decoded before (which nothing mutates).  Only
    successful decodes of small inputs are kept: the cache is bounded.  The
    bytes of bool arrays change every batch: they are checked by the caller.
    """
    key = (data, chunk_size)
    layout = _layouts.get(key)
    if layout is None:
        samples = shm_samples_meta.decode(data, chunk_size=chunk_size)["samples"]
        bools: list[tuple[str, int, int]] = []
        _bool_arrays(samples, "samples", bools)
        layout = (samples, bools)
        if len(data) <= _LAYOUT_MAX_BYTES:
            if len(_layouts) >= _LAYOUT_SLOTS:
                _layouts.clear()
            _layouts[key] = layout
    return layout


# --- the parent's receive loop ------------------------------------------------------------------------


def _close_handles(self: Any) -> None:
    """``ShmChunkManager.close_handles``, keeping a duplicate of each chunk's handle in the parent.

    The duplicate tells the parent the chunk's real size, so a capacity a
    worker declares beyond it is refused instead of mapped (touching a mapping
    past the end of its file kills the process with SIGBUS).
    """
    for chunk in self.get_chunks():
        fd = os.dup(chunk.handle)
        chunk._inert_size_fd = fd
        weakref.finalize(chunk, os.close, fd)
    _original(_dali.worker_modules.pool.ShmChunkManager, "close_handles")(self)


def _check_capacity(desc: Any, shm_chunk: Any) -> None:
    """The capacity a worker declares is one it could have produced, and the chunk's file has it.

    A chunk only grows, in DALI's 4096-byte steps.
    """
    capacity = desc.shm_capacity
    if capacity < shm_chunk.capacity or capacity % _BUFFER_ALIGNMENT:
        raise InvalidValueError(
            shm_descriptor.FORMAT, 8, "shm_capacity", f"{capacity} declared for a chunk of {shm_chunk.capacity} bytes"
        )
    fd = getattr(shm_chunk, "_inert_size_fd", None)
    if fd is not None and capacity > shm_chunk.capacity:
        size = os.fstat(fd).st_size
        if capacity > size:
            reason = f"{capacity} declared, the chunk holds {size} bytes"
            raise InvalidValueError(shm_descriptor.FORMAT, 8, "shm_capacity", reason)


def _check_belongs(pool: Any, context: Any, completed: Any, desc: Any) -> None:
    """A completed task answers a task this pool scheduled on the chunk it names."""
    fmt = shm_message.FORMAT
    if completed.worker_id != desc.worker_id:
        raise InvalidValueError(fmt, _AT_WORKER_ID, "worker_id", f"{completed.worker_id}, the descriptor says {desc.worker_id}")
    context_i = completed.context_i
    if not 0 <= context_i < len(pool.contexts) or pool.contexts[context_i] is not context:
        raise InvalidValueError(fmt, _AT_CONTEXT_I, "context_i", f"{context_i} does not own chunk {desc.shm_chunk_id}")
    scheduled_i = completed.scheduled_i
    minibatches = context.scheduled_minibatches.get(scheduled_i)
    if minibatches is None:
        raise InvalidValueError(fmt, _AT_SCHEDULED_I, "scheduled_i", f"no batch {scheduled_i} awaits results")
    if not 0 <= completed.minibatch_i < minibatches:
        raise InvalidValueError(
            fmt, _AT_MINIBATCH_I, "minibatch_i", f"{completed.minibatch_i} outside 0..{minibatches - 1} of batch {scheduled_i}"
        )


def _receive_chunk(self: Any) -> None:
    """``WorkerPool._receive_chunk``: every descriptor and message from a worker is checked first."""
    descs = self.pool.wait_for_res()
    if descs is None:
        raise RuntimeError("Worker data receiving interrupted")
    for desc in descs:
        # DALI has already unpacked the 32 queue bytes; shm-descriptor checks them.
        shm_descriptor.decode(_DESCRIPTOR.pack(*desc.get_values()), version=_DESCRIPTOR_VERSION)
        if desc.num_bytes > _MAX_MESSAGE_BYTES:
            reason = f"{desc.num_bytes} declared, no shm-message is longer than {_MAX_MESSAGE_BYTES}"
            raise LimitError(shm_descriptor.FORMAT, 24, "num_bytes", reason)
        context = self.shm_chunks_contexts.get(desc.shm_chunk_id)
        if context is None:
            raise InvalidValueError(shm_descriptor.FORMAT, 4, "shm_chunk_id", f"{desc.shm_chunk_id} names no chunk of this pool")
        shm_chunk = context.shm_manager.get_chunk_by_id(desc.shm_chunk_id)
        _check_capacity(desc, shm_chunk)
        completed = _read_result(shm_chunk, desc)
        _check_belongs(self, context, completed, desc)
        context.process_task(shm_chunk, completed)


def _sync_initialized_workers(self: Any) -> None:
    """``ProcPool._sync_initialized_workers``: each worker reports its start once, under its own id.

    DALI only ``assert``s this (an ``AssertionError``, or nothing under ``-O``).
    """
    started: set[int] = set()
    while len(started) < self.num_workers:
        descs = self.wait_for_res()
        if descs is None:
            raise RuntimeError("Workers initialization failed")
        for desc in descs:
            worker_id = desc.worker_id
            if not 0 <= worker_id < self.num_workers or worker_id in started:
                reason = f"{worker_id} is not a worker yet to start (0..{self.num_workers - 1}, started: {sorted(started)})"
                raise InvalidValueError(shm_descriptor.FORMAT, 0, "worker_id", reason)
            started.add(worker_id)


# --- the queues' shared header ---------------------------------------------------------------------------


def _read_queue_meta(self: Any) -> None:
    """``ShmQueue._read_meta``, then the header checked against the queue's own capacity before any use.

    DALI loops over ``size`` messages and indexes slots modulo ``capacity``, all
    read from shared memory: a worker could make the parent loop millions of
    times (``size``), divide by zero (``capacity``) or index past its slots.
    The queue's own ``capacity`` was fixed by the parent when it made the queue.
    """
    meta = self.meta
    meta.unpack_from(self.shm.buf, 0)
    if getattr(self, "_inert_closing", None) == threading.get_ident():
        return  # this thread is closing the queue, which only sets is_closed: it must succeed whatever the header holds
    capacity = self.capacity
    if meta.capacity != capacity:
        _queue_fault("capacity", f"{meta.capacity} in the shared header, the queue has {capacity} slots")
    if not 0 <= meta.size <= capacity:
        _queue_fault("size", f"{meta.size} messages declared, the queue has {capacity} slots")
    if not 0 <= meta.begining < capacity:
        _queue_fault("begining", f"slot {meta.begining} outside 0..{capacity - 1}")
    if meta.is_closed not in (0, 1):
        _queue_fault("is_closed", f"{meta.is_closed}, not 0 or 1")


def _queue_fault(field: str, reason: str) -> None:
    raise InvalidValueError(_QUEUE_FORMAT, _QUEUE_FIELDS[field], field, reason)


def _close_queue(self: Any) -> None:
    """``ShmQueue.close`` whatever its header holds: closing is how the parent stops waiting on a broken pool."""
    # Only the closing thread skips the checks: a reader waiting on the queue meanwhile still checks.
    self._inert_closing = threading.get_ident()
    try:
        _original(_dali.shared_queue.ShmQueue, "close")(self)
    finally:
        self._inert_closing = None
