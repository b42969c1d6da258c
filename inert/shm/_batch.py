"""A batch in a shared-memory chunk: written by a worker, validated and viewed by the parent.

Layout of a successful result (the DALI layout)::

    [sample data, each sample 128-byte aligned | samples meta | CompletedTask]

The samples meta is an ``shm-samples-meta`` value; the CompletedTask an
``shm-message`` value whose ``meta`` gives the meta's offset and size.  A
failed task is a CompletedTask alone at offset 0.  The parent decodes the
message and the meta completely, checks every array against the chunk and the
layout, and only then builds numpy views on the chunk (zero-copy, read-only).
The layout, its caches and the views are ``inert._samples_layout``'s, shared
with ``inert.dali``.
"""

from __future__ import annotations

import dataclasses
import traceback as traceback_module
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from inert import _checks
from inert._errors import ChecksumError, InertError, InvalidValueError, WriteTypeError, WriteValueError
from inert._samples_layout import (
    COMPLETED_TASK_AT,
    MAX_SAMPLE_DEPTH,
    SAMPLE_ALIGNMENT,
    align_up,
    build_samples,
    check_before,
    check_bools,
    decode_layout,
    dtype_text,
    encode_layout,
)
from inert.codecs import shm_message, shm_samples_meta

from ._memory import MappedChunk

__all__ = [
    "SAMPLE_ALIGNMENT",
    "MAX_SAMPLE_DEPTH",
    "MAX_TEXT_BYTES",
    "TaskHeader",
    "PlannedBatch",
    "ResultLayout",
    "TaskFailure",
    "plan_batch",
    "layout_success",
    "layout_failure",
    "write_result",
    "failure_from_exception",
    "read_result",
    "read_samples",
    "at_offset",
    "checksums",
]

#: Longest exception message or traceback a worker sends, in UTF-8 bytes (the format allows 1 MiB).
MAX_TEXT_BYTES = 64 * 1024
_ARRAY, _TUPLE, _LIST = shm_samples_meta.SampleKind.ARRAY, shm_samples_meta.SampleKind.TUPLE, shm_samples_meta.SampleKind.LIST


def at_offset(exc: InertError, base: int) -> InertError:
    """``exc`` with its offset moved from a slice of the chunk to the chunk itself."""
    if exc.offset < 0:
        return exc
    moved = type(exc)(exc.format, exc.offset + base, exc.field, exc.reason)
    return moved


@dataclasses.dataclass(frozen=True)
class TaskHeader:
    """The identifying fields a CompletedTask copies from its ScheduledTask."""

    worker_id: int
    context_i: int
    scheduled_i: int
    minibatch_i: int

    def completed_task(self, **fields: Any) -> dict[str, Any]:
        return {"type": "COMPLETED_TASK", **dataclasses.asdict(self), **fields}


@dataclasses.dataclass
class PlannedBatch:
    """A batch checked and placed: its encoded samples meta and where each array goes."""

    meta: bytes
    arrays: list[tuple[int, np.ndarray]]
    data_size: int


def _plan_sample(sample: Any, path: str, depth: int, arrays: list[np.ndarray]) -> tuple[Any, ...]:
    """The layout of one sample (see ``encode_layout``), checked; its arrays, C-contiguous, go to ``arrays``."""
    if depth > MAX_SAMPLE_DEPTH:
        raise WriteValueError(shm_samples_meta.FORMAT, path, f"nesting exceeds max_depth({MAX_SAMPLE_DEPTH})")
    if isinstance(sample, (tuple, list)):
        items = tuple([_plan_sample(item, f"{path}.items[{i}]", depth + 1, arrays) for i, item in enumerate(sample)])
        return (_TUPLE if isinstance(sample, tuple) else _LIST, items)
    if not isinstance(sample, (np.ndarray, np.generic)):
        raise WriteTypeError(
            shm_samples_meta.FORMAT,
            path,
            f"unsupported sample type {type(sample).__name__}: use a numpy array or a tuple or list of them",
        )
    array = np.asarray(sample)
    dtype = dtype_text(array.dtype)
    if _checks.dtype_itemsize(dtype) is None:
        raise WriteTypeError(
            shm_samples_meta.FORMAT, path, f"unsupported dtype {dtype!r}: use bool, an integer, float or complex dtype"
        )
    if not array.flags.c_contiguous:
        array = array.copy(order="C")
    arrays.append(array)
    return (_ARRAY, dtype, array.shape)


