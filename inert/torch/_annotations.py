"""The field annotations a registered class may use, compiled at ``register_type`` into checks run on load.

A checkpoint's fields are checked against them before the class is built, so
that a saved ``step='x'`` never reaches an ``int`` field.  Supported (and
nothing else: ``register_type`` refuses any other annotation, naming the class
and the field):

* ``int``, ``float`` (an int is taken), ``str``, ``bool``, ``bytes``,
  ``bytearray``, ``complex``, ``None``; a bool is never taken for an int or a float;
* ``numpy.ndarray``, ``torch.Size``, ``torch.dtype``, ``torch.device``, ``io.BytesIO``;
* another dataclass, NamedTuple or Enum class (registered itself to be saved);
* ``list[X]``, ``set[X]``, ``frozenset[X]``, ``tuple[X, ...]``, ``tuple[X, Y]``,
  ``dict[K, V]`` of supported annotations, and ``Optional[X]`` / ``X | Y``;
  the bare ``list``, ``tuple``, ``dict``, ``set`` and ``frozenset`` (their items
  are any value a checkpoint holds, not checked further), and ``typing.Any``
  (any such value).

``object``, a ``Callable``, a ``Literal``, a ``TypeVar`` and any
other class say nothing a value can be checked against: refused.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import types
import typing
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["Check", "compile_fields", "check_value", "SUPPORTED_ANNOTATIONS"]

#: For messages and docs.
SUPPORTED_ANNOTATIONS = ("int, float, str, bool, bytes, bytearray, complex, None, numpy.ndarray, torch.Size, "
                         "torch.dtype, torch.device, io.BytesIO, dataclass/NamedTuple/Enum classes, and list, tuple, "
                         "dict, set, frozenset and Optional/unions of these, typing.Any")

#: A check: the value, the path for the message -> None, or a TypeError saying what is wrong.
Check = Callable[[Any, str], None]

_LEAVES: dict[Any, tuple[type, ...]] = {
    int: (int,), float: (float, int), str: (str,), bool: (bool,), bytes: (bytes,), bytearray: (bytearray,),
    complex: (complex,), type(None): (type(None),), np.ndarray: (np.ndarray,), torch.Size: (torch.Size,),
    torch.dtype: (torch.dtype,), torch.device: (torch.device,), io.BytesIO: (io.BytesIO,),
}
_BARE = (list, tuple, dict, set, frozenset)
#: Builtin spellings, for an annotation string that cannot be evaluated where the class was made.
_SPELLED = {kind.__name__: kind for kind in (int, float, str, bool, bytes, bytearray, complex, list, tuple, dict,
                                             set, frozenset)} | {"None": type(None)}


class Unsupported(TypeError):
    """An annotation the values format cannot check."""


def _isinstance_check(allowed: tuple[type, ...]) -> Check:
    name = allowed[0].__qualname__

    def check(value: Any, path: str) -> None:
        if (type(value) is bool and bool not in allowed) or not isinstance(value, allowed):
            raise TypeError(f"{path} is annotated {name}, the checkpoint holds a {type(value).__qualname__}")
    return check


def _items_check(kind: type, item: Check) -> Check:
    def check(value: Any, path: str) -> None:
        if type(value) is not kind:
            raise TypeError(f"{path} is annotated {kind.__name__}, the checkpoint holds a {type(value).__qualname__}")
        for index, member in enumerate(typing.cast("list[Any]", value)):
            item(member, f"{path}[{index}]")
    return check


def _tuple_check(items: list[Check]) -> Check:
    def check(value: Any, path: str) -> None:
        if type(value) is not tuple or len(value) != len(items):
            raise TypeError(f"{path} is annotated a tuple of {len(items)}, the checkpoint holds a "
                            f"{type(value).__qualname__}" + (f" of {len(value)}" if isinstance(value, tuple) else ""))
        for index, (member, item) in enumerate(zip(value, items, strict=True)):
            item(member, f"{path}[{index}]")
    return check


def _dict_check(key: Check, item: Check) -> Check:
    def check(value: Any, path: str) -> None:
        if type(value) is not dict:
            raise TypeError(f"{path} is annotated dict, the checkpoint holds a {type(value).__qualname__}")
        for k, v in value.items():
            key(k, f"{path} key {k!r}"[:200])
            item(v, f"{path}[{k!r}]"[:200])
    return check


def _union_check(options: list[Check], spelled: str) -> Check:
    def check(value: Any, path: str) -> None:
        for option in options:
            try:
                option(value, path)
                return
            except TypeError:
                continue
        raise TypeError(f"{path} is annotated {spelled}, the checkpoint holds a {type(value).__qualname__}")
    return check


def _class_check(cls: type) -> Check:
    def check(value: Any, path: str) -> None:
        if not isinstance(value, cls):
            raise TypeError(f"{path} is annotated {cls.__qualname__}, the checkpoint holds a {type(value).__qualname__}")
    return check


def _any(value: Any, path: str) -> None:
    return None


def compile_annotation(hint: Any) -> Check:
    """The check for one annotation; :class:`Unsupported` for one the values format cannot check."""
    if hint is None:
        hint = type(None)
    if hint in _LEAVES:
        return _isinstance_check(_LEAVES[hint])
    if hint is Any:  # said so explicitly: any value the checkpoint holds (the values format made it)
        return _any
    if hint in _BARE:
        return _items_check(hint, _any) if hint is not dict else _dict_check(_any, _any)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _union_check([compile_annotation(a) for a in args], " | ".join(_spell(a) for a in args))
    if origin in (list, set, frozenset) and len(args) == 1:
        return _items_check(origin, compile_annotation(args[0]))
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _items_check(tuple, compile_annotation(args[0]))
        if args == ((),):  # tuple[()]
            return _tuple_check([])
        if args and Ellipsis not in args:
            return _tuple_check([compile_annotation(a) for a in args])
    if origin is dict and len(args) == 2:
        return _dict_check(compile_annotation(args[0]), compile_annotation(args[1]))
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or issubclass(hint, enum.Enum)
                                   or (issubclass(hint, tuple) and hasattr(hint, "_fields"))):
        return _class_check(hint)
    raise Unsupported(f"{_spell(hint)} is not an annotation a checkpoint's value can be checked against "
                      f"(supported: {SUPPORTED_ANNOTATIONS})")


def _spell(hint: Any) -> str:
    if hint is type(None):
        return "None"
    return hint.__qualname__ if isinstance(hint, type) else repr(hint)


def _field_names(cls: Any) -> list[str]:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if f.init]
    return list(cls._fields)  # a NamedTuple


def _hints(cls: Any, registered: dict[str, type]) -> dict[str, Any]:
    """The resolved annotations; names local to a function resolve to the builtins and the registered classes."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a name local to where the class was made
        local = {kind.__name__: kind for kind in registered.values()} | {cls.__name__: cls}
        hints: dict[str, Any] = {}
        for base in reversed(getattr(cls, "__mro__", ())):
            for name, hint in getattr(base, "__annotations__", {}).items():
                if isinstance(hint, str):
                    try:
                        hint = eval(hint, {**vars(typing), **_SPELLED, **local}, {})  # noqa: S307 - the class's own source
                    except Exception:  # noqa: BLE001
                        raise Unsupported(f"register_type: {cls.__qualname__}.{name}: annotation {hint!r} cannot be "
                                          "resolved: define the type at module level or register it first") from None
                hints[name] = hint
        return hints


def compile_fields(cls: Any, registered: dict[str, type]) -> dict[str, Check]:
    """A check per field of a dataclass or NamedTuple ``cls``; a ``TypeError`` naming the class and the field
    for an annotation that cannot be checked (or a field without one)."""
    hints = _hints(cls, registered) if not isinstance(cls, type) or not issubclass(cls, enum.Enum) else {}
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        return {}
    checks: dict[str, Check] = {}
    for name in _field_names(cls):
        if name not in hints:
            raise TypeError(f"register_type: {cls.__qualname__}.{name} has no annotation to check its value against")
        try:
            checks[name] = compile_annotation(hints[name])
        except Unsupported as exc:
            raise TypeError(f"register_type: {cls.__qualname__}.{name}: {exc}") from None
    return checks


def check_value(checks: dict[str, Check], state: dict[str, Any]) -> None:
    """Each field present in ``state`` passes its check; a ``TypeError`` names the first that does not."""
    for name, check in checks.items():
        if name in state:
            check(state[name], f"field {name!r}")
