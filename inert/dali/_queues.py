"""The shared header of DALI's queues, checked before DALI uses it."""

from __future__ import annotations

import threading
from typing import Any

from inert._errors import InvalidValueError

from ._host import _dali, _original

# The shared header of DALI's ``ShmQueue`` (``QueueMeta``, native-order ``iiii``).
# Every process that uses a queue rewrites it, so a worker can put anything
# there; it is not an Inert format, but its faults are reported like one.
_QUEUE_FORMAT = "dali-shm-queue"
_QUEUE_FIELDS = {"capacity": 0, "size": 4, "begining": 8, "is_closed": 12}  # DALI's spelling


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
