"""Testee: the grammar in ``inert.spec`` interpreted by Construct (reference codec #1)."""

from __future__ import annotations

from typing import Any

from ._serve import serve


def _format(fmt: str, version: int) -> tuple[Any, str | None]:
    """The grammar of ``fmt`` and the part it names (``<format>.record``), or None."""
    from inert.spec import FORMATS

    name, _, part = fmt.partition(".")
    if name not in FORMATS:
        raise LookupError(f"no grammar for {name}")
    grammar = FORMATS[name]
    if version not in grammar.versions:
        raise LookupError(f"{name} version {version} is not one of {sorted(grammar.versions)}")
    if part and part not in (grammar.parts or {}):
        raise LookupError(f"{name} has no part {part}")
    return grammar, part or None


def decode(fmt: str, version: int, data: bytes, params: dict[str, Any]) -> Any:
    from inert._interpret import interpret_decode

    grammar, part = _format(fmt, version)
    taken = set(grammar.params) | ({"max_size"} if grammar.magic and not part else set())
    unknown = set(params) - taken
    if unknown:  # a parameter this reader does not take: unsupported (PROTOCOL.md)
        raise LookupError(f"{fmt} takes no parameter {sorted(unknown)[0]}")
    return interpret_decode(grammar, data, version, part=part, **params)


def encode(fmt: str, version: int, value: Any) -> bytes:
    from inert._interpret import interpret_encode

    grammar, part = _format(fmt, version)
    return interpret_encode(grammar, value, version, part=part)


if __name__ == "__main__":
    serve((decode, encode))
