"""Run-time helpers the generated codecs call (standard library and msgpack only).

Kept small on purpose: the generated modules hold the per-field logic; this
module holds what would otherwise be repeated in every one of them.
"""

from __future__ import annotations

import io
import operator
import struct
import zlib
from typing import Any

import msgpack

from inert._checks import describe_foreign
from inert._errors import (
    ERROR_CLASSES,
    ForeignFormatError,
    InertError,
    InvalidValueError,
    LimitError,
    TrailingBytesError,
    TruncatedError,
    UnknownTagError,
    VersionError,
    WriteTypeError,
    WriteValueError,
)
from inert._value_types import (
    TYPED_CODES,
    ArrayValue,
    DeviceValue,
    DTypeValue,
    ObjectValue,
    SizeValue,
    decode_typed,
    encode_typed,
)
from inert._value_types import _Fault as TypedFault

__all__ = [
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


def cached_text(cache: dict[bytes, str], raw: bytes) -> str:
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
            return TruncatedError(fmt, base + rel, path, f"{width} bytes needed, {have} present")
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


# -- the MessagePack value subset ---------------------------------------------
#
# A value document holds None, bool, int (-2**63 .. 2**64-1), float, str, bytes,
# list and dict (any keys the subset can hash), plus these extension codes.
# Every other type, and every other extension code (including msgpack's -1
# timestamp), is refused.


EXT_TUPLE = 1  # payload: a MessagePack array
EXT_COMPLEX = 2  # payload: real then imaginary part, two Float64l
EXT_BYTEARRAY = 3  # payload: the raw bytes
EXT_SET = 4  # payload: a MessagePack array
EXT_FROZENSET = 5  # payload: a MessagePack array
EXT_CODES = {EXT_TUPLE: "tuple", EXT_COMPLEX: "complex", EXT_BYTEARRAY: "bytearray", EXT_SET: "set", EXT_FROZENSET: "frozenset"}

_COMPLEX = struct.Struct("<dd")
#: Typed extensions without a document inside (a registered object's state is walked as a container).
_TYPED_LEAVES = (io.BytesIO, ArrayValue, SizeValue, DTypeValue, DeviceValue)
_EXT_OF: dict[type, int] = {tuple: EXT_TUPLE, set: EXT_SET, frozenset: EXT_FROZENSET}
_SCALARS = (type(None), bool, int, float, str, bytes)
_CONTAINERS = (list, tuple, set, frozenset)


class _Unpack:
    """One decode of a value document: limits, the extension hook and its nesting."""

    def __init__(self, fmt: str, base: int, path: str, max_depth: int) -> None:
        self.fmt, self.base, self.path, self.max_depth = fmt, base, path, max_depth
        self.ext_depth = 0

    def unpack(self, data: Any) -> Any:
        n = len(data)
        return msgpack.unpackb(
            data, raw=False, strict_map_key=False, use_list=True, ext_hook=self.ext_hook,
            max_str_len=n, max_bin_len=n, max_array_len=n, max_map_len=n, max_ext_len=n,
        )

    def ext_hook(self, code: int, payload: bytes) -> Any:
        if code == EXT_COMPLEX:
            if len(payload) != 16:
                raise InvalidValueError(self.fmt, self.base, self.path, f"complex extension holds {len(payload)} bytes, not 16")
            return complex(*_COMPLEX.unpack(payload))
        if code == EXT_BYTEARRAY:
            return bytearray(payload)
        if code in (EXT_TUPLE, EXT_SET, EXT_FROZENSET):
            items = self.nested(payload)
            if not isinstance(items, list):
                raise InvalidValueError(self.fmt, self.base, self.path, f"{EXT_CODES[code]} extension does not hold an array")
            return tuple(items) if code == EXT_TUPLE else (set(items) if code == EXT_SET else frozenset(items))
        if code in TYPED_CODES:
            try:
                return decode_typed(code, payload, self.nested)
            except TypedFault as fault:
                reason = f"{TYPED_CODES[code]} extension: {fault.reason}"
                raise ERROR_CLASSES[fault.kind](self.fmt, self.base, self.path, reason) from None
        raise UnknownTagError(self.fmt, self.base, self.path, f"unknown extension code {code}")

    def nested(self, payload: bytes) -> Any:
        """A document inside an extension: bound the Python recursion it causes."""
        if self.ext_depth >= self.max_depth:
            raise LimitError(self.fmt, self.base, self.path, f"nesting exceeds max_depth({self.max_depth})")
        self.ext_depth += 1
        try:
            return self.unpack(payload)
        finally:
            self.ext_depth -= 1


def _check_tree(fmt: str, base: int, path: str, value: Any, max_depth: int) -> None:
    """Every node is of the subset and no deeper than ``max_depth`` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        if kind in _SCALARS or kind is complex or kind is bytearray or kind in _TYPED_LEAVES:
            continue
        if depth > max_depth:
            raise LimitError(fmt, base, path, f"nesting exceeds max_depth({max_depth})")
        if kind is ObjectValue:  # its state is a document of the subset too
            stack.append((node.state, depth + 1))
            continue
        if kind is dict:
            stack.extend((k, depth + 1) for k in node)
            stack.extend((v, depth + 1) for v in node.values())
        elif kind in _CONTAINERS:
            stack.extend((v, depth + 1) for v in node)
        else:  # msgpack's own extension types (the -1 timestamp)
            raise UnknownTagError(fmt, base, path, f"value of type {kind.__name__} is outside the declared subset")


def unpack_value(fmt: str, data: Any, base: int, path: str, max_depth: int) -> Any:
    """Decode one value document; any fault is an ``InertError`` at offset ``base``."""
    try:
        value = _Unpack(fmt, base, path, max_depth).unpack(data)
    except InertError:
        raise
    except msgpack.ExtraData:
        raise TrailingBytesError(fmt, base, path, "bytes after the end of the value document") from None
    except msgpack.OutOfData:
        raise TruncatedError(fmt, base, path, "value document ends inside a value") from None
    except msgpack.StackError:
        raise LimitError(fmt, base, path, f"nesting exceeds max_depth({max_depth})") from None
    except UnicodeDecodeError:
        raise InvalidValueError(fmt, base, path, "invalid UTF-8 in a string") from None
    except (ValueError, TypeError, OverflowError) as exc:  # FormatError, limits, unhashable keys
        text = str(exc)
        if "incomplete input" in text:
            raise TruncatedError(fmt, base, path, "value document ends inside a value") from None
        if "exceeds max_" in text:  # a count or length beyond the bytes present
            raise LimitError(fmt, base, path, f"value document: {text[:120]}") from None
        raise InvalidValueError(fmt, base, path, f"malformed value document: {text[:120]}") from None
    _check_tree(fmt, base, path, value, max_depth)
    return value


def _item_path(path: str, key: Any) -> str:
    return f"{path}[{key!r}]"


def _prepare(fmt: str, path: str, value: Any, depth: int, max_depth: int) -> Any:
    """``value`` checked against the subset, with the extension types wrapped for the packer."""
    kind = type(value)
    if kind in _SCALARS:
        if kind is int and not -(1 << 63) <= value < (1 << 64):
            raise WriteValueError(fmt, path, f"int {value} is outside the 64-bit range")
        return value
    if kind is complex:
        return msgpack.ExtType(EXT_COMPLEX, _COMPLEX.pack(value.real, value.imag))
    if kind is bytearray:
        return msgpack.ExtType(EXT_BYTEARRAY, bytes(value))
    if depth >= max_depth:
        raise WriteValueError(fmt, path, f"nesting exceeds max_depth({max_depth})")
    if kind is list:
        return [_prepare(fmt, _item_path(path, i), v, depth + 1, max_depth) for i, v in enumerate(value)]
    if kind is dict:
        sub = depth + 1
        return {
            _prepare(fmt, f"{path}<key {k!r}>", k, sub, max_depth): _prepare(fmt, _item_path(path, k), v, sub, max_depth)
            for k, v in value.items()
        }
    code = _EXT_OF.get(kind)
    if code is None:
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
    items = [_prepare(fmt, _item_path(path, i), v, depth + 1, max_depth) for i, v in enumerate(value)]
    if code != EXT_TUPLE:  # a set's members in the order of their encodings: equal sets, equal bytes
        items.sort(key=lambda item: msgpack.packb(item, use_bin_type=True, strict_types=True))
    return msgpack.ExtType(code, msgpack.packb(items, use_bin_type=True, strict_types=True))


def pack_value(fmt: str, path: str, value: Any, max_len: int, max_depth: int) -> bytes:
    """One value document; ``WriteTypeError`` names the type and path of a value outside the subset."""
    data = msgpack.packb(_prepare(fmt, path, value, 0, max_depth), use_bin_type=True, strict_types=True)
    if len(data) > max_len:
        raise WriteValueError(fmt, path, f"value document of {len(data)} bytes exceeds max_len({max_len})")
    return data


def for_version(fmt: str, table: dict[int, Any], version: int) -> Any:
    """The reader or writer of ``version``; asking for one the module lacks is a caller mistake."""
    try:
        return table[version]
    except (KeyError, TypeError):
        raise ValueError(f"{fmt}: version {version!r} is not one of {tuple(sorted(table))}") from None
