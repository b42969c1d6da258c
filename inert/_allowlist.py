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

``ALLOWED`` lists the names without importing torch, so ``inert inspect`` can
say whether a legacy ``.metadata`` would pass.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

__all__ = ["ALLOWED", "RefusedGlobal", "is_allowed", "load_legacy_metadata"]

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
    """The pickle names something outside the allowlist; nothing it names was imported or called."""


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


class _AllowlistUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, table: dict[tuple[str, str], Any]) -> None:
        super().__init__(io.BytesIO(data))
        self._table = table

    def find_class(self, module: str, name: str) -> Any:
        value = self._table.get((module, name))
        if value is None:
            raise RefusedGlobal(f"references {module}.{name}, which is not one of DCP's metadata classes")
        return value

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedGlobal("uses a persistent id, which DCP's metadata never holds")


def load_legacy_metadata(data: bytes) -> Any:
    """DCP's ``Metadata`` from the bytes of a legacy ``.metadata``; ``RefusedGlobal`` for anything else named.

    Also refuses a pickle that is not a ``Metadata`` at the top.
    """
    from torch.distributed.checkpoint.metadata import Metadata

    value = _AllowlistUnpickler(data, _table()).load()
    if not isinstance(value, Metadata):
        raise RefusedGlobal(f"holds a {type(value).__name__}, not a DCP Metadata")
    return value
