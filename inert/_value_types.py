"""The typed extensions of the MessagePack value subset (codes 6 to 12), as the codecs read and write them.

The codecs need neither numpy nor torch: a typed extension decodes to one of
the small frozen dataclasses below (``io.BytesIO`` excepted: the standard
library has it), and a host adapter (``inert.torch``) turns them into numpy
arrays, ``torch.Size``, ``torch.dtype``, ``torch.device`` or a class the
loading program registered.  Nothing in a document names an importable
object: a dtype is a ``DType`` code, a registered object carries the name its
writer registered it under, which only a loading program's own registry
resolves.

Payloads (all integers little-endian):

* 6 ``io.BytesIO``: its bytes.
* 7 array: ``dtype`` (``UInt8``, a checkpoint ``DType`` numpy has: not
  BFLOAT16 nor the FLOAT8 types), ``ndim`` (``UInt8``, at most 64), ``ndim``
  dims (``UInt64``), then exactly ``prod(dims) * itemsize`` bytes, C order.
* 8 array scalar (a numpy scalar): ``dtype`` as in 7, then ``itemsize`` bytes.
* 9 ``torch.Size``: a document holding an array of ints, each 0 to 2**63-1, at most 64.
* 10 ``torch.dtype``: ``dtype`` (``UInt8``), any checkpoint ``DType``.
* 11 ``torch.device``: a document holding ``[type, index]``: ``type`` a string of
  1 to 32 characters ``[a-z][a-z0-9_]*``, ``index`` nil or an int 0 to 2**31-1.
* 12 registered object: a document holding ``[name, state]``: ``name`` a string
  of 1 to 256 bytes, ``state`` any value of the subset.

A BOOL array or scalar holds only the bytes 0 and 1, as a tensor record does.
Arrays, array scalars and registered objects whose state is a map do not hash:
as a map key or set member they are an invalid value.
"""

from __future__ import annotations

import dataclasses
import io
import re
import struct
from typing import Any

from inert._checks import _DTYPE_NAMES, CHECKPOINT_ITEMSIZES
from inert._errors import byte_count

__all__ = [
    "ArrayValue", "SizeValue", "DTypeValue", "DeviceValue", "ObjectValue", "TYPED_CODES", "ARRAY_DTYPES",
    "decode_typed", "encode_typed",
]

EXT_BYTESIO = 6
EXT_ARRAY = 7
EXT_ARRAY_SCALAR = 8
EXT_SIZE = 9
EXT_DTYPE = 10
EXT_DEVICE = 11
EXT_OBJECT = 12
TYPED_CODES = {
    EXT_BYTESIO: "BytesIO", EXT_ARRAY: "array", EXT_ARRAY_SCALAR: "array scalar", EXT_SIZE: "torch.Size",
    EXT_DTYPE: "torch.dtype", EXT_DEVICE: "torch.device", EXT_OBJECT: "registered object",
}
MAX_NDIM = 64
MAX_DEVICE_INDEX = (1 << 31) - 1
MAX_OBJECT_NAME = 256
#: The checkpoint dtypes numpy has natively (arrays and array scalars hold only these).
ARRAY_DTYPES = frozenset(_DTYPE_NAMES[:15]) - {"BFLOAT16"}
#: Longest device type name (``cuda``, ``privateuseone``), in characters.
MAX_DEVICE_TYPE = 32
_DEVICE_TYPE = re.compile(rf"[a-z][a-z0-9_]{{0,{MAX_DEVICE_TYPE - 1}}}\Z")
_HEAD = struct.Struct("<BB")


