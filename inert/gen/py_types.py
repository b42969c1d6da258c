"""The value types of a generated codec: one ``TypedDict`` per record (and per case of a union), and the docstring
that lists them.

``decode`` returns these dicts and ``encode`` takes them, so a user's ``mypy --strict`` checks the keys and
their types.  A union is the alias of its cases' dicts, each case carrying the union's tag key typed as its own
member (``Literal[MessageType.SCHEDULED_TASK, "SCHEDULED_TASK"]``: decode returns the member, which equals its
name, and encode takes either).  A checksum or magic key is not required (decode gives it, encode computes it).
The module docstring lists each dict's keys with their types, version by version, so ``help()`` shows them.
"""

from __future__ import annotations

import enum
import keyword
import re
import textwrap
from typing import Any

from inert.spec._grammar import (
    Array,
    Bool8,
    Bytes,
    Crc32,
    Format,
    Magic,
    MsgPack,
    Optional,
    Padding,
    Record,
    Recursive,
    Scalar,
    Tag,
    Union,
    Utf8,
)

__all__ = ["ValueTypes"]

#: Module-level names of a generated codec a value type must not take.
_RESERVED = frozenset({
    "FORMAT", "VERSIONS", "LATEST", "SPEC_HASH", "MAGIC", "HEADER_SIZE", "MAX_SIZE", "Buffer", "Any", "Literal",
    "TypedDict", "Union", "TYPE_CHECKING", "NotRequired", "TagEnum", "decode", "encode", "encode_parts",
})


def _target(con: Recursive) -> Record | Union:
    target = con.target()
    assert isinstance(target, (Record, Union))
    return target


def _readable(annotation: str) -> str:
    """An annotation as the docstring shows it: a case's tag as its name, a tag field as its enum."""
    annotation = re.sub(r'Literal\[\w+\.\w+, ("\w+")\]', r"\1", annotation)
    return re.sub(r"(\w+) \| \1Name", r"\1 (member or name)", annotation)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.lower().split("_"))


class _Dict:
    """One generated TypedDict: its name and its keys as (name, annotation, required)."""

    def __init__(self, name: str, keys: list[tuple[str, str, bool]]) -> None:
        self.name = name
        self.keys = keys


