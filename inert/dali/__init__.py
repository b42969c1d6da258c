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

This is the only package of Inert that imports ``nvidia.dali``, and it does so
only when :func:`enable` is called.
"""

from __future__ import annotations

from inert._extras import extra_error

try:
    import numpy  # noqa: F401 - checked first, so that a missing extra says so
except ImportError as _exc:
    raise extra_error("inert.dali", _exc, extra="dali") from None

# The adapter's parts.  The private names the tests use are kept here.
from ._batches import _deserialize_batch as _deserialize_batch
from ._messages import _MAX_MESSAGE_BYTES as _MAX_MESSAGE_BYTES
from ._messages import _MAX_TEXT_LEN as _MAX_TEXT_LEN
from ._messages import _completed_task as _completed_task
from ._messages import _message_value as _message_value
from ._messages import _read_result as _read_result
from ._messages import _read_task as _read_task
from ._messages import _scheduled_task as _scheduled_task
from ._patching import SUPPORTED_VERSIONS, disable, enable, enabled, is_enabled
from ._patching import _worker_entry as _worker_entry
from ._pool import _receive_chunk as _receive_chunk

__all__ = ["SUPPORTED_VERSIONS", "enable", "disable", "enabled", "is_enabled"]
