"""Non-tensor values of a state dict, to and from the value subset's typed extensions.

Saving turns numpy arrays and scalars, ``torch.Size``, ``torch.dtype``,
``torch.device`` and objects of registered classes into the codecs' typed
values (``inert._value_types``); loading turns them back.  ``io.BytesIO`` and
the plain types (None, bool, int, float, str, bytes, bytearray, complex,
list, tuple, dict, set, frozenset) pass as they are.

A registered class is stored as its field values and the name it was
registered under; a load rebuilds it only if the loading program registered
a class under the same name: nothing is imported or looked up by name
outside the registry.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import threading
from typing import Any

import numpy as np
import torch

from inert._errors import InvalidValueError, WriteTypeError
from inert._value_types import ARRAY_DTYPES, ArrayValue, DeviceValue, DTypeValue, ObjectValue, SizeValue

from ._annotations import Check, check_value, compile_fields
from ._compat import dtype_name

__all__ = ["register_type", "unregister_type", "to_document", "from_document", "SUPPORTED"]

#: What a value may hold, for messages and docs/torch.md.
SUPPORTED = ("None, bool, int, float, complex, str, bytes, bytearray, io.BytesIO, list, tuple, dict, set, frozenset, "
             "numpy arrays and scalars, torch.Size, torch.dtype, torch.device, and registered classes")
_PLAIN = frozenset((type(None), bool, int, float, complex, str, bytes, bytearray, io.BytesIO))
_CONTAINERS = frozenset((list, tuple, dict, set, frozenset))
_NUMPY = {np.dtype(name.lower()).newbyteorder("<"): name for name in ARRAY_DTYPES}
_NUMPY_OF = {name: dtype for dtype, name in _NUMPY.items()}

_FORMAT = "checkpoint-shard"
#: torch keeps a device index in 8 signed bits (c10::DeviceIndex), so the largest is 127.
_MAX_DEVICE_INDEX = 127
_lock = threading.Lock()
_by_name: dict[str, type] = {}
_by_class: dict[type, str] = {}
#: Per registered class, the check of each field's annotation run on load (compiled at register_type time: a
#: string annotation is evaluated then, by the registering program, never while a checkpoint is read).
_checked_fields: dict[type, dict[str, Check]] = {}


def register_type(cls: type, name: str | None = None) -> type:
    """Let values of ``cls`` (a dataclass, a NamedTuple or an Enum) be saved and rebuilt on load.

    The saving and the loading program both register it; ``name`` (default
    ``module.QualName``) is what the checkpoint records, so a class that moves
    keeps loading when registered under its old name.  Every field's annotation
    must be one a checkpoint's value can be checked against on load
    (``inert.torch._annotations``: int, float, str, bool, bytes, containers and
    Optional of them, other registered classes, ...); any other (``object``,
    ``Any``, a ``Callable``, an unknown class) is a ``TypeError`` naming the
    class and the field, here rather than at load.  Returns ``cls``, so it
    also serves as a decorator::

        @inert.torch.register_type
        @dataclasses.dataclass
        class SchedulerState:
            step: int
            warmup: int
    """
    if not (dataclasses.is_dataclass(cls) or _is_namedtuple(cls) or (isinstance(cls, type) and issubclass(cls, enum.Enum))):
        raise TypeError(f"register_type: {cls!r} is not a dataclass, NamedTuple or Enum class")
    name = name or f"{cls.__module__}.{cls.__qualname__}"
    if not 0 < len(name.encode()) <= 256:
        raise ValueError(f"register_type: name {name!r} must have 1 to 256 bytes")
    with _lock:
        registered = dict(_by_name)
    fields = compile_fields(cls, registered)
    with _lock:
        if _by_name.get(name, cls) is not cls:
            raise ValueError(f"register_type: {name!r} is already registered for {_by_name[name]!r}")
        _by_name[name] = cls
        _by_class[cls] = name
        _checked_fields[cls] = fields
    return cls


def unregister_type(cls: type) -> None:
    """Undo :func:`register_type` for ``cls``."""
    with _lock:
        name = _by_class.pop(cls, None)
        if name is not None:
            _by_name.pop(name, None)
        _checked_fields.pop(cls, None)


def _is_namedtuple(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields") and hasattr(cls, "_asdict")


def _how(kind: type) -> str:
    return (f"{kind.__module__}.{kind.__qualname__} is not a value a checkpoint can hold ({SUPPORTED}); "
            f"for a dataclass, NamedTuple or Enum of your own, call inert.torch.register_type({kind.__qualname__}) "
            "in the program that saves and the one that loads; otherwise convert it to those types first")


def _array(value: np.ndarray | np.generic, path: str) -> ArrayValue:
    name = _NUMPY.get(value.dtype.newbyteorder("<"))
    if name is None:
        raise WriteTypeError(_FORMAT, path, f"numpy dtype {value.dtype} has no checkpoint encoding "
                             f"(supported: {', '.join(sorted(n.lower() for n in ARRAY_DTYPES))})")
    little = np.asarray(value, dtype=_NUMPY_OF[name])  # byte-swapped if it was big-endian
    data = np.ascontiguousarray(little).tobytes()
    if isinstance(value, np.generic):
        return ArrayValue(name, (), data, scalar=True)
    return ArrayValue(name, tuple(little.shape), data)


def _plain(value: Any) -> bool:
    """A container of plain values only (the common case: a list of ints, a dict of floats), kept as it is."""
    if type(value) is dict:
        return _PLAIN.issuperset(map(type, value)) and _PLAIN.issuperset(map(type, value.values()))
    return _PLAIN.issuperset(map(type, value))  # a loop in C: about a third of a generator's time


def to_document(value: Any, path: str) -> Any:
    """``value`` with every host type turned into its typed value; a ``TypeError`` names the path of one that has none."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind in _CONTAINERS and _plain(value):
        return value
    if kind is list:
        return [to_document(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind is tuple:
        return tuple(to_document(v, f"{path}[{i}]") for i, v in enumerate(value))
    if kind is dict:
        return {_key(k, f"{path}<key {k!r}>"): to_document(v, f"{path}[{k!r}]") for k, v in value.items()}
    if kind in (set, frozenset):
        return kind(_key(v, f"{path}<member>") for v in value)
    if isinstance(value, (np.ndarray, np.generic)) and kind.__module__ == "numpy":
        return _array(value, path)
    if kind is torch.Size:
        return SizeValue(tuple(int(d) for d in value))
    if kind is torch.dtype:
        try:
            return DTypeValue(dtype_name(value, path))
        except TypeError as exc:
            raise WriteTypeError(_FORMAT, path, str(exc).removeprefix(f"{path}: ")) from None
    if kind is torch.device:
        return DeviceValue(value.type, value.index)
    name = _by_class.get(kind)
    if name is None:
        if isinstance(value, torch.Tensor):
            raise WriteTypeError(_FORMAT, path, "a tensor inside a non-tensor value has no checkpoint encoding; "
                                 "keep tensors at the leaves of dicts and lists of the state dict")
        raise WriteTypeError(_FORMAT, path, _how(kind))
    if isinstance(value, enum.Enum):
        state = value.value
    elif _is_namedtuple(kind):
        state = dict(value._asdict())
    else:
        state = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
    return ObjectValue(name, to_document(state, path))


def _key(value: Any, path: str) -> Any:
    """A map key or set member: its stored form must hash too, or the reader would refuse it."""
    stored = to_document(value, path)
    try:
        hash(stored)
    except TypeError:
        raise WriteTypeError(_FORMAT, path, f"a {type(value).__qualname__} is stored as its fields, which do not hash: "
                             "it cannot be a map key or set member") from None
    return stored


def from_document(value: Any, path: str) -> Any:
    """A decoded value with every typed value turned back into its host type."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind in _CONTAINERS and _plain(value):
        return value
    if kind is list:
        return [from_document(v, path) for v in value]
    if kind is tuple:
        return tuple(from_document(v, path) for v in value)
    if kind is dict:
        return {from_document(k, path): from_document(v, path) for k, v in value.items()}
    if kind in (set, frozenset):
        return kind(from_document(v, path) for v in value)
    if kind is ArrayValue:
        try:
            array = np.frombuffer(value.data, dtype=_NUMPY_OF[value.dtype]).reshape(value.shape)
        except (ValueError, OverflowError):  # a dimension past numpy's intp, e.g. (0, 2**63) or (2**62, 0, 4)
            raise InvalidValueError(_FORMAT, -1, path, f"the checkpoint holds an array of shape {value.shape}, "
                                    "which numpy cannot make") from None
        return array[()] if value.scalar else array.copy()  # a writable array, as np.load gives
    if kind is SizeValue:
        return torch.Size(value.dims)
    if kind is DTypeValue:
        from ._compat import torch_dtype

        return torch_dtype(value.name, path)
    if kind is DeviceValue:
        if value.index is not None and value.index > _MAX_DEVICE_INDEX:  # torch would wrap 128 to -128, 256 to 0
            raise InvalidValueError(_FORMAT, -1, path, f"the checkpoint holds device index {value.index}, above "
                                    f"{_MAX_DEVICE_INDEX}, the largest PyTorch keeps")
        try:
            return torch.device(value.type, value.index)
        except RuntimeError as exc:  # a device type this torch does not know
            raise InvalidValueError(_FORMAT, -1, path, f"the checkpoint holds device {value.type!r}, which PyTorch "
                                    f"{torch.__version__} does not know ({exc})") from None
    if kind is ObjectValue:
        return _rebuild(value, path)
    raise TypeError(f"{path}: {kind.__qualname__} is not a decoded value")  # pragma: no cover - the codec gives none


def _rebuild(value: ObjectValue, path: str) -> Any:
    cls = _by_name.get(value.name)
    if cls is None:
        # The file names a class; only the loading program's registry can give one (nothing is imported by name).
        raise InvalidValueError(_FORMAT, -1, path, f"the checkpoint holds an object registered as {value.name!r} when it "
                                f"was saved; register that class before loading: "
                                f"inert.torch.register_type(cls, name={value.name!r})")
    state = from_document(value.state, path)
    try:
        if issubclass(cls, enum.Enum):
            _check_flag_bits(cls, state)
            return cls(state)
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise TypeError("its state is not a map of field names")
        check_value(_checked_fields.get(cls, {}), state)
        return cls(**state)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - the class's own code (__init__, __post_init__) runs here: any fault
        raise InvalidValueError(_FORMAT, -1, path, f"the saved {value.name!r} does not fit the registered "
                                f"{cls.__qualname__}: {type(exc).__name__}: {_text(exc)}") from None


def _text(exc: BaseException) -> str:
    """``str(exc)``, at most 300 characters; the class's own exception may not even print."""
    try:
        return str(exc)[:300]
    except Exception:  # noqa: BLE001
        return "(its message cannot be printed)"


def _check_flag_bits(cls: Any, state: Any) -> None:
    """A flag's saved value holds only bits its class defines (IntFlag would keep any others)."""
    if issubclass(cls, enum.Flag) and type(state) is int:
        defined = 0
        for member in cls.__members__.values():
            defined |= member.value
        if state & ~defined:
            raise ValueError(f"{state} holds bits {cls.__qualname__} does not define")
