"""Value documents: the canonical MessagePack subset of Inert, read and written.

A value document is one MessagePack value of this subset, in its one canonical
encoding (the rules ``value.*`` of :data:`inert.spec._rules.VALUE_RULES`, stated in
every page of docs/spec/ that has a value document):

* nil, false, true; integers from -2**63 to 2**64-1 in the shortest encoding
  (a non-negative integer always in the unsigned family, a negative one in the
  signed family); floats as float64 only (0xcb), NaN only as ``7ff8000000000000``;
* str (UTF-8), bin, array, map: every length and count in the shortest form;
* map keys and set members are str or bin only, in strictly increasing order
  (str before bin; within each, by their UTF-8 or raw bytes): no duplicates,
  one order;
* the extension codes 1 tuple, 4 set, 5 frozenset (the payload is one array of
  the members, nothing after it), 2 complex (two float64 little-endian, 16
  bytes), 3 bytearray (the raw bytes), each in the shortest ext form.

Why keys are str or bin only: Python's hashes of int, float, complex and tuple
are not randomized, so a document whose keys (or set members) all hash alike
made building its dicts and sets quadratic (950 KB took 30 s).  str and bytes
hashes are seeded per process.  Why keys are ordered: duplicates are found
by comparing neighbours, without hashing anything the input chose, and each
map has one encoding.

Reading is two passes: :func:`_scan` walks the bytes once with an explicit
stack (its memory is one frame per nesting level, at most ``max_depth``) and
refuses the first fault in byte order; only then does msgpack build the value,
which it can no longer fail to do.  Both passes are linear in the input.
"""

from __future__ import annotations

import gc
import math
import struct
from typing import Any

import msgpack

from inert._errors import (
    ERROR_CLASSES,
    InertError,
    InvalidValueError,
    LimitError,
    TrailingBytesError,
    TruncatedError,
    UnknownTagError,
    WriteTypeError,
    WriteValueError,
    byte_count,
)
from inert._value_types import EXT_DEVICE, EXT_OBJECT, EXT_SIZE, TYPED_CODES, decode_typed, encode_typed
from inert._value_types import _Fault as TypedFault

__all__ = [
    "EXT_TUPLE",
    "EXT_COMPLEX",
    "EXT_BYTEARRAY",
    "EXT_SET",
    "EXT_FROZENSET",
    "EXT_CODES",
    "CANONICAL_NAN",
    "unpack_value",
    "pack_value",
]

EXT_TUPLE = 1  # payload: a MessagePack array
EXT_COMPLEX = 2  # payload: real then imaginary part, two Float64l
EXT_BYTEARRAY = 3  # payload: the raw bytes
EXT_SET = 4  # payload: a MessagePack array
EXT_FROZENSET = 5  # payload: a MessagePack array
EXT_CODES = {EXT_TUPLE: "tuple", EXT_COMPLEX: "complex", EXT_BYTEARRAY: "bytearray", EXT_SET: "set", EXT_FROZENSET: "frozenset"}

#: The one encoding of NaN (float64, big-endian as MessagePack stores it): quiet, positive, no payload.
CANONICAL_NAN = bytes.fromhex("7ff8000000000000")

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_COMPLEX = struct.Struct("<dd")
_GC_PAUSE_SIZE = 1 << 16
#: The typed extensions whose payload is a value document.
_DOCUMENT_CODES = frozenset((EXT_SIZE, EXT_DEVICE, EXT_OBJECT))
_ABS = (1 << 63) - 1
_INF = 0x7FF0000000000000

# Frame kinds of the scanner's stack.
_ARRAY, _MAP, _MEMBERS = 0, 1, 2