@dataclasses.dataclass(frozen=True)
class ArrayValue:
    """A numpy array (``scalar`` False) or numpy scalar: dtype name, shape, raw little-endian C-order bytes."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes
    scalar: bool = False

    # Unhashable, as numpy arrays are: an array as a map key or set member is refused when decoded.
    __hash__ = None  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class SizeValue:
    """A ``torch.Size``."""

    dims: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class DTypeValue:
    """A ``torch.dtype``, by its checkpoint ``DType`` name."""

    name: str


@dataclasses.dataclass(frozen=True)
class DeviceValue:
    """A ``torch.device``: its type and index (None: no index)."""

    type: str
    index: int | None


@dataclasses.dataclass(frozen=True)
class ObjectValue:
    """An object of a class its writer registered under ``name``, as the state it was encoded to."""

    name: str
    state: Any


def _dtype_code(name: str) -> int:
    return _DTYPE_NAMES.index(name) + 1


def _dtype_at(code: int, allowed: Any) -> str:
    """The ``DType`` name of ``code``, or a ``(kind, reason)`` fault raised by the caller."""
    if not 1 <= code <= len(_DTYPE_NAMES):
        raise _Fault("unknown-tag", f"unknown dtype code {code}")
    name = _DTYPE_NAMES[code - 1]
    if name not in allowed:
        raise _Fault("invalid-value", f"dtype {name} is not one numpy has")
    return name


class _Fault(Exception):
    """A typed payload that breaks its rule: the codec runtime turns it into the ``InertError`` of ``kind``."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason


def _check_bools(name: str, data: bytes) -> None:
    if name == "BOOL" and data.count(0) + data.count(1) != len(data):
        raise _Fault("invalid-value", "a boolean byte other than 0 and 1")


def _array(payload: bytes) -> ArrayValue:
    if len(payload) < 2:
        raise _Fault("truncated", f"array extension of {byte_count(len(payload))}, its header needs 2")
    code, ndim = _HEAD.unpack_from(payload)
    name = _dtype_at(code, ARRAY_DTYPES)
    if ndim > MAX_NDIM:
        raise _Fault("limit", f"{ndim} dims exceed max_ndim({MAX_NDIM})")
    start = 2 + 8 * ndim
    if len(payload) < start:
        raise _Fault("truncated", f"{ndim} dims declared, {(len(payload) - 2) // 8} present")
    shape = struct.unpack_from(f"<{ndim}Q", payload, 2)
    size = 0 if 0 in shape else CHECKPOINT_ITEMSIZES[name]
    for dim in shape:
        size *= dim
        if size > len(payload):  # checked as it grows (no dim is 0): a forged shape never makes a huge int
            break
    if size != len(payload) - start:
        wanted = size if size <= len(payload) else "more"
        raise _Fault("invalid-value", f"{byte_count(len(payload) - start)} present, shape and dtype give {wanted}")
    data = payload[start:]
    _check_bools(name, data)
    return ArrayValue(name, shape, data)


def _scalar(payload: bytes) -> ArrayValue:
    if not payload:
        raise _Fault("truncated", "array scalar extension of 0 bytes")
    name = _dtype_at(payload[0], ARRAY_DTYPES)
    data = payload[1:]
    if len(data) != CHECKPOINT_ITEMSIZES[name]:
        raise _Fault("invalid-value", f"{byte_count(len(data))} present, dtype {name} takes {CHECKPOINT_ITEMSIZES[name]}")
    _check_bools(name, data)
    return ArrayValue(name, (), data, scalar=True)