def plan_batch(batch: Sequence[Any]) -> PlannedBatch:
    """Check ``batch`` (a list or tuple of samples) and place its arrays.

    Raises ``WriteTypeError``/``WriteValueError`` naming the sample for an
    object or structured dtype, a value that is not an array, or nesting
    deeper than ``MAX_SAMPLE_DEPTH``; nothing has been written then.
    """
    if not isinstance(batch, (list, tuple)):
        raise WriteTypeError(shm_samples_meta.FORMAT, "samples", f"a batch is a list of samples, not {type(batch).__name__}")
    arrays: list[np.ndarray] = []
    layout = tuple([_plan_sample(sample, f"samples[{i}]", 1, arrays) for i, sample in enumerate(batch)])
    encoded = encode_layout(layout, [array.nbytes for array in arrays])
    return PlannedBatch(encoded.meta, list(zip(encoded.offsets, arrays, strict=True)), encoded.data_end)


@dataclasses.dataclass(frozen=True)
class ResultLayout:
    """Where the parts of one result go in a chunk, and the bytes of meta and message."""

    meta_offset: int
    meta: bytes
    message_offset: int
    message: bytes

    @property
    def size(self) -> int:
        return self.message_offset + len(self.message)


def layout_success(plan: PlannedBatch, header: TaskHeader) -> ResultLayout:
    meta = plan.meta
    meta_offset = align_up(plan.data_size, 8)
    message = shm_message.encode(
        header.completed_task(meta={"offset": meta_offset, "size": len(meta)}, exception={"kind": "NONE"}, traceback=None)
    )
    return ResultLayout(meta_offset, meta, meta_offset + len(meta), message)


@dataclasses.dataclass(frozen=True)
class TaskFailure:
    """Why a task failed, as a CompletedTask carries it."""

    kind: str  # "STOP_ITERATION" or "RUNTIME_ERROR"
    message: str
    traceback: str | None


