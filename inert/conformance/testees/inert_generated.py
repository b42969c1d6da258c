"""Testee: Inert's generated codecs (``inert.codecs``), the ones users import."""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any

from ._serve import serve


def _module(fmt: str, version: int) -> tuple[ModuleType, str]:
    """The codec module of ``fmt`` and the suffix of its functions (``_record`` for ``<format>.record``)."""
    from inert.codecs import MODULES

    name, _, part = fmt.partition(".")
    if name not in MODULES:
        raise LookupError(f"no generated codec for {name}")
    module = importlib.import_module(f"inert.codecs.{MODULES[name]}")
    if version not in module.VERSIONS:
        raise LookupError(f"{name} version {version} is not one of {module.VERSIONS}")
    if part and not hasattr(module, f"decode_{part}"):
        raise LookupError(f"{name} has no part {part}")
    return module, f"_{part}" if part else ""


def decode(fmt: str, version: int, data: bytes, params: dict[str, Any]) -> Any:
    module, suffix = _module(fmt, version)
    whole = hasattr(module, "MAGIC") and not suffix  # a file names its version in its header
    reader = module.decode if whole else getattr(module, f"decode{suffix}")
    unknown = set(params) - set(inspect.signature(reader).parameters) - {"version"}
    if unknown:  # a parameter this reader does not take: unsupported (PROTOCOL.md)
        raise LookupError(f"{fmt} takes no parameter {sorted(unknown)[0]}")
    return reader(data, **params) if whole else reader(data, version=version, **params)


def encode(fmt: str, version: int, value: Any) -> bytes:
    module, suffix = _module(fmt, version)
    return bytes(getattr(module, f"encode{suffix}")(value, version=version))


if __name__ == "__main__":
    serve((decode, encode))
