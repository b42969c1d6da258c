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
* the typed extensions (``inert._value_types``): a BytesIO ``{"$bytesio": "<base64>"}``,
  an array ``{"$array": {"data": "<base64>", "dtype": "FLOAT32", "shape": [2]}}``, an
  array scalar ``{"$arrayscalar": {"data": "<base64>", "dtype": "INT64"}}``,
  ``{"$torch.Size": [2, 3]}``, ``{"$torch.dtype": "BFLOAT16"}``,
  ``{"$torch.device": ["cuda", 0]}``, a registered object ``{"$object": [name, state]}``;
* a dict with a key that is not a string, or a string key starting with ``$``,
  ``{"$map": [[key, value], ...]}`` (pairs ordered by their canonical JSON text).

``from_json`` undoes the mapping; tag names are accepted by every writer as they are.
"""

from __future__ import annotations

import base64
import enum
import io
import json
import math
from typing import Any

from inert._value_types import ArrayValue, DeviceValue, DTypeValue, ObjectValue, SizeValue

__all__ = ["SpellingValueError", "to_json", "from_json", "to_json_value"]


class SpellingValueError(ValueError):
    """A spelling of the right type that breaks a rule (a ``$map`` key or a ``$set`` member twice): ``write-value``.

    Any other ``ValueError`` of :func:`from_json` is no value's spelling: ``write-type`` (PROTOCOL.md)."""


def _text(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _b64(data: Any) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _unb64(text: Any) -> bytes:
    """The bytes of a base64 spelling, which must be the canonical one (RFC 4648 section 4, ``=`` padding, no
    line breaks, the unused bits zero): one value, one spelling, on the way in as on the way out."""
    if not isinstance(text, str):
        raise TypeError(f"base64 is a string, not {type(text).__name__}")
    data = base64.b64decode(text, validate=True)
    if _b64(data) != text:
        raise ValueError(f"{text[:40]!r} is not canonical base64 (its bytes are spelled {_b64(data)[:40]!r})")
    return data


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
    typed = _typed_json(value)
    if typed is not None:
        return typed
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    return value


def _typed_json(value: Any) -> Any:
    kind = type(value)
    if kind is io.BytesIO:
        return {"$bytesio": _b64(value.getvalue())}
    if kind is ArrayValue:
        if value.scalar:
            return {"$arrayscalar": {"data": _b64(value.data), "dtype": value.dtype}}
        return {"$array": {"data": _b64(value.data), "dtype": value.dtype, "shape": list(value.shape)}}
    if kind is SizeValue:
        return {"$torch.Size": list(value.dims)}
    if kind is DTypeValue:
        return {"$torch.dtype": value.name}
    if kind is DeviceValue:
        return {"$torch.device": [value.type, value.index]}
    if kind is ObjectValue:
        return {"$object": [value.name, to_json_value(value.state)]}
    return None


def to_json(value: Any) -> str:
    """The canonical JSON text of a decoded value."""
    return _text(to_json_value(value))


_SPELLINGS: dict[str, Any] = {
    "$bytes": _unb64,
    "$bytearray": lambda v: bytearray(_unb64(v)),
    "$float": lambda v: float(v) if v in ("nan", "inf", "-inf") else _no(f"{v!r} is not nan, inf or -inf"),
    "$tuple": lambda v: tuple(_from_json_value(x) for x in v),
    "$set": lambda v: set(_once([_from_json_value(x) for x in v], "set member")),
    "$frozenset": lambda v: frozenset(_once([_from_json_value(x) for x in v], "set member")),
    "$complex": lambda v: complex(*(_part(x) for x in v)),
    "$map": lambda v: _pairs([(_from_json_value(k), _from_json_value(x)) for k, x in v]),
    "$bytesio": lambda v: io.BytesIO(_unb64(v)),
    "$array": lambda v: ArrayValue(v["dtype"], tuple(v["shape"]), _unb64(v["data"])),
    "$arrayscalar": lambda v: ArrayValue(v["dtype"], (), _unb64(v["data"]), scalar=True),
    "$torch.Size": lambda v: SizeValue(tuple(v)),
    "$torch.dtype": DTypeValue,
    "$torch.device": lambda v: DeviceValue(*v),
    "$object": lambda v: ObjectValue(v[0], _from_json_value(v[1])),
}


def _no(reason: str) -> Any:
    raise ValueError(reason)


def _once(items: list[Any], what: str) -> list[Any]:
    """``items``, refused when a str or bytes one comes twice (others are refused by the writer, as the wrong type)."""
    seen: set[Any] = set()
    for item in items:
        if isinstance(item, (str, bytes)):
            if item in seen:
                raise SpellingValueError(f"{what} {item!r} twice")
            seen.add(item)
    return items


def _pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    _once([k for k, _ in pairs], "map key")
    return dict(pairs)


def _part(x: Any) -> float:
    """A complex number's part: a float, spelled with a fraction or exponent or as ``$float`` (``1`` is an int)."""
    part = _from_json_value(x)
    if not isinstance(part, float):
        raise TypeError(f"a part is a float, not {type(part).__name__}")
    return part


def _from_json_value(obj: Any) -> Any:
    if isinstance(obj, dict):
        if len(obj) == 1:
            (key, inner), = obj.items()
            spelling = _SPELLINGS.get(key)
            if spelling is not None:
                try:
                    return spelling(inner)
                except SpellingValueError:
                    raise
                except (TypeError, ValueError, KeyError, IndexError) as exc:  # binascii.Error is a ValueError
                    raise ValueError(f"{{{key!r}: ...}} is not a valid spelling: {exc}") from None
        dollar = next((k for k in obj if k.startswith("$")), None)
        if dollar is not None:  # a str key starting with $ is spelt in $map: this is no value's spelling
            raise ValueError(f"{dollar!r} is not a spelling" if len(obj) == 1 else
                             f"an object of {len(obj)} keys, one of them {dollar!r}, is no spelling")
        return {k: _from_json_value(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_from_json_value(v) for v in obj]
    return obj


def from_json(text: str) -> Any:
    """A value writers accept, from its canonical JSON; ``ValueError`` if ``text`` is not that."""
    return _from_json_value(json.loads(text))
