"""Run-time helpers the generated codecs call (standard library and msgpack only).

Kept small on purpose: the generated modules hold the per-field logic; this
module holds what would otherwise be repeated in every one of them.
"""

from __future__ import annotations

import difflib
import enum
import operator
import struct
import zlib
from collections.abc import Collection
from typing import Any

from inert._accelerator import accelerator, bind_decode, encoder
from inert._checks import describe_foreign
from inert._errors import (
    ForeignFormatError,
    InertError,
    InvalidValueError,
    TruncatedError,
    UnknownTagError,
    VersionError,
    WriteTypeError,
    WriteValueError,
    byte_count,
)
from inert._value_doc import pack_value, unpack_value

__all__ = [
    "TagEnum",
    "refuse_unknown",
    "missing_key",
    "accelerator",
    "bind_decode",
    "encoder",
    "as_buffer",
    "private_bytes",
    "cached_text",
    "run_struct",
    "truncated",
    "as_int",
    "as_float",
    "as_bool",
    "as_text",
    "as_list",
    "as_dict",
    "tag_member",
    "read_file_header",
    "file_header",
    "crc_parts",
    "out_size",
    "as_bytes",
    "check_zero",
    "unpack_value",
    "pack_value",
]


class TagEnum(enum.IntEnum):
    """The base of every generated enum: a member is its wire integer, and it also equals its name.

    ``decode`` returns members; ``encode`` takes a member, its name or its integer.  So a value written
    with names (``{"type": "SCHEDULED_TASK"}``, JSON) equals what decoding its bytes returns, and
    ``value["type"] == "SCHEDULED_TASK"`` holds.  The hash stays the integer's (an ``IntEnum``'s):
    keep names and members apart as keys of one set or dict (``member.name`` is the name).
    """

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return other == self._name_
        return int.__eq__(self, other)  # type: ignore[no-any-return]

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = int.__hash__


