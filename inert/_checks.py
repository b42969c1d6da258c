"""The named checks of the rule language, written once for Python, and the tables the runtime shares.

A format's rules are declared in ``inert.spec`` (``SpecRule``) and compiled into each generated codec
(``inert.gen.py_rules``); what an expression of the rule language cannot say is a named check here
(``plain_file_name``, ``distinct``, the itemsize of a numpy dtype string), beside the few helpers the
compiled rules share (an index beyond its array breaks a rule, ``//`` and ``%`` of the language).  The C
runtime holds the same, written once (c/inert_runtime.c).  Nothing here imports numpy or the spec: the
generated codecs need only the standard library and msgpack.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from inert.codecs._tables import (
    CHECKPOINT_ITEMSIZES,
    DTYPE_NAMES,
    DUMP_FIRST_RECORD,
    DUMP_MANIFEST_NAME,
    DUMP_MIN_RECORD,
    MAX_INFLATED,
    MIN_INFLATED,
)

__all__ = [
    "ITEMSIZE",
    "MAX_ARRAY_SPAN",
    "dtype_itemsize",
    "plain_file_name",
    "distinct",
    "repeat_at",
    "fill_indexes",
    "plural",
    "RuleBroken",
    "CHECKPOINT_ITEMSIZES",
    "MAX_INFLATED",
    "MIN_INFLATED",
    "DUMP_FIRST_RECORD",
    "DUMP_MANIFEST_NAME",
    "DUMP_MIN_RECORD",
]

#: Largest span of an array: numpy's limit, a signed 64-bit byte count.
MAX_ARRAY_SPAN = (1 << 63) - 1
#: The names in the order of their ``DType`` values (1, 2, ...), for writers given a bare int.
_DTYPE_NAMES = DTYPE_NAMES

# numpy's ``dtype.str`` for the plain numeric kinds: byte order, kind, itemsize.
# '|' is numpy's spelling for 1-byte types, '<'/'>' for wider ones.
_DTYPE_RE = re.compile(r"([<>|])([biufc])([1-9][0-9]?)\Z")  # no leading zero: one spelling per dtype
_ITEMSIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}
_dtype_cache: dict[str, int | None] = {}

prod = math.prod
add = operator.add


def dtype_itemsize(text: str) -> int | None:
    """Itemsize of a numpy dtype string Inert accepts, or None.

    Accepted: bool, signed and unsigned integers, float16/32/64 and
    complex64/128, in numpy's canonical ``dtype.str`` spelling.  Object,
    structured, string, datetime and platform-dependent (float128) dtypes are
    refused: they either carry references or have no portable layout.
    """
    try:
        return _dtype_cache[text]
    except KeyError:
        pass
    size: int | None = None
    match = _DTYPE_RE.match(text)
    if match is not None:
        order, kind, digits = match.groups()
        n = int(digits)
        if n in _ITEMSIZES[kind] and (order == "|") == (n == 1):
            size = n
    if len(_dtype_cache) < 256:  # bounded: hostile input cannot grow it
        _dtype_cache[text] = size
    return size


#: Every dtype spelling :func:`dtype_itemsize` accepts, with its itemsize.
ITEMSIZE: dict[str, int] = {
    f"{order}{kind}{size}": size
    for kind, sizes in _ITEMSIZES.items()
    for size in sizes
    for order in ("|" if size == 1 else "<>")
}



def checkpoint_dtype_name(dtype: Any) -> str:
    """The name of a ``DType`` given as member, name or value (already validated by the tag)."""
    if isinstance(dtype, str):
        return dtype
    name = getattr(dtype, "name", None)
    return name if name is not None else _DTYPE_NAMES[int(dtype) - 1]


def checkpoint_itemsize(dtype: Any) -> int:
    """Itemsize of a ``DType`` given as member, name or value (already validated by the tag)."""
    return CHECKPOINT_ITEMSIZES[checkpoint_dtype_name(dtype)]


# -- the named checks and the helpers of compiled rules ------------------------------------------------

# A relative file name inside a checkpoint directory: no separator, no '..', no hidden tricks.
_FILE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}\Z")


def plain_file_name(text: str) -> bool:
    """The named check ``plain_file_name``: the grammar of a file name inside a checkpoint or dump directory."""
    return bool(_FILE_NAME_RE.match(text)) and text not in (".", "..")


def _flat(items: Sequence[Any]) -> list[Any]:
    """A column of arrays as one sequence (``distinct(shards.rows)``: no row in two places)."""
    return [x for item in items for x in item] if items and isinstance(items[0], list) else list(items)


def first_repeat(items: Sequence[Any], earlier: Iterable[Any] = ()) -> int | None:
    """The index of the first of ``items`` that is among ``earlier`` or the items before it, else None
    (str hashes are seeded and ints are below 2**64: no input makes this slow)."""
    seen = set(earlier)
    for index, item in enumerate(items):
        if item in seen:
            return index
        seen.add(item)
    return None


def distinct(items: Sequence[Any], earlier: Sequence[Any] = ()) -> bool:
    """The named check ``distinct``: no item (of a column of arrays: no element) repeats one before it or of
    ``earlier``."""
    flat = _flat(items)
    if len(set(flat)) == len(flat) and not earlier:
        return True
    return first_repeat(flat, earlier) is None


def repeat_at(items: Sequence[Any], earlier: Sequence[Any] = ()) -> list[int]:
    """The indexes of the first repeat of ``distinct``: ``[index]``, or ``[array, element]`` in a column of
    arrays; ``[]`` when there is none."""
    index = first_repeat(_flat(items), earlier)
    if index is None:
        return []
    if items and isinstance(items[0], list):
        for outer, item in enumerate(items):
            if index < len(item):
                return [outer, index]
            index -= len(item)
    return [index]


def fill_indexes(field: str, indexes: Sequence[int]) -> str:
    """``field`` with its ``[i]`` replaced by ``indexes`` in order (one left without an index is dropped)."""
    parts = field.split("[i]")
    out = parts[0]
    for k, part in enumerate(parts[1:]):
        out += (f"[{indexes[k]}]" if k < len(indexes) else "") + part
    return out


class RuleBroken(Exception):
    """An index beyond its array: the rule does not hold."""


def at(seq: Sequence[Any], index: int) -> Any:
    """``seq[index]`` of the rule language: an index outside the array breaks the rule."""
    if 0 <= index < len(seq):
        return seq[index]
    raise RuleBroken


def rule_mod(a: int, b: int) -> int:
    """``a % b`` of the rule language: 0 unless both are 0..2**64 - 1 and ``b`` is not 0."""
    return a % b if 0 < b < 1 << 64 and 0 <= a < 1 << 64 else 0


def rule_div(a: int, b: int) -> int:
    """``a // b`` of the rule language: 0 unless both are 0..2**64 - 1 and ``b`` is not 0."""
    return a // b if 0 < b < 1 << 64 and 0 <= a < 1 << 64 else 0


