"""The canonical JSON mapping of decoded values.

Decoded values are dicts, lists, str, int, float, bool, None, IntEnum tags and
(for formats that carry them) bytes and the value documents of checkpoints and
dumps.  Their canonical JSON: keys sorted, no spaces, tags by member name, and
these spellings for what JSON lacks:

* bytes ``{"$bytes": "<base64>"}``, a bytearray ``{"$bytearray": "<base64>"}``;
* a float JSON cannot spell ``{"$float": "nan" | "inf" | "-inf"}``;
* a tuple ``{"$tuple": [...]}``, a set ``{"$set": [...]}``, a frozenset
  ``{"$frozenset": [...]}`` (members ordered by their canonical JSON text);
* a complex number ``{"$complex": [real, imag]}``;
* a dict with a key that is not a string (value documents allow bytes keys), or a
  string key starting with ``$``, ``{"$map": [[key, value], ...]}`` (pairs ordered
  by their canonical JSON text).

``from_json`` undoes the mapping; tag names are accepted by every writer as they are.
"""

from __future__ import annotations

import base64
import enum
import json
import math
from typing import Any

__all__ = ["to_json", "from_json", "to_json_value"]


def _text(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _b64(data: Any) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def to_json_value(value: Any) -> Any:
    """``value`` with every non-JSON leaf replaced by its canonical spelling."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: to_json_value(v) for k, v in value.items()}
        return {"$map": sorted(([to_json_value(k), to_json_value(v)] for k, v in value.items()), key=_text)}
    if isinstance(value, list):
        return [to_json_value(v) for v in value]
    if isinstance(value, tuple):
        return {"$tuple": [to_json_value(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {f"${type(value).__name__}": sorted((to_json_value(v) for v in value), key=_text)}
    if isinstance(value, complex):
        return {"$complex": [to_json_value(value.real), to_json_value(value.imag)]}
    if isinstance(value, bytearray):
        return {"$bytearray": _b64(value)}
    if isinstance(value, (bytes, memoryview)):
        return {"$bytes": _b64(value)}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    return value


def to_json(value: Any) -> str:
    """The canonical JSON text of a decoded value."""
    return _text(to_json_value(value))


_SPELLINGS: dict[str, Any] = {
    "$bytes": lambda v: base64.b64decode(v, validate=True),
    "$bytearray": lambda v: bytearray(base64.b64decode(v, validate=True)),
    "$float": float,
    "$tuple": lambda v: tuple(_from_json_value(x) for x in v),
    "$set": lambda v: {_from_json_value(x) for x in v},
    "$frozenset": lambda v: frozenset(_from_json_value(x) for x in v),
    "$complex": lambda v: complex(*(_from_json_value(x) for x in v)),
    "$map": lambda v: {_from_json_value(k): _from_json_value(x) for k, x in v},
}


def _from_json_value(obj: Any) -> Any:
    if isinstance(obj, dict):
        if len(obj) == 1:
            (key, inner), = obj.items()
            spelling = _SPELLINGS.get(key)
            if spelling is not None:
                try:
                    return spelling(inner)
                except (TypeError, ValueError) as exc:  # binascii.Error is a ValueError
                    raise ValueError(f"{{{key!r}: ...}} is not a valid spelling: {exc}") from None
        return {k: _from_json_value(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_json_value(v) for v in obj]
    return obj


def from_json(text: str) -> Any:
    """A value writers accept, from its canonical JSON; ``ValueError`` if ``text`` is not that."""
    return _from_json_value(json.loads(text))
