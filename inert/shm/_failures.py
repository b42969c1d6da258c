"""How a worker's failure surfaces in the parent.

A task the worker reported as failed raises :class:`WorkerTaskError` (the
callback raised, or its batch could not be written) or :class:`EndOfData`
(the callback raised ``StopIteration``).  A worker process that exits raises
:class:`WorkerDiedError`.  Malformed bytes from a worker raise an
``inert.InertError``.  All of them pickle intact, as errors crossing processes must.
"""

from __future__ import annotations

__all__ = ["WorkerTaskError", "EndOfData", "WorkerDiedError", "ChannelClosedError"]


class WorkerTaskError(RuntimeError):
    """A worker reported a task as failed; ``traceback_text`` is the worker's traceback."""

    def __init__(self, message: str, traceback_text: str | None, worker_id: int, scheduled_i: int) -> None:
        self.message = message
        self.traceback_text = traceback_text
        self.worker_id = worker_id
        self.scheduled_i = scheduled_i
        detail = f"\n\nTraceback in the worker:\n{traceback_text}" if traceback_text else ""
        super().__init__(f"worker {worker_id}, task {scheduled_i}: {message}{detail}")

    def __reduce__(self) -> tuple[type, tuple[str, str | None, int, int]]:
        return (type(self), (self.message, self.traceback_text, self.worker_id, self.scheduled_i))


class EndOfData(StopIteration):
    """The callback raised ``StopIteration`` for this task: the data source is exhausted."""

    def __init__(self, message: str, worker_id: int, scheduled_i: int) -> None:
        self.message = message
        self.worker_id = worker_id
        self.scheduled_i = scheduled_i
        super().__init__(f"worker {worker_id}, task {scheduled_i}: {message}")

    def __reduce__(self) -> tuple[type, tuple[str, int, int]]:
        return (type(self), (self.message, self.worker_id, self.scheduled_i))


class WorkerDiedError(RuntimeError):
    """A worker process exited or was killed; the pool is closed."""

    def __init__(self, worker_id: int, pid: int | None, exitcode: int | None) -> None:
        self.worker_id = worker_id
        self.pid = pid
        self.exitcode = exitcode
        if exitcode is None:
            how = "closed its channel"
        elif exitcode < 0:
            how = f"was killed by signal {-exitcode}"
        else:
            how = f"exited with code {exitcode}"
        super().__init__(f"worker {worker_id} (pid {pid}) {how}")

    def __reduce__(self) -> tuple[type, tuple[int, int | None, int | None]]:
        return (type(self), (self.worker_id, self.pid, self.exitcode))


class ChannelClosedError(RuntimeError):
    """The pool was closed, by the caller or after a worker died or sent malformed data."""
