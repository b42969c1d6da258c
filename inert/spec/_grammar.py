"""The vocabulary Inert's formats are declared in.

Every element is a Construct class, so a declaration is at once:

* reference codec #1: Construct interprets it (``parse``/``build``), slowly but
  faithfully, for differential testing and the conformance runner;
* the input of the generator (``inert gen``), which walks the same objects and
  writes the plain-Python codecs in ``inert.codecs``.

The vocabulary is deliberately small.  Every element that reads a count, a
length or a nesting level carries its limit, so no declaration can describe an
unbounded read.  Names of primitives say width, sign and byte order (all
little-endian), as in Construct: ``Int64ul`` is an unsigned 64-bit little-endian
integer.

The grammar stands alone: it imports Construct and the standard library, never
the runtime.  What interpreting a declaration needs beyond them (the error
family, the value-document codec, the evaluator of the declared rules) is the
:class:`Host` its caller hands in for the time of one call
(:func:`inert._interpret.interpret_decode`/``interpret_encode``): while
parsing, every element raises the host's errors with the absolute offset and
the field path; while building, its ``WriteTypeError``/``WriteValueError``.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import io
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from construct import Construct, Container

from ._rules import ELEMENT_RULES, FILE_RULES, VALUE_RULES, SpecRule

__all__ = [
    "Scalar",
    "Int8ul",
    "Int16ul",
    "Int32ul",
    "Int32sl",
    "Int64ul",
    "Int64sl",
    "Float64l",
    "Bool8",
    "Tag",
    "Utf8",
    "Array",
    "Optional",
    "Record",
    "Union",
    "Recursive",
    "Magic",
    "Bytes",
    "Padding",
    "Crc32",
    "MsgPack",
    "Rule",
    "Validate",
    "Format",
    "min_size",
    "Host",
    "hosted",
    "declaration",
    "remaining",
    "new_context",
]

_FORMAT = "?"  # errors raised inside the grammar are attributed by the interpreter's entry points


class Host(Protocol):
    """What interpreting a declaration needs from the runtime (``inert._interpret.HOST``)."""

    #: The error family, by class name (``errors.TruncatedError``): :mod:`inert._errors`.
    @property
    def errors(self) -> Any: ...

    def describe_foreign(self, head: bytes) -> str: ...

    def as_bytes(self, fmt: str, field: str, obj: Any, max_len: int) -> bytes | bytearray | memoryview: ...

    def check_zero(self, fmt: str, buf: Any, offset: int, size: int, field: str) -> None: ...

    def pack_value(self, fmt: str, field: str, obj: Any, max_len: int, max_depth: int) -> bytes: ...

    def unpack_value(self, fmt: str, data: bytes, start: int, field: str, max_depth: int) -> Any: ...

    def rule_fault(self, rules: Any, env: dict[str, Any]) -> tuple[str, str] | None:
        """The first fault of ``rules`` (each a declared rule with its steps) in ``env``, or None."""

    def missing_key(self, fmt: str, value: dict[Any, Any], key: str, keys: tuple[str, ...], typename: str) -> Exception:
        """The write error for a required ``key`` absent from ``value`` (the generated writers' text)."""

    def refuse_unknown(self, fmt: str, value: dict[Any, Any], keys: tuple[str, ...], typename: str) -> None:
        """Raise the write error for the first key of ``value`` outside ``keys`` (the generated writers' text)."""


_HOST: contextvars.ContextVar[Host] = contextvars.ContextVar("inert_spec_host")


@contextlib.contextmanager
def hosted(host: Host) -> Iterator[None]:
    """Interpret declarations with ``host`` inside the ``with`` block."""
    token = _HOST.set(host)
    try:
        yield
    finally:
        _HOST.reset(token)


def _host() -> Host:
    try:
        return _HOST.get()
    except LookupError:
        raise RuntimeError(
            "a declaration is interpreted through inert._interpret (interpret_decode/interpret_encode), "
            "which supplies the runtime's errors and value codec"
        ) from None


def _errors() -> Any:
    return _host().errors


def _bytes(n: int) -> str:
    """``1 byte``, ``n bytes``: the runtime's wording (``inert._errors.byte_count``)."""
    return str(_errors().byte_count(n))


def _remaining(stream: io.BytesIO) -> int:
    return len(stream.getbuffer()) - stream.tell()


def _read(stream: io.BytesIO, size: int) -> bytes:
    offset = stream.tell()
    data = stream.read(size)
    if len(data) != size:
        raise _errors().TruncatedError(_FORMAT, offset, "", f"{_bytes(size)} needed, {len(data)} present")
    return data


def _params(context: Any) -> Any:
    return context._params


class Scalar(Construct):  # type: ignore[misc]
    """A fixed-width little-endian number; ``code`` is its ``struct`` letter."""

    def __init__(self, typename: str, code: str) -> None:
        super().__init__()
        self.typename = typename
        self.code = code
        self.packer = struct.Struct("<" + code)
        self.size = self.packer.size
        self.is_float = code == "d"
        if not self.is_float:
            bits = self.size * 8
            signed = code.islower()
            self.low = -(1 << (bits - 1)) if signed else 0
            self.high = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1

    def __repr__(self) -> str:
        return self.typename

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Any:
        return self.packer.unpack(_read(stream, self.size))[0]

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        stream.write(self.packer.pack(self.check(obj)))
        return obj

    def check(self, obj: Any) -> Any:
        """The value to pack, or a write error saying why it cannot be."""
        if self.is_float:
            if isinstance(obj, bool) or not isinstance(obj, (int, float)):
                raise _errors().WriteTypeError(_FORMAT, "", f"expected float, got {type(obj).__name__}")
            return float(obj)
        if isinstance(obj, bool) or not isinstance(obj, int):
            raise _errors().WriteTypeError(_FORMAT, "", f"expected int, got {type(obj).__name__}")
        if not self.low <= obj <= self.high:
            raise _errors().WriteValueError(_FORMAT, "", f"{obj} outside {self.typename} range {self.low}..{self.high}")
        return int(obj)

    def _sizeof(self, context: Any, path: str) -> int:
        return self.size


Int8ul = Scalar("Int8ul", "B")
Int16ul = Scalar("Int16ul", "H")
Int32ul = Scalar("Int32ul", "I")
Int32sl = Scalar("Int32sl", "i")
Int64ul = Scalar("Int64ul", "Q")
Int64sl = Scalar("Int64sl", "q")
Float64l = Scalar("Float64l", "d")


class Bool8(Construct):  # type: ignore[misc]
    """One byte, 0 or 1.  Any other byte is refused: it would be a second spelling of true."""

    size = 1

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> bool:
        offset = stream.tell()
        byte = _read(stream, 1)[0]
        if byte > 1:
            raise _errors().InvalidValueError(_FORMAT, offset, "", f"boolean byte is {byte}, not 0 or 1")
        return byte == 1

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if not isinstance(obj, bool):
            raise _errors().WriteTypeError(_FORMAT, "", f"expected bool, got {type(obj).__name__}")
        stream.write(b"\x01" if obj else b"\x00")
        return obj


class Tag(Construct):  # type: ignore[misc]
    """An enumeration stored as ``scalar``; decodes to the ``IntEnum`` member.

    Writers take the member, its integer value or its name.
    """

    def __init__(self, enum_cls: type[enum.IntEnum], scalar: Scalar = Int8ul) -> None:
        super().__init__()
        self.enum_cls = enum_cls
        self.scalar = scalar
        self.size = scalar.size

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> enum.IntEnum:
        offset = stream.tell()
        raw = self.scalar._parse(stream, context, path)
        try:
            return self.enum_cls(raw)
        except ValueError:
            raise _errors().UnknownTagError(_FORMAT, offset, "", f"unknown {self.enum_cls.__name__} {raw}") from None

    def member(self, obj: Any) -> enum.IntEnum:
        """The member ``obj`` names, or a write error."""
        name = self.enum_cls.__name__
        if isinstance(obj, str) or (isinstance(obj, int) and not isinstance(obj, bool)):
            try:
                return self.enum_cls[obj] if isinstance(obj, str) else self.enum_cls(obj)
            except (KeyError, ValueError):
                raise _errors().WriteValueError(_FORMAT, "", f"unknown {name} {obj!r}") from None
        raise _errors().WriteTypeError(_FORMAT, "", f"expected {name}, got {type(obj).__name__}")

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        member = self.member(obj)
        self.scalar._build(int(member), stream, context, path)
        return member


class Utf8(Construct):  # type: ignore[misc]
    """A UTF-8 string after a length prefix, at most ``max_len`` bytes.

    Invalid UTF-8 is refused, never replaced: a reader that replaced it would
    decode two different byte strings to one value.
    """

    def __init__(self, prefix: Scalar, max_len: int) -> None:
        super().__init__()
        self.prefix = prefix
        self.max_len = max_len

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> str:
        offset = stream.tell()
        length = self.prefix._parse(stream, context, path)
        if length > self.max_len:
            raise _errors().LimitError(_FORMAT, offset, "", f"string length {length} exceeds max_len({self.max_len})")
        data = _read(stream, length)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _errors().InvalidValueError(
                _FORMAT, offset + self.prefix.size + exc.start, "", "invalid UTF-8"
            ) from None

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if not isinstance(obj, str):
            raise _errors().WriteTypeError(_FORMAT, "", f"expected str, got {type(obj).__name__}")
        try:
            data = obj.encode("utf-8")
        except UnicodeEncodeError:
            raise _errors().WriteValueError(_FORMAT, "", "string holds lone surrogates, not encodable as UTF-8") from None
        if len(data) > self.max_len:
            raise _errors().WriteValueError(_FORMAT, "", f"string length {len(data)} exceeds max_len({self.max_len})")
        self.prefix._build(len(data), stream, context, path)
        stream.write(data)
        return obj


class Array(Construct):  # type: ignore[misc]
    """A count prefix then that many elements, at most ``max_count``.

    The count is also checked against the bytes that remain (count times the
    element's smallest encoding), so a forged count allocates nothing.
    """

    def __init__(self, prefix: Scalar, element: Construct, max_count: int) -> None:
        super().__init__()
        self.prefix = prefix
        self.element = element
        self.max_count = max_count

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> list[Any]:
        offset = stream.tell()
        count = self.prefix._parse(stream, context, path)
        if count > self.max_count:
            raise _errors().LimitError(_FORMAT, offset, "", f"count {count} exceeds max_count({self.max_count})")
        smallest = min_size(self.element)
        if count * smallest > _remaining(stream):
            reason = f"{count} elements need at least {_bytes(count * smallest)}, {_remaining(stream)} present"
            raise _errors().TruncatedError(_FORMAT, offset, "", reason)
        items = []
        for index in range(count):
            try:
                items.append(self.element._parse(stream, context, path))
            except _errors().InertError as exc:
                raise exc.within(f"[{index}]") from None
        return items

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if not isinstance(obj, (list, tuple)):
            raise _errors().WriteTypeError(_FORMAT, "", f"expected list, got {type(obj).__name__}")
        if len(obj) > self.max_count:
            raise _errors().WriteValueError(_FORMAT, "", f"count {len(obj)} exceeds max_count({self.max_count})")
        self.prefix._build(len(obj), stream, context, path)
        for index, item in enumerate(obj):
            try:
                self.element._build(item, stream, context, path)
            except (_errors().WriteTypeError, _errors().WriteValueError) as exc:
                raise exc.within(f"[{index}]") from None
        return obj


class Optional(Construct):  # type: ignore[misc]
    """A :class:`Bool8` presence flag, then ``element`` when it is 1.  ``None`` when absent."""

    def __init__(self, element: Construct) -> None:
        super().__init__()
        self.element = element

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Any:
        if not Bool8()._parse(stream, context, path):
            return None
        return self.element._parse(stream, context, path)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        stream.write(b"\x00" if obj is None else b"\x01")
        if obj is not None:
            self.element._build(obj, stream, context, path)
        return obj


class Rule:
    """A relation between fields of a :class:`Record`, as a Construct expression.

    ``Rule("end", this.end >= this.start, "end is before start")``.  The
    generator turns the expression into Python; the interpreter evaluates it.
    """

    def __init__(self, field: str, expr: Any, reason: str) -> None:
        self.field = field
        self.expr = expr
        self.reason = reason


class Validate:
    """A named rule from :mod:`inert._checks` run on the fields read so far.

    ``check(fields, ctx)`` returns ``None`` or ``(field, reason)``; ``ctx``
    holds what the caller knows beyond the bytes (e.g. ``chunk_size``).
    """

    def __init__(self, check: Callable[[dict[str, Any], dict[str, Any]], tuple[str, str] | None]) -> None:
        self.check = check


def _run_checks(checks: list[Rule | Validate], fields: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    for check in checks:
        if isinstance(check, Rule):
            if not check.expr(fields):
                return check.field, check.reason
        else:
            fault = check.check(fields, ctx)
            if fault is not None:
                return fault
    return None


class Record(Construct):  # type: ignore[misc]
    """Named fields in order, then the rules that relate them.

    ``Record("Descriptor", "worker_id" / Int32sl, ..., Validate(check))``.
    Decodes to a ``dict``.  ``typename`` names the generated reader and writer.
    """

    def __init__(self, typename: str, *items: Any) -> None:
        super().__init__()
        self.typename = typename
        self.fields: list[tuple[str, Construct]] = []
        self.checks: list[Rule | Validate] = []
        for item in items:
            if isinstance(item, (Rule, Validate)):
                self.checks.append(item)
            else:
                self.fields.append((item.name, item.subcon))

    def parse_into(self, stream: io.BytesIO, context: Any, fields: dict[str, Any]) -> None:
        start = stream.tell()
        for name, sub in self.fields:
            try:
                if isinstance(sub, Crc32):
                    fields[name] = _parse_crc(stream, start, _params(context).ctx)
                elif isinstance(sub, Padding):
                    sub._parse(stream, context, name)
                else:
                    fields[name] = sub._parse(stream, context, name)
            except _errors().InertError as exc:
                raise exc.within(name) from None
        fault = _run_checks(self.checks, fields, _params(context).ctx)
        if fault is not None:
            raise _errors().InvalidValueError(_FORMAT, start, fault[0], fault[1])

    def check_keys(self, obj: dict[str, Any], tag_field: str | None = None, typename: str | None = None) -> None:
        """Refuse a value whose keys are not the record's, before any field is written: a missing key
        (``write-type``), then a key outside the record's (``write-value``; a typo is not lost data).
        A union case's keys include the union's tag; a ``crc32`` or magic key may be given (and is ignored)."""
        required = ((tag_field,) if tag_field is not None else ()) + tuple(
            name for name, sub in self.fields if not isinstance(sub, (Padding, Crc32, Magic)))
        keys = required + tuple(name for name, sub in self.fields if isinstance(sub, (Crc32, Magic)))
        typename = self.typename if typename is None else typename
        for name in required:
            if name not in obj:
                raise _host().missing_key(_FORMAT, obj, name, keys, typename)
        if len(obj) != len(required):
            _host().refuse_unknown(_FORMAT, obj, keys, typename)

    def build_from(self, obj: dict[str, Any], stream: io.BytesIO, context: Any, tag_field: str | None = None) -> None:
        self.check_keys(obj, tag_field)
        start = stream.tell()
        for name, sub in self.fields:
            if isinstance(sub, Crc32):
                Int32ul._build(zlib.crc32(stream.getbuffer()[start:]), stream, context, name)
                continue
            if isinstance(sub, (Padding, Magic)):  # constants: the value needs no entry for them
                sub._build(None, stream, context, name)
                continue
            try:
                sub._build(obj[name], stream, context, name)
            except (_errors().WriteTypeError, _errors().WriteValueError) as exc:
                raise exc.within(name) from None
        fault = _run_checks(self.checks, obj, {})
        if fault is not None:
            raise _errors().WriteValueError(_FORMAT, fault[0], fault[1])

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        self.parse_into(stream, context, fields)
        return fields

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if not isinstance(obj, dict):
            raise _errors().WriteTypeError(_FORMAT, "", f"expected dict ({self.typename}), got {type(obj).__name__}")
        self.build_from(obj, stream, context)
        return obj


def _parse_crc(stream: io.BytesIO, start: int, ctx: dict[str, Any]) -> int:
    offset = stream.tell()
    stored = Int32ul._parse(stream, None, "")
    if ctx.get("verify_checksums") is not False:
        computed = zlib.crc32(stream.getbuffer()[start:offset])
        if computed != stored:
            raise _errors().ChecksumError(_FORMAT, offset, "", f"stored CRC-32 {stored:#010x}, bytes give {computed:#010x}")
    return stored


class Union(Construct):  # type: ignore[misc]
    """A :class:`Tag` then the :class:`Record` it selects (or nothing).

    Decodes to one ``dict``: the tag under ``tag_field`` beside the case's fields.
    """

    def __init__(
        self, typename: str, tag_field: str, tag: Tag, cases: dict[enum.IntEnum, Record | None]
    ) -> None:
        super().__init__()
        self.typename = typename
        self.tag_field = tag_field
        self.tag = tag
        self.cases = cases
        if set(cases) != set(tag.enum_cls):
            raise ValueError(f"{typename}: a case for every {tag.enum_cls.__name__} member is required")

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> dict[str, Any]:
        try:
            member = self.tag._parse(stream, context, path)
        except _errors().InertError as exc:
            raise exc.within(self.tag_field) from None
        fields: dict[str, Any] = {self.tag_field: member}
        case = self.cases[member]
        if case is not None:
            case.parse_into(stream, context, fields)
        return fields

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        if not isinstance(obj, dict):
            raise _errors().WriteTypeError(_FORMAT, "", f"expected dict ({self.typename}), got {type(obj).__name__}")
        if self.tag_field not in obj:
            raise _host().missing_key(_FORMAT, obj, self.tag_field, (self.tag_field,), self.typename)
        try:
            member = self.tag._build(obj[self.tag_field], stream, context, path)
        except (_errors().WriteTypeError, _errors().WriteValueError) as exc:
            raise exc.within(self.tag_field) from None
        case = self.cases[member]
        if case is not None:
            case.build_from(obj, stream, context, self.tag_field)
        elif len(obj) != 1:
            _host().refuse_unknown(_FORMAT, obj, (self.tag_field,), f"{self.typename} {member.name}")
        return obj


class Recursive(Construct):  # type: ignore[misc]
    """A reference to a declaration that contains itself, at most ``max_depth`` levels deep.

    The outermost occurrence is level 1.  The limit stays well below Python's
    recursion limit, so no input can exhaust the stack.
    """

    def __init__(self, target: Callable[[], Construct], max_depth: int) -> None:
        super().__init__()
        self.target = target
        self.max_depth = max_depth

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Any:
        params = _params(context)
        if params.depth >= self.max_depth:
            raise _errors().LimitError(_FORMAT, stream.tell(), "", f"nesting exceeds max_depth({self.max_depth})")
        params.depth += 1
        try:
            return self.target()._parse(stream, context, path)
        finally:
            params.depth -= 1

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        params = _params(context)
        if params.depth >= self.max_depth:
            raise _errors().WriteValueError(_FORMAT, "", f"nesting exceeds max_depth({self.max_depth})")
        params.depth += 1
        try:
            return self.target()._build(obj, stream, context, path)
        finally:
            params.depth -= 1


class Magic(Construct):  # type: ignore[misc]
    """Constant bytes that name a format.  Other bytes are a :class:`~inert.ForeignFormatError`
    that says what the input looks like (a pickle, a ``torch.save`` zip, safetensors, ...)."""

    def __init__(self, value: bytes) -> None:
        super().__init__()
        self.value = value
        self.size = len(value)

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> bytes:
        offset = stream.tell()
        head = stream.getbuffer()[offset : offset + 16].tobytes()
        if head[: self.size] != self.value:
            found = _host().describe_foreign(head)
            raise _errors().ForeignFormatError(_FORMAT, offset, "", f"expected {self.value!r}, found {found}")
        stream.seek(offset + self.size)
        return self.value

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        stream.write(self.value)
        return self.value


class Bytes(Construct):  # type: ignore[misc]
    """A byte length (``prefix``), zero padding up to a multiple of ``align`` (counted from
    the start of the buffer), then that many raw bytes, at most ``max_len``.

    The generated reader returns a zero-copy ``memoryview`` of the input.
    """

    def __init__(self, prefix: Scalar, max_len: int, align: int = 1) -> None:
        super().__init__()
        self.prefix = prefix
        self.max_len = max_len
        self.align = align

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> bytes:
        offset = stream.tell()
        length = self.prefix._parse(stream, context, path)
        if length > self.max_len:
            raise _errors().LimitError(_FORMAT, offset, "", f"length {length} exceeds max_len({self.max_len})")
        Padding(self.align)._parse(stream, context, path)
        if length > _remaining(stream):
            raise _errors().TruncatedError(_FORMAT, stream.tell(), "", f"{_bytes(length)} needed, {_remaining(stream)} present")
        return _read(stream, length)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        data = _host().as_bytes(_FORMAT, "", obj, self.max_len)
        self.prefix._build(len(data), stream, context, path)
        Padding(self.align)._build(None, stream, context, path)
        stream.write(data)
        return obj


class Padding(Construct):  # type: ignore[misc]
    """Zero bytes up to the next multiple of ``align``, counted from the start of the buffer.

    Every padding byte must be zero.  A :class:`Record` leaves padding out of its value.
    """

    def __init__(self, align: int) -> None:
        super().__init__()
        if align < 1 or align & (align - 1) or align > 4096:
            raise ValueError("Padding: align must be a power of two up to 4096")
        self.align = align

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> None:
        offset = stream.tell()
        size = -offset % self.align
        if size > _remaining(stream):
            raise _errors().TruncatedError(_FORMAT, offset, "", f"{_bytes(size)} of padding needed, {_remaining(stream)} present")
        _host().check_zero(_FORMAT, stream.getbuffer(), offset, size, "")
        stream.seek(offset + size)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        stream.write(bytes(-stream.tell() % self.align))
        return None


class Crc32(Construct):  # type: ignore[misc]
    """An ``Int32ul`` holding the CRC-32 (zlib's) of every byte of the enclosing :class:`Record`
    before it.  Readers verify it unless told ``verify_checksums=False``; writers compute it
    (a value given for it is ignored)."""

    size = 4


class MsgPack(Construct):  # type: ignore[misc]
    """A byte length (``prefix``) then one MessagePack value document of Inert's value subset.

    The subset and its one canonical encoding are :mod:`inert._value_doc`'s (the
    rules ``value.*`` of :mod:`inert.spec._rules`): None, bool, int (-2**63 .. 2**64-1),
    float, str, bytes, list, dict (keys str or bytes), the extension codes
    1 tuple, 2 complex, 3 bytearray, 4 set, 5 frozenset, and the typed codes 6 to
    12 (:mod:`inert._value_types`).  The document is at most ``max_len`` bytes and
    ``max_depth`` containers deep.
    """

    def __init__(self, prefix: Scalar, max_len: int, max_depth: int) -> None:
        super().__init__()
        self.prefix = prefix
        self.max_len = max_len
        self.max_depth = max_depth

    def _parse(self, stream: io.BytesIO, context: Any, path: str) -> Any:
        offset = stream.tell()
        length = self.prefix._parse(stream, context, path)
        if length > self.max_len:
            raise _errors().LimitError(_FORMAT, offset, "", f"document length {length} exceeds max_len({self.max_len})")
        start = stream.tell()
        data = _read(stream, length)
        return _host().unpack_value(_FORMAT, data, start, "", self.max_depth)

    def _build(self, obj: Any, stream: io.BytesIO, context: Any, path: str) -> Any:
        data = _host().pack_value(_FORMAT, "", obj, self.max_len, self.max_depth)
        self.prefix._build(len(data), stream, context, path)
        stream.write(data)
        return obj


def min_size(con: Any, _seen: frozenset[int] = frozenset()) -> int:
    """The fewest bytes any encoding of ``con`` takes (used to bound counts)."""
    if isinstance(con, (Scalar, Tag)):
        return int(con.size)
    if isinstance(con, Bool8):
        return 1
    if isinstance(con, (Utf8, Array, Bytes, MsgPack)):
        return int(con.prefix.size)
    if isinstance(con, (Magic, Crc32)):
        return int(con.size)
    if isinstance(con, Padding):
        return 0
    if isinstance(con, Optional):
        return 1
    if isinstance(con, Record):
        return sum(min_size(sub, _seen) for _, sub in con.fields)
    if isinstance(con, Union):
        return con.tag.size + min(0 if c is None else min_size(c, _seen) for c in con.cases.values())
    if isinstance(con, Recursive):
        if id(con) in _seen:
            return 0
        return min_size(con.target(), _seen | {id(con)})
    raise TypeError(f"min_size: {type(con).__name__} is not part of the grammar")


class Format:
    """A format: its name, its versions (each a top-level declaration) and its documentation.

    ``params`` names what a reader may be told beyond the bytes (``chunk_size``);
    they reach :class:`Validate` rules as ``ctx``.

    A file format has a ``magic``: its encoding starts with the file header,
    the magic then the ``format_version`` as ``Int16ul``, and the reader picks
    the version from it (an unknown one is a :class:`~inert.VersionError` naming the
    known ones).  ``max_size`` bounds the whole input (a reader may lower it).
    ``parts`` names declarations that are also read and written on their own
    (``{"record": {1: ShardRecord}}`` gives ``decode_record``/``encode_record``),
    e.g. a record that a reader fetches by its byte range.
    """

    def __init__(
        self,
        name: str,
        versions: dict[int, Construct],
        doc: str,
        params: tuple[str, ...] = (),
        magic: bytes | None = None,
        max_size: int | None = None,
        parts: dict[str, dict[int, Construct]] | None = None,
    ) -> None:
        self.name = name
        self.versions = versions
        self.doc = doc
        self.params = params
        self.magic = magic
        self.max_size = max_size
        self.parts = parts or {}
        #: The format's own rules (its module's ``RULES``; set by ``inert.spec``).
        self.declared: tuple[SpecRule, ...] = ()
        #: Its named integer constants (``MAX_DEPTH``), for the spec pages.
        self.constants: dict[str, int] = {}

    def rules(self) -> tuple[SpecRule, ...]:
        """Every rule a reader of this format enforces, in the order the spec page numbers them: the rules
        of the grammar elements its versions use, the file rules (a format with a magic), the value
        document rules (one with a ``MsgPack`` field), then its own ``RULES`` (``declared``)."""
        used: set[str] = set()
        for table in (self.versions, *self.parts.values()):
            for con in table.values():
                _element_names(con, used)
        rules = [*ELEMENT_RULES["any"]]
        for element, element_rules in ELEMENT_RULES.items():
            if element in used:
                rules.extend(element_rules)
        if self.magic is not None:
            rules.extend(r for r in FILE_RULES if r.id != "file.crc32")
        if "Crc32" in used:
            rules.extend(r for r in FILE_RULES if r.id == "file.crc32")
        if "MsgPack" in used:
            rules.extend(VALUE_RULES)
        rules.extend(self.declared)
        return tuple(rules)

    @property
    def size_limit(self) -> int:
        """The largest input a reader accepts by default (``max_size``; 2**63 - 1 when the format sets none)."""
        return self.max_size if self.max_size is not None else (1 << 63) - 1

    @property
    def header_size(self) -> int:
        """Bytes of the file header (0 for formats without a magic)."""
        return 0 if self.magic is None else len(self.magic) + 2

    @property
    def latest(self) -> int:
        return max(self.versions)

    @property
    def module_name(self) -> str:
        return self.name.replace("-", "_")


def _element_names(con: Any, used: set[str], _seen: set[int] | None = None) -> None:
    """Add the names of the grammar elements ``con`` uses to ``used`` (an optional's flag is a Bool8,
    an aligned Bytes has Padding)."""
    seen = set() if _seen is None else _seen
    if id(con) in seen:
        return
    seen.add(id(con))
    used.add(type(con).__name__)
    if isinstance(con, Tag):
        used.add("Tag")
    elif isinstance(con, Optional):
        used.add("Bool8")
        _element_names(con.element, used, seen)
    elif isinstance(con, Array):
        _element_names(con.element, used, seen)
    elif isinstance(con, Bytes) and con.align > 1:
        used.add("Padding")
    elif isinstance(con, Record):
        for _, sub in con.fields:
            _element_names(sub, used, seen)
    elif isinstance(con, Union):
        used.add("Tag")
        for case in con.cases.values():
            if case is not None:
                _element_names(case, used, seen)
    elif isinstance(con, Recursive):
        _element_names(con.target(), used, seen)


class _Params:
    def __init__(self, ctx: dict[str, Any]) -> None:
        self.ctx = ctx
        self.depth = 0


def _context(ctx: dict[str, Any]) -> Container:
    context = Container()
    context._params = _Params(ctx)
    return context




def declaration(fmt: Format, version: int | None, part: str | None) -> Construct:
    """The declaration of ``fmt``'s ``version`` (the latest when None), or of one of its ``parts``."""
    versions = fmt.versions if part is None else fmt.parts[part]
    return versions[max(versions) if version is None else version]


def remaining(stream: io.BytesIO) -> int:
    """The bytes of ``stream`` after its position."""
    return _remaining(stream)


def new_context(ctx: dict[str, Any]) -> Container:
    """A Construct context for one interpretation; ``ctx`` is what the reader is told beyond the bytes."""
    return _context(ctx)
