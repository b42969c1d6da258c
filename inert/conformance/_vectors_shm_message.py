"""Vectors of ``shm-message``: DALI's task and result messages between a data loader and its workers."""

from __future__ import annotations

from typing import Any

from ._vectorlib import I64_MAX, I64_MIN, U64_MAX, Corpus, Piece, i64, text64, u32, u64

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
    return Piece(bytes([EXCEPTION_KINDS[kind]]) + text64(data), {"kind": kind, "message": message or ""})


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
    data += b"\x00" if traceback is None else b"\x01" + text64(traceback.encode("utf-8"))
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


def build() -> Corpus:
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
    for name, what, rng, rule in (
        ("RangeEpochBeforeOrder", "epoch -1 and end 4 before start 5", sample_range(5, 4, 0, -1),
         "shm-message.range-non-negative"),
        ("RangeOrderBeforeSlice", "end 4 before start 5, and a slice ending at 9", sample_range(5, 4, 0, 0, 0, 9),
         "shm-message.range-order"),
    ):
        c.reject(name, f"{what}: the rule listed first decides", scheduled(task_range(rng)).data, "invalid-value",
                 rule=rule)
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
        tail = _completed_head() + b"\x00\x00" + bytes([byte]) + text64(b"x")
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
        data = _completed_head() + b"\x00" + bytes([value]) + text64(b"m") + b"\x00"
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
        msg = _completed_head() + b"\x00\x02" + text64(data) + b"\x00"
        c.reject(f"BadUtf8{name}", f"an exception message that is not UTF-8: {data.hex()}", msg, "invalid-value")
    stop = _completed_head() + b"\x00\x01" + text64(b"\xc0\xaf") + b"\x00"
    c.reject("BadUtf8StopIteration", "a StopIteration message that is not UTF-8 (an overlong slash)", stop, "invalid-value")
    bad_tb = _completed_head() + b"\x00\x00\x01" + text64(b"\xed\xa0\x80")
    c.reject("BadUtf8Traceback", "a traceback that is not UTF-8 (a surrogate)", bad_tb, "invalid-value")
    longest = "a" * MAX_TEXT_LEN
    c.accept(
        "TextAtLimit",
        f"an exception message of exactly {MAX_TEXT_LEN} bytes",
        completed(exc=exception("STOP_ITERATION", longest)),
    )
    c.accept("TracebackAtLimit", f"a traceback of exactly {MAX_TEXT_LEN} bytes", completed(traceback=longest))
    over = text64(b"a" * (MAX_TEXT_LEN + 1))
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
        _completed_head() + b"\x00\x02" + u64(MAX_TEXT_LEN + 1),
        "limit",
    )
    c.reject("TextLengthAtLimitAlone", "a message length of the limit itself with no bytes after it: cut short",
             _completed_head() + b"\x00\x02" + u64(MAX_TEXT_LEN), "truncated", rule="grammar.truncated")
    c.reject("TextLengthU64Max", "a message length of 2**64-1", _completed_head() + b"\x00\x02" + u64(U64_MAX), "limit")
    c.reject(
        "TextLengthHighWord",
        "a message length of 2**32 + 1: a reader of a 32-bit length would see 1",
        _completed_head() + b"\x00\x02" + u64((1 << 32) + 1) + b"a\x00",
        "limit",
    )
    c.reject(
        "TracebackLengthHighWord",
        "a traceback length of 2**40: its low 32 bits are 0",
        _completed_head() + b"\x00\x00\x01" + u64(1 << 40),
        "limit",
    )
    c.reject(
        "TextLengthBeyondInput",
        "a message length within the limit but beyond the input",
        _completed_head() + b"\x00\x02" + u64(100) + b"abc",
        "truncated",
    )
    c.reject(
        "TextLength32Bit",
        "a message written with a 32-bit length (Inert before the layout fix): the u64 length takes the text's first bytes",
        _completed_head() + b"\x00\x02" + u32(4) + b"okay" + b"\x00",
        "limit",
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
    _unknown_key_writes(c, rep_completed.value)
    c.malformed_values("ScheduledRange", "a scheduled sample-range task", rep_range.value)
    c.malformed_values("ScheduledBatchInfo", "a scheduled batch task with a BatchInfo", rep_batch.value)
    c.malformed_values(
        "ScheduledBatchInt", "a scheduled batch task with an int argument", scheduled(task_batch(args_int(-2))).value
    )
    c.malformed_values("Completed", "a result with meta, an exception and a traceback", rep_completed.value)

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
        ("TypeUnknownName", "a message type that is not a MessageType name", {**done, "type": "NOPE"}, "write-value"),
        ("TypeUnknownNumber", "a message type number the enum lacks", {**done, "type": 3}, "write-value"),
        ("TypeBool", "true as the message type", {**done, "type": True}, "write-type"),
        ("CounterBool", "true as an int64 counter", {**sched, "context_i": True}, "write-type"),
        ("CounterFloat", "1.5 as an int64 counter", {**sched, "context_i": 1.5}, "write-type"),
        ("CounterWholeFloat", "1.0 as an int64 counter: a float, even whole", {**sched, "context_i": 1.0}, "write-type"),
        ("CounterString", "a string as an int64 counter", {**sched, "context_i": "1"}, "write-type"),
        ("CounterAboveInt64", "2**63 as an int64 counter", {**done, "worker_id": I64_MAX + 1}, "write-value"),
        ("CounterBelowInt64", "-2**63-1 as an int64 counter", {**done, "minibatch_i": I64_MIN - 1}, "write-value"),
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
        (
            "StopIterationMessageMissing",
            "a StopIteration without its message",
            {**done, "exception": {"kind": "STOP_ITERATION"}},
            "write-type",
        ),
        ("MetaNegative", "a negative batch offset", {**done, "meta": {"offset": -1, "size": 0}}, "write-value"),
        ("MetaOverflows", "batch meta whose end is 2**64", {**done, "meta": {"offset": U64_MAX, "size": 1}}, "write-value"),
        (
            "MessageNotString",
            "a number as the exception message",
            {**done, "exception": {"kind": "RUNTIME_ERROR", "message": 5}},
            "write-type",
        ),
        ("TracebackBytes", "bytes as the traceback", {**done, "traceback": {"$bytes": "eA=="}}, "write-type"),
    ]
    for name, what, value, kind in refusals:
        c.refuse_write(name, what, value, kind)


def _unknown_key_writes(c: Corpus, done: dict[str, Any]) -> None:
    """Keys a record does not have: refused as write-value, at the record's level and below it."""
    c.refuse_write("UnknownKey", "a key the CompletedTask does not have beside all of its own", {**done, "minibatch": 0},
                   "write-value")
    c.refuse_write("UnknownKeyNested", "a key the batch meta does not have", {**done, "meta": {**done["meta"], "sise": 1}},
                   "write-value")
    c.refuse_write("UnknownKeyEmptyCase", "a message given with an exception kind that carries none",
                   {**done, "exception": {"kind": "NONE", "message": "x"}}, "write-value")
