"""The canonical JSON mapping of decoded values.

Decoded values are dicts, lists, str, int, float, bool, None, IntEnum tags and
(for formats that carry them) bytes.  Their canonical JSON: keys sorted, no
spaces, tags by member name, bytes as ``{"$bytes": "<base64>"}``, floats that
JSON cannot spell as ``{"$float": "nan" | "inf" | "-inf"}``.  ``from_json``
undoes the mapping; tag names are accepted by every writer as they are.
"""

from __future__ import annotations

import base64
import enum
import json
import math
from typing import Any

__all__ = ["to_json", "from_json", "to_json_value"]


def to_json_value(value: Any) -> Any:
    """``value`` with every non-JSON leaf replaced by its canonical spelling."""
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    return value


def to_json(value: Any) -> str:
    """The canonical JSON text of a decoded value."""
    return json.dumps(to_json_value(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _from_json_value(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"$bytes"}:
            return base64.b64decode(obj["$bytes"], validate=True)
        if set(obj) == {"$float"}:
            return float(obj["$float"])
        return {k: _from_json_value(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_json_value(v) for v in obj]
    return obj


def from_json(text: str) -> Any:
    """A value writers accept, from its canonical JSON."""
    return _from_json_value(json.loads(text))
