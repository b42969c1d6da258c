"""The worker process: run the callback for each task and write its batch into a chunk.

A worker never dies silently over a task: a callback that raises, and a batch
that cannot be written (an object array, nesting too deep, a value that is not
an array, a batch too large for ``max_chunk_size``), become a failed
CompletedTask carrying the reason and traceback, and the worker goes on.  It
exits when the parent says STOP or closes the channel.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

from inert.codecs import shm_descriptor, shm_message

from ._batch import (
    PlannedBatch,
    ResultLayout,
    TaskFailure,
    TaskHeader,
    checksums,
    failure_from_exception,
    layout_failure,
    layout_success,
    plan_batch,
    write_result,
)
from ._fdpass import FrameKind, PeerClosed, close_fds, recv_frame, send_frame
from ._handshake import FORMAT_VERSIONS, answer
from ._memory import MemoryBackend, WritableChunk, create_chunk
from ._tasks import callback_calls

__all__ = ["WorkerConfig", "worker_main", "VERSION_REFUSED_EXIT"]

#: Exit code of a worker that refused the parent's format versions.
VERSION_REFUSED_EXIT = 3
_PAGE = 4096
# Room for a failure message in a chunk that cannot grow.
_SHORT_MESSAGE_BYTES = 1024

#: Called after a result is written, with the chunk's buffer and the result's descriptor.
AfterWrite = Callable[[memoryview, dict[str, int]], None]


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    worker_id: int
    batch_mode: bool
    chunk_size: int
    chunks: int
    max_chunk_size: int
    backend: MemoryBackend
    #: Descriptors inherited through fork that belong to other workers' channels.
    inherited_fds: tuple[int, ...] = ()
    #: The format versions this worker speaks (a test can make a worker speak others).
    versions: Mapping[str, tuple[int, ...]] = dataclasses.field(default_factory=lambda: dict(FORMAT_VERSIONS))
    #: A hook run after each result is written, for tests of a misbehaving worker.
    after_write: AfterWrite | None = None


def _run_callback(callback: Callable[..., Any], task: dict[str, Any], batch_mode: bool) -> Any:
    calls = callback_calls(task, batch_mode)
    if batch_mode:
        return callback(*calls[0])
    return [callback(*args) for args in calls]


class _Worker:
    def __init__(self, sock: socket.socket, callback: Callable[..., Any], config: WorkerConfig) -> None:
        self.sock = sock
        self.callback = callback
        self.config = config
        self.chunks: list[WritableChunk] = []
        self.free: set[int] = set()

    def _send_chunk(self, chunk_id: int, chunk: WritableChunk) -> None:
        descriptor = {
            "worker_id": self.config.worker_id,
            "shm_chunk_id": chunk_id,
            "shm_capacity": chunk.capacity,
            "offset": 0,
            "num_bytes": 0,
            "message_crc32": 0,
            "meta_crc32": 0,
        }
        send_frame(self.sock, FrameKind.CHUNK, shm_descriptor.encode(descriptor), (chunk.fd,))

    def open_chunks(self) -> None:
        for chunk_id in range(self.config.chunks):
            chunk = create_chunk(self.config.chunk_size, self.config.backend)
            self.chunks.append(chunk)
            self._send_chunk(chunk_id, chunk)
            self.free.add(chunk_id)

    def _grow(self, chunk_id: int, needed: int) -> None:
        """Replace chunk ``chunk_id`` by one of at least ``needed`` bytes (the parent maps the new one)."""
        old = self.chunks[chunk_id]
        capacity = min(max(-(-needed // _PAGE) * _PAGE, 2 * old.capacity), self.config.max_chunk_size)
        chunk = create_chunk(capacity, self.config.backend)
        self._send_chunk(chunk_id, chunk)
        self.chunks[chunk_id] = chunk
        old.close()

    def _fit(self, chunk_id: int, layout: ResultLayout) -> None:
        if layout.size <= self.chunks[chunk_id].capacity:
            return
        if layout.size > self.config.max_chunk_size:
            raise MemoryError(f"the result needs {layout.size} bytes, above max_chunk_size({self.config.max_chunk_size})")
        self._grow(chunk_id, layout.size)

    def _place(self, chunk_id: int, header: TaskHeader, task: dict[str, Any]) -> tuple[PlannedBatch | None, ResultLayout]:
        """Run the task and lay its result out in chunk ``chunk_id``, growing it if needed."""
        failure: TaskFailure
        try:
            batch = _run_callback(self.callback, task, self.config.batch_mode)
        except (Exception, SystemExit) as exc:
            failure = failure_from_exception(exc)
        else:
            try:
                plan = plan_batch(batch)
                layout = layout_success(plan, header)
                self._fit(chunk_id, layout)
                return plan, layout
            except Exception as exc:
                failure = failure_from_exception(exc, "batch cannot be written to shared memory: ")
        layout = layout_failure(failure, header)
        try:
            self._fit(chunk_id, layout)
        except Exception:  # noqa: BLE001 - no room to grow: send the reason without its traceback
            short = TaskFailure(failure.kind, failure.message.encode()[:_SHORT_MESSAGE_BYTES].decode("utf-8", "ignore"), None)
            layout = layout_failure(short, header)
        return None, layout

    def run_task(self, payload: bytes) -> None:
        message = shm_message.decode(payload)
        if message["type"] != shm_message.MessageType.SCHEDULED_TASK:
            raise ValueError(f"{message['type'].name} sent to a worker")
        if not self.free:
            raise RuntimeError("the parent sent a task while every chunk is in use")
        chunk_id = min(self.free)
        header = TaskHeader(self.config.worker_id, message["context_i"], message["scheduled_i"], message["minibatch_i"])
        plan, layout = self._place(chunk_id, header, message["task"])
        chunk = self.chunks[chunk_id]
        offset, size = write_result(chunk.buffer, plan, layout)
        descriptor = {
            "worker_id": self.config.worker_id,
            "shm_chunk_id": chunk_id,
            "shm_capacity": chunk.capacity,
            "offset": offset,
            "num_bytes": size,
        }
        if self.config.after_write is not None:
            self.config.after_write(memoryview(chunk.buffer), descriptor)
        descriptor.update(checksums(chunk.buffer, layout))
        self.free.discard(chunk_id)
        send_frame(self.sock, FrameKind.RESULT, shm_descriptor.encode(descriptor))

    def serve(self) -> None:
        while True:
            kind, payload, fds = recv_frame(self.sock, None)
            close_fds(fds)
            if kind == FrameKind.STOP:
                return
            if kind == FrameKind.RELEASE:
                descriptor = shm_descriptor.decode(payload)
                if 0 <= descriptor["shm_chunk_id"] < len(self.chunks):
                    self.free.add(descriptor["shm_chunk_id"])
            elif kind == FrameKind.TASK:
                self.run_task(payload)
            else:
                raise ValueError(f"{kind.name} sent to a worker")

    def close(self) -> None:
        for chunk in self.chunks:
            chunk.close()
        self.sock.close()


def worker_main(sock: socket.socket, callback: Callable[..., Any], config: WorkerConfig) -> None:
    """Entry point of a worker process; returns when the parent stops it or goes away."""
    for fd in config.inherited_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    worker = _Worker(sock, callback, config)
    try:
        if not answer(sock, config.versions):
            raise SystemExit(VERSION_REFUSED_EXIT)
        worker.open_chunks()
        worker.serve()
    except PeerClosed:
        pass
    finally:
        worker.close()