# First bytes of the str and bin families: (header size, minimal length of the form).
_STR_FORMS = {0xD9: (1, 32), 0xDA: (2, 256), 0xDB: (4, 65536)}
_BIN_FORMS = {0xC4: (1, 0), 0xC5: (2, 256), 0xC6: (4, 65536)}
_EXT_FORMS = {0xC7: (1, 0), 0xC8: (2, 256), 0xC9: (4, 65536)}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_COUNT_FORMS = {0xDC: (_ARRAY, 2, 16), 0xDD: (_ARRAY, 4, 65536), 0xDE: (_MAP, 2, 16), 0xDF: (_MAP, 4, 65536)}
# Unsigned ints: (struct, smallest value that needs this width).
_UINT_FORMS = {0xCC: (1, 128), 0xCD: (2, 256), 0xCE: (4, 1 << 16), 0xCF: (8, 1 << 32)}
# Signed ints (negative values only): (struct, largest value that needs this width).
_INT_FORMS = {0xD0: (_I8, -33), 0xD1: (_I16, -129), 0xD2: (_I32, -32769), 0xD3: (_I64, -(1 << 31) - 1)}
_LENGTH = {1: None, 2: _U16, 4: _U32, 8: _U64}
#: 1 for the bytes that are a whole value on their own: fixints, nil, false, true.
_SINGLE = bytes(1 if b <= 0x7F or b >= 0xE0 or b in (0xC0, 0xC2, 0xC3) else 0 for b in range(256))
#: The scanner's paths by first byte: 0 a one-byte value, 1 a fixstr, 2 a fixmap or fixarray, 3 an ext,
#: 4 a float64, 5 an unsigned int, 6 the rest.
_CLASS = bytes(
    0 if _SINGLE[b] else 1 if 0xA0 <= b <= 0xBF else 2 if 0x80 <= b <= 0x9F
    else 3 if 0xC7 <= b <= 0xC9 or 0xD4 <= b <= 0xD8 else 4 if b == 0xCB else 5 if 0xCC <= b <= 0xCF else 6
    for b in range(256)
)


class _Fault(Exception):
    """A fault found by the scanner: the error class, the position in the document and the reason."""

    def __init__(self, cls: type[InertError], pos: int, reason: str) -> None:
        self.cls, self.pos, self.reason = cls, pos, reason


def _length(data: bytes, pos: int, size: int, end: int) -> int:
    if pos + size > end:
        raise _Fault(TruncatedError, pos, f"a length of {byte_count(size)} needed, {end - pos} present")
    if size == 1:
        return data[pos]
    return int(_LENGTH[size].unpack_from(data, pos)[0])  # type: ignore[union-attr]


def _check_nan(raw: bytes, pos: int) -> None:
    if raw != CANONICAL_NAN:
        raise _Fault(InvalidValueError, pos, f"NaN stored as {raw.hex()}, only {CANONICAL_NAN.hex()} is canonical")


