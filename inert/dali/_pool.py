"""The parent's receive loop: every descriptor and completed task a worker sends is checked before use."""

from __future__ import annotations

import os
import struct
import weakref
from typing import Any

from inert._errors import InvalidValueError, LimitError
from inert._samples_layout import COMPLETED_TASK_AT as _AT
from inert.codecs import shm_descriptor, shm_message
from inert.codecs._tables import DESCRIPTOR_AT, DESCRIPTOR_V1_LAYOUT

from ._host import _dali, _original
from ._messages import _MAX_MESSAGE_BYTES, _read_result

# DALI's own alignment (``SharedBatchWriter``): chunks grow in 4096-byte steps.
_BUFFER_ALIGNMENT = 4096


# ``ShmMessageDesc`` is DALI's native-order ``iiQQQ``; ``shm-descriptor`` v1 is
# the same 32 bytes little-endian, which is native on every platform DALI ships for.
# (DALI sends no checksum: v2's CRC-32s are for Inert's own channel.)
_DESCRIPTOR_VERSION = 1
_DESCRIPTOR = struct.Struct(DESCRIPTOR_V1_LAYOUT)


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
            shm_descriptor.FORMAT, DESCRIPTOR_AT["shm_capacity"], "shm_capacity",
            f"{capacity} declared for a chunk of {shm_chunk.capacity} bytes",
        )
    fd = getattr(shm_chunk, "_inert_size_fd", None)
    if fd is not None and capacity > shm_chunk.capacity:
        size = os.fstat(fd).st_size
        if capacity > size:
            reason = f"{capacity} declared, the chunk holds {size} bytes"
            raise InvalidValueError(shm_descriptor.FORMAT, DESCRIPTOR_AT["shm_capacity"], "shm_capacity", reason)


def _check_belongs(pool: Any, context: Any, completed: Any, desc: Any) -> None:
    """A completed task answers a task this pool scheduled on the chunk it names."""
    fmt = shm_message.FORMAT
    if completed.worker_id != desc.worker_id:
        reason = f"{completed.worker_id}, the descriptor says {desc.worker_id}"
        raise InvalidValueError(fmt, _AT["worker_id"], "worker_id", reason)
    context_i = completed.context_i
    if not 0 <= context_i < len(pool.contexts) or pool.contexts[context_i] is not context:
        raise InvalidValueError(fmt, _AT["context_i"], "context_i", f"{context_i} does not own chunk {desc.shm_chunk_id}")
    scheduled_i = completed.scheduled_i
    minibatches = context.scheduled_minibatches.get(scheduled_i)
    if minibatches is None:
        raise InvalidValueError(fmt, _AT["scheduled_i"], "scheduled_i", f"no batch {scheduled_i} awaits results")
    if not 0 <= completed.minibatch_i < minibatches:
        raise InvalidValueError(
            fmt, _AT["minibatch_i"], "minibatch_i", f"{completed.minibatch_i} outside 0..{minibatches - 1} of batch {scheduled_i}"
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
            raise LimitError(shm_descriptor.FORMAT, DESCRIPTOR_AT["num_bytes"], "num_bytes", reason)
        context = self.shm_chunks_contexts.get(desc.shm_chunk_id)
        if context is None:
            reason = f"{desc.shm_chunk_id} names no chunk of this pool"
            raise InvalidValueError(shm_descriptor.FORMAT, DESCRIPTOR_AT["shm_chunk_id"], "shm_chunk_id", reason)
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
                raise InvalidValueError(shm_descriptor.FORMAT, DESCRIPTOR_AT["worker_id"], "worker_id", reason)
            started.add(worker_id)
