"""The parent side: start workers, send them tasks, and hand back their batches as zero-copy views.

Every record from a worker is validated before anything is built from it: the
descriptor against the chunk the parent mapped, the CompletedTask against the
task the parent sent, the samples meta against the chunk and the layout.  A
worker that sends malformed data, or that dies, closes the pool: the caller
gets the ``InertError`` (or :class:`WorkerDiedError`) once, and
:class:`ChannelClosedError` after.  Every wait has a deadline.
"""

from __future__ import annotations

import collections
import dataclasses
import multiprocessing
import select
import socket
import time
from collections.abc import Callable, Mapping
from multiprocessing.process import BaseProcess
from types import TracebackType
from typing import Any

from inert._errors import InertError, InvalidValueError
from inert.codecs import shm_descriptor, shm_message
from inert.codecs._tables import DESCRIPTOR_AT

from ._batch import TaskHeader, at_offset, read_result, read_samples
from ._failures import ChannelClosedError, EndOfData, WorkerDiedError, WorkerTaskError
from ._fdpass import CHANNEL_FORMAT, FrameKind, PeerClosed, close_fds, recv_frame, send_frame, socket_pair
from ._handshake import propose
from ._memory import MappedChunk, MemoryBackend, default_backend, map_chunk
from ._tasks import BatchInfo, batch_task, sample_range_task
from ._worker import AfterWrite, WorkerConfig, worker_main

__all__ = ["ShmWorkerPool", "Batch"]

# How long a stopping worker gets before it is terminated, then killed.
_STOP_GRACE_S = 2.0
# The same after a failure: a worker that sent garbage is not waited for long.
_FAIL_GRACE_S = 0.5
# A descriptor follows its channel record's kind byte: errors count offsets from the record's start.
_KIND_SIZE = 1
_AT = {name: _KIND_SIZE + at for name, at in DESCRIPTOR_AT.items()}


def _descriptor_fault(field: str, reason: str) -> InvalidValueError:
    """A refusal of a well-formed descriptor that does not fit the pool, at the field's offset in the record."""
    return InvalidValueError(shm_descriptor.FORMAT, _AT.get(field, _KIND_SIZE), field, reason)


class Batch:
    """One completed task: its samples as read-only numpy views into a worker's chunk.

    The views stay valid memory for as long as they live, but after
    :meth:`release` the worker may overwrite the chunk: copy what must outlive
    the release.  Use as a context manager to release on exit.
    """

    def __init__(self, pool: ShmWorkerPool, link: _Link, descriptor: dict[str, int], samples: list[Any], scheduled_i: int):
        self._pool = pool
        self._link = link
        self._descriptor = descriptor
        self.samples = samples
        self.worker_id = link.worker_id
        self.scheduled_i = scheduled_i
        self.chunk: MappedChunk = link.chunks[descriptor["shm_chunk_id"]]
        self.released = False

    def release(self) -> None:
        """Hand the chunk back to its worker (idempotent)."""
        if not self.released:
            self.released = True
            self._pool._release(self._link, self._descriptor)

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Batch(worker_id={self.worker_id}, scheduled_i={self.scheduled_i}, {len(self.samples)} samples)"


@dataclasses.dataclass(eq=False)
class _Task:
    scheduled_i: int
    payload: bytes
    worker: int | None
    sent_to: int | None = None
    outcome: Batch | BaseException | None = None


@dataclasses.dataclass(eq=False)
class _Link:
    """The parent's end of one worker: its process, socket, chunks and tasks."""

    worker_id: int
    process: BaseProcess
    sock: socket.socket
    chunks: dict[int, MappedChunk] = dataclasses.field(default_factory=dict)
    in_flight: collections.deque[_Task] = dataclasses.field(default_factory=collections.deque)
    held: set[int] = dataclasses.field(default_factory=set)

    @property
    def load(self) -> int:
        """Chunks this worker cannot use: tasks in flight and batches not yet released."""
        return len(self.in_flight) + len(self.held)

    def died(self) -> WorkerDiedError:
        self.process.join(_STOP_GRACE_S)
        return WorkerDiedError(self.worker_id, self.process.pid, self.process.exitcode)