def _clip(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    data = text.encode("utf-8", "replace")
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


def failure_from_exception(exc: BaseException, context: str = "") -> TaskFailure:
    """The failure a worker reports for ``exc`` (raised by the callback or while writing its batch)."""
    kind = "STOP_ITERATION" if isinstance(exc, StopIteration) else "RUNTIME_ERROR"
    try:
        message = f"{context}{type(exc).__name__}: {exc}"
        tb = "".join(traceback_module.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # noqa: BLE001 - a user exception whose __str__ fails still gets reported
        message, tb = f"{context}{type(exc).__name__}", ""
    return TaskFailure(kind, _clip(message), _clip(tb))


def layout_failure(failure: TaskFailure, header: TaskHeader) -> ResultLayout:
    message = shm_message.encode(
        header.completed_task(
            meta=None, exception={"kind": failure.kind, "message": failure.message}, traceback=failure.traceback
        )
    )
    return ResultLayout(0, b"", 0, message)


def write_result(buffer: Any, plan: PlannedBatch | None, layout: ResultLayout) -> tuple[int, int]:
    """Write the arrays, meta and message into ``buffer``; return the message's (offset, size)."""
    if plan is not None:
        for offset, array in plan.arrays:
            if array.nbytes:
                target = np.frombuffer(buffer, np.uint8, count=array.nbytes, offset=offset)
                target[:] = array.reshape(-1).view(np.uint8)
    buffer[layout.meta_offset : layout.meta_offset + len(layout.meta)] = layout.meta
    buffer[layout.message_offset : layout.size] = layout.message
    return layout.message_offset, len(layout.message)


def checksums(buffer: Any, layout: ResultLayout) -> dict[str, int]:
    """The CRC-32s an shm-descriptor v2 carries of the result ``layout`` placed in ``buffer``.

    Taken from the chunk as it stands when the descriptor is sent, so they vouch for exactly the
    bytes the parent should find there.
    """
    view = memoryview(buffer)
    return {
        "message_crc32": zlib.crc32(view[layout.message_offset : layout.size]),
        "meta_crc32": zlib.crc32(view[layout.meta_offset : layout.meta_offset + len(layout.meta)]),
    }


def _private_copy(chunk: MappedChunk, fmt: str, offset: int, size: int, crc32: int | None) -> bytes:
    """The bytes at ``offset`` copied out of the chunk, checked against the descriptor's CRC-32 if it has one.

    Decoded from a private copy: the worker can keep writing to the chunk while the parent reads.
    """
    data = bytes(chunk.view[offset : offset + size])
    if crc32 is not None and zlib.crc32(data) != crc32:
        reason = f"CRC-32 {zlib.crc32(data):#010x} of {size} bytes, the descriptor says {crc32:#010x}"
        raise ChecksumError(fmt, offset, "", reason)
    return data


def read_result(
    chunk: MappedChunk, offset: int, size: int, expected: TaskHeader, crc32: int | None = None
) -> dict[str, Any]:
    """Decode the CompletedTask at ``offset`` in ``chunk`` and check that it answers ``expected``.

    ``offset + size`` must already be known to lie inside the chunk (the
    descriptor was checked against it); ``crc32``, from an shm-descriptor v2,
    is checked before anything is decoded.
    """
    data = _private_copy(chunk, shm_message.FORMAT, offset, size, crc32)
    try:
        message = shm_message.decode(data)
    except InertError as exc:
        raise at_offset(exc, offset) from None
    if message["type"] != shm_message.MessageType.COMPLETED_TASK:
        raise InvalidValueError(shm_message.FORMAT, offset, "type", f"{message['type'].name} where a CompletedTask belongs")
    for name, want in dataclasses.asdict(expected).items():
        if message[name] != want:
            reason = f"{message[name]}, expected {want}"
            raise InvalidValueError(shm_message.FORMAT, offset + COMPLETED_TASK_AT[name], name, reason)
    meta = message["meta"]
    has_exception = message["exception"]["kind"] != shm_message.ExceptionKind.NONE
    where = offset + COMPLETED_TASK_AT["meta"]
    if meta is None and not has_exception:
        raise InvalidValueError(shm_message.FORMAT, where, "meta", "absent from a task that did not fail")
    if meta is not None and meta["offset"] + meta["size"] > offset:
        raise InvalidValueError(
            shm_message.FORMAT,
            where + 1,
            "meta",
            f"bytes {meta['offset']}..{meta['offset'] + meta['size']} do not lie before the message at {offset}",
        )
    return message


def read_samples(chunk: MappedChunk, meta: dict[str, int], crc32: int | None = None) -> list[Any]:
    """Decode and check the samples meta ``meta`` points at, then view the samples in ``chunk``.

    ``crc32``, from an shm-descriptor v2, is checked before the meta is decoded.

    Every array must lie in the chunk before the meta; bool arrays must hold
    only 0 and 1 bytes.  The views are read-only and share the chunk's memory:
    the structure (dtypes, shapes, places) is decoded from a private copy and
    cannot change once checked, but a worker that writes into sample data it
    already handed over changes the values the parent sees (bool bytes
    included), as with any zero-copy shared memory.
    """
    offset, size = meta["offset"], meta["size"]
    data = _private_copy(chunk, shm_samples_meta.FORMAT, offset, size, crc32)
    try:
        layout = decode_layout(data, chunk.capacity)
    except InertError as exc:
        raise at_offset(exc, offset) from None
    check_before(layout, offset)
    check_bools(chunk.view, layout)
    return build_samples(chunk.buffer, layout.samples)
