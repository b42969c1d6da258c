"""Declarations several formats share, generated once: in the codec of the format that declares them.

``dump-shard``'s row fields hold ``checkpoint-shard``'s ``RecordBody``; rather than a second copy of its
reader and writer (whose branches only one of the two formats' bytes reach), ``dump_shard`` imports
``checkpoint_shard``'s functions, value types and enums.  The owner is the format whose spec module binds
the declaration to a name; the other codec calls the owner's reader and writer and attributes their
errors to its own format (``in_format``).

A declaration is shared only where the owner's code means the same in the other format: neither reads
it below a ``Recursive`` (its depth checks would differ), both are files or both messages (a message's
short strings are cached per module), both take the same parameters, and the same rules sit on every
record in it with the same constants.  Otherwise each format keeps its own copy, as before.
"""

from __future__ import annotations

import enum
import sys
from typing import Any

from inert.spec import FORMATS, _rule_expr
from inert.spec._grammar import Array, Format, Optional, Record, Recursive, Tag, Union

__all__ = ["exported", "imported", "records_within", "enums_within"]


def _children(con: Any) -> list[Any]:
    if isinstance(con, Record):
        return [sub for _, sub in con.fields]
    if isinstance(con, Union):
        return [case for case in con.cases.values() if case is not None]
    if isinstance(con, (Array, Optional)):
        return [con.element]
    if isinstance(con, Recursive):
        return [con.target()]
    return []


def _reached(fmt: Format) -> dict[int, Any]:
    """Every declaration ``fmt``'s versions and parts reach, by id."""
    found: dict[int, Any] = {}
    stack: list[Any] = [*fmt.versions.values(), *(con for versions in fmt.parts.values() for con in versions.values())]
    while stack:
        con = stack.pop()
        if id(con) not in found:
            found[id(con)] = con
            stack += _children(con)
    return found


def _nested(fmt: Format) -> set[int]:
    """ids of the declarations ``fmt`` reaches through a Recursive."""
    out: set[int] = set()
    stack = [con.target() for con in _reached(fmt).values() if isinstance(con, Recursive)]
    while stack:
        con = stack.pop()
        if id(con) not in out:
            out.add(id(con))
            stack += _children(con)
    return out


def records_within(con: Any) -> list[Record]:
    """The records of a declaration, itself included, each once."""
    seen: dict[int, Record] = {}
    stack = [con]
    visited: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in visited:
            continue
        visited.add(id(item))
        if isinstance(item, Record):
            seen[id(item)] = item
        stack += _children(item)
    return list(seen.values())


def enums_within(con: Any) -> dict[str, type[enum.IntEnum]]:
    """The enumerations a declaration's tags and unions use, by name."""
    names: dict[str, type[enum.IntEnum]] = {}
    stack, visited = [con], set()
    while stack:
        item = stack.pop()
        if id(item) in visited:
            continue
        visited.add(id(item))
        if isinstance(item, Tag):
            names[item.enum_cls.__name__] = item.enum_cls
        elif isinstance(item, Union):
            names[item.tag.enum_cls.__name__] = item.tag.enum_cls
        stack += _children(item)
    return names


def _owner(con: Any) -> Format | None:
    """The format whose spec module binds ``con`` to a name (None when none does)."""
    for fmt in FORMATS.values():
        module = sys.modules[f"inert.spec.{fmt.module_name}"]
        if any(value is con for value in vars(module).values()):
            return fmt
    return None


def _same_meaning(fmt: Format, owner: Format, con: Any) -> bool:
    """Whether ``owner``'s reader and writer of ``con`` are what ``fmt``'s own copy would be."""
    if id(con) in _nested(fmt) or id(con) in _nested(owner):
        return False
    if (fmt.magic is None) != (owner.magic is None) or tuple(fmt.params) != tuple(owner.params):
        return False
    ours, theirs = _rule_expr.record_rules(fmt), _rule_expr.record_rules(owner)
    for record in records_within(con):
        a = [rule for rule, _ in ours.get(record.typename, [])]
        b = [rule for rule, _ in theirs.get(record.typename, [])]
        if len(a) != len(b) or any(x is not y for x, y in zip(a, b, strict=True)):
            return False
    mine = _rule_expr.constants(sys.modules[f"inert.spec.{fmt.module_name}"])
    other = _rule_expr.constants(sys.modules[f"inert.spec.{owner.module_name}"])
    return all(mine[name] == other[name] for name in mine.keys() & other.keys())


def imported(fmt: Format) -> dict[int, tuple[Record | Union, Format]]:
    """The outermost declarations ``fmt``'s codec imports, by id, each with the format that owns it."""
    out: dict[int, tuple[Record | Union, Format]] = {}
    seen: set[tuple[int, bool]] = set()
    # (declaration, whether a function may read it): not a version or part (its own codec's entry points),
    # nor a union's case (read inline after the union's tag).
    stack: list[tuple[Any, bool]] = [
        (con, False) for con in [*fmt.versions.values(), *(c for versions in fmt.parts.values() for c in versions.values())]
    ]
    while stack:
        con, callable_ = stack.pop()
        if (id(con), callable_) in seen:
            continue
        seen.add((id(con), callable_))
        if callable_ and isinstance(con, (Record, Union)):
            owner = _owner(con)
            if owner is not None and owner is not fmt and id(con) in _reached(owner) and _same_meaning(fmt, owner, con):
                out[id(con)] = (con, owner)
                continue  # read and written by the owner's functions: nothing below it is generated here
        cases = isinstance(con, Union)
        stack += [(child, not cases) for child in _children(con)]
    return out


def exported(fmt: Format) -> set[int]:
    """ids of ``fmt``'s declarations another format's codec imports: read and written by functions."""
    return {key for other in FORMATS.values() if other is not fmt
            for key, (_, owner) in imported(other).items() if owner is fmt}
