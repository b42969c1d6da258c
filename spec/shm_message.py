"""Format ``shm-message``: the task and result messages of a data loader's workers.

Version 1 is byte-compatible with the binary layout proposed for NVIDIA DALI's
parallel external source (a ScheduledTask from the parent to a worker, a
CompletedTask back).  The layout has no version field: the channel agrees on
the version when it starts and refuses a mismatch there.

Strings are a ``Int32ul`` byte length then UTF-8; invalid UTF-8 is rejected.
"""

import enum

from construct import this

from inert._checks import check_sample_range
from inert._rules import SpecRule

from ._grammar import (
    Format,
    Int32ul,
    Int64sl,
    Int64ul,
    Optional,
    Record,
    Rule,
    Tag,
    Union,
    Utf8,
    Validate,
)

#: Longest exception message or traceback carried, in UTF-8 bytes.
MAX_TEXT_LEN = 1 << 20


class MessageType(enum.IntEnum):
    SCHEDULED_TASK = 1
    COMPLETED_TASK = 2


class TaskKind(enum.IntEnum):
    SAMPLE_RANGE = 0
    BATCH = 1


class BatchArgKind(enum.IntEnum):
    NONE = 0
    INT = 1
    BATCH_INFO = 2


class ExceptionKind(enum.IntEnum):
    NONE = 0
    STOP_ITERATION = 1
    RUNTIME_ERROR = 2


SampleRange = Record(
    "SampleRange",
    "start" / Int64sl,
    "end" / Int64sl,
    "iteration" / Int64sl,
    "epoch" / Int64sl,
    "slice_start" / Int64sl,
    "slice_end" / Int64sl,
    Validate(check_sample_range),
)

BatchArgs = Union(
    "BatchArgs",
    "kind",
    Tag(BatchArgKind),
    {
        BatchArgKind.NONE: None,
        BatchArgKind.INT: Record("IntArg", "value" / Int64sl),
        BatchArgKind.BATCH_INFO: Record("BatchInfo", "iteration" / Int64sl, "epoch_idx" / Int64sl),
    },
)

Task = Union(
    "Task",
    "kind",
    Tag(TaskKind),
    {
        TaskKind.SAMPLE_RANGE: Record("SampleRangeTask", "range" / SampleRange),
        TaskKind.BATCH: Record("BatchTask", "args" / BatchArgs),
    },
)

ScheduledTask = Record(
    "ScheduledTask",
    "context_i" / Int64sl,
    "scheduled_i" / Int64sl,
    "epoch_start" / Int64sl,
    "minibatch_i" / Int64sl,
    "task" / Task,
)

BatchMeta = Record(
    "BatchMeta",
    "offset" / Int64ul,
    "size" / Int64ul,
    Rule("size", this.offset + this.size <= 0xFFFFFFFFFFFFFFFF, "offset + size overflows 64 bits"),
)

Text = Utf8(Int32ul, MAX_TEXT_LEN)

Exception_ = Union(
    "TaskException",
    "kind",
    Tag(ExceptionKind),
    {
        ExceptionKind.NONE: None,
        ExceptionKind.STOP_ITERATION: Record("StopIterationException", "message" / Text),
        ExceptionKind.RUNTIME_ERROR: Record("RuntimeErrorException", "message" / Text),
    },
)

CompletedTask = Record(
    "CompletedTask",
    "worker_id" / Int64sl,
    "context_i" / Int64sl,
    "scheduled_i" / Int64sl,
    "minibatch_i" / Int64sl,
    "meta" / Optional(BatchMeta),
    "exception" / Exception_,
    "traceback" / Optional(Text),
)

ShmMessageV1 = Union(
    "ShmMessage",
    "type",
    Tag(MessageType),
    {MessageType.SCHEDULED_TASK: ScheduledTask, MessageType.COMPLETED_TASK: CompletedTask},
)

FORMAT = Format(
    name="shm-message",
    versions={1: ShmMessageV1},
    doc=__doc__ or "",
)

#: Checked after the fields of their record, in this order.
RULES = (
    SpecRule("shm-message.range-non-negative", "A SampleRange's start, iteration and epoch are not negative "
             "(start first).", "invalid-value", "start|iteration|epoch", "start >= 0 and iteration >= 0 and epoch >= 0",
             r"is negative$"),
    SpecRule("shm-message.range-order", "A SampleRange's end is not before its start (checked after start).",
             "invalid-value", "end", "end >= start", r"is before start"),
    SpecRule("shm-message.slice-inside", "A SampleRange's slice lies inside it: 0 <= slice_start <= slice_end "
             "<= end - start.", "invalid-value", "slice_start|slice_end",
             "0 <= slice_start <= slice_end <= end - start", r"lies outside"),
    SpecRule("shm-message.batch-meta-overflow", "A BatchMeta's offset + size is below 2**64.", "invalid-value",
             "size", "offset + size <= 2**64 - 1", r"^offset \+ size overflows 64 bits"),
)
