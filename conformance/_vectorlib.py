"""What the vector declarations are written with: byte packers, the Piece and the Corpus.

Each ``_vectors_<format>.py`` module declares the vectors of one format, every
version, with these; ``_generate_vectors.py`` writes them to ``corpus/``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from ._corpus import vector_document, write_vector_document

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
U64_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class Piece:
    """Bytes and the canonical JSON value they decode to."""

    data: bytes
    value: Any


def i64(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}q", *values)


def u64(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def text(data: bytes) -> bytes:
    """A UTF-8 string field: u32 byte length, then the bytes (not checked here: vectors need bad ones)."""
    return u32(len(data)) + data


class Corpus:
    """The vectors of one format version, by name."""

    def __init__(self, fmt: str, version: int) -> None:
        self.fmt = fmt
        self.version = version
        self.docs: dict[str, dict[str, Any]] = {}

    def _add(self, name: str, description: str, data: bytes, expect: dict[str, Any], params: dict[str, Any] | None) -> None:
        self._put(name, vector_document(name, description, data, expect, params))

    def _put(self, name: str, doc: dict[str, Any]) -> None:
        if name in self.docs:
            raise ValueError(f"{self.fmt} v{self.version}: vector {name} declared twice")
        self.docs[name] = doc

    def refuse_write(self, name: str, description: str, value: Any, kind: str) -> None:
        """A value every writer must refuse (``write-type``: wrong type; ``write-value``: breaks a rule)."""
        self._put(f"Write{name}", write_vector_document(f"Write{name}", description, value, kind))

    def accept(self, name: str, description: str, piece: Piece, params: dict[str, Any] | None = None) -> None:
        self._add(name, description, piece.data, {"accept": piece.value}, params)

    def reject(self, name: str, description: str, data: bytes, kind: str, params: dict[str, Any] | None = None) -> None:
        self._add(name, description, data, {"reject": kind}, params)

    def either(self, name: str, description: str, data: bytes, outcomes: list[dict[str, Any]]) -> None:
        self._add(name, description, data, {"either": outcomes}, None)

    def truncations(self, label: str, what: str, piece: Piece) -> None:
        """Every proper prefix of ``piece`` is refused as truncated."""
        n = len(piece.data)
        for k in range(n):
            self.reject(f"Truncated{label}{k:03d}", f"the first {k} of the {n} bytes of {what}", piece.data[:k], "truncated")
