"""DALI's ScheduledTask and CompletedTask as ``shm-message`` values, and their reading and writing in a chunk."""

from __future__ import annotations

from typing import Any

from inert._errors import InvalidValueError
from inert._samples_layout import COMPLETED_TASK_AT
from inert.codecs import shm_message
from inert.codecs._tables import MESSAGE_MAX_SIZE, MESSAGE_MAX_TEXT_LEN

from ._host import _dali

#: Longest exception message or traceback ``shm-message`` v1 carries, in UTF-8
#: bytes (``MAX_TEXT_LEN`` in ``inert.spec.shm_message``); longer texts are cut.
_MAX_TEXT_LEN = MESSAGE_MAX_TEXT_LEN

#: Largest shm-message a worker can send: a CompletedTask with batch meta, a
#: message and a traceback of ``_MAX_TEXT_LEN`` bytes each (computed from the
#: grammar by ``inert gen``).  A descriptor that declares more is refused before
#: any byte is copied.
_MAX_MESSAGE_BYTES = MESSAGE_MAX_SIZE

# Byte offsets of fields in a ``shm-message`` CompletedTask, for errors about
# values that are well-formed but do not fit the pool that reads them.
_AT = COMPLETED_TASK_AT

_MessageType = shm_message.MessageType
_TaskKind = shm_message.TaskKind
_BatchArgKind = shm_message.BatchArgKind
_ExceptionKind = shm_message.ExceptionKind


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
        reason = "a completed task carries either a batch or an exception, not both or neither"
        raise InvalidValueError(shm_message.FORMAT, _AT["meta"], "meta", reason)
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
