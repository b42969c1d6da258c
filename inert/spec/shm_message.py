"""Format ``shm-message``: the task and result messages of a data loader's workers.

Version 1 is the binary layout published for NVIDIA DALI's parallel external
source (``_BinaryWriter``/``_BinaryReader`` in DALI's ``shared_batch.py``): a
ScheduledTask from the parent to a worker, a CompletedTask back, every field
in DALI's order and width.  Integers are signed 64-bit, the batch meta's
offset and size unsigned 64-bit, presence flags one byte, and every string
(exception message, traceback) a ``Int64ul`` byte length then UTF-8.  The
layout has no version field: the channel agrees on the version when it starts
and refuses a mismatch there.

Inert reads the same bytes more strictly than DALI's reader, and says so:
invalid UTF-8 is refused, not replaced (two byte strings would decode to one
value); a flag byte other than 0 or 1 is refused, not taken as true; a text
is at most ``MAX_TEXT_LEN`` bytes, checked before anything is read; the batch
meta's offset plus size must fit 64 bits; a SampleRange follows DALI's own
rules (which its reader checks too).  Every message DALI's writer produces
from a real task or result, with texts of at most ``MAX_TEXT_LEN`` bytes,
passes these checks.
"""

import enum

from ._grammar import (
    Format,
    Int64sl,
    Int64ul,
    Optional,
    Record,
    Tag,
    Union,
    Utf8,
)
from ._rules import SpecRule

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
)

Text = Utf8(Int64ul, MAX_TEXT_LEN)

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
             r"is negative$", on="SampleRange",
             message=('{start} is negative', '{iteration} is negative', '{epoch} is negative')),
    SpecRule("shm-message.range-order", "A SampleRange's end is not before its start (checked after epoch).",
             "invalid-value", "end", "end >= start", r"is before start", on="SampleRange",
             message='{end} is before start {start}'),
    SpecRule("shm-message.slice-inside", "A SampleRange's slice lies inside it: 0 <= slice_start <= slice_end "
             "<= end - start.", "invalid-value", "slice_start|slice_end",
             "0 <= slice_start <= end - start and slice_start <= slice_end <= end - start", r"lies outside",
             on="SampleRange",
             message=('{slice_start} lies outside 0..{end - start}', '{slice_end} lies outside {slice_start}..{end - start}')),
    SpecRule("shm-message.batch-meta-overflow", "A BatchMeta's offset + size is below 2**64.", "invalid-value",
             "size", "offset + size <= 2**64 - 1", r"^offset \+ size overflows 64 bits", on="BatchMeta",
             message='offset + size overflows 64 bits'),
)