class ShmWorkerPool:
    """Worker processes that run ``callback`` and return batches through shared memory.

    Sample mode (``batch_mode=False``): :meth:`schedule_range` asks a worker
    for samples of a range; the callback is called per sample with a
    ``SampleInfo``.  Batch mode: :meth:`schedule_batch` calls the callback
    once with no argument, an int or a ``BatchInfo``; it returns a list of
    samples.  A sample is a numpy array (bool, integer, float or complex) or
    a tuple or list of samples.  :meth:`receive` returns results in the
    order they were scheduled.

    Each worker has ``chunks_per_worker`` chunks of ``chunk_size`` bytes to
    start with; a batch that does not fit grows its chunk up to
    ``max_chunk_size``.  ``timeout`` bounds the start-up handshake and every
    :meth:`receive` that does not pass its own.  ``backend`` picks the
    shared memory (``"memfd"``, or the ``"file"`` fallback); by default memfd
    where the kernel has it.  A pool is used from one thread.  The
    underscored arguments make workers misbehave, for tests.

    Example (batch mode; with ``spawn``, ``make_batch`` must be importable)::

        def make_batch(info):
            return [np.arange(4) * info.iteration, (np.zeros(2, np.bool_), [np.float32(1)])]

        with ShmWorkerPool(make_batch, batch_mode=True, start_method="fork") as pool:
            pool.schedule_batch(BatchInfo(iteration=3, epoch_idx=0))
            with pool.receive() as batch:
                total = int(batch.samples[0].sum())  # 18; copy what must outlive release()
    """

    def __init__(
        self,
        callback: Callable[..., Any],
        *,
        num_workers: int = 2,
        batch_mode: bool = False,
        start_method: str | None = None,
        chunk_size: int = 1 << 20,
        chunks_per_worker: int = 2,
        max_chunk_size: int = 1 << 30,
        timeout: float = 30.0,
        backend: MemoryBackend | str | None = None,
        _worker_versions: Mapping[str, tuple[int, ...]] | None = None,
        _after_write: AfterWrite | None = None,
    ) -> None:
        if num_workers < 1 or chunks_per_worker < 1:
            raise ValueError("num_workers and chunks_per_worker must be at least 1")
        if not 0 < chunk_size <= max_chunk_size:
            raise ValueError(f"chunk_size must lie in 1..max_chunk_size({max_chunk_size}), not {chunk_size}")
        self.batch_mode = batch_mode
        self.timeout = timeout
        self.backend = MemoryBackend(backend) if backend is not None else default_backend()
        self._chunks_per_worker = chunks_per_worker
        self._max_chunk_size = max_chunk_size
        self._links: list[_Link] = []
        self._tasks: dict[int, _Task] = {}
        self._queue: collections.deque[_Task] = collections.deque()
        self._next_scheduled = 0
        self._next_worker = 0
        self._closed = False
        self._failure: BaseException | None = None
        context: Any = multiprocessing.get_context(start_method)  # typeshed gives BaseContext no Process
        forked = context.get_start_method() == "fork"
        try:
            for worker_id in range(num_workers):
                parent_end, worker_end = socket_pair()
                config = WorkerConfig(
                    worker_id=worker_id,
                    batch_mode=batch_mode,
                    chunk_size=chunk_size,
                    chunks=chunks_per_worker,
                    max_chunk_size=max_chunk_size,
                    backend=self.backend,
                    # A forked worker holds copies of the parent's ends (its own too): it closes
                    # them, or it would never see the parent close its channel.
                    inherited_fds=tuple(sock.fileno() for sock in [*(link.sock for link in self._links), parent_end])
                    if forked
                    else (),
                    **({"versions": dict(_worker_versions)} if _worker_versions is not None else {}),
                    after_write=_after_write,
                )
                process = context.Process(
                    target=worker_main, args=(worker_end, callback, config), name=f"inert-shm-worker-{worker_id}", daemon=True
                )
                try:
                    process.start()
                except BaseException:
                    parent_end.close()
                    raise
                finally:
                    worker_end.close()
                parent_end.settimeout(timeout)  # bounds sends to a worker that stopped reading
                self._links.append(_Link(worker_id, process, parent_end))
            for link in self._links:
                try:
                    propose(link.sock, timeout)
                except PeerClosed:
                    raise link.died() from None
        except BaseException:
            self._shutdown()
            raise

    # -- scheduling -------------------------------------------------------

    @property
    def pids(self) -> list[int | None]:
        """Process ids of the workers, by worker id."""
        return [link.process.pid for link in self._links]

    def schedule_range(
        self,
        start: int,
        end: int,
        *,
        iteration: int = 0,
        epoch: int = 0,
        slice_start: int = 0,
        slice_end: int | None = None,
        worker: int | None = None,
    ) -> int:
        """Ask for samples ``start + slice_start .. start + slice_end`` (sample mode); return the task's number."""
        if self.batch_mode:
            raise ValueError("schedule_range() needs a pool in sample mode (batch_mode=False)")
        slice_end = end - start if slice_end is None else slice_end
        return self._schedule(lambda i: sample_range_task(i, start, end, iteration, epoch, slice_start, slice_end), worker)

    def schedule_batch(self, arg: int | BatchInfo | None = None, *, worker: int | None = None) -> int:
        """Ask for one batch from the callback called with ``arg`` (batch mode); return the task's number."""
        if not self.batch_mode:
            raise ValueError("schedule_batch() needs a pool in batch mode (batch_mode=True)")
        return self._schedule(lambda i: batch_task(i, arg), worker)

    def _schedule(self, encode: Callable[[int], bytes], worker: int | None) -> int:
        self._check_open()
        if worker is not None and not 0 <= worker < len(self._links):
            raise ValueError(f"worker {worker} is not one of 0..{len(self._links) - 1}")
        scheduled_i = self._next_scheduled
        task = _Task(scheduled_i, encode(scheduled_i), worker)
        self._next_scheduled += 1
        self._tasks[scheduled_i] = task
        self._queue.append(task)
        self._dispatch()
        return scheduled_i

    def _pick(self, task: _Task) -> _Link | None:
        if task.worker is not None:
            link = self._links[task.worker]
            return link if link.load < self._chunks_per_worker else None
        for step in range(len(self._links)):
            link = self._links[(self._next_worker + step) % len(self._links)]
            if link.load < self._chunks_per_worker:
                self._next_worker = (link.worker_id + 1) % len(self._links)
                return link
        return None

    def _dispatch(self) -> None:
        waiting: collections.deque[_Task] = collections.deque()
        while self._queue:
            task = self._queue.popleft()
            link = self._pick(task)
            if link is None:
                waiting.append(task)
                continue
            try:
                send_frame(link.sock, FrameKind.TASK, task.payload)
            except (PeerClosed, OSError):
                self._fail(link.died())
                raise self._failure from None  # type: ignore[misc]
            task.sent_to = link.worker_id
            link.in_flight.append(task)
        self._queue = waiting

    # -- receiving --------------------------------------------------------

    def receive(self, timeout: float | None = None) -> Batch:
        """The result of the oldest task not yet received.

        Raises :class:`WorkerTaskError` or :class:`EndOfData` for a task the
        worker reported as failed, an ``InertError`` for malformed data from a
        worker, :class:`WorkerDiedError` for a worker that exited, and
        ``TimeoutError`` after ``timeout`` seconds (default: the pool's).
        """
        self._check_open()
        if not self._tasks:
            raise RuntimeError("receive() called with no task scheduled")
        head = next(iter(self._tasks.values()))
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while head.outcome is None:
            if head.sent_to is None and not any(link.in_flight for link in self._links):
                raise RuntimeError("every chunk holds an unreleased Batch: release() one before receiving more")
            self._pump(max(0.0, deadline - time.monotonic()))  # reads what is there even when the time is up
            if head.outcome is None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"task {head.scheduled_i}: no result within {self.timeout if timeout is None else timeout:g} s"
                )
        del self._tasks[head.scheduled_i]
        if isinstance(head.outcome, BaseException):
            raise head.outcome
        return head.outcome

    def _pump(self, wait: float) -> None:
        poller = select.poll()
        by_fd = {}
        for link in self._links:
            poller.register(link.sock, select.POLLIN)
            by_fd[link.sock.fileno()] = link
        for fd, _ in poller.poll(wait * 1000):
            link = by_fd[fd]
            try:
                self._read_frame(link)
            except PeerClosed:
                self._fail(link.died())
                raise self._failure from None  # type: ignore[misc]
            except InertError as exc:
                self._fail(exc)
                raise

    def _read_frame(self, link: _Link) -> None:
        kind, payload, fds = recv_frame(link.sock, 0.0)
        if kind == FrameKind.CHUNK:
            self._take_chunk(link, payload, fds)
            return
        close_fds(fds)
        if fds:
            raise InvalidValueError(CHANNEL_FORMAT, 0, "fds", f"descriptors attached to a {kind.name} record")
        if kind != FrameKind.RESULT:
            raise InvalidValueError(CHANNEL_FORMAT, 0, "kind", f"{kind.name} where CHUNK or RESULT belongs")
        self._take_result(link, self._descriptor(link, payload))

    @staticmethod
    def _descriptor(link: _Link, payload: bytes) -> dict[str, int]:
        try:
            descriptor: dict[str, int] = shm_descriptor.decode(payload)
        except InertError as exc:
            raise at_offset(exc, _KIND_SIZE) from None
        if descriptor["worker_id"] != link.worker_id:
            raise _descriptor_fault("worker_id", f"{descriptor['worker_id']} from worker {link.worker_id}")
        return descriptor

    def _take_chunk(self, link: _Link, payload: bytes, fds: list[int]) -> None:
        try:
            if len(fds) != 1:
                raise InvalidValueError(CHANNEL_FORMAT, 0, "fds", f"{len(fds)} descriptors with a CHUNK record, not 1")
            descriptor = self._descriptor(link, payload)
            chunk_id = descriptor["shm_chunk_id"]
            if chunk_id >= self._chunks_per_worker:
                raise _descriptor_fault("shm_chunk_id", f"{chunk_id} outside 0..{self._chunks_per_worker - 1}")
            if chunk_id in link.held:
                raise _descriptor_fault("shm_chunk_id", f"chunk {chunk_id} holds an unreleased batch")
        except BaseException:
            close_fds(fds)
            raise
        link.chunks[chunk_id] = map_chunk(
            fds[0],
            chunk_id,
            descriptor["shm_capacity"],
            require_seals=self.backend is MemoryBackend.MEMFD,
            max_capacity=self._max_chunk_size,
        )

    def _take_result(self, link: _Link, descriptor: dict[str, int]) -> None:
        chunk_id = descriptor["shm_chunk_id"]
        chunk = link.chunks.get(chunk_id)
        if chunk is None:
            raise _descriptor_fault("shm_chunk_id", f"worker {link.worker_id} has no chunk {chunk_id}")
        if descriptor["shm_capacity"] != chunk.capacity:
            raise _descriptor_fault("shm_capacity", f"{descriptor['shm_capacity']} declared, the chunk holds {chunk.capacity}")
        if chunk_id in link.held:
            raise _descriptor_fault("shm_chunk_id", f"chunk {chunk_id} holds an unreleased batch")
        if not link.in_flight:
            raise _descriptor_fault("", f"a result from worker {link.worker_id} with no task in flight")
        task = link.in_flight.popleft()
        expected = TaskHeader(link.worker_id, 0, task.scheduled_i, task.scheduled_i)
        message = read_result(chunk, descriptor["offset"], descriptor["num_bytes"], expected, descriptor["message_crc32"])
        exception = message["exception"]
        if exception["kind"] == shm_message.ExceptionKind.NONE:
            samples = read_samples(chunk, message["meta"], descriptor["meta_crc32"])
            link.held.add(chunk_id)
            task.outcome = Batch(self, link, descriptor, samples, task.scheduled_i)
            return
        if exception["kind"] == shm_message.ExceptionKind.STOP_ITERATION:
            task.outcome = EndOfData(exception["message"], link.worker_id, task.scheduled_i)
        else:
            task.outcome = WorkerTaskError(exception["message"], message["traceback"], link.worker_id, task.scheduled_i)
        self._send_release(link, descriptor)

    def _send_release(self, link: _Link, descriptor: dict[str, int]) -> None:
        try:
            send_frame(link.sock, FrameKind.RELEASE, shm_descriptor.encode(descriptor))
        except (PeerClosed, OSError):
            self._fail(link.died())

    def _release(self, link: _Link, descriptor: dict[str, int]) -> None:
        if self._closed:
            return
        link.held.discard(descriptor["shm_chunk_id"])
        self._send_release(link, descriptor)
        if not self._closed:
            self._dispatch()

    # -- closing ----------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            reason = f" after: {self._failure}" if self._failure is not None else ""
            raise ChannelClosedError(f"the worker pool is closed{reason}") from self._failure

    def _fail(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self._shutdown()

    def _shutdown(self) -> None:
        self._closed = True
        polite = self._failure is None
        for link in self._links:
            if polite and link.process.is_alive():
                try:
                    send_frame(link.sock, FrameKind.STOP)
                except (PeerClosed, OSError):
                    pass
            link.sock.close()  # a worker waiting for a task sees the end of the channel and exits
            link.chunks.clear()  # mappings stay alive while views use them
        deadline = time.monotonic() + (_STOP_GRACE_S if polite else _FAIL_GRACE_S)
        for link in self._links:
            link.process.join(max(0.0, deadline - time.monotonic()))
            if link.process.is_alive():
                link.process.terminate()
                link.process.join(_STOP_GRACE_S)
            if link.process.is_alive():
                link.process.kill()
                link.process.join()

    def close(self) -> None:
        """Stop the workers (politely, then by force) and close the channel; idempotent."""
        if not self._closed:
            self._shutdown()

    def __enter__(self) -> ShmWorkerPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
