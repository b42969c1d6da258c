"""Tasks shared out to a few threads, the calling one included, by helper threads kept between reads.

Starting a thread costs about 0.2 ms here, as much as reading 4 MiB: the helpers
wait for work between reads instead.  A helper that has not started on a batch of
tasks by the time the caller finished them never touches it, so a read never waits
for a helper busy elsewhere (another read on another thread, or none at all in a
child forked while helpers ran: only the forking thread lives on there).
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["SharedTasks", "Task"]

Task = Callable[[], Any]


class _Helpers:
    """Daemon threads that run the jobs lent to them, as many as the largest loan so far."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._count = 0
        self._lock = threading.Lock()

    def _serve(self) -> None:
        while True:
            self._jobs.get()()

    def lend(self, count: int, job: Callable[[], None]) -> None:
        with self._lock:
            while self._count < count:
                threading.Thread(target=self._serve, name="inert-reader", daemon=True).start()
                self._count += 1
        for _ in range(count):
            self._jobs.put(job)


_HELPERS = _Helpers()


def _forget_helpers() -> None:  # in a forked child: the helpers did not come along, a lock may be held
    global _HELPERS
    _HELPERS = _Helpers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


class SharedTasks:
    """Tasks taken in turn by a few threads; a task may add tasks for any of them to take next.

    No queue hand-off, future or wake-up of an idle coordinating thread per task: a task
    costs a lock and a list append beyond its own work.  A thread with nothing to take
    waits while others still run tasks (they may add some) and leaves once none run.
    A task returns a result or None (its work is reported by a later task).  The first
    failure stops every thread at its next task and is raised by ``run`` once all have
    stopped.
    """

    def __init__(self) -> None:
        self._tasks: deque[Task] = deque()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._running = 0
        self._results: list[Any] = []
        self._failures: list[BaseException] = []
        self._closed = False
        self._helping = 0

    def spill(self, tasks: list[Task]) -> None:
        """Put ``tasks`` first in line, in order."""
        with self._lock:
            self._tasks.extendleft(reversed(tasks))
            self._changed.notify_all()

    def waiting(self) -> int:
        """How many tasks wait to be taken (a glance: it may change right after)."""
        return len(self._tasks)

    def _work(self) -> None:
        with self._lock:
            while not self._failures:
                if not self._tasks:
                    if not self._running:
                        return
                    self._changed.wait()
                    continue
                task = self._tasks.popleft()
                self._running += 1
                self._lock.release()
                result = None
                try:
                    result = task()
                except BaseException as exc:  # noqa: BLE001 - raised again by run()
                    self._failures.append(exc)
                finally:
                    self._lock.acquire()
                    self._running -= 1
                    if result is not None:
                        self._results.append(result)
                    if not self._tasks:
                        self._changed.notify_all()

    def _help(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._helping += 1
        try:
            self._work()
        finally:
            with self._lock:
                self._helping -= 1
                self._changed.notify_all()

    def run(self, threads: int) -> list[Any]:
        """Run every task on this thread and ``threads - 1`` helpers; the results, in no set order."""
        _HELPERS.lend(threads - 1, self._help)
        self._work()
        with self._lock:
            self._closed = True
            while self._helping:
                self._changed.wait()
        if self._failures:
            raise self._failures[0]
        return self._results
