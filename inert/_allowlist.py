"""The allowlisted unpickler for a legacy DCP ``.metadata``: only DCP's metadata classes and the torch values they hold.

``find_class`` answers from fixed tables and never imports by name: a
``(module, name)`` pair outside them raises :class:`RefusedGlobal` before
anything is called, so a ``.metadata`` naming ``os.system`` runs nothing.
The tables follow how each allowed object pickles (``__reduce__`` in torch):

* DCP's dataclasses (``Metadata``, ``TensorStorageMetadata``,
  ``ChunkStorageMetadata``, ``BytesStorageMetadata``, ``TensorProperties``,
  ``MetadataIndex``, ``StorageMeta``, ``_StorageInfo``) by their module and
  name; ``TensorProperties`` also in ``torch.distributed._shard.sharded_tensor.metadata``
  (PyTorch 2.2) and its memory-format enum ``_MEM_FORMAT_ENCODING``;
* ``torch.Size``, a dtype as ``torch.<name>``, a layout as
  ``torch.serialization._get_layout("torch.strided")`` (answered with a
  lookup that knows only torch's layouts), a memory format as
  ``torch._utils.torch.contiguous_format``;
* ``collections.OrderedDict`` and ``pathlib`` paths (``StorageMeta.checkpoint_id``).

It builds instances of those classes and nothing else: BUILD (set a state) only on
a new instance of one of DCP's classes, SETITEM(S) only on a dict, APPEND(S) only on
a list, so a pickle cannot change a class, a module or a shared object (replacing
``pathlib.PurePath.__truediv__`` for the rest of the process, say).

``ALLOWED`` lists the names without importing torch, so ``inert inspect`` can
say whether a legacy ``.metadata`` would pass.
"""

from __future__ import annotations

import collections
import io
import pickle
import types
from typing import Any

__all__ = ["ALLOWED", "RefusedGlobal", "MalformedPickle", "is_allowed", "load_legacy_metadata"]

