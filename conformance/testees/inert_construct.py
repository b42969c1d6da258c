"""Testee: the grammar in ``inert.spec`` interpreted by Construct (reference codec #1)."""

from __future__ import annotations

from typing import Any

from ._serve import serve


def _format(fmt: str, version: int) -> Any:
    from inert.spec import FORMATS

    if fmt not in FORMATS:
        raise LookupError(f"no grammar for {fmt}")
    if version not in FORMATS[fmt].versions:
        raise LookupError(f"{fmt} version {version} is not one of {sorted(FORMATS[fmt].versions)}")
    return FORMATS[fmt]


def decode(fmt: str, version: int, data: bytes, params: dict[str, Any]) -> Any:
    from inert.spec._grammar import interpret_decode

    return interpret_decode(_format(fmt, version), data, version, **params)


def encode(fmt: str, version: int, value: Any) -> bytes:
    from inert.spec._grammar import interpret_encode

    return interpret_encode(_format(fmt, version), value, version)


if __name__ == "__main__":
    serve((decode, encode))