class ValueTypes:
    """The TypedDicts and aliases of one format, named after the grammar's typenames."""

    def __init__(self, fmt: Format, enum_names: list[str], imported: dict[str, list[str]] | None = None,
                 shared: frozenset[int] = frozenset()) -> None:
        """``shared``: ids of the declarations another codec holds (named, not walked); ``imported``: the
        names taken from each such codec, for the docstring."""
        self.fmt = fmt
        self.shared = shared
        self.imported = imported or {}
        self.dicts: dict[str, _Dict] = {}
        self.aliases: dict[str, list[str]] = {}  # union typename -> its cases' dict names
        self.enums: dict[str, type[enum.IntEnum]] = {}
        self._owners: dict[str, tuple[int, str]] = {}  # a case's dict name -> (its union, its member)
        self._cases: set[int] = {id(case) for con in self._all(fmt) if isinstance(con, Union)
                                 for case in con.cases.values() if case is not None}
        self.tops = {version: self.annotation(con) for version, con in sorted(fmt.versions.items())}
        self.parts = {part: {v: self.annotation(con) for v, con in sorted(versions.items())}
                      for part, versions in fmt.parts.items()}
        taken = set(self.dicts) | set(self.aliases)
        clash = taken & (_RESERVED | set(enum_names) | {f"{e}Name" for e in enum_names})
        if clash:
            raise TypeError(f"{fmt.name}: typenames {sorted(clash)} clash with the codec's own names")

    @staticmethod
    def _all(fmt: Format) -> list[Any]:
        """Every declaration reachable from the format's versions and parts."""
        found: list[Any] = []
        seen: set[int] = set()
        stack: list[Any] = [*fmt.versions.values(), *(c for vs in fmt.parts.values() for c in vs.values())]
        while stack:
            con = stack.pop()
            if id(con) in seen:
                continue
            seen.add(id(con))
            found.append(con)
            if isinstance(con, Record):
                stack += [sub for _, sub in con.fields]
            elif isinstance(con, Union):
                stack += [case for case in con.cases.values() if case is not None]
            elif isinstance(con, (Array, Optional)):
                stack.append(con.element)
            elif isinstance(con, Recursive):
                stack.append(_target(con))
        return found

    # -- annotations -------------------------------------------------------------------------------
    def annotation(self, con: Any) -> str:
        """The annotation of a value of ``con`` (registering the dicts it needs)."""
        if isinstance(con, Scalar):
            return "float" if con.is_float else "int"
        if isinstance(con, Bool8):
            return "bool"
        if isinstance(con, Tag):
            name = con.enum_cls.__name__
            self.enums[name] = con.enum_cls
            return f"{name} | {name}Name"
        if isinstance(con, Utf8):
            return "str"
        if isinstance(con, Bytes):
            return "Buffer"
        if isinstance(con, Magic):
            return "bytes"
        if isinstance(con, Crc32):
            return "int"
        if isinstance(con, MsgPack):
            return "Any"
        if isinstance(con, Optional):
            return f"{self.annotation(con.element)} | None"
        if isinstance(con, Array):
            return f"list[{self.annotation(con.element)}]"
        if isinstance(con, Recursive):
            return self.annotation(_target(con))
        if isinstance(con, (Record, Union)) and id(con) in self.shared:
            return con.typename
        if isinstance(con, Record):
            if id(con) in self._cases:
                raise TypeError(f"{self.fmt.name}: {con.typename} is a union's case and a field's type too")
            self._record(con, con.typename, [])
            return con.typename
        if isinstance(con, Union):
            self._union(con)
            return con.typename
        raise TypeError(f"the generator has no value type for {type(con).__name__}")

    def _record(self, con: Record, name: str, keys: list[tuple[str, str, bool]]) -> None:
        if name in self.dicts:
            return
        entry = _Dict(name, keys)
        self.dicts[name] = entry  # before the fields: a recursive record refers to itself
        for field, sub in con.fields:
            if isinstance(sub, Padding):
                continue
            keys.append((field, self.annotation(sub), not isinstance(sub, (Crc32, Magic))))

    def _union(self, con: Union) -> None:
        if con.typename in self.aliases:
            return
        cases: list[str] = []
        self.aliases[con.typename] = cases
        enum_name = con.tag.enum_cls.__name__
        self.enums[enum_name] = con.tag.enum_cls
        for member, case in con.cases.items():
            tag = (con.tag_field, f'Literal[{enum_name}.{member.name}, "{member.name}"]', True)
            name = case.typename if case is not None else f"{con.typename}{_camel(member.name)}"
            if self._owners.setdefault(name, (id(con), member.name)) != (id(con), member.name):
                name = f"{con.typename}{name}"  # a record that is a case of two unions: one dict per union
            cases.append(name)
            if case is None:
                self.dicts[name] = _Dict(name, [tag])
            else:
                self._record(case, name, [tag])

    def names_within(self, con: Record | Union) -> list[str]:
        """The dicts and aliases this module names for a declaration and what it holds, ``con``'s first."""
        out: dict[str, None] = {}
        stack: list[Any] = [con]
        seen: set[int] = set()
        while stack:
            item = stack.pop()
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, Union):
                out.update(dict.fromkeys([item.typename, *self.aliases[item.typename]]))
                stack += [sub for case in item.cases.values() if case is not None for _, sub in case.fields]
                continue
            if isinstance(item, Record):
                out[item.typename] = None
                stack += [sub for _, sub in item.fields]
            elif isinstance(item, (Array, Optional)):
                stack.append(item.element)
            elif isinstance(item, Recursive):
                stack.append(_target(item))
        return list(out)

    # -- the source ----------------------------------------------------------------------------------
    def source(self) -> str:
        """The enums' name aliases, the TypedDicts and the unions' aliases, as module source."""
        lines: list[str] = []
        for name in sorted(self.enums):
            members = ", ".join(f'"{m.name}"' for m in self.enums[name])
            lines.append(f"{name}Name = Literal[{members}]\n")
        for entry in self.dicts.values():
            lines.append("\n\n" + self._typed_dict(entry))
        if self.aliases:
            lines.append("\n\n")
        for alias, cases in self.aliases.items():
            lines.append(f"{alias} = Union[{', '.join(repr(c) for c in cases)}]\n")
        return "".join(lines)

    @staticmethod
    def _typed_dict(entry: _Dict) -> str:
        if all(k.isidentifier() and not keyword.iskeyword(k) for k, _, _ in entry.keys):
            body = [f"    {k}: {t if req else f'NotRequired[{t}]'}" for k, t, req in entry.keys] or ["    pass"]
            return f"class {entry.name}(TypedDict):\n" + "\n".join(body) + "\n"
        items = ", ".join(f"{k!r}: {(t if req else f'NotRequired[{t}]')!r}" for k, t, req in entry.keys)
        return f"{entry.name} = TypedDict({entry.name!r}, {{{items}}})\n"

    def annotation_of(self, annotations: dict[int, str]) -> str:
        """The union of some versions' annotations, each once."""
        return " | ".join(dict.fromkeys(annotations.values()))

    # -- the docstring -------------------------------------------------------------------------------
    def doc(self) -> str:
        """The lines of the module docstring that list the values' keys and types."""
        out = ["Values (``decode`` returns them, ``encode`` takes them; each dict a ``TypedDict`` of this module):", ""]
        for version, top in self.tops.items():
            out.append(f"* version {version}: ``{top}``")
        for part, versions in self.parts.items():
            for version, top in versions.items():
                out.append(f"* ``decode_{part}``/``encode_{part}``, version {version}: ``{top}``")
        out.append("")
        for alias, cases in self.aliases.items():
            out.append(f"``{alias}`` is one of {', '.join(f'``{c}``' for c in cases)}.")
        out.append("")
        for entry in self.dicts.values():
            out.append(f"``{entry.name}``")
            for key, annotation, required in entry.keys:
                note = "" if required else " (not required by encode: computed)"
                out.append(f"    {key}: {_readable(annotation)}{note}")
        for module, names in sorted(self.imported.items()):
            listed = ", ".join(f"``{name}``" for name in names)
            out.extend(textwrap.wrap(f"{listed}: those of ``inert.codecs.{module}``, whose format declares them "
                                     "(imported).", 110))
        out.append("")
        for name in sorted(self.enums):
            members = ", ".join(f"{m.name} = {int(m)}" for m in self.enums[name])
            out.extend(textwrap.wrap(f"``{name}``: {members}", 110, subsequent_indent="    "))
        return "\n".join(out)
