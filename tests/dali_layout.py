"""A byte-level writer and reader of the binary layout published for DALI's shared-memory messages.

Written from the layout as the pull request in ``../shared/seeds/shm-messages-pr.txt``
describes it (``_BinaryWriter``/``_BinaryReader`` in DALI's ``shared_batch.py``),
not from Inert's grammar or codecs, so that a test can hold Inert to the
published bytes rather than to itself::

    ScheduledTask = u8 1 | q context_i | q scheduled_i | q epoch_start | q minibatch_i
                    | u8 kind: 0 -> 6q SampleRange(start, end, iteration, epoch, slice_start, slice_end)
                               1 -> u8 arg: 0 -> () | 1 -> q int | 2 -> qq BatchInfo(iteration, epoch_idx)
    CompletedTask = u8 2 | q worker_id | q context_i | q scheduled_i | q minibatch_i
                    | ? has_meta [QQ meta_offset, meta_size]
                    | u8 exc: 0 none | 1 StopIteration(str) | 2 RuntimeError(str)
                    | ? has_tb [str traceback]
    samples meta  = Q count | sample*
    sample        = u8 0 -> QQ offset, nbytes | str dtype.str | I ndim | ndim*Q shape
                  | u8 1/2 -> Q n | sample*          (tuple / list, nesting limited to 64)
    str           = Q byte length | UTF-8 bytes

All little-endian.  The reader behaves as the published one is described:
bounds checked, unknown tags, trailing bytes and too deep nesting refused
(``RuntimeError("Malformed shared memory message: ...")``), but bad UTF-8 is
replaced and any non-zero flag byte is true.

Values are plain data shaped like DALI's objects: a ScheduledTask is
``Scheduled(context_i, scheduled_i, epoch_start, minibatch_i, sample_range,
batch_args)`` with ``sample_range`` a 6-tuple or None and ``batch_args`` ``()``,
``(int,)`` or ``(("BatchInfo", iteration, epoch_idx),)``; a CompletedTask is
``Completed(worker_id, context_i, scheduled_i, minibatch_i, batch_meta,
exception, traceback_str)`` with ``batch_meta`` ``(offset, size)`` or None and
``exception`` ``("StopIteration" | "RuntimeError", message)`` or None; a
samples meta is a list whose arrays are ``Array(offset, nbytes, dtype, shape)``
and whose tuples and lists are Python tuples and lists.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

MAX_NESTING = 64
_EXCEPTIONS = ("StopIteration", "RuntimeError")


class Scheduled(NamedTuple):
    context_i: int
    scheduled_i: int
    epoch_start: int
    minibatch_i: int
    sample_range: tuple[int, int, int, int, int, int] | None
    batch_args: tuple[Any, ...]


class Completed(NamedTuple):
    worker_id: int
    context_i: int
    scheduled_i: int
    minibatch_i: int
    batch_meta: tuple[int, int] | None
    exception: tuple[str, str] | None
    traceback_str: str | None


class Array(NamedTuple):
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]


# --- writing ----------------------------------------------------------------------------------------


def _str(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def write_message(message: Scheduled | Completed) -> bytes:
    if isinstance(message, Scheduled):
        out = struct.pack("<Bqqqq", 1, message.context_i, message.scheduled_i, message.epoch_start, message.minibatch_i)
        if message.sample_range is not None:
            return out + struct.pack("<B6q", 0, *message.sample_range)
        out += b"\x01"
        if not message.batch_args:
            return out + b"\x00"
        (arg,) = message.batch_args
        if isinstance(arg, tuple):
            _, iteration, epoch_idx = arg
            return out + struct.pack("<Bqq", 2, iteration, epoch_idx)
        return out + struct.pack("<Bq", 1, arg)
    out = struct.pack("<Bqqqq", 2, message.worker_id, message.context_i, message.scheduled_i, message.minibatch_i)
    if message.batch_meta is None:
        out += struct.pack("<?", False)
    else:
        out += struct.pack("<?QQ", True, *message.batch_meta)
    if message.exception is None:
        out += b"\x00"
    else:
        name, text = message.exception
        out += bytes([_EXCEPTIONS.index(name) + 1]) + _str(text)
    if message.traceback_str is None:
        return out + struct.pack("<?", False)
    return out + struct.pack("<?", True) + _str(message.traceback_str)


def _write_sample(sample: Any) -> bytes:
    if isinstance(sample, Array):
        head = struct.pack("<BQQ", 0, sample.offset, sample.nbytes) + _str(sample.dtype)
        return head + struct.pack(f"<I{len(sample.shape)}Q", len(sample.shape), *sample.shape)
    kind = 1 if isinstance(sample, tuple) else 2
    return struct.pack("<BQ", kind, len(sample)) + b"".join(_write_sample(part) for part in sample)


def write_samples_meta(samples: list[Any]) -> bytes:
    return struct.pack("<Q", len(samples)) + b"".join(_write_sample(s) for s in samples)


# --- reading ----------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def malformed(self, what: str) -> RuntimeError:
        return RuntimeError(f"Malformed shared memory message: {what} at byte {self.at}")

    def take(self, fmt: str) -> tuple[Any, ...]:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise self.malformed("truncated")
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return values

    def one(self, fmt: str) -> Any:
        return self.take(fmt)[0]

    def str(self) -> str:
        length = self.one("<Q")
        if length > len(self.data) - self.at:
            raise self.malformed("string beyond the buffer")
        text = self.data[self.at : self.at + length].decode("utf-8", errors="replace")
        self.at += length
        return text

    def end(self) -> None:
        if self.at != len(self.data):
            raise self.malformed("trailing bytes")


def read_message(data: bytes) -> Scheduled | Completed:
    r = _Reader(data)
    tag = r.one("<B")
    message: Scheduled | Completed
    if tag == 1:
        context_i, scheduled_i, epoch_start, minibatch_i = r.take("<qqqq")
        kind = r.one("<B")
        if kind == 0:
            start, end, iteration, epoch, slice_start, slice_end = r.take("<6q")
            if not (0 <= start <= end and 0 <= slice_start <= slice_end <= end - start):
                raise r.malformed("invalid SampleRange")
            sample_range = (start, end, iteration, epoch, slice_start, slice_end)
            message = Scheduled(context_i, scheduled_i, epoch_start, minibatch_i, sample_range, ())
        elif kind == 1:
            arg = r.one("<B")
            if arg == 0:
                args: tuple[Any, ...] = ()
            elif arg == 1:
                args = (r.one("<q"),)
            elif arg == 2:
                args = (("BatchInfo", *r.take("<qq")),)
            else:
                raise r.malformed(f"unknown batch argument {arg}")
            message = Scheduled(context_i, scheduled_i, epoch_start, minibatch_i, None, args)
        else:
            raise r.malformed(f"unknown task kind {kind}")
    elif tag == 2:
        worker_id, context_i, scheduled_i, minibatch_i = r.take("<qqqq")
        meta = r.take("<QQ") if r.one("<?") else None
        exc = r.one("<B")
        if exc > len(_EXCEPTIONS):
            raise r.malformed(f"unknown exception {exc}")
        exception = None if exc == 0 else (_EXCEPTIONS[exc - 1], r.str())
        traceback_str = r.str() if r.one("<?") else None
        message = Completed(worker_id, context_i, scheduled_i, minibatch_i, meta, exception, traceback_str)
    else:
        raise r.malformed(f"unknown message tag {tag}")
    r.end()
    return message


def _read_sample(r: _Reader, level: int) -> Any:
    if level > MAX_NESTING:
        raise r.malformed("nesting too deep")
    kind = r.one("<B")
    if kind == 0:
        offset, nbytes = r.take("<QQ")
        dtype = r.str()
        if not dtype or dtype[1:2] == "O":
            raise r.malformed(f"invalid dtype {dtype!r}")
        ndim = r.one("<I")
        if ndim * 8 > len(r.data) - r.at:
            raise r.malformed("shape beyond the buffer")
        return Array(offset, nbytes, dtype, r.take(f"<{ndim}Q"))
    if kind in (1, 2):
        count = r.one("<Q")
        if count > len(r.data) - r.at:  # every sample takes at least a byte
            raise r.malformed("count beyond the buffer")
        parts = [_read_sample(r, level + 1) for _ in range(count)]
        return tuple(parts) if kind == 1 else parts
    raise r.malformed(f"unknown sample kind {kind}")


def read_samples_meta(data: bytes) -> list[Any]:
    r = _Reader(data)
    count = r.one("<Q")
    if count > len(data) - r.at:
        raise r.malformed("count beyond the buffer")
    samples = [_read_sample(r, 1) for _ in range(count)]
    r.end()
    return samples
