"""What ``inert.torch.load`` raises when ``dcp.load`` fails: the cause, not DCP's wrapper around it.

DCP wraps every rank's failure in a ``CheckpointException`` whose text is a traceback per rank, and
when a reader's ``read_metadata`` fails it logs the failure with its traceback (``Global metadata is
not found. Falling back to rank local metadata.``) and tries again, so a damaged or legacy
``.metadata`` printed two tracebacks before any error reached the caller.  Here:

* ``cause``: the ``InertError`` a rank raised, or a ``ShapeMismatchError`` naming the fqn and both
  shapes when DCP's default planner refused the state dict (a shape that differs, a key the
  checkpoint lacks); ``inert.torch.load`` raises it with the ``CheckpointException`` as its cause;
* ``quiet_fallback`` and ``install_log_filter``: DCP's fallback records whose exception is an
  ``InertError`` print no traceback: inside ``inert.torch.load``, which raises that error itself,
  they are dropped; a direct ``dcp.load`` keeps one line that carries the error's text.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

from inert._errors import InertError
from inert._records import ShapeMismatchError

__all__ = ["cause", "quiet_fallback", "install_log_filter"]

#: Where DCP's own modules live: only their records are touched.
_DCP_DIR = os.path.join("torch", "distributed", "checkpoint") + os.sep
#: Set while ``inert.torch.load`` runs in this context: it raises the error that DCP's records carry.
_RAISING_ITSELF: contextvars.ContextVar[bool] = contextvars.ContextVar("inert_torch_load", default=False)


def _failures(exc: BaseException) -> list[BaseException]:
    """The exceptions inside DCP's ``CheckpointException`` in rank order (``failures``: rank -> exception
    or (exception, traceback)); none for any other exception."""
    failures = getattr(exc, "failures", None)
    if not isinstance(failures, dict):
        return []
    found = []
    for rank in sorted(failures):
        failure = failures[rank]
        error = failure[0] if isinstance(failure, tuple) and failure else failure
        if isinstance(error, BaseException):
            found.append(error)
    return found


def cause(exc: BaseException, reader: Any, state_dict: dict[str, Any], planner: Any) -> BaseException | None:
    """What ``inert.torch.load`` raises in place of ``exc`` (None: ``exc`` itself).

    A rank's ``InertError`` first; then the one a metadata read raised (DCP keeps only its text);
    then, for a refusal by DCP's default planner, the ``ShapeMismatchError`` it stands for.
    """
    if isinstance(exc, InertError):
        return None
    failures = _failures(exc)
    found = next((error for error in failures if isinstance(error, InertError)), None)
    found = found or getattr(reader, "metadata_error", None)
    if found is not None:
        return found
    planned = failures[0] if failures else None
    metadata = getattr(reader, "metadata", None)
    if not isinstance(planned, (ValueError, RuntimeError)) or not isinstance(metadata, Metadata):
        return None
    if planner is not None and not _plans_as_default(planner):
        return None  # a planner of the caller's own may map keys in ways this check cannot know
    return planned_mismatch(state_dict, metadata, partial=bool(getattr(planner, "allow_partial_load", False)))


def _plans_as_default(planner: Any) -> bool:
    """Whether ``planner`` plans as DCP's default planner does (its class may add, not replace, planning)."""
    kind = type(planner)
    return isinstance(planner, DefaultLoadPlanner) and all(
        getattr(kind, name) is getattr(DefaultLoadPlanner, name) for name in ("set_up_planner", "create_local_plan"))


def planned_mismatch(state_dict: dict[str, Any], metadata: Metadata, *, partial: bool = False) -> ShapeMismatchError | None:
    """The first entry of ``state_dict`` (flattened as DCP's default planner flattens it) that the checkpoint
    cannot fill: no entry under its name (unless ``partial``), or a tensor of another shape."""
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    from torch.distributed.checkpoint.stateful import Stateful

    try:  # what dcp.load plans from: each Stateful's own state dict, flattened
        state = {key: value.state_dict() if isinstance(value, Stateful) else value for key, value in state_dict.items()}
        flat, _ = flatten_state_dict(state)
    except Exception:  # noqa: BLE001 - a state dict this check cannot walk: DCP's own error stands
        return None
    entries = metadata.state_dict_metadata
    for fqn, value in flat.items():
        md = entries.get(fqn)
        if md is None:
            if partial:
                continue
            return ShapeMismatchError("checkpoint-metadata", -1, fqn, "the checkpoint has no entry under this name")
        if isinstance(md, TensorStorageMetadata) and isinstance(value, torch.Tensor) and value.size() != md.size:
            reason = (f"destination is {tuple(value.size())} {value.dtype}, "
                      f"the checkpoint holds {tuple(md.size)} {md.properties.dtype}")
            return ShapeMismatchError("checkpoint-metadata", -1, fqn, reason)
    return None


class _FallbackRecords(logging.Filter):
    """DCP's records of a failed metadata read whose exception is an ``InertError``: no traceback.

    Dropped while ``inert.torch.load`` runs (it raises that error); otherwise one line, the
    record's message and the error's text, so a direct ``dcp.load`` still says why it fell back.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, InertError) or _DCP_DIR not in record.pathname:
            return True
        if _RAISING_ITSELF.get():
            return False
        record.msg = f"{record.getMessage()} ({error})"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


_FILTER = _FallbackRecords()
_INSTALL = threading.Lock()


def install_log_filter() -> None:
    """Put the filter on the logger of DCP's loader (the root logger in 2.13), once; cheap to call again."""
    module = sys.modules.get("torch.distributed.checkpoint.state_dict_loader")
    logger = getattr(module, "logger", None)
    if not isinstance(logger, logging.Logger):
        return
    with _INSTALL:
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


@contextlib.contextmanager
def quiet_fallback() -> Iterator[None]:
    """Within: DCP's fallback records of an ``InertError`` are dropped (the caller raises the error itself)."""
    install_log_filter()
    token = _RAISING_ITSELF.set(True)
    try:
        yield
    finally:
        _RAISING_ITSELF.reset(token)
