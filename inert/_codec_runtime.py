"""Run-time helpers the generated codecs call (standard library only).

Kept small on purpose: the generated modules hold the per-field logic; this
module holds what would otherwise be repeated in every one of them.
"""

from __future__ import annotations

import operator
from typing import Any

from inert._errors import TruncatedError, WriteTypeError, WriteValueError

__all__ = ["as_buffer", "truncated", "as_int", "as_float", "as_bool", "as_text", "as_list", "as_dict", "tag_member"]


def as_buffer(data: Any) -> bytes | bytearray | memoryview:
    """``data`` as something ``struct.unpack_from`` reads byte by byte."""
    if isinstance(data, (bytes, bytearray)):
        return data
    if isinstance(data, memoryview):
        if data.format != "B" or data.ndim != 1:
            return data.cast("B") if data.c_contiguous else memoryview(data.tobytes())
        return data
    raise TypeError(f"decode() takes bytes, bytearray or memoryview, not {type(data).__name__}")


def truncated(fmt: str, base: int, size: int, layout: tuple[tuple[int, int, str], ...]) -> TruncatedError:
    """The error for a fixed-size group cut short: names its first incomplete field.

    ``layout`` holds (offset in group, width, field path) per field.
    """
    available = size - base
    for rel, width, path in layout:
        if rel + width > available:
            have = max(0, available - rel)
            return TruncatedError(fmt, base + rel, path, f"{width} bytes needed, {have} present")
    raise AssertionError("truncated() called for a group that fits")


def as_int(fmt: str, path: str, obj: Any, low: int, high: int, typename: str) -> int:
    """``obj`` as an int in ``low..high``; bools are refused, ``__index__`` types accepted."""
    if isinstance(obj, bool):
        raise WriteTypeError(fmt, path, "expected int, got bool")
    try:
        value = operator.index(obj)
    except TypeError:
        raise WriteTypeError(fmt, path, f"expected int, got {type(obj).__name__}") from None
    if not low <= value <= high:
        raise WriteValueError(fmt, path, f"{value} outside {typename} range {low}..{high}")
    return value


def as_float(fmt: str, path: str, obj: Any) -> float:
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        raise WriteTypeError(fmt, path, f"expected float, got {type(obj).__name__}")
    return float(obj)


def as_bool(fmt: str, path: str, obj: Any) -> bool:
    if not isinstance(obj, bool):
        raise WriteTypeError(fmt, path, f"expected bool, got {type(obj).__name__}")
    return obj


def as_text(fmt: str, path: str, obj: Any, max_len: int) -> bytes:
    """``obj`` encoded as UTF-8, within ``max_len`` bytes."""
    if not isinstance(obj, str):
        raise WriteTypeError(fmt, path, f"expected str, got {type(obj).__name__}")
    try:
        data = obj.encode("utf-8")
    except UnicodeEncodeError:
        raise WriteValueError(fmt, path, "string holds lone surrogates, not encodable as UTF-8") from None
    if len(data) > max_len:
        raise WriteValueError(fmt, path, f"string length {len(data)} exceeds max_len({max_len})")
    return data


def as_list(fmt: str, path: str, obj: Any, max_count: int) -> list[Any] | tuple[Any, ...]:
    if not isinstance(obj, (list, tuple)):
        raise WriteTypeError(fmt, path, f"expected list, got {type(obj).__name__}")
    if len(obj) > max_count:
        raise WriteValueError(fmt, path, f"count {len(obj)} exceeds max_count({max_count})")
    return obj


def as_dict(fmt: str, path: str, obj: Any, typename: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise WriteTypeError(fmt, path, f"expected dict ({typename}), got {type(obj).__name__}")
    return obj


def tag_member(fmt: str, path: str, obj: Any, table: dict[Any, Any], enum_name: str) -> Any:
    """The enum member ``obj`` names (the member, its value or its name), or a write error."""
    if isinstance(obj, str) or (isinstance(obj, int) and not isinstance(obj, bool)):
        member = table.get(obj)
        if member is None:
            raise WriteValueError(fmt, path, f"unknown {enum_name} {obj!r}")
        return member
    raise WriteTypeError(fmt, path, f"expected {enum_name}, got {type(obj).__name__}")
