"""What a task asks of the callback: the ScheduledTask the parent sends and the arguments a worker derives from it.

Sample mode (DALI's per-sample callback): a task is a range of sample indices
and the callback is called once per sample with a :class:`SampleInfo`.  Batch
mode: the callback is called once with no argument, an int, or a
:class:`BatchInfo`, and returns the whole batch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from inert.codecs import shm_message

__all__ = ["SampleInfo", "BatchInfo", "sample_range_task", "batch_task", "callback_calls"]


class SampleInfo(NamedTuple):
    """Which sample a per-sample callback is asked for."""

    idx_in_epoch: int
    idx_in_batch: int
    iteration: int
    epoch_idx: int


class BatchInfo(NamedTuple):
    """Which batch a batch callback is asked for."""

    iteration: int
    epoch_idx: int


def _scheduled(scheduled_i: int, task: dict[str, Any], epoch_start: int) -> dict[str, Any]:
    return {
        "type": "SCHEDULED_TASK",
        "context_i": 0,
        "scheduled_i": scheduled_i,
        "epoch_start": epoch_start,
        "minibatch_i": scheduled_i,
        "task": task,
    }


def sample_range_task(
    scheduled_i: int, start: int, end: int, iteration: int, epoch: int, slice_start: int, slice_end: int
) -> bytes:
    """An encoded ScheduledTask for samples ``start + slice_start .. start + slice_end`` of a batch."""
    sample_range = {
        "start": start,
        "end": end,
        "iteration": iteration,
        "epoch": epoch,
        "slice_start": slice_start,
        "slice_end": slice_end,
    }
    return shm_message.encode(_scheduled(scheduled_i, {"kind": "SAMPLE_RANGE", "range": sample_range}, epoch))


def batch_task(scheduled_i: int, arg: int | BatchInfo | None) -> bytes:
    """An encoded ScheduledTask calling the batch callback with ``arg`` (none, an int or a BatchInfo)."""
    if arg is None:
        args: dict[str, Any] = {"kind": "NONE"}
        epoch = 0
    elif isinstance(arg, BatchInfo):
        args = {"kind": "BATCH_INFO", "iteration": arg.iteration, "epoch_idx": arg.epoch_idx}
        epoch = arg.epoch_idx
    elif isinstance(arg, int) and not isinstance(arg, bool):
        args = {"kind": "INT", "value": arg}
        epoch = 0
    else:
        raise TypeError(f"a batch argument is None, an int or a BatchInfo, not {type(arg).__name__}")
    return shm_message.encode(_scheduled(scheduled_i, {"kind": "BATCH", "args": args}, epoch))


def callback_calls(task: dict[str, Any], batch_mode: bool) -> list[tuple[Any, ...]]:
    """The argument tuples to call the callback with for a decoded ``task`` (one per sample, or one)."""
    kind = task["kind"]
    if batch_mode != (kind == shm_message.TaskKind.BATCH):
        mode = "batch" if batch_mode else "sample"
        raise ValueError(f"a {kind.name} task was sent to a worker in {mode} mode")
    if kind == shm_message.TaskKind.SAMPLE_RANGE:
        r = task["range"]
        return [(SampleInfo(r["start"] + i, i, r["iteration"], r["epoch"]),) for i in range(r["slice_start"], r["slice_end"])]
    args = task["args"]
    if args["kind"] == shm_message.BatchArgKind.INT:
        return [(args["value"],)]
    if args["kind"] == shm_message.BatchArgKind.BATCH_INFO:
        return [(BatchInfo(args["iteration"], args["epoch_idx"]),)]
    return [()]
