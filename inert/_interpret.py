"""Reference codec #1: the declarations of :mod:`inert.spec` interpreted by Construct.

The grammar imports nothing of the runtime; what interpreting it needs (the error family, the
value-document codec, the evaluator of the declared rules) is handed in here, as the grammar's
:class:`~inert.spec._grammar.Host`, for the time of each call.  Slow but faithful: differential tests,
the fuzz oracle and the conformance runner's ``inert-construct`` testee, never a hot path.
"""

from __future__ import annotations

import io
from typing import Any

from inert import _errors
from inert._checks import describe_foreign
from inert._codec_runtime import as_bytes, check_zero, missing_key, refuse_unknown
from inert._errors import (
    ForeignFormatError,
    InertError,
    LimitError,
    TrailingBytesError,
    VersionError,
    WriteTypeError,
    WriteValueError,
    byte_count,
)
from inert._rule_eval import fault
from inert._value_doc import pack_value, unpack_value
from inert.spec._grammar import Format, Int16ul, Magic, declaration, hosted, new_context, remaining

__all__ = ["HOST", "interpret_decode", "interpret_encode"]

_FORMAT = "?"  # the grammar's errors are attributed to the format below, at the end of each call


class _Runtime:
    """The runtime's side of interpreting a declaration (the grammar's ``Host``)."""

    errors = _errors

    @staticmethod
    def describe_foreign(head: bytes) -> str:
        return describe_foreign(head)

    @staticmethod
    def as_bytes(fmt: str, field: str, obj: Any, max_len: int) -> bytes | bytearray | memoryview:
        return as_bytes(fmt, field, obj, max_len)

    @staticmethod
    def check_zero(fmt: str, buf: Any, offset: int, size: int, field: str) -> None:
        check_zero(fmt, buf, offset, size, field)

    @staticmethod
    def pack_value(fmt: str, field: str, obj: Any, max_len: int, max_depth: int) -> bytes:
        return pack_value(fmt, field, obj, max_len, max_depth)

    @staticmethod
    def unpack_value(fmt: str, data: bytes, start: int, field: str, max_depth: int) -> Any:
        return unpack_value(fmt, data, start, field, max_depth)

    @staticmethod
    def rule_fault(rules: Any, env: dict[str, Any]) -> tuple[str, str] | None:
        return fault(rules, env)

    @staticmethod
    def missing_key(fmt: str, value: dict[Any, Any], key: str, keys: tuple[str, ...], typename: str) -> Exception:
        return missing_key(fmt, value, key, keys, typename)

    @staticmethod
    def refuse_unknown(fmt: str, value: dict[Any, Any], keys: tuple[str, ...], typename: str) -> None:
        refuse_unknown(fmt, value, keys, typename)


HOST = _Runtime()


def _parse_header(fmt: Format, stream: io.BytesIO, context: Any) -> int:
    assert fmt.magic is not None
    try:
        Magic(fmt.magic)._parse(stream, context, "")
    except ForeignFormatError as exc:  # worded as the generated reader words it
        raise ForeignFormatError(_FORMAT, exc.offset, "magic", f"not a {fmt.name} file: {exc.reason}") from None
    offset = stream.tell()
    try:
        version = Int16ul._parse(stream, context, "")
    except InertError as exc:
        raise exc.within("format_version") from None
    if version not in fmt.versions:
        known = ", ".join(str(v) for v in sorted(fmt.versions))
        raise VersionError(_FORMAT, offset, "format_version", f"version {version} is not supported (this reader knows {known})")
    return int(version)


def interpret_decode(
    fmt: Format, data: bytes | bytearray | memoryview, version: int | None = None, part: str | None = None, **ctx: Any
) -> Any:
    """Decode ``data`` by interpreting the grammar (reference codec #1).

    A file format's version comes from its header; ``part`` decodes one of
    the format's ``parts`` on its own.
    """
    stream = io.BytesIO(bytes(data))
    context = new_context(ctx)
    try:
        with hosted(HOST):
            limits = [v for v in (fmt.max_size, ctx.get("max_size")) if v is not None]
            if part is None and limits:  # the format's limit, or a lower one the caller sets
                limit = min(limits)
                if len(data) > limit:
                    raise LimitError(_FORMAT, 0, "", f"input of {byte_count(len(data))} exceeds max_size({limit})")
            if part is None and fmt.magic is not None:
                version = _parse_header(fmt, stream, context)
            value = declaration(fmt, version, part)._parse(stream, context, "")
            if remaining(stream):
                extra = byte_count(remaining(stream))
                raise TrailingBytesError(_FORMAT, stream.tell(), "", f"{extra} after the end of the value")
    except InertError as exc:
        raise exc.in_format(fmt.name) from None
    return value


def interpret_encode(fmt: Format, value: Any, version: int | None = None, part: str | None = None) -> bytes:
    """Encode ``value`` by interpreting the grammar (reference codec #1)."""
    con = declaration(fmt, version, part)
    stream = io.BytesIO()
    try:
        with hosted(HOST):
            if part is None and fmt.magic is not None:
                stream.write(fmt.magic)
                Int16ul._build(fmt.latest if version is None else version, stream, None, "")
            con._build(value, stream, new_context({}), "")
    except (WriteTypeError, WriteValueError) as exc:
        raise type(exc)(fmt.name, exc.field, exc.reason) from None
    return stream.getvalue()