def _scan(data: bytes, max_depth: int) -> list[int]:
    """Refuse the first fault of ``data`` in byte order; return when it is one canonical document, with the
    depth (containers open around it) of each typed extension holding a document (9, 11, 12), in byte order."""
    docs: list[int] = []
    n = len(data)
    # A frame: [items left, end of the bytes it may use, kind, the previous key's bytes, the end to reach
    # when done (-1: none), whether the previous key is a bin].
    stack: list[list[Any]] = [[1, n, _ARRAY, None, -1, False]]  # the top: one value, checked for trailing bytes below
    depth = 0  # containers open around the next value
    pos = 0
    classes = _CLASS
    u64 = _U64.unpack_from
    while stack:
        frame = stack[-1]
        left, end, kind = frame[0], frame[1], frame[2]
        while left:  # the items of this frame, until one opens a container with items
            left -= 1
            if pos >= end:
                raise _Fault(TruncatedError, pos, "the document ends where a value belongs")
            b = data[pos]
            if kind and (kind == _MEMBERS or left & 1):  # a map key or a set member
                if 0xA0 <= b <= 0xBF:  # a fixstr key, the usual case, inline
                    length = b & 0x1F
                    after = pos + 1 + length
                    if after > end:
                        raise _Fault(TruncatedError, pos + 1, f"a str of {byte_count(length)}, {end - pos - 1} present")
                    payload = data[pos + 1 : after]
                    previous = frame[3]
                    if previous is not None and (frame[5] or payload <= previous) or not payload.isascii():
                        _key(data, pos, end, frame)  # the precise error (or a valid non-ASCII key)
                    frame[3] = payload
                    pos = after
                    continue
                frame[0] = left
                pos = _key(data, pos, end, frame)
                continue
            c = classes[b]
            if c == 0:  # a whole value in one byte
                pos += 1
                continue
            if c == 1:  # a fixstr
                pos += 1
                length = b & 0x1F
                if length > end - pos:
                    raise _Fault(TruncatedError, pos, f"a str of {byte_count(length)}, {end - pos} present")
                if length:
                    chunk = data[pos : pos + length]
                    if not chunk.isascii():  # ASCII is valid UTF-8; checking it allocates nothing
                        try:
                            chunk.decode("utf-8")
                        except UnicodeDecodeError as exc:
                            raise _Fault(InvalidValueError, pos + exc.start, "invalid UTF-8 in a str") from None
                pos += length
                continue
            if c == 4:  # a float64, inline (arrays of floats are common)
                if pos + 9 > end:
                    raise _Fault(TruncatedError, pos + 1, f"8 bytes needed, {end - pos - 1} present")
                if u64(data, pos + 1)[0] & _ABS > _INF:  # a NaN: exponent all ones, mantissa not 0
                    _check_nan(data[pos + 1 : pos + 9], pos + 1)
                pos += 9
                continue
            if c == 5:  # an unsigned int of 1 to 8 bytes, inline
                size, least = _UINT_FORMS[b]
                after = pos + 1 + size
                if after > end:
                    raise _Fault(TruncatedError, pos + 1, f"{byte_count(size)} needed, {end - pos - 1} present")
                number = int.from_bytes(data[pos + 1 : after], "big")
                if number < least:
                    raise _Fault(InvalidValueError, pos, f"the integer {number} in a longer form (0x{b:02x}) than it needs")
                pos = after
                continue
            if c == 2:  # a fixmap or fixarray, inline (an empty one needs no frame)
                if depth >= max_depth:
                    raise _Fault(LimitError, pos, f"nesting exceeds max_depth({max_depth})")
                count = b & 0x0F
                pos += 1
                if not count:
                    continue
                if b <= 0x8F:
                    items, child = 2 * count, _MAP
                else:
                    items, child = count, _ARRAY
                if items > end - pos:
                    raise _Fault(TruncatedError, pos - 1, f"{count} {'pairs' if child == _MAP else 'elements'} need "
                                 f"at least {byte_count(items)}, {end - pos} present")
                frame[0] = left
                stack.append([items, end, child, None, -1, False])
                depth += 1
                break
            frame[0] = left
            pos = _ext(data, pos, end, b, stack, max_depth, docs) if c == 3 else _item(data, pos, end, b, stack, max_depth, docs)
            if stack[-1] is not frame:
                depth += 1
                break
        else:
            stack.pop()
            depth -= 1
            if frame[4] >= 0 and pos != frame[4]:
                raise _Fault(TrailingBytesError, pos, f"{byte_count(frame[4] - pos)} after the array of an extension payload")
    if pos != n:
        raise _Fault(TrailingBytesError, pos, f"{byte_count(n - pos)} after the end of the value document")
    return docs


def _key(data: bytes, pos: int, end: int, frame: list[Any]) -> int:
    """Read a map key or set member (a str or bin) at ``pos``, check its order; the position after it."""
    b = data[pos]
    if 0xA0 <= b <= 0xBF or b in _STR_FORMS:
        key_kind = 0
    elif b in _BIN_FORMS:
        key_kind = 1
    else:
        what = "a map key" if frame[2] == _MAP else "a set member"
        raise _Fault(InvalidValueError, pos, f"{what} of type 0x{b:02x}: keys and set members are str or bin")
    after = _item(data, pos, end, b, [], 0)
    payload = data[after - _payload_length(data, pos, b) : after]
    previous, previous_bin = frame[3], frame[5]
    if previous is not None and (previous_bin, previous) >= (key_kind == 1, payload):
        what = "map key" if frame[2] == _MAP else "set member"
        repeats = previous_bin == (key_kind == 1) and payload == previous
        raise _Fault(InvalidValueError, pos, f"{what} {'repeats' if repeats else 'is out of order'}: "
                     "keys are strictly increasing (str before bin, by their bytes)")
    frame[3], frame[5] = payload, key_kind == 1
    return after