def align(value: int, to: int) -> int:
    """``align(x, a)``: the first multiple of ``a`` at or after ``x``."""
    return value + (-value % to)


def plural(count: int, word: str, words: str = "") -> str:
    """``plural(n, 'byte')`` of a rule's message: ``1 byte``, ``0 bytes``, ``2 bytes`` (``words``, when given, is
    the plural: ``plural(n, 'index', 'indexes')``)."""
    return f"{count} {word if count == 1 else (words or word + 's')}"


def bytes_within(data: Any, allowed: bytes) -> bool:
    """Whether every byte of ``data`` is one of ``allowed`` (``all(b in (0, 1) for b in data)`` in one pass)."""
    return not bytes(data).translate(None, allowed)


def holds(test: Callable[[], Any]) -> bool:
    """Whether a step's test holds (an index beyond its array breaks it): for the error path."""
    try:
        return bool(test())
    except (IndexError, RuleBroken):
        return False


def steps(items: Callable[[], Iterable[Any]]) -> Iterator[tuple[int, Any]]:
    """``enumerate`` of what a generator of a rule iterates, for the error path: a pair whose taking breaks
    the rule (a zip() of a generator reading beyond an array) comes as ``RuleBroken``, the last."""
    index = 0
    try:
        iterator = iter(items())
        while True:
            try:
                item = next(iterator)
            except StopIteration:
                return
            yield index, item
            index += 1
    except (IndexError, RuleBroken):
        yield index, RuleBroken


def describe_foreign(head: bytes) -> str:
    """What the first bytes of a file that is not the expected Inert file look like."""
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return f"a pickle (protocol {head[1]}), e.g. a legacy torch.distributed.checkpoint .metadata"
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive, e.g. a torch.save file"
    if len(head) >= 9 and head[8:9] == b"{":
        return "a safetensors file (8-byte header length, then a JSON header)"
    if head.startswith(b"\x89INRT"):
        return f"another Inert file ({head[:8]!r})"
    if not head:
        return "no bytes (the input ends here)"
    return f"unknown bytes {head[:8].hex(' ')}"
