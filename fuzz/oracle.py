"""What the property tests and the fuzzers assert about a reader, and how they damage valid bytes.

The invariant of every reader: ``decode`` returns a value or raises an
``InertError`` subclass.  Anything else propagates out of here untouched, so a
test or a fuzz target reports it.  The differential oracle adds: the generated
codec and the Construct-interpreted grammar give the same value (same
:func:`describe` text: canonical JSON, which tells tuples, sets, complex
numbers and non-string keys apart) or the same error (same class, same message).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hypothesis import strategies as st

from inert._canonical import to_json
from inert._errors import InertError

__all__ = [
    "Outcome",
    "Disagreement",
    "outcome",
    "differential",
    "describe",
    "as_written",
    "same_value",
    "Mutation",
    "mutate",
    "mutations",
]

#: ``("value", canonical JSON)`` or ``(error class name, message)``.
Outcome = tuple[str, str]


class Disagreement(AssertionError):
    """The two reference codecs read the same bytes differently."""

    def __init__(self, message: str, generated: Outcome | None = None, interpreted: Outcome | None = None) -> None:
        super().__init__(message)
        self.generated = generated
        self.interpreted = interpreted


def outcome(decode: Callable[..., Any], data: bytes | bytearray | memoryview, kwargs: Mapping[str, Any] | None = None) -> Outcome:
    """What ``decode`` makes of ``data``; exceptions outside the error family propagate."""
    try:
        value = decode(data, **(kwargs or {}))
    except InertError as exc:
        return type(exc).__name__, str(exc)
    return "value", describe(value)


def differential(
    entry: Any, data: bytes, kwargs: Mapping[str, Any] | None = None, run: Callable[..., Outcome] = outcome
) -> Outcome:
    """Decode ``data`` with both reference codecs of ``entry``; raise :class:`Disagreement` unless they agree.

    ``run(decode, data, kwargs)`` runs the generated codec (the fuzz harness
    passes one that also guards time and memory).
    """
    from fuzz.registry import codec, spec, spec_kwargs
    from inert._interpret import interpret_decode

    fmt, part = spec(entry), spec_kwargs(entry)
    generated = run(codec(entry).decode, data, kwargs)
    interpreted = outcome(lambda d, **kw: interpret_decode(fmt, d, **part, **kw), data, kwargs)
    if generated != interpreted:
        raise Disagreement(
            f"{entry.name} {dict(kwargs or {})} on {data.hex()}:\n  generated:   {generated}\n  interpreted: {interpreted}",
            generated,
            interpreted,
        )
    return generated


def _without_checksums(value: Any) -> Any:
    """``value`` without the ``crc32`` fields a reader adds to records."""
    if isinstance(value, dict):
        return {k: _without_checksums(v) for k, v in value.items() if k != "crc32"}
    if isinstance(value, list):
        return [_without_checksums(v) for v in value]
    return value


def describe(value: Any) -> str:
    """A decoded value as its canonical JSON text, which keeps apart everything the value subset
    keeps apart (tuples and lists, sets, complex numbers, bytearrays, map keys); what the oracles compare."""
    return to_json(value)


def as_written(value: Any) -> str:
    """:func:`describe` without the checksums a reader adds (``crc32`` fields): equal for a decoded value
    and the value a writer was given, when decoding gave it back."""
    return to_json(_without_checksums(value))


def same_value(decoded: Any, value: Any) -> bool:
    """``decoded`` is ``value`` as a writer was given it (checksum fields aside)."""
    return as_written(decoded) == as_written(value)


#: ``(operation, position, operand)``; positions wrap around the data, so any triple applies to any input.
Mutation = tuple[str, int, bytes]

OPERATIONS = ("flip", "set", "insert", "delete", "truncate", "overwrite")


def mutate(data: bytes, mutations: Iterable[Mutation]) -> bytes:
    """``data`` damaged by each mutation in turn.

    ``flip`` xors the byte at ``position`` with ``operand[0]`` (or 1), ``set``
    replaces it, ``insert`` inserts ``operand``, ``delete`` removes
    ``len(operand) or 1`` bytes, ``truncate`` cuts the data there, and
    ``overwrite`` writes ``operand`` over the bytes from there on.
    """
    buf = bytearray(data)
    for op, position, operand in mutations:
        if not buf and op != "insert":
            continue
        at = position % (len(buf) + 1 if op in ("insert", "truncate") else len(buf))
        if op == "flip":
            buf[at] ^= operand[0] if operand and operand[0] else 1
        elif op == "set":
            buf[at] = operand[0] if operand else 0
        elif op == "insert":
            buf[at:at] = operand
        elif op == "delete":
            del buf[at : at + (len(operand) or 1)]
        elif op == "truncate":
            del buf[at:]
        elif op == "overwrite":
            buf[at : at + len(operand)] = operand
        else:
            raise ValueError(f"unknown mutation {op!r}; expected one of {OPERATIONS}")
    return bytes(buf)


#: One to four mutations, positions anywhere in a 64 KiB input.
mutations = st.lists(
    st.tuples(st.sampled_from(OPERATIONS), st.integers(0, 1 << 16), st.binary(max_size=9)),
    min_size=1,
    max_size=4,
)