def _payload_length(data: bytes, pos: int, b: int) -> int:
    if b <= 0xBF:
        return b & 0x1F
    size = (_STR_FORMS.get(b) or _BIN_FORMS[b])[0]
    return data[pos + 1] if size == 1 else int(_LENGTH[size].unpack_from(data, pos + 1)[0])  # type: ignore[union-attr]


def _item(data: bytes, pos: int, end: int, b: int, stack: list[list[Any]], max_depth: int,
          docs: list[int] | None = None) -> int:
    """Check the value starting with byte ``b`` at ``pos``; the position after it (after its header for a
    container with items, whose frame is pushed on ``stack``)."""
    start = pos
    if _SINGLE[b]:
        return pos + 1
    if 0xA0 <= b <= 0xBF or b in _STR_FORMS:
        if b <= 0xBF:
            length, pos = b & 0x1F, pos + 1
        else:
            size, least = _STR_FORMS[b]
            length = _length(data, pos + 1, size, end)
            if length < least:
                longer = f"a str of {byte_count(length)} in a longer form (0x{b:02x}) than it needs"
                raise _Fault(InvalidValueError, start, longer)
            pos += 1 + size
        if length > end - pos:
            raise _Fault(TruncatedError, pos, f"a str of {byte_count(length)}, {end - pos} present")
        try:
            data[pos : pos + length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _Fault(InvalidValueError, pos + exc.start, "invalid UTF-8 in a str") from None
        return pos + length
    if b in _BIN_FORMS:
        size, least = _BIN_FORMS[b]
        length = _length(data, pos + 1, size, end)
        if length < least:
            raise _Fault(InvalidValueError, start, f"a bin of {byte_count(length)} in a longer form (0x{b:02x}) than it needs")
        pos += 1 + size
        if length > end - pos:
            raise _Fault(TruncatedError, pos, f"a bin of {byte_count(length)}, {end - pos} present")
        return pos + length
    if 0x80 <= b <= 0x9F or b in _COUNT_FORMS:
        if b <= 0x9F:
            child, count, pos = (_MAP if b <= 0x8F else _ARRAY), b & 0x0F, pos + 1
        else:
            child, size, least = _COUNT_FORMS[b]
            count = _length(data, pos + 1, size, end)
            if count < least:
                raise _Fault(InvalidValueError, start, f"a count of {count} in a longer form (0x{b:02x}) than it needs")
            pos += 1 + size
        _push(stack, child, count, pos, end, -1, max_depth, start)
        return pos
    if b == 0xCB:
        if pos + 9 > end:
            raise _Fault(TruncatedError, pos + 1, f"8 bytes needed, {end - pos - 1} present")
        if _U64.unpack_from(data, pos + 1)[0] & _ABS > _INF:  # a NaN: exponent all ones, mantissa not 0
            _check_nan(data[pos + 1 : pos + 9], pos + 1)
        return pos + 9
    if b in _UINT_FORMS:
        size, least = _UINT_FORMS[b]
        if pos + 1 + size > end:
            raise _Fault(TruncatedError, pos + 1, f"{byte_count(size)} needed, {end - pos - 1} present")
        number = int.from_bytes(data[pos + 1 : pos + 1 + size], "big")
        if number < least:
            raise _Fault(InvalidValueError, start, f"the integer {number} in a longer form (0x{b:02x}) than it needs")
        return pos + 1 + size
    if b in _INT_FORMS:
        packer, most = _INT_FORMS[b]
        if pos + 1 + packer.size > end:
            raise _Fault(TruncatedError, pos + 1, f"{byte_count(packer.size)} needed, {end - pos - 1} present")
        (number,) = packer.unpack_from(data, pos + 1)
        if number > most:
            raise _Fault(InvalidValueError, start, f"the integer {number} in a longer form (0x{b:02x}) than it needs"
                         + (" (a non-negative integer is unsigned)" if number >= 0 else ""))
        return pos + 1 + packer.size
    if b in _FIXEXT or b in _EXT_FORMS:
        return _ext(data, pos, end, b, stack, max_depth, docs)
    if b == 0xC1:
        raise _Fault(InvalidValueError, pos, "the byte 0xc1 is never used")
    raise _Fault(InvalidValueError, pos, "float32 (0xca): floats are float64 (0xcb)")


def _ext(data: bytes, pos: int, end: int, b: int, stack: list[list[Any]], max_depth: int,
         docs: list[int] | None = None) -> int:
    start = pos
    if b in _FIXEXT:
        length, pos = _FIXEXT[b], pos + 1
    else:
        size, least = _EXT_FORMS[b]
        length = _length(data, pos + 1, size, end)
        if length < least or length in (1, 2, 4, 8, 16):
            raise _Fault(InvalidValueError, start, f"an ext of {byte_count(length)} in a longer form (0x{b:02x}) than it needs")
        pos += 1 + size
    if pos >= end:
        raise _Fault(TruncatedError, pos, "the document ends where an extension code belongs")
    (code,) = _I8.unpack_from(data, pos)
    if code not in EXT_CODES and code not in TYPED_CODES:
        raise _Fault(UnknownTagError, pos, f"unknown extension code {code}")
    pos += 1
    if length > end - pos:
        raise _Fault(TruncatedError, pos, f"an ext payload of {byte_count(length)}, {end - pos} present")
    if code == EXT_COMPLEX:
        if length != 16:
            raise _Fault(InvalidValueError, start, f"complex extension holds {byte_count(length)}, not 16")
        for part in (data[pos : pos + 8], data[pos + 8 : pos + 16]):
            if math.isnan(struct.unpack("<d", part)[0]):
                _check_nan(part[::-1], pos)
        return pos + 16
    if code == EXT_BYTEARRAY or code in TYPED_CODES:
        # A typed payload has its own rules (inert._value_types); a document inside it is scanned
        # like this one when the value is built (_Build.nested), its depth counted on from here.
        if code in _DOCUMENT_CODES and docs is not None:
            docs.append(len(stack) - 1)  # the stack holds the top pseudo-frame and one frame per open container
        return pos + length
    # A tuple, set or frozenset: the payload is one array, then nothing.
    payload_end = pos + length
    if length == 0:
        raise _Fault(TruncatedError, pos, f"{EXT_CODES[code]} extension payload is empty")
    first = data[pos]
    if 0x90 <= first <= 0x9F:
        count, pos = first & 0x0F, pos + 1
    elif first in (0xDC, 0xDD):
        _, size, least = _COUNT_FORMS[first]
        count = _length(data, pos + 1, size, payload_end)
        if count < least:
            raise _Fault(InvalidValueError, pos, f"a count of {count} in a longer form (0x{first:02x}) than it needs")
        pos += 1 + size
    else:
        raise _Fault(InvalidValueError, pos, f"{EXT_CODES[code]} extension does not hold an array")
    _push(stack, _ARRAY if code == EXT_TUPLE else _MEMBERS, count, pos, payload_end, payload_end, max_depth, start)
    return pos


def _push(stack: list[list[Any]], kind: int, count: int, pos: int, end: int, close: int, max_depth: int, start: int) -> None:
    if len(stack) > max_depth:  # the stack holds the top pseudo-frame and one frame per enclosing container
        raise _Fault(LimitError, start, f"nesting exceeds max_depth({max_depth})")
    if not count:  # nothing to read inside: no frame (a million empty maps stay cheap)
        if close >= 0 and pos != close:
            raise _Fault(TrailingBytesError, pos, f"{byte_count(close - pos)} after the array of an extension payload")
        return
    least = 2 * count if kind == _MAP else count
    if least > end - pos:
        raise _Fault(TruncatedError, start, f"{count} {'pairs' if kind == _MAP else 'elements'} need at least "
                     f"{byte_count(least)}, {end - pos} present")
    stack.append([2 * count if kind == _MAP else count, end, kind, None, close, False])


class _Build:
    """msgpack's decode of a document already scanned: it builds, the scanner has checked.

    A typed extension's inner document (torch.Size, torch.device, a registered object's state) is
    scanned and built by :meth:`nested`: the extension counts as one level, and the inner document's
    depth continues from the containers around it (as the writer counts it)."""

    def __init__(self, fmt: str, base: int, path: str, max_depth: int, docs: list[int]) -> None:
        self.fmt, self.base, self.path, self.max_depth = fmt, base, path, max_depth
        # Per document being built: the depths of its typed documents (from _scan, in the order msgpack
        # meets them: byte order), how many were built, and its depth limit.
        self.documents: list[list[Any]] = [[docs, 0, max_depth]]
        self.hook = self.ext_hook

    def unpack(self, data: Any) -> Any:
        n = len(data)
        return msgpack.unpackb(
            data, raw=False, strict_map_key=False, use_list=True, ext_hook=self.hook,
            max_str_len=n, max_bin_len=n, max_array_len=n, max_map_len=n, max_ext_len=n,
        )

    def ext_hook(self, code: int, payload: bytes) -> Any:
        if code == EXT_COMPLEX:
            return complex(*_COMPLEX.unpack(payload))
        if code == EXT_BYTEARRAY:
            return bytearray(payload)
        if code in TYPED_CODES:
            try:
                return decode_typed(code, payload, self.nested)
            except TypedFault as fault:
                reason = f"{TYPED_CODES[code]} extension: {fault.reason}"
                raise ERROR_CLASSES[fault.kind](self.fmt, self.base, self.path, reason) from None
        items = [] if payload == b"\x90" else self.unpack(payload)
        return tuple(items) if code == EXT_TUPLE else (set(items) if code == EXT_SET else frozenset(items))

    def nested(self, payload: bytes) -> Any:
        """A document inside a typed extension: canonical like the outer one, below the extension's level."""
        outer = self.documents[-1]
        depths, built, limit = outer
        outer[1] = built + 1
        inner_limit = limit - depths[built] - 1  # the containers around the extension, and the extension
        if inner_limit < 1:
            raise LimitError(self.fmt, self.base, self.path, f"nesting exceeds max_depth({self.max_depth})")
        try:
            docs = _scan(payload, inner_limit)
        except _Fault as fault:
            raise _error(fault, self.fmt, self.base, self.path) from None
        self.documents.append([docs, 0, inner_limit])
        try:
            return self.unpack(payload)
        finally:
            self.documents.pop()


def _error(fault: _Fault, fmt: str, base: int, path: str) -> InertError:
    """The error of a fault: at the document's start (where the field is), the fault's byte in the reason."""
    reason = f"value document cut short: {fault.reason}" if fault.cls is TruncatedError else fault.reason
    return fault.cls(fmt, base, path, f"{reason} (at byte {fault.pos} of the document)")


def unpack_value(fmt: str, data: Any, base: int, path: str, max_depth: int) -> Any:
    """Decode one value document; any fault is an ``InertError`` at ``base`` plus its position."""
    raw = data if isinstance(data, bytes) else bytes(data)
    try:
        docs = _scan(raw, max_depth)
    except _Fault as fault:
        raise _error(fault, fmt, base, path) from None
    # The value holds no cycles: collecting while a million containers are built only costs time
    # (4x the build on large documents).
    pause = len(raw) > _GC_PAUSE_SIZE and gc.isenabled()
    if pause:
        gc.disable()
    try:
        return _Build(fmt, base, path, max_depth, docs).unpack(raw)
    except InertError:  # a typed extension's own rules
        raise
    except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as exc:  # pragma: no cover - a scanner bug
        raise InvalidValueError(fmt, base, path, f"value document: {str(exc)[:120]}") from None
    finally:
        if pause:
            gc.enable()


# -- writing --------------------------------------------------------------------------------------

_SCALARS = (type(None), bool, int, str, bytes)
_EXT_OF: dict[type, int] = {tuple: EXT_TUPLE, set: EXT_SET, frozenset: EXT_FROZENSET}
_NAN = float("nan")


def _item_path(path: str, key: Any) -> str:
    return f"{path}[{key!r}]"


def _key_order(key: Any) -> tuple[int, bytes]:
    return (0, key.encode("utf-8")) if isinstance(key, str) else (1, bytes(key))


def _check_key(fmt: str, path: str, key: Any, what: str) -> None:
    if type(key) is not str and type(key) is not bytes:
        raise WriteTypeError(
            fmt, path, f"{what} of type {type(key).__name__}: {what}s must be str or bytes (Python's hashes of "
            "other types are not randomized, so a reader of such keys could be made to take quadratic time)"
        )
    if type(key) is str:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise WriteValueError(fmt, path, "string holds lone surrogates, not encodable as UTF-8") from None


def _float(value: float) -> float:
    return _NAN if value != value else value  # one NaN: quiet, positive, no payload


def _prepare(fmt: str, path: str, value: Any, depth: int, max_depth: int) -> Any:
    """``value`` checked against the subset, in canonical order, with the extension types wrapped."""
    kind = type(value)
    if kind in _SCALARS:
        if kind is int and not -(1 << 63) <= value < (1 << 64):
            raise WriteValueError(fmt, path, f"int {value} is outside the 64-bit range")
        if kind is str:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise WriteValueError(fmt, path, "string holds lone surrogates, not encodable as UTF-8") from None
        return value
    if kind is float:
        return _float(value)
    if kind is complex:
        return msgpack.ExtType(EXT_COMPLEX, _COMPLEX.pack(_float(value.real), _float(value.imag)))
    if kind is bytearray:
        return msgpack.ExtType(EXT_BYTEARRAY, bytes(value))
    code = _EXT_OF.get(kind)
    if code is None and kind is not list and kind is not dict:
        # A typed extension: no level of its own; the document of a torch.Size, torch.device or registered
        # object nests one level below it (value.depth), checked by the containers of that document.
        try:
            typed = encode_typed(value, lambda inner: msgpack.packb(
                _prepare(fmt, path, inner, depth + 1, max_depth), use_bin_type=True, strict_types=True))
        except ValueError as exc:
            if isinstance(exc, WriteValueError):
                raise
            raise WriteValueError(fmt, path, str(exc)) from None
        if typed is None:
            raise WriteTypeError(fmt, path, f"{kind.__module__}.{kind.__qualname__} is not in the value subset of this format")
        return msgpack.ExtType(*typed)
    if depth >= max_depth:
        raise WriteValueError(fmt, path, f"nesting exceeds max_depth({max_depth})")
    sub = depth + 1
    if kind is list:
        return [_prepare(fmt, _item_path(path, i), v, sub, max_depth) for i, v in enumerate(value)]
    if kind is dict:
        for k in value:
            _check_key(fmt, f"{path}<key {k!r}>", k, "map key")
        return {k: _prepare(fmt, _item_path(path, k), value[k], sub, max_depth) for k in sorted(value, key=_key_order)}
    if code == EXT_TUPLE:
        items = [_prepare(fmt, _item_path(path, i), v, sub, max_depth) for i, v in enumerate(value)]
    else:
        for member in value:
            _check_key(fmt, f"{path}<member {member!r}>", member, "set member")
        items = sorted(value, key=_key_order)
    return msgpack.ExtType(code, msgpack.packb(items, use_bin_type=True, strict_types=True))


def pack_value(fmt: str, path: str, value: Any, max_len: int, max_depth: int) -> bytes:
    """One canonical value document; ``WriteTypeError`` names the type and path of a value outside the subset."""
    data = msgpack.packb(_prepare(fmt, path, value, 0, max_depth), use_bin_type=True, strict_types=True)
    if len(data) > max_len:
        raise WriteValueError(fmt, path, f"value document of {byte_count(len(data))} exceeds max_len({max_len})")
    return data