def decode_typed(code: int, payload: bytes, nested: Any) -> Any:
    """The value of a typed extension; ``nested(payload)`` decodes an inner document (depth-bounded).

    A payload that breaks its rule raises ``_Fault``.
    """
    if code == EXT_BYTESIO:
        return io.BytesIO(payload)
    if code == EXT_ARRAY:
        return _array(payload)
    if code == EXT_ARRAY_SCALAR:
        return _scalar(payload)
    if code == EXT_DTYPE:
        if len(payload) != 1:
            raise _Fault("invalid-value", f"torch.dtype extension holds {byte_count(len(payload))}, not 1")
        return DTypeValue(_dtype_at(payload[0], _DTYPE_NAMES))
    inner = nested(payload)
    if code == EXT_SIZE:
        if type(inner) is not list or len(inner) > MAX_NDIM or any(type(d) is not int or not 0 <= d < 1 << 63 for d in inner):
            raise _Fault("invalid-value", f"torch.Size extension does not hold an array of at most {MAX_NDIM} ints 0..2**63-1")
        return SizeValue(tuple(inner))
    if code == EXT_DEVICE:
        if (type(inner) is not list or len(inner) != 2 or type(inner[0]) is not str or not _DEVICE_TYPE.match(inner[0])
                or not (inner[1] is None or (type(inner[1]) is int and 0 <= inner[1] <= MAX_DEVICE_INDEX))):
            raise _Fault("invalid-value", "torch.device extension does not hold [type, index]")
        return DeviceValue(inner[0], inner[1])
    named = type(inner) is list and len(inner) == 2 and type(inner[0]) is str
    if not named or not 0 < len(inner[0].encode()) <= MAX_OBJECT_NAME:
        raise _Fault("invalid-value", f"registered object extension does not hold [name of 1 to {MAX_OBJECT_NAME} bytes, state]")
    return ObjectValue(inner[0], inner[1])


def encode_typed(value: Any, pack: Any) -> tuple[int, bytes] | None:
    """``(code, payload)`` of a typed value, None for any other; ``pack(v)`` packs an inner document.

    A typed value that breaks its rule is a ``ValueError`` (the runtime names the field).
    """
    kind = type(value)
    if kind is io.BytesIO:
        return EXT_BYTESIO, value.getvalue()
    if kind is ArrayValue:
        if value.dtype not in ARRAY_DTYPES:
            raise ValueError(f"array dtype {value.dtype} is not one numpy has")
        data = bytes(value.data)
        if value.scalar:
            if value.shape or len(data) != CHECKPOINT_ITEMSIZES[value.dtype]:
                raise ValueError("an array scalar has shape () and itemsize bytes")
            _checked_bools(value.dtype, data)
            return EXT_ARRAY_SCALAR, bytes([_dtype_code(value.dtype)]) + data
        shape = tuple(value.shape)
        if len(shape) > MAX_NDIM:
            raise ValueError(f"{len(shape)} dims exceed max_ndim({MAX_NDIM})")
        size = CHECKPOINT_ITEMSIZES[value.dtype]
        for dim in shape:
            size *= dim
        if size != len(data):
            raise ValueError(f"{byte_count(len(data))} given, shape and dtype give {size}")
        _checked_bools(value.dtype, data)
        return EXT_ARRAY, _HEAD.pack(_dtype_code(value.dtype), len(shape)) + struct.pack(f"<{len(shape)}Q", *shape) + data
    if kind is DTypeValue:
        if value.name not in _DTYPE_NAMES:
            raise ValueError(f"dtype {value.name} is not a checkpoint dtype")
        return EXT_DTYPE, bytes([_dtype_code(value.name)])
    if kind is SizeValue:
        dims = list(value.dims)
        if len(dims) > MAX_NDIM or any(type(d) is not int or not 0 <= d < 1 << 63 for d in dims):
            raise ValueError(f"a torch.Size of at most {MAX_NDIM} dims, each 0..2**63-1")
        return EXT_SIZE, pack(dims)
    if kind is DeviceValue:
        if not _DEVICE_TYPE.match(value.type) or not (value.index is None or 0 <= value.index <= MAX_DEVICE_INDEX):
            raise ValueError(f"device {value.type!r}:{value.index!r} is outside [a-z][a-z0-9_]{{0,31}} and 0..2**31-1")
        return EXT_DEVICE, pack([value.type, value.index])
    if kind is ObjectValue:
        if type(value.name) is not str or not 0 < len(value.name.encode()) <= MAX_OBJECT_NAME:
            raise ValueError(f"a registered name has 1 to {MAX_OBJECT_NAME} bytes")
        return EXT_OBJECT, pack([value.name, value.state])
    return None


def _checked_bools(name: str, data: bytes) -> None:
    try:
        _check_bools(name, data)
    except _Fault as fault:
        raise ValueError(fault.reason) from None
