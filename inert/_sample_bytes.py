"""Checks of a sample's bytes, shared by the readers of batches in shared memory (``inert.shm``, ``inert.dali``).

The samples meta says where an array lies and what it is; only the bytes can
say whether a bool array holds bools.  numpy reads any non-zero byte of a
``bool_`` array as true but keeps the byte, so a 2 or a 255 would reach the
caller as a third and fourth truth value (``a == True`` is false for it).
"""

from __future__ import annotations

import numpy as np

from inert._errors import InvalidValueError

__all__ = ["BOOL_DTYPE", "check_bool_bytes"]

#: numpy's ``dtype.str`` of ``bool_``, as shm-samples-meta spells it.
BOOL_DTYPE = "|b1"
# Bool arrays up to this size are checked without numpy: deleting the good bytes beats numpy's per-call cost.
_SMALL_BOOL_BYTES = 4096


def check_bool_bytes(fmt: str, buffer: memoryview, offset: int, nbytes: int) -> None:
    """Raise ``InvalidValueError`` (at ``offset``) unless each of the ``nbytes`` bytes at ``offset`` is 0 or 1.

    The caller has checked that the bytes lie inside ``buffer``.
    """
    if nbytes <= _SMALL_BOOL_BYTES:
        bad = bytes(buffer[offset : offset + nbytes]).translate(None, b"\x00\x01")
        largest = max(bad) if bad else 0
    else:
        largest = int(np.frombuffer(buffer, np.uint8, count=nbytes, offset=offset).max())
    if largest > 1:
        raise InvalidValueError(fmt, offset, "", f"bool byte {largest} is not 0 or 1")
