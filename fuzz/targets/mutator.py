#!/usr/bin/env python3
"""Structure-aware fuzzing with a custom libFuzzer mutator: decoded values are mutated, then re-encoded.

Inputs are those of the differential target (a byte choosing the format and
``decode`` keyword set, then the encoding) and so is the check.  The mutator
decodes the input; when it is valid, it changes one thing in the value (an
integer to a boundary, a string, a tag to another member, a list element
duplicated or dropped, an optional part removed, a payload
resized), re-encodes it with the
generated writer and, half the time, lets libFuzzer damage the result too.
Inputs that do not decode, or values the writer refuses, get libFuzzer's own
byte mutations.  So the corpus stays close to valid messages while every
field is pushed to its edges.
"""

import copy
import enum
import random
import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[2]))
from fuzz import harness  # noqa: E402
from fuzz.registry import FORMATS  # noqa: E402

harness.instrument(*FORMATS)

import atheris  # noqa: E402

from fuzz.oracle import differential  # noqa: E402
from fuzz.registry import cases, codec  # noqa: E402
from inert._errors import InertError, WriteTypeError, WriteValueError  # noqa: E402

CASES = cases()
TEXTS = ("", "x" * 17, "|u1", "<f4", ">c16", "|O", "<U8", "\u00fc\u20ac", "a" * 300)


def _int_edge(rng: random.Random, value: int) -> int:
    return rng.choice((0, 1, -1, value + 1, value - 1, value * 2, (1 << 63) - 1, -(1 << 63), (1 << 64) - 1, 1 << 32))


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Every (path, part) of a decoded value."""
    found = [(path, value)]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _places(item, (*path, index))
    return found


def _plain(value: Any) -> Any:
    """``value`` with the zero-copy views a file reader returns turned into bytes (views cannot be copied)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def _mutated(rng: random.Random, value: Any) -> Any:
    """A copy of ``value`` with one part changed."""
    value = copy.deepcopy(_plain(value))
    path, part = rng.choice(_places(value)[1:] or [((), value)])
    if isinstance(part, list):
        if part and rng.random() < 0.5:
            del part[rng.randrange(len(part))]
        elif part:
            part.insert(rng.randrange(len(part) + 1), copy.deepcopy(rng.choice(part)))
        return value
    if isinstance(part, enum.Enum):  # before int: tags are IntEnum members
        new: Any = rng.choice(list(type(part))).name
    elif isinstance(part, bool) or part is None:
        return value
    elif isinstance(part, int):
        new = _int_edge(rng, part)
    elif isinstance(part, str):
        new = rng.choice(TEXTS)
    elif isinstance(part, bytes):  # a tensor payload one element short or long, or emptied
        new = rng.choice((part[:-1], part + b"\x01", b""))
    elif isinstance(part, dict):
        new = None  # an optional part left out (or, elsewhere, a value the writer refuses)
    else:
        return value
    holder = value
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = new
    return value


def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    if data and rng.random() < 0.8:
        entry, kwargs = CASES[data[0] % len(CASES)]
        module = codec(entry)
        try:
            value = module.decode(data[1:], **kwargs)
            encoded = module.encode(_mutated(rng, value))
        except (InertError, WriteTypeError, WriteValueError):
            pass
        else:
            out = data[:1] + encoded
            if rng.random() < 0.5:
                out = atheris.Mutate(out, max(len(out), max_size))
            return out[:max_size]
    return atheris.Mutate(data, max_size)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    entry, kwargs = CASES[data[0] % len(CASES)]
    differential(entry, data[1:], kwargs, run=harness.guarded)


if __name__ == "__main__":
    harness.main(test_one_input, custom_mutator=custom_mutator)
