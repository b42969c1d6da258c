"""The constructor arguments DCP users pass to torch's storage classes, as Inert takes them.

* ``_extensions`` (writer): ``None`` or ``[]`` store records as they are;
  ``[ZStandard()]`` (torch's own class) stores them as ``checkpoint-shard``
  version 2 ``ZSTD`` bodies.  Any other stream transform is refused: its code
  would have to run again to read the checkpoint, and Inert's readers run none.
* ``serialization_format`` (writer): ``TORCH_SAVE``, the default, stands for
  DCP's default layout, which Inert's records replace; ``SAFETENSORS`` asks for
  safetensors files, which Inert does not write.
* ``_extension_registry`` (reader): accepted and unused: compression is
  declared by the format, so no registry is consulted on load.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:  # 2.7+
    from torch.distributed.checkpoint._extension import ExtensionRegistry, StreamTransformExtension, ZStandard
except ImportError:  # before 2.7: no extensions
    ExtensionRegistry = StreamTransformExtension = ZStandard = None  # type: ignore[assignment,misc]

try:  # 2.8+
    from torch.distributed.checkpoint.filesystem import SerializationFormat
except ImportError:  # older: only DCP's torch.save layout
    SerializationFormat = None  # type: ignore[assignment,misc]

__all__ = ["SUPPORTED_EXTENSIONS", "compression_of", "check_serialization_format", "checked_extension_registry",
           "DEFAULT_SERIALIZATION_FORMAT"]

SUPPORTED_EXTENSIONS = "torch.distributed.checkpoint._extension.ZStandard (records stored as zstd frames)"


def compression_of(extensions: Sequence[Any] | None) -> str | None:
    """``"ZSTD"`` for ``[ZStandard()]``, None for no extension; a ``ValueError`` naming what is supported otherwise."""
    if extensions is None:
        return None
    if isinstance(extensions, (str, bytes)) or not isinstance(extensions, Sequence):
        raise TypeError(f"_extensions: expected a list of extensions or None, got {type(extensions).__name__}")
    if not extensions:
        return None
    unknown = [ext for ext in extensions if ZStandard is None or type(ext) is not ZStandard]
    if unknown or len(extensions) > 1:
        names = ", ".join(f"{type(ext).__module__}.{type(ext).__qualname__}" for ext in (unknown or extensions))
        why = "a stream transform Inert does not know" if unknown else "more than one stream transform"
        raise ValueError(
            f"_extensions: {names}: {why}; reading it back would run its code, and Inert's readers run none. "
            f"Supported: None, [], or [{SUPPORTED_EXTENSIONS}]"
        )
    return "ZSTD"


def check_serialization_format(value: Any) -> None:
    """Refuse any layout but DCP's default, which Inert's records stand in for."""
    name = getattr(value, "value", value)
    if name == "torch_save":
        return
    raise ValueError(
        f"serialization_format={value!r}: inert.torch writes checkpoint-shard records (raw tensor bytes, "
        "CRC-32s), not safetensors files; leave the default (SerializationFormat.TORCH_SAVE), or use DCP's "
        "HuggingFaceStorageWriter for safetensors output"
    )


def checked_extension_registry(registry: Any) -> Any:
    """``registry`` if it is None or torch's ``ExtensionRegistry``; a ``TypeError`` otherwise."""
    if registry is None or (ExtensionRegistry is not None and isinstance(registry, ExtensionRegistry)):
        return registry
    raise TypeError(f"_extension_registry: expected torch's ExtensionRegistry or None, got {type(registry).__name__}")


#: torch's default ``serialization_format`` (its name where the enum does not exist).
DEFAULT_SERIALIZATION_FORMAT: Any = "torch_save" if SerializationFormat is None else SerializationFormat.TORCH_SAVE
