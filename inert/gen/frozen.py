"""Frozen versions: the hash of every released version's declaration, recorded in ``inert/spec/frozen.json``.

A released version never changes (docs/compatibility.md).  ``inert gen`` hashes each version's
declaration (its grammar: typenames, fields, widths, limits, tag members, the format's magic and
size limit; and the declared rules checked on its records: id, kind, field and check) and refuses
to write anything when a version recorded here hashes differently.  ``inert gen --freeze`` records
the versions not recorded yet (a new version, once released); it never rewrites a recorded hash:
a reviewed change of a frozen declaration that keeps every byte's meaning (a refactor) deletes
its entry from the file by hand, in the same commit, then freezes it again.

Not hashed: prose (docs, sentences, reasons), the hand-written Python checks a record may still
carry (``Validate``: the declared rules state what they check), the order of a format's versions.
"""

from __future__ import annotations

import enum
import hashlib
import json
from pathlib import Path
from typing import Any

import inert.spec
from inert.spec import FORMATS
from inert.spec._grammar import Format, Record, Recursive, Scalar, Union

__all__ = ["FROZEN_FILE", "entries", "describe", "fingerprint", "fingerprints", "load", "freeze_text", "reached", "walk"]

#: Where the hashes live: beside the declarations (``inert/spec/``), ``{format: {"v<N>" | "<part>.v<N>": hash}}``.
FROZEN_FILE = Path(inert.spec.__file__).resolve().parent / "frozen.json"


def _describe(con: Any, seen: dict[int, str]) -> Any:
    """A JSON-able description of a grammar element: what its bytes mean, nothing of how it is coded."""
    if isinstance(con, Recursive):
        return ["Recursive", con.max_depth, _describe(con.target(), seen)]
    if isinstance(con, (Record, Union)):
        if id(con) in seen:  # a cycle (a recursive element) or a shared element: named once
            return ["ref", seen[id(con)]]
        seen[id(con)] = con.typename
        if isinstance(con, Record):
            return ["Record", con.typename, [[name, _describe(sub, seen)] for name, sub in con.fields]]
        cases = [[int(k), k.name, None if v is None else _describe(v, seen)] for k, v in con.cases.items()]
        return ["Union", con.typename, con.tag_field, _describe(con.tag, seen), cases]
    if isinstance(con, Scalar):
        return ["Scalar", con.code]
    if isinstance(con, type) and issubclass(con, enum.IntEnum):
        return [[m.name, int(m)] for m in con]
    out: list[Any] = [type(con).__name__]
    for key, value in sorted(vars(con).items()):
        if key.startswith("_") or key in ("name", "docs", "flagbuildnone", "parsed", "typename", "packer"):
            continue
        if isinstance(value, (int, str, bytes, bool)) or value is None:
            out.append([key, value.hex() if isinstance(value, bytes) else value])
        elif isinstance(value, type) and issubclass(value, enum.IntEnum):
            out.append([key, _describe(value, seen)])
        elif hasattr(value, "_parse") or isinstance(value, Scalar):
            out.append([key, _describe(value, seen)])
    return out


def walk(con: Any) -> list[Any]:
    """Every record and union ``con`` reaches (itself included), each once, in the order they are met."""
    out: list[Any] = []
    stack, seen = [con], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Recursive):
            stack.append(node.target())
            continue
        if isinstance(node, (Record, Union)):
            out.append(node)
        if isinstance(node, Record):
            stack.extend(sub for _, sub in reversed(node.fields))
        elif isinstance(node, Union):
            stack.extend(case for case in reversed(list(node.cases.values())) if case is not None)
        elif getattr(node, "element", None) is not None:
            stack.append(node.element)
    return out


def reached(con: Any) -> dict[str, Any]:
    """The records and unions ``con`` reaches (itself included), by typename (the first of each name)."""
    out: dict[str, Any] = {}
    for node in walk(con):
        out.setdefault(node.typename, node)
    return out


def describe(con: Any) -> Any:
    """What :func:`fingerprint` hashes of a grammar element: its bytes' meaning, as JSON-able data."""
    return _describe(con, {})


def fingerprint(fmt: Format, con: Any) -> str:
    """The hash of one version's declaration (``con``, a top-level declaration or part of ``fmt``)."""
    names = set(reached(con))
    rules = sorted(
        [r.id, r.kind, r.field, r.check]
        for r in fmt.declared
        if names.intersection(filter(None, r.on.split("|")))
    )
    doc = {"magic": (fmt.magic or b"").hex(), "max_size": fmt.max_size, "grammar": _describe(con, {}), "rules": rules}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


def entries(fmt: Format) -> dict[str, Any]:
    """Every version and part of ``fmt`` by its key in the file (``v2``, ``record.v2``), with its declaration."""
    out = {f"v{v}": con for v, con in sorted(fmt.versions.items())}
    for part, table in sorted(fmt.parts.items()):
        out.update({f"{part}.v{v}": con for v, con in sorted(table.items())})
    return out


def fingerprints(formats: dict[str, Format] | None = None) -> dict[str, dict[str, str]]:
    """The hash of every version (and versioned part) of every format."""
    return {name: {key: fingerprint(fmt, con) for key, con in entries(fmt).items()}
            for name, fmt in (formats or FORMATS).items()}


def load(path: Path = FROZEN_FILE) -> dict[str, dict[str, str]]:
    """The recorded hashes ({} when the file is absent: an installed package, or nothing frozen yet)."""
    if not path.is_file():
        return {}
    data: dict[str, dict[str, str]] = json.loads(path.read_text())
    return data


def freeze_text(recorded: dict[str, dict[str, str]], current: dict[str, dict[str, str]]) -> str:
    """The file with every version of ``current`` not recorded yet added (recorded hashes kept as they are)."""
    merged = {name: dict(versions) for name, versions in recorded.items()}
    for name, versions in current.items():
        for key, digest in versions.items():
            merged.setdefault(name, {}).setdefault(key, digest)
    return json.dumps(merged, indent=2, sort_keys=True) + "\n"
