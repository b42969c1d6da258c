"""What the vector declarations are written with: byte packers, the Piece and the Corpus.

Each ``_vectors_<format>.py`` module declares the vectors of one format, every
version, with these; ``_generate_vectors.py`` writes them to ``corpus/``.
"""

from __future__ import annotations

import copy as copy_module
import json
import struct
from collections.abc import Iterator
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


def text64(data: bytes) -> bytes:
    """A string as DALI's published shared-memory layout writes it: u64 byte length, then the bytes."""
    return u64(len(data)) + data


class Corpus:
    """The vectors of one format version, by name."""

    def __init__(self, fmt: str, version: int) -> None:
        self.fmt = fmt
        self.version = version
        self.docs: dict[str, dict[str, Any]] = {}

    def _add(
        self, name: str, description: str, data: bytes, expect: dict[str, Any], params: dict[str, Any] | None,
        rule: str | None = None,
    ) -> None:
        self._put(name, vector_document(name, description, data, expect, params, rule))

    def _put(self, name: str, doc: dict[str, Any]) -> None:
        if name in self.docs:
            raise ValueError(f"{self.fmt} v{self.version}: vector {name} declared twice")
        self.docs[name] = doc

    def refuse_write(self, name: str, description: str, value: Any, kind: str) -> None:
        """A value every writer must refuse (``write-type``: wrong type; ``write-value``: breaks a rule)."""
        self._put(f"Write{name}", write_vector_document(f"Write{name}", description, value, kind))

    def accept(
        self, name: str, description: str, piece: Piece, params: dict[str, Any] | None = None, rule: str | None = None
    ) -> None:
        self._add(name, description, piece.data, {"accept": piece.value}, params, rule)

    def reject(
        self, name: str, description: str, data: bytes, kind: str, params: dict[str, Any] | None = None,
        rule: str | None = None,
    ) -> None:
        self._add(name, description, data, {"reject": kind}, params, rule)

    def either(self, name: str, description: str, data: bytes, outcomes: list[dict[str, Any]]) -> None:
        self._add(name, description, data, {"either": outcomes}, None)

    def truncations(self, label: str, what: str, piece: Piece) -> None:
        """Every proper prefix of ``piece`` is refused as truncated."""
        n = len(piece.data)
        for k in range(n):
            self.reject(f"Truncated{label}{k:03d}", f"the first {k} of the {n} bytes of {what}", piece.data[:k], "truncated")

    def malformed_values(self, label: str, what: str, value: Any) -> None:
        """For every field of ``value``: without it, and with a value of the wrong type; writers refuse both.

        The wrong type is an empty list, or an empty object where a list belongs: no field of any
        format accepts either there.
        """
        for path, sub in _paths(value):
            name, where = _camel(path), _dotted(path)
            if isinstance(path[-1], str):
                missing = _replaced(value, path, _MISSING)
                self.refuse_write(f"{label}Missing{name}", f"{what} without {where}", missing, "write-type")
            wrong: Any = {} if isinstance(sub, list) else []
            mistyped = _replaced(value, path, wrong)
            self.refuse_write(f"{label}Mistyped{name}", f"{what} with {json.dumps(wrong)} as {where}", mistyped, "write-type")


_MISSING = object()
Path = tuple[Any, ...]


def _paths(value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """(path, value) of every field and list element below ``value``, depth first."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, sub in items:
        yield (*path, key), sub
        yield from _paths(sub, (*path, key))


def _replaced(value: Any, path: Path, new: Any) -> Any:
    """A copy of ``value`` with the item at ``path`` replaced by ``new`` (removed when it is ``_MISSING``)."""
    copy = copy_module.deepcopy(value)
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    if new is _MISSING:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return copy


def _camel(path: Path) -> str:
    return "".join(str(key) if isinstance(key, int) else "".join(p.title() for p in key.split("_")) for key in path)


def _dotted(path: Path) -> str:
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text