_DCP = "torch.distributed.checkpoint.metadata"
_DCP_CLASSES = ("Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "BytesStorageMetadata",
                "TensorProperties", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")
_PATHS = ("PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath", "Path", "PurePath")
_DTYPES = ("bool", "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "half",
           "bfloat16", "float32", "float", "float64", "double", "complex32", "complex64", "complex128",
           "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "qint8", "quint8",
           "qint32", "quint4x2", "quint2x4")
_LAYOUTS = ("strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn", "jagged")
_FORMATS = ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")

#: Every ``module.name`` the unpickler answers.
ALLOWED: frozenset[str] = frozenset(
    [f"{_DCP}.{name}" for name in _DCP_CLASSES]
    + ["torch.distributed._shard.sharded_tensor.metadata.TensorProperties",
       "torch.distributed._shard.sharded_tensor.metadata.MEM_FORMAT_ENCODING",
       "torch.distributed.checkpoint.filesystem._StorageInfo", "torch.Size", "torch.serialization._get_layout",
       "collections.OrderedDict"]
    + [f"torch.{name}" for name in _DTYPES]
    + [f"torch._utils.torch.{name}" for name in _FORMATS]
    + [f"{module}.{name}" for module in ("pathlib", "pathlib._local") for name in _PATHS]
)


class RefusedGlobal(pickle.UnpicklingError):
    """The pickle names something outside the allowlist; nothing it names was imported or called.

    ``offset``: how far the unpickler had read when it refused (set by :func:`load_legacy_metadata`).
    """

    offset = -1


class MalformedPickle(pickle.UnpicklingError):
    """The bytes are not a well-formed pickle (truncated, an opcode on a stack too short, a key that does not hash).

    ``offset``: how far the unpickler had read; ``truncated``: the bytes ended before the pickle did.
    """

    def __init__(self, offset: int, reason: str, truncated: bool = False) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason
        self.truncated = truncated


def is_allowed(name: str) -> bool:
    return name in ALLOWED


def _table() -> dict[tuple[str, str], Any]:
    import collections
    import pathlib

    import torch
    import torch.distributed.checkpoint.filesystem as filesystem
    import torch.distributed.checkpoint.metadata as metadata

    def layout(name: str) -> Any:
        # torch pickles a layout as _get_layout("torch.strided"); answer only torch's own layouts.
        short = name.removeprefix("torch.") if isinstance(name, str) else ""
        value = getattr(torch, short, None) if short in _LAYOUTS else None
        if not isinstance(value, torch.layout):
            raise RefusedGlobal(f"layout {name!r} is not one of torch's layouts")
        return value

    table: dict[tuple[str, str], Any] = {}
    for name in _DCP_CLASSES:
        if hasattr(metadata, name):
            table[(_DCP, name)] = getattr(metadata, name)
    try:
        import torch.distributed._shard.sharded_tensor.metadata as sharded
    except ImportError:  # pragma: no cover - a build without the sharded-tensor package
        sharded = None  # type: ignore[assignment]
    for name in ("TensorProperties", "MEM_FORMAT_ENCODING"):
        if sharded is not None and hasattr(sharded, name):
            table[("torch.distributed._shard.sharded_tensor.metadata", name)] = getattr(sharded, name)
    table[("torch.distributed.checkpoint.filesystem", "_StorageInfo")] = filesystem._StorageInfo
    table[("torch", "Size")] = torch.Size
    table[("torch.serialization", "_get_layout")] = layout
    table[("collections", "OrderedDict")] = collections.OrderedDict
    for name in _DTYPES:
        if isinstance(getattr(torch, name, None), torch.dtype):
            table[("torch", name)] = getattr(torch, name)
    for name in _FORMATS:
        table[("torch._utils", f"torch.{name}")] = getattr(torch, name)
    for module in ("pathlib", "pathlib._local"):
        for name in _PATHS:
            table[(module, name)] = getattr(pathlib, name)
    return table


def _instance_types(table: dict[tuple[str, str], Any]) -> frozenset[type]:
    """The classes whose fresh instances may take a state (BUILD): DCP's dataclasses, not its enum."""
    import enum

    return frozenset(value for value in table.values()
                     if isinstance(value, type) and not issubclass(value, enum.Enum)
                     and value.__module__.startswith("torch.distributed."))


def _what(value: Any) -> str:
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__}"
    if isinstance(value, types.ModuleType):
        return f"the module {value.__name__}"
    return f"a {type(value).__module__}.{type(value).__qualname__}"


#: Deepest dict key or set member (a tuple in a tuple ...): DCP's keys are MetadataIndex(fqn, torch.Size, int), depth 2.
MAX_KEY_DEPTH = 16


