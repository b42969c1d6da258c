"""Enabling and disabling the adapter: which DALI attributes are replaced, by what, and for which releases."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from ._batches import _deserialize_batch, _serialize_done_task, _write_batch
from ._host import _dali, _lock, _originals
from ._messages import _read_message, _read_result, _read_task, _write_message
from ._pool import _close_handles, _receive_chunk, _sync_initialized_workers
from ._queues import _close_queue, _read_queue_meta

#: DALI releases whose shared-memory internals this adapter knows.
SUPPORTED_VERSIONS: tuple[str, ...] = ("2.4.0",)


class _RefusedVersion(RuntimeError):
    """The installed DALI is not one whose internals the adapter knows."""


# --- enabling ----------------------------------------------------------------------------------


def is_enabled() -> bool:
    """Whether DALI currently exchanges its shared-memory messages through Inert's codecs."""
    return bool(_originals)


def enable() -> None:
    """Make DALI's parallel external source use Inert's codecs in both directions.

    Idempotent.  Raises ``RuntimeError`` naming the supported releases when the
    installed DALI is not one of :data:`SUPPORTED_VERSIONS`, and ``ImportError``
    when DALI is not installed.

    >>> import inert.dali
    >>> inert.dali.enable()          # doctest: +SKIP
    >>> inert.dali.is_enabled()      # doctest: +SKIP
    True
    """
    with _lock:
        if _originals:
            return
        dali = _load_dali()
        unlike = f"this nvidia.dali {dali.version} build differs from the supported releases {', '.join(SUPPORTED_VERSIONS)}"
        try:
            patches = _patches(dali)
        except AttributeError as exc:
            raise _RefusedVersion(f"inert.dali: {exc}; {unlike}") from None
        for owner, name, _ in patches:
            if name not in vars(owner):  # defined there, not inherited: that is what gets replaced
                raise _RefusedVersion(f"inert.dali: {getattr(owner, '__name__', owner)} lacks {name}; {unlike}")
        for owner, name, replacement in patches:
            _originals.append((owner, name, owner.__dict__[name]))
            setattr(owner, name, replacement)


def disable() -> None:
    """Restore DALI's own (pickle) serialization.  Idempotent.

    Pipelines whose workers started while the adapter was enabled must not run
    after this: their workers keep writing Inert messages.
    """
    with _lock:
        while _originals:
            owner, name, original = _originals.pop()
            setattr(owner, name, original)


@contextmanager
def enabled() -> Iterator[None]:
    """Enable the adapter inside a ``with`` block, then restore the previous state.

    Build and run the pipeline inside the block::

        with inert.dali.enabled():
            pipe.build()
            pipe.run()
    """
    was_enabled = is_enabled()
    enable()
    try:
        yield
    finally:
        if not was_enabled:
            disable()


def _load_dali() -> SimpleNamespace:
    import nvidia.dali as dali

    version = getattr(dali, "__version__", "unknown")
    if version not in SUPPORTED_VERSIONS:
        raise _RefusedVersion(
            f"inert.dali supports NVIDIA DALI {', '.join(SUPPORTED_VERSIONS)}; the installed nvidia.dali is "
            f"{version}, whose shared-memory internals the adapter does not know. "
            f"Install a supported release (pip install nvidia-dali-cuda130=={SUPPORTED_VERSIONS[-1]})."
        )
    from nvidia.dali import types
    from nvidia.dali._multiproc import messages, pool, shared_batch, shared_queue, worker

    _dali.version = version
    _dali.shared_batch = shared_batch
    _dali.shared_queue = shared_queue
    _dali.BatchInfo = types.BatchInfo
    _dali.ScheduledTask = messages.ScheduledTask
    _dali.TaskArgs = messages.TaskArgs
    _dali.SampleRange = messages.SampleRange
    _dali.CompletedTask = messages.CompletedTask
    _dali.ShmMessageDesc = messages.ShmMessageDesc
    _dali.SharedBatchMeta = shared_batch.SharedBatchMeta
    _dali.worker_modules = SimpleNamespace(worker=worker, pool=pool)
    return _dali


def _patches(dali: SimpleNamespace) -> list[tuple[Any, str, Any]]:
    """Every DALI attribute the adapter replaces, with its replacement.

    ``worker.py`` and ``pool.py`` import the shared_batch functions by name, so
    each name is replaced where it is looked up.  The pickle readers left in
    ``shared_batch`` are replaced by a refusal, so a path missed here fails
    loudly instead of unpickling.  ``ShmQueue`` reads its shared header through
    ``_read_meta`` alone, so checking it there covers every queue operation.
    """
    sb, wk, pl = dali.shared_batch, dali.worker_modules.worker, dali.worker_modules.pool
    return [
        (sb, "read_shm_message", _read_message),
        (wk, "read_shm_message", _read_task),
        (pl, "read_shm_message", _read_result),
        (sb, "write_shm_message", _write_message),
        (wk, "write_shm_message", _write_message),
        (pl, "write_shm_message", _write_message),
        (sb, "deserialize_batch", _deserialize_batch),
        (pl, "deserialize_batch", _deserialize_batch),
        (sb, "deserialize_sample_meta", _pickle_refused),
        (sb, "restricted_pickle_loads", _pickle_refused),
        (sb.SharedBatchWriter, "_write_batch", _write_batch),
        (wk.SharedBatchDispatcher, "_serialize_done_task", _serialize_done_task),
        (pl.WorkerPool, "_receive_chunk", _receive_chunk),
        (pl.ProcPool, "_sync_initialized_workers", _sync_initialized_workers),
        (dali.shared_queue.ShmQueue, "_read_meta", _read_queue_meta),
        (dali.shared_queue.ShmQueue, "close", _close_queue),
        (pl.ShmChunkManager, "close_handles", _close_handles),
        (pl, "worker", _worker_entry),
    ]


def _worker_entry(worker_args: Any) -> None:
    """Entry point of a DALI worker process: enable the adapter, then run DALI's worker.

    A ``spawn`` worker imports DALI afresh; this (importable) function is what
    its process unpickles and runs, so the worker speaks the parent's format.
    A ``fork`` worker is already patched (and must not wait on a lock another
    parent thread may have held when it forked).
    """
    if not _originals:
        enable()
    _dali.worker_modules.worker.worker(worker_args)


def _pickle_refused(*args: Any) -> Any:
    raise RuntimeError("inert.dali: DALI tried to unpickle shared memory while the Inert adapter is enabled")