def refuse_unknown(fmt: str, value: dict[Any, Any], keys: Collection[str], typename: str) -> None:
    """Refuse the first key of ``value`` outside ``keys`` (the record's fields): a typo is not lost data."""
    for key in value:
        if key not in keys:
            close = difflib.get_close_matches(str(key), list(keys), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (its keys: {', '.join(keys)})"
            raise WriteValueError(fmt, str(key), f"unknown key: {typename} has no field {key!r}{hint}")


def missing_key(fmt: str, value: dict[Any, Any], key: str, keys: Collection[str], typename: str) -> WriteTypeError:
    """The error for a required ``key`` absent from ``value``, naming a given key that looks like its typo."""
    unknown = [str(k) for k in value if k not in keys]
    close = difflib.get_close_matches(key, unknown, n=1)
    hint = f" (an unknown key {close[0]!r} is given: a typo?)" if close else ""
    return WriteTypeError(fmt, key, f"missing: {typename} requires this key{hint}")


def as_buffer(data: Any) -> bytes | bytearray | memoryview:
    """``data`` as something ``struct.unpack_from`` reads byte by byte."""
    if isinstance(data, (bytes, bytearray)):
        return data
    if isinstance(data, memoryview):
        if data.format != "B" or data.ndim != 1:
            return data.cast("B") if data.c_contiguous else memoryview(data.tobytes())
        return data
    raise TypeError(f"decode() takes bytes, bytearray or memoryview, not {type(data).__name__}")


def private_bytes(data: Any) -> bytes:
    """A private copy of a message: what a peer writes to shared memory meanwhile changes nothing read."""
    return bytes(as_buffer(data))


#: Most distinct short strings a module's reader remembers (hostile input cannot grow it further).
TEXT_CACHE_SIZE = 256


def cached_text(cache: dict[Any, str], raw: bytes | bytearray | memoryview) -> str:
    """``raw`` decoded as UTF-8 (``UnicodeDecodeError`` if it is not), remembered while ``cache`` has room.

    Short strings that repeat through a message (a batch's dtypes) are decoded once.
    """
    text = str(raw, "utf-8")
    if len(cache) < TEXT_CACHE_SIZE:
        cache[raw] = text
    return text


#: Most element layouts (string lengths, counts) a run reader remembers a Struct for.
RUN_CACHE_SIZE = 64


def run_struct(cache: dict[tuple[int, ...], struct.Struct], key: tuple[int, ...], template: str) -> struct.Struct:
    """The Struct of one element of a uniform run whose prefixes are ``key``, remembered while ``cache`` has room."""
    packer = struct.Struct(template.format(*key))
    if len(cache) < RUN_CACHE_SIZE:
        cache[key] = packer
    return packer


def truncated(fmt: str, buf: Any, base: int, layout: tuple[tuple[int, int, str, Any], ...]) -> InertError:
    """The error for a fixed-size group cut short at ``base``: what a field-by-field read meets first.

    ``layout`` holds (offset in group, width, field path, rule) per field; a rule
    (``('tag', code, table, enum name)`` or ``('bool',)``) is checked on every
    complete field before the first incomplete one is reported.
    """
    available = len(buf) - base
    for rel, width, path, rule in layout:
        if rel + width > available:
            have = max(0, available - rel)
            return TruncatedError(fmt, base + rel, path, f"{byte_count(width)} needed, {have} present")
        if rule is None:
            continue
        (raw,) = struct.unpack_from("<" + ("B" if rule[0] == "bool" else rule[1]), buf, base + rel)
        if rule[0] == "bool" and raw > 1:
            return InvalidValueError(fmt, base + rel, path, f"boolean byte is {raw}, not 0 or 1")
        if rule[0] == "tag" and raw not in rule[2]:
            return UnknownTagError(fmt, base + rel, path, f"unknown {rule[3]} {raw}")
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


# -- file formats: magic, version, checksums, raw bytes -----------------------



def read_file_header(fmt: str, buf: Any, magic: bytes, versions: tuple[int, ...], required: int | None = None) -> int:
    """Check the magic and return the ``format_version`` after it.

    A file of another kind gets a :class:`ForeignFormatError` saying what it
    looks like; an unknown version a :class:`VersionError` naming the known ones.
    ``required`` is a version the caller insists on (asking for one the module
    does not know is a caller mistake, a ``ValueError``).
    """
    if required is not None and required not in versions:
        raise ValueError(f"{fmt}: version {required} is not one of {versions}")
    size = len(magic)
    head = bytes(buf[:size])
    if head != magic:
        raise ForeignFormatError(
            fmt, 0, "magic", f"not a {fmt} file: expected {magic!r}, found {describe_foreign(bytes(buf[:16]))}"
        )
    if len(buf) < size + 2:
        raise TruncatedError(fmt, size, "format_version", f"2 bytes needed, {len(buf) - size} present")
    version = int.from_bytes(buf[size : size + 2], "little")
    if version not in versions:
        supported = ", ".join(str(v) for v in versions)
        raise VersionError(fmt, size, "format_version", f"version {version} is not supported (this reader knows {supported})")
    if required is not None and version != required:
        raise VersionError(fmt, size, "format_version", f"the file is version {version}, version {required} was required")
    return version


def file_header(magic: bytes, version: int) -> bytes:
    """The magic then the ``format_version`` as ``Int16ul``."""
    return magic + version.to_bytes(2, "little")


def crc_parts(parts: list[Any], start: int) -> int:
    """The CRC-32 of ``parts[start:]`` taken in order (zlib releases the GIL on large buffers)."""
    crc = 0
    for part in parts[start:]:
        crc = zlib.crc32(part, crc)
    return crc


def out_size(parts: list[Any]) -> int:
    """Bytes written so far into a writer's list of parts (each bytes or a byte memoryview)."""
    return sum(len(part) for part in parts)


def as_bytes(fmt: str, path: str, obj: Any, max_len: int) -> bytes | bytearray | memoryview:
    """``obj`` as a flat byte buffer within ``max_len`` bytes; no copy for memoryviews."""
    if isinstance(obj, (bytes, bytearray)):
        data: bytes | bytearray | memoryview = obj
    elif isinstance(obj, memoryview):
        if not obj.c_contiguous:
            raise WriteValueError(fmt, path, "memoryview is not C-contiguous")
        data = obj if obj.format == "B" and obj.ndim == 1 else obj.cast("B")
    else:
        raise WriteTypeError(fmt, path, f"expected bytes, got {type(obj).__name__}")
    if len(data) > max_len:
        raise WriteValueError(fmt, path, f"length {len(data)} exceeds max_len({max_len})")
    return data


_ZEROS = bytes(4096)


def check_zero(fmt: str, buf: Any, off: int, size: int, path: str) -> None:
    """Padding bytes must be zero: any other byte would be a second encoding of the same value."""
    chunk = bytes(buf[off : off + size])
    if chunk != _ZEROS[:size]:
        bad = next(i for i, b in enumerate(chunk) if b)
        raise InvalidValueError(fmt, off + bad, path, f"padding byte is {chunk[bad]}, not 0")


# -- the MessagePack value subset: inert._value_doc ------------------------------------------------


def for_version(fmt: str, table: dict[int, Any], version: int) -> Any:
    """The reader or writer of ``version``; asking for one the module lacks is a caller mistake."""
    try:
        return table[version]
    except (KeyError, TypeError):
        raise ValueError(f"{fmt}: version {version!r} is not one of {tuple(sorted(table))}") from None