def key_depth(value: Any, limit: int) -> int:
    """How deep tuples, frozensets and objects' attributes nest in ``value``, counted up to ``limit + 1``.

    A loop over an explicit stack (never a recursion); shared parts are walked once per depth reached.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    seen: dict[int, int] = {}
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        if seen.get(id(item), -1) >= depth:
            continue
        seen[id(item)] = depth
        if type(item) in (tuple, frozenset) or isinstance(item, tuple):
            stack.extend((inner, depth + 1) for inner in item)
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            stack.extend((inner, depth + 1) for inner in vars(item).values())
    return deepest


#: The pure-Python unpickler: its opcodes are a table, each of which can be replaced (the C one's cannot).
_PurePythonUnpickler: Any = pickle._Unpickler


class _AllowlistUnpickler(_PurePythonUnpickler):
    """The pure-Python unpickler, answering ``find_class`` from ``table``.

    BUILD sets attributes of the object below it, SETITEM(S) and APPEND(S) call its item methods:
    on a class, a module or a shared object such as a dtype or an enum member (both answered
    by ``find_class``) that would change it for the whole process.  Only fresh instances of DCP's
    classes take a state, only dicts take items, only lists take appends.
    """

    dispatch = dict(_PurePythonUnpickler.dispatch)

    def __init__(self, stream: io.BytesIO, table: dict[tuple[str, str], Any]) -> None:
        super().__init__(stream)
        self._table = table
        self._instances = _instance_types(table)

    def find_class(self, module: str, name: str) -> Any:
        value = self._table.get((module, name))
        if value is None:
            raise RefusedGlobal(f"references {module}.{name}, which is not one of DCP's metadata classes")
        return value

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedGlobal("uses a persistent id, which DCP's metadata never holds")

    def _load_build(self) -> None:
        state, target = self.stack[-1], self.stack[-2]
        if type(target) not in self._instances:
            raise RefusedGlobal(f"sets the state of {_what(target)}: only new instances of DCP's metadata classes take one")
        if getattr(type(target), "__setstate__", None) is None:  # plain attributes: no slots, no dunder names
            if not isinstance(state, dict) or any(type(k) is not str or k.startswith("__") for k in state):
                raise RefusedGlobal(f"gives {_what(target)} a state that is not a dict of attribute names")
        _PurePythonUnpickler.load_build(self)

    def _check_keys(self, keys: list[Any]) -> None:
        """A dict key nested deeper than ``MAX_KEY_DEPTH`` is refused before it is hashed: hashing a tuple
        recurses in C without a depth check, and a million nested tuples overflow the C stack."""
        for key in keys:
            if key_depth(key, MAX_KEY_DEPTH) > MAX_KEY_DEPTH:
                raise MalformedPickle(-1, f"a dict key nested more than {MAX_KEY_DEPTH} deep")

    def _items_target(self, target: Any, kinds: tuple[type, ...], opcode: str) -> None:
        if type(target) not in kinds:
            raise RefusedGlobal(f"{opcode} on {_what(target)}: only {' and '.join(k.__name__ for k in kinds)} take it")

    def _load_setitem(self) -> None:
        self._items_target(self.stack[-3], (dict, collections.OrderedDict), "SETITEM")
        self._check_keys([self.stack[-2]])
        _PurePythonUnpickler.load_setitem(self)

    def _load_setitems(self) -> None:
        self._items_target(self.metastack[-1][-1], (dict, collections.OrderedDict), "SETITEMS")
        self._check_keys(self.stack[0::2])
        _PurePythonUnpickler.load_setitems(self)

    def _load_append(self) -> None:
        self._items_target(self.stack[-2], (list,), "APPEND")
        _PurePythonUnpickler.load_append(self)

    def _load_appends(self) -> None:
        self._items_target(self.metastack[-1][-1], (list,), "APPENDS")
        _PurePythonUnpickler.load_appends(self)

    def _load_frozenset(self) -> None:
        self._check_keys(self.stack)
        _PurePythonUnpickler.load_frozenset(self)

    def _load_additems(self) -> None:
        self._check_keys(self.stack)
        _PurePythonUnpickler.load_additems(self)

    dispatch[pickle.BUILD[0]] = _load_build
    dispatch[pickle.FROZENSET[0]] = _load_frozenset
    dispatch[pickle.ADDITEMS[0]] = _load_additems
    dispatch[pickle.SETITEM[0]] = _load_setitem
    dispatch[pickle.SETITEMS[0]] = _load_setitems
    dispatch[pickle.APPEND[0]] = _load_append
    dispatch[pickle.APPENDS[0]] = _load_appends


def load_legacy_metadata(data: bytes) -> Any:
    """DCP's ``Metadata`` from the bytes of a legacy ``.metadata``; ``RefusedGlobal`` for anything else named.

    Also refuses a pickle that is not a ``Metadata`` at the top; any fault of the pickle itself is a
    :class:`MalformedPickle` at the offset reached (the unpickler is a loop, never a recursion: depth
    costs nothing here; the objects built are checked by the caller).
    """
    from torch.distributed.checkpoint.metadata import Metadata

    stream = io.BytesIO(data)
    try:
        value = _AllowlistUnpickler(stream, _table()).load()
    except (RefusedGlobal, MalformedPickle) as exc:
        exc.offset = stream.tell()
        raise
    except EOFError:
        raise MalformedPickle(stream.tell(), "ends before the pickle does", truncated=True) from None
    except (pickle.UnpicklingError, ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError,
            MemoryError, OverflowError, RuntimeError) as exc:  # RuntimeError: TensorProperties' own checks
        raise MalformedPickle(stream.tell(), f"{type(exc).__name__}: {exc}"[:300]) from None
    if not isinstance(value, Metadata):
        raise RefusedGlobal(f"holds a {type(value).__name__}, not a DCP Metadata")
    return value
