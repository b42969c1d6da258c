"""Writes the conformance corpus (``corpus/``) from the cases declared here.

Run ``python -m inert.conformance._generate_vectors`` after changing a case;
``--check`` exits 1 when the committed corpus differs from what this script
writes (the test suite runs it).  Vectors come in two kinds:

* written out one by one, one or more per rule of the spec, each saying what
  it tests;
* generated: the boundaries of every limit and integer range, every enum value
  and the first values beyond, and every truncation point of representative
  messages.

The bytes are built here with ``struct``, independently of ``inert.codecs`` and
of the Construct grammar, so that the corpus tests those codecs rather than
restating them.  Enum tables and limits are copied from the spec on purpose: a
change in the spec then shows up as failing vectors until they are updated.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._corpus import CORPUS_DIR, vector_document, vector_file_text, write_vector_document

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
U64_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class Piece:
    """Bytes and the canonical JSON value they decode to."""

    data: bytes
    value: Any


def i64(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}q", *values)


def u64(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def text(data: bytes) -> bytes:
    """A UTF-8 string field: u32 byte length, then the bytes (not checked here: vectors need bad ones)."""
    return u32(len(data)) + data


class Corpus:
    """The vectors of one format version, by name."""

    def __init__(self, fmt: str, version: int) -> None:
        self.fmt = fmt
        self.version = version
        self.docs: dict[str, dict[str, Any]] = {}

    def _add(self, name: str, description: str, data: bytes, expect: dict[str, Any], params: dict[str, Any] | None) -> None:
        self._put(name, vector_document(name, description, data, expect, params))

    def _put(self, name: str, doc: dict[str, Any]) -> None:
        if name in self.docs:
            raise ValueError(f"{self.fmt} v{self.version}: vector {name} declared twice")
        self.docs[name] = doc

    def refuse_write(self, name: str, description: str, value: Any, kind: str) -> None:
        """A value every writer must refuse (``write-type``: wrong type; ``write-value``: breaks a rule)."""
        self._put(f"Write{name}", write_vector_document(f"Write{name}", description, value, kind))

    def accept(self, name: str, description: str, piece: Piece, params: dict[str, Any] | None = None) -> None:
        self._add(name, description, piece.data, {"accept": piece.value}, params)

    def reject(self, name: str, description: str, data: bytes, kind: str, params: dict[str, Any] | None = None) -> None:
        self._add(name, description, data, {"reject": kind}, params)

    def either(self, name: str, description: str, data: bytes, outcomes: list[dict[str, Any]]) -> None:
        self._add(name, description, data, {"either": outcomes}, None)

    def truncations(self, label: str, what: str, piece: Piece) -> None:
        """Every proper prefix of ``piece`` is refused as truncated."""
        n = len(piece.data)
        for k in range(n):
            self.reject(f"Truncated{label}{k:03d}", f"the first {k} of the {n} bytes of {what}", piece.data[:k], "truncated")


# -- shm-message -------------------------------------------------------------------------------------------

MESSAGE_TYPES = {"SCHEDULED_TASK": 1, "COMPLETED_TASK": 2}
TASK_KINDS = {"SAMPLE_RANGE": 0, "BATCH": 1}
BATCH_ARG_KINDS = {"NONE": 0, "INT": 1, "BATCH_INFO": 2}
EXCEPTION_KINDS = {"NONE": 0, "STOP_ITERATION": 1, "RUNTIME_ERROR": 2}
MAX_TEXT_LEN = 1 << 20


def sample_range(
    start: int = 0, end: int = 0, iteration: int = 0, epoch: int = 0, slice_start: int = 0, slice_end: int = 0
) -> Piece:
    fields = {
        "start": start,
        "end": end,
        "iteration": iteration,
        "epoch": epoch,
        "slice_start": slice_start,
        "slice_end": slice_end,
    }
    return Piece(i64(*fields.values()), fields)


def task_range(rng: Piece) -> Piece:
    return Piece(b"\x00" + rng.data, {"kind": "SAMPLE_RANGE", "range": rng.value})


def args_none() -> Piece:
    return Piece(b"\x00", {"kind": "NONE"})


def args_int(value: int) -> Piece:
    return Piece(b"\x01" + i64(value), {"kind": "INT", "value": value})


def args_info(iteration: int, epoch_idx: int) -> Piece:
    return Piece(b"\x02" + i64(iteration, epoch_idx), {"kind": "BATCH_INFO", "iteration": iteration, "epoch_idx": epoch_idx})


def task_batch(args: Piece) -> Piece:
    return Piece(b"\x01" + args.data, {"kind": "BATCH", "args": args.value})


def scheduled(task: Piece, context_i: int = 0, scheduled_i: int = 0, epoch_start: int = 0, minibatch_i: int = 0) -> Piece:
    counters = {"context_i": context_i, "scheduled_i": scheduled_i, "epoch_start": epoch_start, "minibatch_i": minibatch_i}
    return Piece(b"\x01" + i64(*counters.values()) + task.data, {"type": "SCHEDULED_TASK", **counters, "task": task.value})


def batch_meta(offset: int, size: int) -> Piece:
    return Piece(u64(offset, size), {"offset": offset, "size": size})


def exception(kind: str = "NONE", message: str | None = None) -> Piece:
    if kind == "NONE":
        return Piece(b"\x00", {"kind": "NONE"})
    data = (message or "").encode("utf-8")
    return Piece(bytes([EXCEPTION_KINDS[kind]]) + text(data), {"kind": kind, "message": message or ""})


def completed(
    worker_id: int = 0,
    context_i: int = 0,
    scheduled_i: int = 0,
    minibatch_i: int = 0,
    meta: Piece | None = None,
    exc: Piece | None = None,
    traceback: str | None = None,
) -> Piece:
    exc = exc or exception()
    data = b"\x02" + i64(worker_id, context_i, scheduled_i, minibatch_i)
    data += b"\x00" if meta is None else b"\x01" + meta.data
    data += exc.data
    data += b"\x00" if traceback is None else b"\x01" + text(traceback.encode("utf-8"))
    value = {
        "type": "COMPLETED_TASK",
        "worker_id": worker_id,
        "context_i": context_i,
        "scheduled_i": scheduled_i,
        "minibatch_i": minibatch_i,
        "meta": None if meta is None else meta.value,
        "exception": exc.value,
        "traceback": traceback,
    }
    return Piece(data, value)


def _completed_head(worker_id: int = 0) -> bytes:
    """A COMPLETED_TASK up to (not including) its meta flag."""
    return b"\x02" + i64(worker_id, 0, 0, 0)


def _scheduled_head() -> bytes:
    """A SCHEDULED_TASK up to (not including) its task kind."""
    return b"\x01" + i64(0, 0, 0, 0)


# Texts that must survive decoding and canonical JSON unchanged: every width of UTF-8 and every escape.
GOOD_TEXTS = {
    "Empty": "",
    "Ascii": "worker 3 failed",
    "TwoByte": "bad sample \u00fc",
    "ThreeByte": "\u20ac and \u4e2d",
    "FourByte": "\U0001f600",
    "MaxScalar": "\U0010ffff",
    "NonCharacter": "\uffff",
    "ByteOrderMark": "\ufeff",
    "LineSeparators": "\u2028\u2029",
    "Nul": "a\x00b",
    "ControlCharacters": "\x01\x07\x08\t\n\x0b\x0c\r\x1b\x1f",
    "QuoteBackslashSlash": 'say "hi" \\ /',
    "Delete": "\x7f",
}
# Byte strings that are not UTF-8: each must be refused, never replaced.
BAD_UTF8 = {
    "LoneContinuation": b"a\x80",
    "OverlongSlash": b"\xc0\xaf",
    "OverlongTwoByte": b"\xc1\xbf",
    "OverlongThreeByte": b"\xe0\x80\x80",
    "OverlongFourByte": b"\xf0\x80\x80\x80",
    "HighSurrogate": b"\xed\xa0\x80",
    "LowSurrogate": b"\xed\xbf\xbf",
    "AboveMaxScalar": b"\xf4\x90\x80\x80",
    "LeadF5": b"\xf5\x80\x80\x80",
    "LeadFF": b"\xff",
    "CutTwoByte": b"ok\xc3",
    "CutThreeByte": b"\xe2\x82",
    "CutFourByte": b"\xf0\x9f\x98",
    "CutThenAscii": b"\xe2\x82A",
}


def shm_message() -> Corpus:
    c = Corpus("shm-message", 1)
    rep_range = scheduled(task_range(sample_range(10, 20, 1, 0, 2, 8)), 1, 2, 3, 4)
    rep_batch = scheduled(task_batch(args_info(7, 2)), 5, 6, 0, 1)
    rep_completed = completed(1, 0, 5, 5, batch_meta(4096, 300), exception("RUNTIME_ERROR", "bad sample \u00fc"), "Traceback ...")

    # Each message shape, accepted.
    c.accept("ScheduledSampleRange", "a task for samples 10..20 of iteration 1, slice 2..8", rep_range)
    c.accept("ScheduledBatchInfo", "a batch task whose callback receives a BatchInfo", rep_batch)
    c.accept("ScheduledBatchNoArgument", "a batch task whose callback takes no argument", scheduled(task_batch(args_none())))
    c.accept("ScheduledBatchIntArgument", "a batch task whose callback receives an int", scheduled(task_batch(args_int(42))))
    c.accept("CompletedFull", "a result with batch meta, a runtime error and a traceback", rep_completed)
    c.accept("CompletedMinimal", "a result with no meta, no exception and no traceback", completed())
    c.accept(
        "CompletedStopIteration", "a result that ends the epoch", completed(3, meta=None, exc=exception("STOP_ITERATION", ""))
    )
    c.accept("CompletedMetaOnly", "a successful result: batch meta, nothing else", completed(meta=batch_meta(0, 128)))

    # SampleRange rules (shared with DALI): a non-negative range, a slice inside it.
    c.accept("RangeEmpty", "an empty range with an empty slice", scheduled(task_range(sample_range(5, 5, 0, 0, 0, 0))))
    c.accept(
        "RangeSliceAtEnd",
        "a slice that is empty at the very end of the range",
        scheduled(task_range(sample_range(0, 4, 0, 0, 4, 4))),
    )
    c.accept(
        "RangeWidest",
        "the widest range an int64 allows",
        scheduled(task_range(sample_range(0, I64_MAX, I64_MAX, I64_MAX, 0, I64_MAX))),
    )
    c.accept("RangeAtMaximum", "an empty range at the largest int64", scheduled(task_range(sample_range(I64_MAX, I64_MAX))))
    bad_ranges = {
        "RangeStartNegative": ("a range that starts at -1", sample_range(-1, 4)),
        "RangeStartMinimum": ("a range that starts at the smallest int64", sample_range(I64_MIN, 0)),
        "RangeEndBeforeStart": ("a range whose end (4) is before its start (5)", sample_range(5, 4)),
        "RangeIterationNegative": ("a range with iteration -1", sample_range(0, 4, -1)),
        "RangeEpochNegative": ("a range with epoch -1", sample_range(0, 4, 0, -1)),
        "RangeSliceStartNegative": ("a slice that starts at -1", sample_range(0, 4, 0, 0, -1, 2)),
        "RangeSliceStartBeyondRange": ("a slice that starts past the range's length", sample_range(0, 4, 0, 0, 5, 5)),
        "RangeSliceEndBeforeSliceStart": ("a slice whose end is before its start", sample_range(0, 4, 0, 0, 3, 2)),
        "RangeSliceEndBeyondRange": ("a slice that ends past the range's length", sample_range(10, 14, 0, 0, 0, 5)),
    }
    for name, (what, rng) in bad_ranges.items():
        c.reject(name, what, scheduled(task_range(rng)).data, "invalid-value")
    cut = scheduled(task_range(sample_range(-1, 4))).data
    c.reject(
        "RangeRulesAfterFields",
        "a range breaking a rule, cut short in its last field: truncation is found first",
        cut[:-1],
        "truncated",
    )

    # BatchMeta: the batch's bytes end within 64 bits.
    c.accept("MetaEndsAtU64Max", "batch meta whose end is exactly 2**64-1", completed(meta=batch_meta(U64_MAX - 10, 10)))
    c.accept("MetaLargest", "batch meta with the largest offset and size 0", completed(meta=batch_meta(U64_MAX, 0)))
    c.reject(
        "MetaOverflows", "batch meta whose offset + size is 2**64", completed(meta=batch_meta(U64_MAX, 1)).data, "invalid-value"
    )
    c.reject(
        "MetaOverflowsFar",
        "batch meta whose offset and size are both 2**64-1",
        completed(meta=batch_meta(U64_MAX, U64_MAX)).data,
        "invalid-value",
    )

    # Booleans are 0 or 1; anything else would be a second spelling of true.
    for byte in (2, 0x80, 0xFF):
        c.reject(
            f"MetaFlagByte{byte:02X}",
            f"the meta presence byte is {byte}",
            _completed_head() + bytes([byte]) + u64(0, 0) + b"\x00\x00",
            "invalid-value",
        )
        tail = _completed_head() + b"\x00\x00" + bytes([byte]) + text(b"x")
        c.reject(f"TracebackFlagByte{byte:02X}", f"the traceback presence byte is {byte}", tail, "invalid-value")

    # Every enum value, and the first values beyond.
    for name, value in TASK_KINDS.items():
        task = task_range(sample_range()) if name == "SAMPLE_RANGE" else task_batch(args_none())
        c.accept(f"TaskKind{value}", f"task kind {value} ({name})", scheduled(task))
    for name, value in BATCH_ARG_KINDS.items():
        args = {"NONE": args_none(), "INT": args_int(-1), "BATCH_INFO": args_info(0, 0)}[name]
        c.accept(f"BatchArgKind{value}", f"batch argument kind {value} ({name})", scheduled(task_batch(args)))
    for name, value in EXCEPTION_KINDS.items():
        c.accept(
            f"ExceptionKind{value}",
            f"exception kind {value} ({name})",
            completed(exc=exception(name, None if name == "NONE" else "m")),
        )
    c.accept(
        f"MessageType{MESSAGE_TYPES['SCHEDULED_TASK']}", "message type 1 (SCHEDULED_TASK)", scheduled(task_batch(args_none()))
    )
    c.accept(f"MessageType{MESSAGE_TYPES['COMPLETED_TASK']}", "message type 2 (COMPLETED_TASK)", completed())
    for value in (0, 3, 0x80, 0xFF):
        c.reject(
            f"MessageType{value:02X}", f"message type byte {value}, not a MessageType", bytes([value]) + bytes(40), "unknown-tag"
        )
    for value in (2, 0xFF):
        c.reject(
            f"TaskKind{value:02X}Unknown",
            f"task kind byte {value}, not a TaskKind",
            _scheduled_head() + bytes([value]) + bytes(48),
            "unknown-tag",
        )
    for value in (3, 0xFF):
        data = _scheduled_head() + b"\x01" + bytes([value]) + bytes(16)
        c.reject(f"BatchArgKind{value:02X}Unknown", f"batch argument kind byte {value}, not a BatchArgKind", data, "unknown-tag")
    for value in (3, 0xFF):
        data = _completed_head() + b"\x00" + bytes([value]) + text(b"m") + b"\x00"
        c.reject(f"ExceptionKind{value:02X}Unknown", f"exception kind byte {value}, not an ExceptionKind", data, "unknown-tag")

    # Integer fields at both ends of their range (no rule restricts them).
    for label, lo_hi in (("Min", I64_MIN), ("Max", I64_MAX)):
        c.accept(
            f"ScheduledCounters{label}",
            f"every scheduled-task counter at {lo_hi}",
            scheduled(task_batch(args_none()), lo_hi, lo_hi, lo_hi, lo_hi),
        )
        c.accept(f"CompletedCounters{label}", f"every completed-task counter at {lo_hi}", completed(lo_hi, lo_hi, lo_hi, lo_hi))
        c.accept(f"IntArgument{label}", f"a batch int argument of {lo_hi}", scheduled(task_batch(args_int(lo_hi))))
        c.accept(f"BatchInfo{label}", f"a BatchInfo with both fields at {lo_hi}", scheduled(task_batch(args_info(lo_hi, lo_hi))))

    # Texts: UTF-8, strictly; at most MAX_TEXT_LEN bytes.
    for name, good in GOOD_TEXTS.items():
        c.accept(f"Text{name}", f"an exception message: {name}", completed(exc=exception("RUNTIME_ERROR", good)))
    c.accept("TracebackUtf8", "a traceback with non-ASCII text", completed(traceback='  File "w.py", line 3\n\u00e9'))
    for name, data in BAD_UTF8.items():
        msg = _completed_head() + b"\x00\x02" + text(data) + b"\x00"
        c.reject(f"BadUtf8{name}", f"an exception message that is not UTF-8: {data.hex()}", msg, "invalid-value")
    stop = _completed_head() + b"\x00\x01" + text(b"\xc0\xaf") + b"\x00"
    c.reject("BadUtf8StopIteration", "a StopIteration message that is not UTF-8 (an overlong slash)", stop, "invalid-value")
    bad_tb = _completed_head() + b"\x00\x00\x01" + text(b"\xed\xa0\x80")
    c.reject("BadUtf8Traceback", "a traceback that is not UTF-8 (a surrogate)", bad_tb, "invalid-value")
    longest = "a" * MAX_TEXT_LEN
    c.accept(
        "TextAtLimit",
        f"an exception message of exactly {MAX_TEXT_LEN} bytes",
        completed(exc=exception("STOP_ITERATION", longest)),
    )
    c.accept("TracebackAtLimit", f"a traceback of exactly {MAX_TEXT_LEN} bytes", completed(traceback=longest))
    over = text(b"a" * (MAX_TEXT_LEN + 1))
    c.reject(
        "TextOverLimit",
        f"an exception message of {MAX_TEXT_LEN + 1} bytes",
        _completed_head() + b"\x00\x02" + over + b"\x00",
        "limit",
    )
    c.reject(
        "TracebackOverLimit", f"a traceback of {MAX_TEXT_LEN + 1} bytes", _completed_head() + b"\x00\x00\x01" + over, "limit"
    )
    stop_over = _completed_head() + b"\x00\x01" + over + b"\x00"
    c.reject("StopIterationOverLimit", f"a StopIteration message of {MAX_TEXT_LEN + 1} bytes", stop_over, "limit")
    c.reject(
        "TextLengthOverLimitAlone",
        "a message length over the limit with no bytes after it: the limit is checked before the bytes",
        _completed_head() + b"\x00\x02" + u32(MAX_TEXT_LEN + 1),
        "limit",
    )
    c.reject("TextLengthU32Max", "a message length of 2**32-1", _completed_head() + b"\x00\x02" + u32(0xFFFFFFFF), "limit")
    c.reject(
        "TextLengthBeyondInput",
        "a message length within the limit but beyond the input",
        _completed_head() + b"\x00\x02" + u32(100) + b"abc",
        "truncated",
    )

    # Trailing bytes and foreign inputs.
    c.reject("TrailingByteScheduled", "one byte after a complete scheduled task", rep_range.data + b"\x00", "trailing-bytes")
    c.reject("TrailingBytesCompleted", "a second message after a complete result", completed().data * 2, "trailing-bytes")
    c.reject(
        "PickleProtocol4",
        "a pickle (protocol 4) of a dict, as DALI sends today",
        bytes.fromhex("80049505000000000000007d942e"),
        "unknown-tag",
    )
    c.reject("ZipArchive", "the start of a zip archive, as torch.save writes", b"PK\x03\x04" + bytes(26), "unknown-tag")

    _message_writes(c, rep_range.value, rep_completed.value)

    c.truncations("ScheduledRange", "a scheduled sample-range task", rep_range)
    c.truncations("ScheduledBatch", "a scheduled batch task with a BatchInfo", rep_batch)
    c.truncations("ScheduledBatchInt", "a scheduled batch task with an int argument", scheduled(task_batch(args_int(-2))))
    c.truncations("Completed", "a result with meta, an exception and a traceback", rep_completed)
    c.truncations(
        "CompletedStopIteration", "a result that ends the epoch with a message", completed(exc=exception("STOP_ITERATION", "end"))
    )
    return c


def _message_writes(c: Corpus, sched: dict[str, Any], done: dict[str, Any]) -> None:
    """Values no shm-message writer may encode."""
    batch_task = scheduled(task_batch(args_int(1))).value
    refusals: list[tuple[str, str, Any, str]] = [
        ("NotAnObject", "a list where a message belongs", [], "write-type"),
        ("MissingType", "a message without its type", {}, "write-type"),
        ("TypeUnknownName", "a message type that is not a MessageType name", {**done, "type": "NOPE"}, "write-value"),
        ("TypeUnknownNumber", "a message type number the enum lacks", {**done, "type": 3}, "write-value"),
        ("TypeBool", "true as the message type", {**done, "type": True}, "write-type"),
        ("CounterBool", "true as an int64 counter", {**sched, "context_i": True}, "write-type"),
        ("CounterFloat", "1.5 as an int64 counter", {**sched, "context_i": 1.5}, "write-type"),
        ("CounterString", "a string as an int64 counter", {**sched, "context_i": "1"}, "write-type"),
        ("CounterAboveInt64", "2**63 as an int64 counter", {**done, "worker_id": I64_MAX + 1}, "write-value"),
        ("CounterBelowInt64", "-2**63-1 as an int64 counter", {**done, "minibatch_i": I64_MIN - 1}, "write-value"),
        ("MissingCounter", "a result without minibatch_i", {k: v for k, v in done.items() if k != "minibatch_i"}, "write-type"),
        ("TaskNotObject", "a string where the task belongs", {**sched, "task": "BATCH"}, "write-type"),
        (
            "TaskKindUnknown",
            "a task kind that is not a TaskKind",
            {**sched, "task": {**sched["task"], "kind": "NOPE"}},
            "write-value",
        ),
        (
            "RangeEndBeforeStart",
            "a range whose end is before its start",
            scheduled(task_range(sample_range(5, 4))).value,
            "write-value",
        ),
        (
            "RangeSliceOutside",
            "a slice past the range's end",
            scheduled(task_range(sample_range(0, 4, 0, 0, 0, 5))).value,
            "write-value",
        ),
        (
            "ArgKindUnknown",
            "a batch argument kind that is not a BatchArgKind",
            {**batch_task, "task": {"kind": "BATCH", "args": {"kind": 7}}},
            "write-value",
        ),
        (
            "ArgValueBool",
            "true as the int batch argument",
            {**batch_task, "task": {"kind": "BATCH", "args": {"kind": "INT", "value": True}}},
            "write-type",
        ),
        ("MetaNotObject", "a string as the batch meta", {**done, "meta": "x"}, "write-type"),
        ("MetaNegative", "a negative batch offset", {**done, "meta": {"offset": -1, "size": 0}}, "write-value"),
        ("MetaOverflows", "batch meta whose end is 2**64", {**done, "meta": {"offset": U64_MAX, "size": 1}}, "write-value"),
        (
            "MessageNotString",
            "a number as the exception message",
            {**done, "exception": {"kind": "RUNTIME_ERROR", "message": 5}},
            "write-type",
        ),
        ("MessageMissing", "a runtime error without its message", {**done, "exception": {"kind": "RUNTIME_ERROR"}}, "write-type"),
        ("TracebackBytes", "bytes as the traceback", {**done, "traceback": {"$bytes": "eA=="}}, "write-type"),
    ]
    for name, what, value, kind in refusals:
        c.refuse_write(name, what, value, kind)


# -- shm-samples-meta --------------------------------------------------------------------------------------

SAMPLE_KINDS = {"ARRAY": 0, "TUPLE": 1, "LIST": 2}
MAX_DEPTH = 64
MAX_SAMPLES = 1 << 24
MAX_NDIM = 64
MAX_DTYPE_LEN = 16
# numpy's dtype.str for the plain numeric kinds; 1-byte types take '|', wider ones '<' or '>'.
ITEMSIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}


def dtype_names() -> list[str]:
    names = []
    for kind, sizes in ITEMSIZES.items():
        for size in sizes:
            names += [f"|{kind}{size}"] if size == 1 else [f"<{kind}{size}", f">{kind}{size}"]
    return names


def array(dtype: str, shape: list[int], offset: int = 0, nbytes: int | None = None, raw_dtype: bytes | None = None) -> Piece:
    if nbytes is None:
        nbytes = int(dtype[2:])
        for dim in shape:
            nbytes *= dim
    dtype_bytes = dtype.encode("utf-8") if raw_dtype is None else raw_dtype
    data = b"\x00" + u64(offset, nbytes) + text(dtype_bytes) + u32(len(shape)) + u64(*shape)
    return Piece(data, {"kind": "ARRAY", "offset": offset, "nbytes": nbytes, "dtype": dtype, "shape": shape})


def group(kind: str, items: list[Piece]) -> Piece:
    data = bytes([SAMPLE_KINDS[kind]]) + u64(len(items)) + b"".join(i.data for i in items)
    return Piece(data, {"kind": kind, "items": [i.value for i in items]})


def batch(samples: list[Piece]) -> Piece:
    return Piece(u64(len(samples)) + b"".join(s.data for s in samples), {"samples": [s.value for s in samples]})


def nested(depth: int, kind: str = "TUPLE") -> Piece:
    """An array wrapped so that it sits at level ``depth`` (a top-level sample is level 1)."""
    sample = array("|u1", [1])
    for _ in range(depth - 1):
        sample = group(kind, [sample])
    return sample


def shm_samples_meta() -> Corpus:
    c = Corpus("shm-samples-meta", 1)
    rep = batch(
        [
            array("<f4", [2, 3]),
            group("TUPLE", [array("|b1", [], offset=128), array("<i8", [4], offset=256)]),
            group("LIST", []),
        ]
    )
    c.accept("Representative", "an array, a tuple of two arrays and an empty list", rep)
    c.accept("EmptyBatch", "a batch of no samples", batch([]))
    c.accept("OneArray", "one float32 array of shape (2, 3)", batch([array("<f4", [2, 3])]))
    c.accept("ScalarArray", "a 0-dimensional array: nbytes is the itemsize", batch([array("<f8", [])]))
    c.accept("ZeroSizeArray", "an array with a zero dimension holds no bytes", batch([array("<f4", [0, 5])]))
    c.accept(
        "ZeroSizeHugeDimension", "a zero dimension before a 2**64-1 one: the product stays 0", batch([array("<f4", [0, U64_MAX])])
    )
    c.accept("EmptyTuple", "a tuple of no samples", batch([group("TUPLE", [])]))
    c.accept("EmptyList", "a list of no samples", batch([group("LIST", [])]))
    c.accept(
        "MixedNesting",
        "lists and tuples inside each other",
        batch([group("LIST", [group("TUPLE", [array("|u1", [3])]), group("LIST", [])])]),
    )

    # dtypes: every accepted spelling, and refused ones.
    for name in dtype_names():
        label = {"|": "", "<": "Little", ">": "Big"}[name[0]] + name[1:].upper()
        c.accept(f"Dtype{label}", f"an array of dtype {name}", batch([array(name, [3])]))
    bad_dtypes = {
        "Object": "|O",
        "Unicode": "<U4",
        "Bytes": "|S4",
        "Datetime": "<M8",
        "Float128": "<f16",
        "Float8": "|f1",
        "Int3": "<i3",
        "Complex4": "<c4",
        "NativeOrder": "=f4",
        "NoOrder": "f4",
        "PipeOnWide": "|i4",
        "LittleOnByte": "<i1",
        "BigOnBool": ">b1",
        "TrailingSpace": "<f4 ",
        "UpperCase": "<F4",
        "LeadingZero": "<f08",
        "Empty": "",
        "Structured": "[('a','<f4')]",
    }
    for label, dtype in bad_dtypes.items():
        # nbytes as a lax reader would compute it, so that only the dtype rule can refuse the vector.
        lax_itemsize = int("".join(ch for ch in dtype if ch.isdigit()) or 1)
        refused = array("|u1", [4], nbytes=4 * lax_itemsize, raw_dtype=dtype.encode())
        c.reject(
            f"DtypeRefused{label}",
            f"dtype {dtype!r} is not a plain numeric dtype in numpy's spelling",
            batch([refused]).data,
            "invalid-value",
        )
    c.reject("DtypeNotUtf8", "a dtype that is not UTF-8", batch([array("|u1", [4], raw_dtype=b"<f\xff")]).data, "invalid-value")
    at_limit = "<f4" + " " * (MAX_DTYPE_LEN - 3)
    c.reject(
        "DtypeAtLengthLimit",
        f"a {MAX_DTYPE_LEN}-byte dtype is read, then refused as unsupported",
        batch([array("|u1", [4], raw_dtype=at_limit.encode())]).data,
        "invalid-value",
    )
    c.reject(
        "DtypeOverLengthLimit",
        f"a {MAX_DTYPE_LEN + 1}-byte dtype",
        batch([array("|u1", [4], raw_dtype=b"<" * (MAX_DTYPE_LEN + 1))]).data,
        "limit",
    )
    c.reject("DtypeLengthU32Max", "a dtype length of 2**32-1", u64(1) + b"\x00" + u64(0, 0) + u32(0xFFFFFFFF), "limit")

    # Size, placement and the chunk.
    c.reject(
        "NbytesTooSmall",
        "nbytes one less than shape and dtype give",
        batch([array("<f4", [2, 3], nbytes=23)]).data,
        "invalid-value",
    )
    c.reject(
        "NbytesTooLarge",
        "nbytes one more than shape and dtype give",
        batch([array("<f4", [2, 3], nbytes=25)]).data,
        "invalid-value",
    )
    c.accept("OffsetAligned", "a float64 array at offset 8", batch([array("<f8", [1], offset=8)]))
    c.accept("OffsetUnalignedByte", "a 1-byte dtype may start at any offset", batch([array("|u1", [1], offset=3)]))
    c.reject("OffsetMisaligned", "a float32 array at offset 2", batch([array("<f4", [1], offset=2)]).data, "invalid-value")
    c.reject(
        "OffsetMisalignedComplex",
        "a complex128 array at offset 8 (its itemsize is 16)",
        batch([array("<c16", [1], offset=8)]).data,
        "invalid-value",
    )
    c.accept("OffsetLargest", "the largest aligned offset, no chunk size given", batch([array("<f8", [1], offset=U64_MAX - 7)]))
    c.accept(
        "ProductAtU64Limit",
        "uint8 of shape (2**32, 2**32-1): the byte count fits 64 bits",
        batch([array("|u1", [1 << 32, (1 << 32) - 1])]),
    )
    c.reject(
        "ProductOverflows",
        "uint8 of shape (2**32, 2**32): 2**64 bytes",
        batch([array("|u1", [1 << 32, 1 << 32], nbytes=0)]).data,
        "invalid-value",
    )
    c.accept("ItemsizeProductAtLimit", "float64 of shape (2**61-1,)", batch([array("<f8", [(1 << 61) - 1])]))
    c.reject(
        "ItemsizeProductOverflows",
        "float64 of shape (2**61,): 2**64 bytes",
        batch([array("<f8", [1 << 61], nbytes=0)]).data,
        "invalid-value",
    )
    overflow_then_zero = batch([array("|u1", [1 << 63, 4, 0], nbytes=0)])
    c.either(
        "ProductOverflowsBeforeZero",
        "shape (2**63, 4, 0): a partial product overflows 64 bits, the full product is 0",
        overflow_then_zero.data,
        [{"accept": overflow_then_zero.value}, {"reject": "invalid-value"}],
    )
    chunk = {"chunk_size": 24}
    c.accept("ChunkExactFit", "an array ending exactly at the end of the chunk", batch([array("<f4", [2, 3])]), chunk)
    c.reject(
        "ChunkOneBeyond",
        "an array ending one byte past the chunk",
        batch([array("<f4", [2, 3])]).data,
        "invalid-value",
        {"chunk_size": 23},
    )
    c.accept(
        "ChunkEmptyArrayAtEnd", "an empty array placed at the end of the chunk", batch([array("<f4", [0], offset=24)]), chunk
    )
    c.reject(
        "ChunkEmptyArrayBeyond",
        "an empty array placed past the end of the chunk",
        batch([array("<f4", [0], offset=28)]).data,
        "invalid-value",
        chunk,
    )
    c.reject(
        "ChunkNestedBeyond",
        "an array inside a tuple lying past the chunk",
        batch([group("TUPLE", [array("<f4", [8])])]).data,
        "invalid-value",
        chunk,
    )
    c.reject(
        "ChunkOffsetHuge",
        "offset near 2**64 with a chunk: the sum must not wrap",
        batch([array("|u1", [16], offset=U64_MAX - 7)]).data,
        "invalid-value",
        chunk,
    )

    # Limits: nesting, dimensions, counts.
    c.accept("DepthAtLimit", f"an array nested in tuples at level {MAX_DEPTH}", batch([nested(MAX_DEPTH)]))
    c.accept("DepthAtLimitLists", f"an array nested in lists at level {MAX_DEPTH}", batch([nested(MAX_DEPTH, "LIST")]))
    c.reject(
        "DepthOverLimit", f"an array nested in tuples at level {MAX_DEPTH + 1}", batch([nested(MAX_DEPTH + 1)]).data, "limit"
    )
    c.reject("DepthOverLimitEmpty", f"an empty list at level {MAX_DEPTH + 1}", batch([nested_group(MAX_DEPTH + 1)]).data, "limit")
    c.accept("NdimAtLimit", f"an array of {MAX_NDIM} dimensions", batch([array("<f4", [1] * MAX_NDIM)]))
    c.reject("NdimOverLimit", f"an array of {MAX_NDIM + 1} dimensions", batch([array("<f4", [1] * (MAX_NDIM + 1))]).data, "limit")
    c.reject("NdimU32Max", "a dimension count of 2**32-1", u64(1) + b"\x00" + u64(0, 4) + text(b"<f4") + u32(0xFFFFFFFF), "limit")
    c.reject(
        "NdimBeyondInput",
        "3 dimensions declared, 1 present",
        u64(1) + b"\x00" + u64(0, 4) + text(b"<f4") + u32(3) + u64(1),
        "truncated",
    )
    c.reject("CountOverLimit", f"a batch of {MAX_SAMPLES + 1} samples declared", u64(MAX_SAMPLES + 1), "limit")
    c.reject("CountU64Max", "a batch of 2**64-1 samples declared", u64(U64_MAX), "limit")
    c.reject("CountAtLimitBeyondInput", f"a batch of {MAX_SAMPLES} samples declared, none present", u64(MAX_SAMPLES), "truncated")
    c.reject("CountBeyondInput", "two samples declared, one present", u64(2) + group("LIST", []).data, "truncated")
    c.reject("ItemsOverLimit", f"a tuple of {MAX_SAMPLES + 1} items declared", u64(1) + b"\x01" + u64(MAX_SAMPLES + 1), "limit")
    c.reject(
        "ListItemsOverLimit", f"a list of {MAX_SAMPLES + 1} items declared", u64(1) + b"\x02" + u64(MAX_SAMPLES + 1), "limit"
    )
    c.reject("ItemsBeyondInput", "a tuple of 1000 items declared, none present", u64(1) + b"\x01" + u64(1000), "truncated")
    c.reject("ListItemsBeyondInput", "a list of 1000 items declared, none present", u64(1) + b"\x02" + u64(1000), "truncated")
    bad_first = u64(3) + b"\x07" + bytes(10)
    c.either(
        "CountBeyondInputBadFirst",
        "three samples declared, too few bytes for them, the first one of an unknown kind",
        bad_first,
        [{"reject": "truncated"}, {"reject": "unknown-tag"}],
    )

    # Order: a record's rules run once all its fields are read.
    cut = batch([array("|u1", [4], raw_dtype=b"|O")]).data[:-1]
    c.reject(
        "ArrayRulesAfterFields",
        "an array with a refused dtype, cut short in its shape: truncation is found first",
        cut,
        "truncated",
    )

    # Every kind, and the first values beyond.
    for name, value in SAMPLE_KINDS.items():
        sample = array("|u1", [2]) if name == "ARRAY" else group(name, [array("|u1", [2])])
        c.accept(f"SampleKind{value}", f"sample kind {value} ({name})", batch([sample]))
    for value in (3, 0xFF):
        c.reject(
            f"SampleKind{value:02X}Unknown",
            f"sample kind byte {value}, not a SampleKind",
            u64(1) + bytes([value]) + bytes(40),
            "unknown-tag",
        )
    c.reject("TrailingByte", "one byte after a complete batch", rep.data + b"\x00", "trailing-bytes")
    array_value = array("<f4", [2, 3]).value
    refusals: list[tuple[str, str, Any, str]] = [
        ("SamplesNotList", "an object where the list of samples belongs", {"samples": {}}, "write-type"),
        ("KindUnknown", "a sample kind that is not a SampleKind", {"samples": [{"kind": "SET", "items": []}]}, "write-value"),
        ("ItemsMissing", "a tuple without its items", {"samples": [{"kind": "TUPLE"}]}, "write-type"),
        ("DtypeRefused", "an object dtype", {"samples": [{**array_value, "dtype": "|O", "nbytes": 48}]}, "write-value"),
        (
            "DtypeTooLong",
            f"a dtype of {MAX_DTYPE_LEN + 1} bytes",
            {"samples": [{**array_value, "dtype": "<" * 17}]},
            "write-value",
        ),
        (
            "NbytesMismatch",
            "nbytes one more than shape and dtype give",
            {"samples": [{**array_value, "nbytes": 25}]},
            "write-value",
        ),
        ("OffsetMisaligned", "a float32 array at offset 2", {"samples": [{**array_value, "offset": 2}]}, "write-value"),
        ("ShapeNotList", "a string as the shape", {"samples": [{**array_value, "shape": "2,3"}]}, "write-type"),
        ("DimensionNegative", "a dimension of -1", {"samples": [{**array_value, "shape": [-1, 3]}]}, "write-value"),
        ("DimensionFloat", "a dimension of 2.0", {"samples": [{**array_value, "shape": [2.0, 3]}]}, "write-type"),
        (
            "NdimOverLimit",
            f"an array of {MAX_NDIM + 1} dimensions",
            {"samples": [{**array_value, "shape": [1] * (MAX_NDIM + 1), "nbytes": 4}]},
            "write-value",
        ),
        (
            "ProductOverflows",
            "uint8 of shape (2**32, 2**32)",
            {"samples": [array("|u1", [1 << 32, 1 << 32], nbytes=0).value]},
            "write-value",
        ),
        ("DepthOverLimit", f"an array nested at level {MAX_DEPTH + 1}", batch([nested(MAX_DEPTH + 1)]).value, "write-value"),
    ]
    for name, what, value, kind in refusals:
        c.refuse_write(name, what, value, kind)
    c.truncations("Representative", "the representative batch", rep)
    return c


def nested_group(depth: int) -> Piece:
    """An empty list at level ``depth``."""
    sample = group("LIST", [])
    for _ in range(depth - 1):
        sample = group("LIST", [sample])
    return sample


# -- shm-descriptor ----------------------------------------------------------------------------------------


def descriptor(worker_id: int = 0, shm_chunk_id: int = 0, shm_capacity: int = 4096, offset: int = 0, num_bytes: int = 0) -> Piece:
    fields = {
        "worker_id": worker_id,
        "shm_chunk_id": shm_chunk_id,
        "shm_capacity": shm_capacity,
        "offset": offset,
        "num_bytes": num_bytes,
    }
    return Piece(struct.pack("<iiQQQ", *fields.values()), fields)


def shm_descriptor() -> Corpus:
    c = Corpus("shm-descriptor", 1)
    rep = descriptor(1, 3, 8192, 4096, 100)
    c.accept("Representative", "100 bytes at offset 4096 of chunk 3 of worker 1", rep)
    c.accept("Empty", "an empty message in an empty chunk", descriptor(shm_capacity=0))
    c.accept(
        "FillsChunk",
        "a message that ends exactly at the chunk's capacity",
        descriptor(shm_capacity=4096, offset=96, num_bytes=4000),
    )
    c.reject(
        "BeyondChunk",
        "a message that ends one byte past the chunk's capacity",
        descriptor(shm_capacity=4096, offset=97, num_bytes=4000).data,
        "invalid-value",
    )
    c.reject(
        "SumWraps",
        "offset + num_bytes is 2**64: must not wrap around",
        descriptor(shm_capacity=U64_MAX, offset=1, num_bytes=U64_MAX).data,
        "invalid-value",
    )
    c.reject(
        "SumWrapsFar",
        "offset and num_bytes both 2**64-1",
        descriptor(shm_capacity=U64_MAX, offset=U64_MAX, num_bytes=U64_MAX).data,
        "invalid-value",
    )
    c.accept("LargestCapacity", "capacity, offset at 2**64-1, an empty message", descriptor(shm_capacity=U64_MAX, offset=U64_MAX))
    c.accept("LargestMessage", "a 2**64-1 byte message at offset 0", descriptor(shm_capacity=U64_MAX, num_bytes=U64_MAX))
    for field in ("worker_id", "shm_chunk_id"):
        label = "".join(p.title() for p in field.split("_"))
        c.accept(f"{label}Zero", f"{field} 0", descriptor(**{field: 0}))
        c.accept(f"{label}Max", f"{field} at the largest int32", descriptor(**{field: I32_MAX}))
        c.reject(f"{label}Negative", f"{field} -1", descriptor(**{field: -1}).data, "invalid-value")
        c.reject(f"{label}Min", f"{field} at the smallest int32", descriptor(**{field: I32_MIN}).data, "invalid-value")
    c.accept("ChunkSizeMatches", "the declared capacity equals the chunk the reader maps", rep, {"chunk_size": 8192})
    c.reject(
        "ChunkSizeSmaller",
        "the declared capacity exceeds the chunk the reader maps",
        rep.data,
        "invalid-value",
        {"chunk_size": 4096},
    )
    c.reject(
        "ChunkSizeLarger",
        "the declared capacity is smaller than the chunk the reader maps",
        rep.data,
        "invalid-value",
        {"chunk_size": 16384},
    )
    c.reject("TrailingByte", "33 bytes: one after the descriptor", rep.data + b"\x00", "trailing-bytes")
    refusals: list[tuple[str, str, Any, str]] = [
        ("NotAnObject", "a list where a descriptor belongs", [1, 3, 8192, 4096, 100], "write-type"),
        (
            "MissingField",
            "a descriptor without num_bytes",
            {k: v for k, v in rep.value.items() if k != "num_bytes"},
            "write-type",
        ),
        ("WorkerIdBool", "true as the worker id", {**rep.value, "worker_id": True}, "write-type"),
        ("WorkerIdString", "a string as the worker id", {**rep.value, "worker_id": "1"}, "write-type"),
        ("WorkerIdNegative", "worker id -1", {**rep.value, "worker_id": -1}, "write-value"),
        ("WorkerIdAboveInt32", "worker id 2**31", {**rep.value, "worker_id": I32_MAX + 1}, "write-value"),
        ("CapacityNegative", "capacity -1", {**rep.value, "shm_capacity": -1}, "write-value"),
        ("CapacityAboveU64", "capacity 2**64", {**rep.value, "shm_capacity": U64_MAX + 1}, "write-value"),
        ("BeyondChunk", "a message that ends past the capacity", {**rep.value, "num_bytes": 4097}, "write-value"),
    ]
    for name, what, value, kind in refusals:
        c.refuse_write(name, what, value, kind)
    c.truncations("Representative", "the representative descriptor", rep)
    return c


#: Every format version's corpus, as the generator writes it.
BUILDERS: tuple[Callable[[], Corpus], ...] = (shm_message, shm_samples_meta, shm_descriptor)


def generate() -> dict[str, str]:
    """Relative path -> file text, for every vector."""
    files = {}
    for build in BUILDERS:
        corpus = build()
        for name, doc in corpus.docs.items():
            files[f"{corpus.fmt}/v{corpus.version}/{name}.json"] = vector_file_text(doc)
    return files


def differences(root: Path = CORPUS_DIR) -> list[str]:
    """How the corpus under ``root`` differs from what this script writes (empty when equal)."""
    wanted = generate()
    present = {p.relative_to(root).as_posix() for p in root.rglob("*.json")} if root.is_dir() else set()
    problems = [f"missing {path}" for path in sorted(set(wanted) - present)]
    problems += [f"not generated {path}" for path in sorted(present - set(wanted))]
    for path in sorted(set(wanted) & present):
        if (root / path).read_text(encoding="utf-8") != wanted[path]:
            problems.append(f"differs {path}")
    return problems


def write(root: Path = CORPUS_DIR) -> int:
    """Write the corpus under ``root``, removing vectors no longer generated; the number of files."""
    files = generate()
    if root.is_dir():
        for stale in root.rglob("*.json"):
            if stale.relative_to(root).as_posix() not in files:
                stale.unlink()
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text(encoding="utf-8") != content:
            target.write_text(content, encoding="utf-8")
    return len(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inert.conformance._generate_vectors", description="Write the conformance corpus."
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed corpus differs from what this writes")
    args = parser.parse_args(argv)
    if args.check:
        problems = differences()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    print(f"{write()} vectors written under {CORPUS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
