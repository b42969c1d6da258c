"""Testee: Inert's generated codecs (``inert.codecs``), the ones users import."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ._serve import serve


def _module(fmt: str, version: int) -> ModuleType:
    from inert.codecs import MODULES

    if fmt not in MODULES:
        raise LookupError(f"no generated codec for {fmt}")
    module = importlib.import_module(f"inert.codecs.{MODULES[fmt]}")
    if version not in module.VERSIONS:
        raise LookupError(f"{fmt} version {version} is not one of {module.VERSIONS}")
    return module


def decode(fmt: str, version: int, data: bytes, params: dict[str, Any]) -> Any:
    return _module(fmt, version).decode(data, version=version, **params)


def encode(fmt: str, version: int, value: Any) -> bytes:
    return bytes(_module(fmt, version).encode(value, version=version))


if __name__ == "__main__":
    serve((decode, encode))
