"""The codec generator: walks the grammar in ``inert.spec`` and writes ``inert.codecs``.

Each generated module is plain Python with precompiled ``struct.Struct``
objects: one bounds check and one ``unpack_from`` per group of fixed-size
fields, every count and length compared with its declared limit and with the
bytes that remain before anything is allocated, and a writer that mirrors the
reader.  An array of alike records is read as one uniform run when it can be
(``inert.gen.runs``), element by element otherwise.  ``inert gen --check`` fails when a committed module differs from what
the spec generates now.

Run it as ``inert gen`` (or ``python -m inert gen``).
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

from inert._errors import byte_count
from inert.gen import c_python, grammar_hash, py_shared, py_tables
from inert.gen.emitter import LineEmitter
from inert.gen.py_rules import RecordRules
from inert.gen.py_types import ValueTypes
from inert.gen.runs import RULE_FIELD_RE, RUN_MIN, eligible, quick_test, run_function
from inert.spec import FORMATS, _rule_expr
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
    Rule,
    Scalar,
    Tag,
    Union,
    Utf8,
    min_size,
)

CODECS_DIR = Path(__file__).resolve().parents[1] / "codecs"

_FIXED = (Scalar, Bool8, Tag)
#: Strings up to this many bytes (a dtype, say) are decoded once per module and remembered.
_CACHED_TEXT_MAX = 16
#: Scalar arrays up to this many elements get one precompiled Struct per count.
_PRECOMPILED_MAX = 256


class _Prefix:
    """The length prefix of a Utf8 or Array, read in the fixed group before it into ``local``."""

    def __init__(self, scalar: Scalar, local: str) -> None:
        self.scalar = scalar
        self.size = scalar.size
        self.local = local


def _code(sub: Any) -> str:
    """The ``struct`` letter of a fixed-size element."""
    if isinstance(sub, Bool8):
        return "B"
    if isinstance(sub, (Tag, _Prefix)):
        return str(sub.scalar.code)
    return str(sub.code)


def _spec_hash(fmt: Format) -> str:
    """Hash of everything a module is generated from: the spec module, the grammar, the generator."""
    digest = hashlib.sha256()
    owners = sorted({_spec_module(owner) for _, owner in py_shared.imported(fmt).values()})  # what it imports is theirs
    for module in (_spec_module(fmt), *owners, "inert.spec._grammar", __name__, c_python.__name__, py_shared.__name__):
        digest.update(inspect.getsource(sys.modules[module]).encode())
    return digest.hexdigest()[:16]


def _spec_module(fmt: Format) -> str:
    return f"inert.spec.{fmt.module_name}"


def _nested_declarations(fmt: Format) -> set[int]:
    """ids of the Records and Unions reached through a Recursive: only their code can see depth > 0.

    Elsewhere depth is 0, so a depth check there could never fire: it is not emitted.
    """
    nested: set[int] = set()
    seen: set[tuple[int, bool]] = set()
    stack: list[tuple[Any, bool]] = [(con, False) for con in fmt.versions.values()]
    while stack:
        con, inside = stack.pop()
        if (id(con), inside) in seen:
            continue
        seen.add((id(con), inside))
        if inside and isinstance(con, (Record, Union)):
            nested.add(id(con))
        if isinstance(con, Record):
            stack += [(sub, inside) for _, sub in con.fields]
        elif isinstance(con, Union):
            stack += [(case, inside) for case in con.cases.values() if case is not None]
        elif isinstance(con, (Array, Optional)):
            stack.append((con.element, inside))
        elif isinstance(con, Recursive):
            stack.append((_target(con), True))
    return nested


def _called_declarations(fmt: Format) -> set[int]:
    """ids of the Records and Unions read by calling their reader function.

    Those are a format's versions and parts, the targets of a Recursive, and any declaration used
    in more than one place; the readers of the others are inlined where they are used (once), so
    the code grows with the grammar, and the corpus can reach every line of it.
    """
    tops = [*fmt.versions.values(), *(con for versions in fmt.parts.values() for con in versions.values())]
    called = {id(con) for con in tops}
    uses: dict[int, int] = {}
    seen: set[int] = set()
    stack: list[Any] = list(tops)
    while stack:
        con = stack.pop()
        if id(con) in seen:
            continue
        seen.add(id(con))
        if isinstance(con, Union):  # its cases are read inline by the union's own code
            stack += [case for case in con.cases.values() if case is not None]
            continue
        if isinstance(con, Record):
            children = [sub for _, sub in con.fields]
        elif isinstance(con, (Array, Optional)):
            children = [con.element]
        else:
            children = []
        for child in children:
            if isinstance(child, Recursive):
                called.add(id(_target(child)))
                stack.append(_target(child))
                continue
            if isinstance(child, (Record, Union)):
                uses[id(child)] = uses.get(id(child), 0) + 1
            stack.append(child)
    return called | {key for key, count in uses.items() if count > 1}


class _Module:
    """The text of one generated module, built declaration by declaration."""

    def __init__(self, fmt: Format) -> None:
        self.fmt = fmt
        self.consts: dict[str, str] = {}  # source -> name
        self.enums: dict[str, type[enum.IntEnum]] = {}
        self.checks: dict[str, Any] = {}
        self.readers: dict[int, str] = {}
        self.writers: dict[int, str] = {}
        self.functions: list[str] = []
        self._pending: list[tuple[str, Any]] = []
        self.nested = _nested_declarations(fmt)
        #: Declarations another format's codec reads and writes (:mod:`inert.gen.py_shared`): their functions
        #: are imported from it, by name.
        self.imported = py_shared.imported(fmt)
        self.imports: dict[str, set[str]] = {}  # owner's module name -> names imported from it
        self.called = _called_declarations(fmt) | py_shared.exported(fmt)
        self.run_functions: set[str] = set()
        #: The declared rules on each record (by typename), compiled once each (:mod:`inert.gen.py_rules`).
        self.rules = _rule_expr.record_rules(fmt)
        self.constants = _rule_expr.constants(sys.modules[f"inert.spec.{fmt.module_name}"])
        self.compiled: dict[str, RecordRules] = {}

    def record_rules(self, con: Record | None) -> RecordRules | None:
        """The compiled rules on ``con`` (its function emitted once), or None when it has none."""
        if con is None or con.typename not in self.rules:
            return None
        if con.typename not in self.compiled:
            names = {**self.constants, **_rule_expr.tag_members(con)}
            compiled = RecordRules(self, con, self.rules[con.typename], names, self.fmt.params)
            self.compiled[con.typename] = compiled
            self.functions.append(compiled.function())
        return self.compiled[con.typename]

    # -- shared pieces -------------------------------------------------
    def const(self, source: str, hint: str) -> str:
        if source not in self.consts:
            self.consts[source] = f"_{hint}_{len(self.consts)}"
        return self.consts[source]

    def struct(self, codes: str) -> str:
        return self.const(f"struct.Struct('<{codes}')", "S")

    def enum(self, enum_cls: type[enum.IntEnum]) -> str:
        self.enums[enum_cls.__name__] = enum_cls
        return enum_cls.__name__

    def check(self, fn: Any) -> str:
        self.checks[fn.__name__] = fn
        return f"_checks.{fn.__name__}"

    def _import(self, con: Record | Union, name: str) -> str:
        self.imports.setdefault(self.imported[id(con)][1].module_name, set()).add(name)
        return name

    def reader(self, con: Record | Union) -> str:
        """The name of ``con``'s reader function, emitted once something calls it (imported if shared)."""
        if id(con) in self.imported:
            return self._import(con, f"_read_{con.typename}")
        if id(con) not in self.readers:
            self.readers[id(con)] = f"_read_{con.typename}"
            self._pending.append(("read", con))
        return self.readers[id(con)]

    def writer(self, con: Record | Union) -> str:
        """The name of ``con``'s writer function, emitted once something calls it (imported if shared)."""
        if id(con) in self.imported:
            return self._import(con, f"_write_{con.typename}")
        if id(con) not in self.writers:
            self.writers[id(con)] = f"_write_{con.typename}"
            self._pending.append(("write", con))
        return self.writers[id(con)]

    def drain(self) -> None:
        while self._pending:
            kind, con = self._pending.pop(0)
            emitter = _ReadEmitter(self) if kind == "read" else _WriteEmitter(self)
            self.functions.append(emitter.function(con))


def _target(con: Recursive) -> Record | Union:
    target = con.target()
    if not isinstance(target, (Record, Union)):
        raise TypeError("Recursive must refer to a Record or a Union")
    return target


def _item_path(path: str, index: str) -> str:
    """The Python expression of the path of element ``index`` of the array at ``path``."""
    return f"{path} + '[' + str({index}) + ']'"


def _recurses(con: Any) -> bool:
    """Whether reading ``con`` can reach a Recursive."""
    if isinstance(con, Recursive):
        return True
    if isinstance(con, Record):
        return any(_recurses(sub) for _, sub in con.fields)
    if isinstance(con, (Array, Optional)):
        return _recurses(con.element)
    if isinstance(con, Union):
        return any(_recurses(case) for case in con.cases.values() if case is not None)
    return False


def _leaf_cases(element: Any) -> list[tuple[enum.IntEnum, Record | None]]:
    """The cases of a recursive union, tagged by one byte, whose reads do not recurse (read inline)."""
    if not isinstance(element, Recursive):
        return []
    target = _target(element)
    if not isinstance(target, Union) or target.tag.scalar.code != "B":
        return []
    return [(member, case) for member, case in target.cases.items() if not _recurses(case)]


class _ReadEmitter(LineEmitter):
    """Emits the reader of one Record or Union."""

    mod: _Module

    #: The record and field being read, for the names of their temporaries (see :meth:`named`).
    where: tuple[str, str] | None = None

    def named(self, hint: str) -> str:
        """A temporary named for the field being read (``len_TensorRecord_data``): a name taken from the spec,
        which regenerating after an unrelated change does not renumber (the coverage gate quotes such lines);
        numbered as any other only when the function already holds one of that name."""
        taken: set[str] = self.__dict__.setdefault("_named", set())
        if self.where is not None:
            name = re.sub(r"\W", "_", f"{hint}_{self.where[0]}_{self.where[1]}")
            if name not in taken:
                taken.add(name)
                return name
        return self.fresh(hint)

    def function(self, con: Record | Union) -> str:
        self.nested = id(con) in self.mod.nested
        name = self.mod.readers[id(con)]
        self.emit(0, f"def {name}(buf: Buffer, off: int, depth: int, ctx: dict[str, Any]) -> tuple[Any, int]:")
        self.emit(1, "n = len(buf)")
        if isinstance(con, Record):
            result = self.record(con, 1, {})
            self.emit(1, f"return {result}, off")
        else:
            self.union(con, 1)
        return "\n".join(self.lines)

    def union(self, con: Union, ind: int, local: str | None = None) -> None:
        """Read a union: returned from the function, or, inlined, assigned to ``local``."""
        tag = self.fresh("tag")
        start = self.fresh("start")
        self.emit(ind, f"{start} = off")
        self.scalar_read(con.tag.scalar, tag, repr(con.tag_field), ind)
        enum_name = self.mod.enum(con.tag.enum_cls)
        for i, (member, case) in enumerate(con.cases.items()):
            self.emit(ind, f"{'elif' if i and local else 'if'} {tag} == {int(member)}:")
            result = self.case(con, member, case, ind + 1)
            self.emit(ind + 1, f"return {result}, off" if local is None else f"{local} = {result}")
        raise_unknown = f"raise UnknownTagError(FORMAT, {start}, {con.tag_field!r}, f\"unknown {enum_name} {{{tag}}}\")"
        if local is None:
            self.emit(ind, raise_unknown)
        else:
            self.emit(ind, "else:")
            self.emit(ind + 1, raise_unknown)

    def case(self, con: Union, member: enum.IntEnum, case: Record | None, ind: int) -> str:
        """Emit the reads of one case of a union, its tag already read; return the expression of its dict."""
        fields = {con.tag_field: f"_{self.mod.enum(con.tag.enum_cls)}_{member.name}"}
        return self.record(case, ind, fields) if case is not None else self.dict_literal(fields)

    @staticmethod
    def dict_literal(fields: dict[str, str]) -> str:
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in fields.items()) + "}"

    def record(self, con: Record, ind: int, fields: dict[str, str]) -> str:
        """Emit the reads of a record's fields; return the expression of its dict."""
        start = self.fresh("start")
        rules = self.mod.record_rules(con)
        checks = [] if rules is not None else con.checks  # declared rules state every check of the record
        if checks or rules is not None or any(isinstance(sub, Crc32) for _, sub in con.fields):
            self.emit(ind, f"{start} = off")
        group: list[tuple[str, Any]] = []
        for name, sub in con.fields:
            if isinstance(sub, _FIXED):
                group.append((name, sub))
                continue
            local = f"f_{name}_{self.fresh('')}"
            self.where = (con.typename, name)
            if isinstance(sub, (Padding, Crc32)):
                self.group(group, ind, fields)
                group = []
                if isinstance(sub, Padding):
                    self.padding(sub.align, repr(name), ind)
                    continue
                self.crc32(start, local, repr(name), ind)
                fields[name] = local
                continue
            if isinstance(sub, (Utf8, Array)):
                # Read the length prefix in the same unpack as the fixed fields before it.
                prefix = self.fresh("prefix")
                group.append((name, _Prefix(sub.prefix, prefix)))
                self.group(group, ind, fields)
                group = []
                self.value(sub, local, repr(name), ind, prefix=prefix)
            else:
                self.group(group, ind, fields)
                group = []
                self.value(sub, local, repr(name), ind)
            fields[name] = local
        self.group(group, ind, fields)
        result = self.dict_literal(fields)
        if rules is not None:
            out = self.fresh("value")
            self.emit(ind, f"{out} = {result}")
            fault = self.fresh("fault")
            inline = rules.accept(fields, lambda key: f"{key}_{start}")  # the temporaries' numbering as it was
            if inline is None:
                self.emit(ind, f"{fault} = {rules.function_name}({out}, ctx)")
                self.emit(ind, f"if {fault} is not None:")
            else:
                for line in inline[0]:
                    self.emit(ind, line)
                # The conjunction of the rules inline, the call only for the fault: it holds exactly when they do.
                self.emit(ind, f"if not ({inline[1]}):")
                self.emit(ind + 1, f"{fault} = {rules.function_name}({out}, ctx)")
                self.emit(ind + 1, f"assert {fault} is not None")
            self.emit(ind + 1, f"raise InvalidValueError(FORMAT, {start}, {fault}[0], {fault}[1])")
            return out
        if checks:
            out = self.fresh("value")
            self.emit(ind, f"{out} = {result}")
            for check in checks:
                test = quick_test(self.mod, check, fields)
                if isinstance(check, Rule):
                    self.emit(ind, f"if not {test}:")
                    self.emit(ind + 1, f"raise InvalidValueError(FORMAT, {start}, {check.field!r}, {check.reason!r})")
                else:
                    fault = self.fresh("fault")
                    if test is None:
                        self.emit(ind, f"{fault} = {self.mod.check(check.check)}({out}, ctx)")
                        self.emit(ind, f"if {fault} is not None:")
                        self.emit(ind + 1, f"raise InvalidValueError(FORMAT, {start}, {fault}[0], {fault}[1])")
                        continue
                    # The rule's quick test inline, the call only for its error: the test holds exactly
                    # when the rule accepts (a test that refuses more would fail here on None).
                    self.emit(ind, f"if not ({test}):")
                    self.emit(ind + 1, f"{fault} = {self.mod.check(check.check)}({out}, ctx)")
                    self.emit(ind + 1, f"raise InvalidValueError(FORMAT, {start}, {fault}[0], {fault}[1])")
            return out
        return result

    def group(self, group: list[tuple[str, Any]], ind: int, fields: dict[str, str]) -> None:
        """One bounds check and one unpack for consecutive fixed-size fields."""
        if not group:
            return
        codes = "".join(_code(sub) for _, sub in group)
        packer = self.mod.struct(codes)
        # Per field: offset in the group, width, path, and what a complete field must satisfy, so that a
        # cut-short group reports what the interpreter, reading field by field, meets first.
        entries, offsets, rel = [], [], 0
        for name, sub in group:
            offsets.append(rel)
            if isinstance(sub, Tag):
                rule = f"('tag', {sub.scalar.code!r}, _BY_VALUE_{self.mod.enum(sub.enum_cls)}, {sub.enum_cls.__name__!r})"
            elif isinstance(sub, Bool8):
                rule = "('bool',)"
            else:
                rule = "None"
            entries.append(f"({rel}, {sub.size}, {name!r}, {rule})")
            rel += sub.size
        layout_name = self.mod.const("(" + ", ".join(entries) + ",)", "L")
        locals_ = [sub.local if isinstance(sub, _Prefix) else f"f_{name}_{self.fresh('')}" for name, sub in group]
        self.emit(ind, f"if off + {rel} > n:")
        self.emit(ind + 1, f"raise truncated(FORMAT, buf, off, {layout_name})")
        self.emit(ind, f"{', '.join(locals_)}{',' if len(locals_) == 1 else ''} = {packer}.unpack_from(buf, off)")
        for (name, sub), local, fo in zip(group, locals_, offsets, strict=True):
            if isinstance(sub, _Prefix):
                continue
            if isinstance(sub, Bool8):
                self.emit(ind, f"if {local} > 1:")
                self.emit(ind + 1, f"raise InvalidValueError(FORMAT, off + {fo}, {name!r}, f\"boolean byte is {{{local}}}, not 0 or 1\")")
                self.emit(ind, f"{local} = {local} == 1")
            elif isinstance(sub, Tag):
                enum_name = self.mod.enum(sub.enum_cls)
                raw = self.fresh("raw")
                self.emit(ind, f"{raw} = {local}")
                self.emit(ind, f"{local} = _BY_VALUE_{enum_name}.get({raw})")
                self.emit(ind, f"if {local} is None:")
                self.emit(ind + 1, f"raise UnknownTagError(FORMAT, off + {fo}, {name!r}, f\"unknown {enum_name} {{{raw}}}\")")
            fields[name] = local
        self.emit(ind, f"off += {rel}")

    def scalar_read(self, sub: Scalar, local: str, path: str, ind: int) -> None:
        self.emit(ind, f"if off + {sub.size} > n:")
        self.emit(ind + 1, f"raise TruncatedError(FORMAT, off, {path}, f\"{byte_count(sub.size)} needed, {{n - off}} present\")")
        if sub.code == "B":
            self.emit(ind, f"{local} = buf[off]")
        else:
            self.emit(ind, f"({local},) = {self.mod.struct(sub.code)}.unpack_from(buf, off)")
        self.emit(ind, f"off += {sub.size}")

    def value(self, sub: Any, local: str, path: str, ind: int, prefix: str | None = None) -> None:
        """Read one value of ``sub`` into ``local``; ``path`` is a Python expression of its field path.

        ``prefix`` names a local that already holds the length prefix of a Utf8 or Array.
        """
        if isinstance(sub, (Record, Union)) and (id(sub) in self.mod.called or id(sub) in self.mod.imported):
            err = self.fresh("exc")
            self.emit(ind, "try:")
            self.emit(ind + 1, f"{local}, off = {self.mod.reader(sub)}(buf, off, depth, ctx)")
            self.emit(ind, f"except InertError as {err}:")
            self.emit(ind + 1, f"raise {err}.within({path}){self.attributed(sub)} from None")
        elif isinstance(sub, (Record, Union)):
            # Used here only: inlined, as a call per nested record costs more than its reads.
            err = self.fresh("exc")
            self.emit(ind, "try:")
            if isinstance(sub, Record):
                self.emit(ind + 1, f"{local} = {self.record(sub, ind + 1, {})}")
            else:
                self.emit(ind + 1, f"{local}: dict[str, Any]")  # each case's dict is its own type
                self.union(sub, ind + 1, local)
            self.emit(ind, f"except InertError as {err}:")
            self.emit(ind + 1, f"raise {err}.within({path}) from None")
        elif isinstance(sub, Recursive):
            self.depth_check(sub, path, ind)
            self.recursive_call(sub, local, path, ind)
        elif isinstance(sub, Scalar):
            self.scalar_read(sub, local, path, ind)
        elif isinstance(sub, Utf8):
            self.utf8(sub, local, path, ind, prefix)
        elif isinstance(sub, Array):
            self.array(sub, local, path, ind, prefix)
        elif isinstance(sub, Bytes):
            self.raw_bytes(sub, local, path, ind)
        elif isinstance(sub, MsgPack):
            self.msgpack(sub, local, path, ind)
        elif isinstance(sub, Magic):
            self.magic(sub, path, ind)
            self.emit(ind, f"{local} = {sub.value!r}")
        elif isinstance(sub, Optional):
            flag = self.fresh("flag")
            self.emit(ind, "if off >= n:")
            self.emit(ind + 1, f"raise TruncatedError(FORMAT, off, {path}, \"1 byte needed, 0 present\")")
            self.emit(ind, f"{flag} = buf[off]")
            self.emit(ind, f"if {flag} > 1:")
            self.emit(ind + 1, f"raise InvalidValueError(FORMAT, off, {path}, f\"boolean byte is {{{flag}}}, not 0 or 1\")")
            self.emit(ind, "off += 1")
            self.emit(ind, f"{local} = None")
            self.emit(ind, f"if {flag}:")
            self.value(sub.element, local, path, ind + 1)
        else:
            raise TypeError(f"the generator cannot read {type(sub).__name__}")

    def attributed(self, sub: Any) -> str:
        """What a caller appends to an error of ``sub``'s reader or writer: a shared one names its owner's format."""
        return ".in_format(FORMAT)" if id(sub) in self.mod.imported else ""

    def depth_check(self, sub: Recursive, path: str, ind: int) -> None:
        if self.nested or sub.max_depth < 1:
            self.emit(ind, f"if depth >= {sub.max_depth}:")
            self.emit(ind + 1, f"raise LimitError(FORMAT, off, {path}, \"nesting exceeds max_depth({sub.max_depth})\")")

    def recursive_call(self, sub: Recursive, local: str, path: str, ind: int) -> None:
        err = self.fresh("exc")
        self.emit(ind, "try:")
        self.emit(ind + 1, f"{local}, off = {self.mod.reader(_target(sub))}(buf, off, depth + 1, ctx)")
        self.emit(ind, f"except InertError as {err}:")
        self.emit(ind + 1, f"raise {err}.within({path}) from None")

    def _counted(self, prefix_con: Scalar, prefix: str | None, path: str, ind: int, hint: str = "len") -> tuple[str, str]:
        """The local holding a length/count prefix (an array's ``count``, else ``len``), and the expression
        of the prefix's offset."""
        if prefix is not None:
            return prefix, f"off - {prefix_con.size}"
        length = self.named(hint)
        start = self.named("at")
        self.emit(ind, f"{start} = off")
        self._prefix(prefix_con, length, path, ind)
        return length, start

    def padding(self, align: int, path: str, ind: int) -> None:
        if align == 1:
            return
        pad = self.fresh("pad")
        self.emit(ind, f"{pad} = -off % {align}")
        self.emit(ind, f"if off + {pad} > n:")
        self.emit(ind + 1, f"raise TruncatedError(FORMAT, off, {path}, f\"{{byte_count({pad})}} of padding needed, {{n - off}} present\")")
        self.emit(ind, f"if {pad}:")
        self.emit(ind + 1, f"check_zero(FORMAT, buf, off, {pad}, {path})")
        self.emit(ind + 1, f"off += {pad}")

    def crc32(self, start: str, local: str, path: str, ind: int) -> None:
        computed = self.fresh("crc")
        self.emit(ind, "if off + 4 > n:")
        self.emit(ind + 1, f"raise TruncatedError(FORMAT, off, {path}, f\"4 bytes needed, {{n - off}} present\")")
        self.emit(ind, f"({local},) = {self.mod.struct('I')}.unpack_from(buf, off)")
        self.emit(ind, "if ctx.get('verify_checksums') is not False:")
        self.emit(ind + 1, f"{computed} = zlib.crc32(memoryview(buf)[{start}:off])")
        self.emit(ind + 1, f"if {computed} != {local}:")
        self.emit(
            ind + 2,
            f"raise ChecksumError(FORMAT, off, {path}, f\"stored CRC-32 {{{local}:#010x}}, bytes give {{{computed}:#010x}}\")",
        )
        self.emit(ind, "off += 4")

    def raw_bytes(self, sub: Bytes, local: str, path: str, ind: int) -> None:
        length, start = self._counted(sub.prefix, None, path, ind)
        self.emit(ind, f"if {length} > {sub.max_len}:")
        self.emit(ind + 1, f"raise LimitError(FORMAT, {start}, {path}, f\"length {{{length}}} exceeds max_len({sub.max_len})\")")
        self.padding(sub.align, path, ind)
        self.emit(ind, f"if {length} > n - off:")
        self.emit(ind + 1, f"raise TruncatedError(FORMAT, off, {path}, f\"{{byte_count({length})}} needed, {{n - off}} present\")")
        self.emit(ind, f"{local} = memoryview(buf)[off:off + {length}]")
        self.emit(ind, f"off += {length}")

    def msgpack(self, sub: MsgPack, local: str, path: str, ind: int) -> None:
        length, start = self._counted(sub.prefix, None, path, ind)
        self.emit(ind, f"if {length} > {sub.max_len}:")
        self.emit(
            ind + 1, f"raise LimitError(FORMAT, {start}, {path}, f\"document length {{{length}}} exceeds max_len({sub.max_len})\")"
        )
        self.emit(ind, f"if {length} > n - off:")
        self.emit(ind + 1, f"raise TruncatedError(FORMAT, off, {path}, f\"{{byte_count({length})}} needed, {{n - off}} present\")")
        self.emit(ind, f"{local} = unpack_value(FORMAT, buf[off:off + {length}], off, {path}, {sub.max_depth})")
        self.emit(ind, f"off += {length}")

    def magic(self, sub: Magic, path: str, ind: int) -> None:
        self.emit(ind, f"if bytes(buf[off:off + {sub.size}]) != {sub.value!r}:")
        self.emit(
            ind + 1,
            f"raise ForeignFormatError(FORMAT, off, {path}, \"expected {sub.value!r}, found \" + _checks.describe_foreign(bytes(buf[off:off + 16])))",
        )
        self.emit(ind, f"off += {sub.size}")

    def utf8(self, sub: Utf8, local: str, path: str, ind: int, prefix: str | None = None) -> None:
        length, start = self._counted(sub.prefix, prefix, path, ind)
        self.emit(ind, f"if {length} > {sub.max_len}:")
        self.emit(ind + 1, f"raise LimitError(FORMAT, {start}, {path}, f\"string length {{{length}}} exceeds max_len({sub.max_len})\")")
        self.emit(ind, f"if off + {length} > n:")
        self.emit(ind + 1, f"raise TruncatedError(FORMAT, off, {path}, f\"{{byte_count({length})}} needed, {{n - off}} present\")")
        err = self.fresh("exc")
        self.emit(ind, "try:")
        self.emit(ind + 1, f"{local} = {self.text(sub, f'buf[off:off + {length}]')}")
        self.emit(ind, f"except UnicodeDecodeError as {err}:")
        self.emit(ind + 1, f"raise InvalidValueError(FORMAT, off + {err}.start, {path}, \"invalid UTF-8\") from None")
        self.emit(ind, f"off += {length}")

    def uniform_run(self, element: Any, leaves: list[tuple[enum.IntEnum, Record | None]]) -> str | None:
        """The reader of an array of ``element`` as one uniform run, if it has one (see ``inert.gen.runs``)."""
        present = RUN_MIN * min_size(element)  # bytes the array's count check has seen to be there
        if isinstance(element, Record) and eligible(element):
            return run_function(self.mod, element, None, self.text, present)
        records = [(member, case) for member, case in leaves if case is not None]
        if len(records) != 1 or not eligible(records[0][1]):
            return None
        member, case = records[0]
        assert isinstance(element, Recursive) and case is not None
        union = _target(element)
        assert isinstance(union, Union)
        return run_function(self.mod, case, (union.tag, member, union.tag_field), self.text, present)

    def text(self, sub: Utf8, raw: str) -> str:
        """The expression that decodes the UTF-8 bytes ``raw`` of ``sub`` (``UnicodeDecodeError`` if invalid)."""
        if self.mod.fmt.magic is None and sub.max_len <= _CACHED_TEXT_MAX:
            # A message's input is bytes (decode copies anything else), so its slices can be keys.
            cache = self.mod.const("dict[Any, str]()", "TEXT")
            return f"{cache}.get({raw}) or cached_text({cache}, {raw})"
        return f"str({raw}, 'utf-8')"

    def _prefix(self, prefix: Scalar, local: str, path: str, ind: int) -> None:
        self.emit(ind, f"if off + {prefix.size} > n:")
        self.emit(ind + 1, f"raise TruncatedError(FORMAT, off, {path}, f\"{byte_count(prefix.size)} needed, {{n - off}} present\")")
        self.emit(ind, f"({local},) = {self.mod.struct(prefix.code)}.unpack_from(buf, off)")
        self.emit(ind, f"off += {prefix.size}")

    def array(self, sub: Array, local: str, path: str, ind: int, prefix: str | None = None) -> None:
        count, start = self._counted(sub.prefix, prefix, path, ind, "count")
        self.emit(ind, f"if {count} > {sub.max_count}:")
        self.emit(ind + 1, f"raise LimitError(FORMAT, {start}, {path}, f\"count {{{count}}} exceeds max_count({sub.max_count})\")")
        smallest = min_size(sub.element)
        self.emit(ind, f"if {count} * {smallest} > n - off:")
        self.emit(
            ind + 1,
            f"raise TruncatedError(FORMAT, {start}, {path}, f\"{{{count}}} elements need at least {{byte_count({count} * {smallest})}}, {{n - off}} present\")",
        )
        element = sub.element
        if isinstance(element, Scalar):
            if sub.max_count <= _PRECOMPILED_MAX:
                table = self.mod.const(
                    f"tuple(struct.Struct(f'<{{k}}{element.code}') for k in range({sub.max_count + 1}))", "A"
                )
                self.emit(ind, f"{local} = list({table}[{count}].unpack_from(buf, off))")
            else:
                self.emit(ind, f"{local} = list(struct.unpack_from(f'<{{{count}}}{element.code}', buf, off))")
            self.emit(ind, f"off += {count} * {element.size}")
            return
        index, item = self.fresh("i"), self.fresh("item")
        # Only where the loop is outside the union's own reader: one inlined copy beside the reader's.
        leaves = [] if self.nested else _leaf_cases(element)
        run = self.uniform_run(element, leaves)
        if run is not None:
            got = self.fresh("run")
            self.emit(ind, f"{got} = {run}(buf, off, {count}, ctx) if {count} >= {RUN_MIN} else None")
            self.emit(ind, f"if {got} is not None:")
            self.emit(ind + 1, f"{local}, off = {got}")
            self.emit(ind, "else:")
            ind += 1
        self.emit(ind, f"{local} = []")
        self.emit(ind, f"for {index} in range({count}):")
        if not leaves:
            self.value(element, item, _item_path(path, index), ind + 1)
        else:
            # A recursive union's cases that do not recurse are read here, not by a call per element
            # (a batch's arrays, say); the tag is peeked, and every other byte goes to the union's reader.
            assert isinstance(element, Recursive)
            target = _target(element)
            item_path = _item_path(path, index)
            self.depth_check(element, item_path, ind + 1)
            peek = self.fresh("peek")
            self.emit(ind + 1, f"{peek} = buf[off] if off < n else -1")
            for i, (member, case) in enumerate(leaves):
                err = self.fresh("exc")
                self.emit(ind + 1, f"{'elif' if i else 'if'} {peek} == {int(member)}:")
                self.emit(ind + 2, "try:")
                self.emit(ind + 3, "off += 1")
                self.emit(ind + 3, f"{item} = {self.case(target, member, case, ind + 3)}")
                self.emit(ind + 2, f"except InertError as {err}:")
                self.emit(ind + 3, f"raise {err}.within({item_path}) from None")
            self.emit(ind + 1, "else:")
            self.recursive_call(element, item, item_path, ind + 2)
        self.emit(ind + 1, f"{local}.append({item})")


class _WriteEmitter(_ReadEmitter):
    """Emits the writer of one Record or Union, mirroring its reader."""

    def function(self, con: Record | Union) -> str:
        self.nested = id(con) in self.mod.nested
        name = self.mod.writers[id(con)]
        self.emit(0, f"def {name}(v: Any, out: list[Buffer], depth: int) -> None:")
        self.emit(1, f"v = as_dict(FORMAT, '', v, {con.typename!r})")
        if isinstance(con, Record):
            self.record_w(con, 1)
        else:
            self.union_w(con, 1)
        return "\n".join(self.lines)

    def union_w(self, con: Union, ind: int) -> None:
        enum_name = self.mod.enum(con.tag.enum_cls)
        tag = self.fresh("tag")
        self.emit(ind, f"if {con.tag_field!r} not in v:")
        self.emit(ind + 1, f"raise missing_key(FORMAT, v, {con.tag_field!r}, ({con.tag_field!r},), {con.typename!r})")
        self.emit(ind, f"{tag} = tag_member(FORMAT, {con.tag_field!r}, v[{con.tag_field!r}], _FROM_{enum_name}, {enum_name!r})")
        self.emit(ind, f"out.append({self.mod.struct(con.tag.scalar.code)}.pack({tag}))")
        for member, case in con.cases.items():
            self.emit(ind, f"{'if' if member == next(iter(con.cases)) else 'elif'} {tag} == {int(member)}:")
            if case is None:
                self.keys_w((con.tag_field,), (), f"{con.typename} {member.name}", ind + 1)
            else:
                self.record_w(case, ind + 1, con.tag_field)

    def keys_w(self, required: tuple[str, ...], optional: tuple[str, ...], typename: str, ind: int) -> None:
        """Refuse a key outside the record's (its required ones read already): a typo is not lost data."""
        keys = self.mod.const(repr(required + optional), "K")
        self.emit(ind, f"if len(v) != {len(required)}:")
        self.emit(ind + 1, f"refuse_unknown(FORMAT, v, {keys}, {typename!r})")

    def record_w(self, con: Record, ind: int, tag_field: str | None = None) -> None:
        names = [name for name, sub in con.fields if not isinstance(sub, (Padding, Crc32, Magic))]
        optional = tuple(name for name, sub in con.fields if isinstance(sub, (Crc32, Magic)))
        required = ((tag_field,) if tag_field is not None else ()) + tuple(names)
        mark = ""
        if any(isinstance(sub, Crc32) for _, sub in con.fields):
            mark = self.fresh("mark")  # only here: other formats' generated names stay as they were
            self.emit(ind, f"{mark} = len(out)")
        locals_ = {name: f"f_{name}_{self.fresh('')}" for name in names}
        if names:
            err = self.fresh("exc")
            self.emit(ind, "try:")
            for name in names:
                self.emit(ind + 1, f"{locals_[name]} = v[{name!r}]")
            self.emit(ind, f"except KeyError as {err}:")
            keys = self.mod.const(repr(required + optional), "K")
            self.emit(ind + 1, f"raise missing_key(FORMAT, v, {err}.args[0], {keys}, {con.typename!r}) from None")
        self.keys_w(required, optional, con.typename, ind)
        group: list[tuple[str, Any]] = []
        for name, sub in con.fields:
            if isinstance(sub, _FIXED):
                group.append((name, sub))
                continue
            self.group_w(group, ind, locals_)
            group = []
            if isinstance(sub, Crc32):
                self.emit(ind, f"out.append({self.mod.struct('I')}.pack(crc_parts(out, {mark})))")
            elif isinstance(sub, (Padding, Magic)):
                self.value_w(sub, "None", repr(name), ind)
            else:
                self.value_w(sub, locals_[name], repr(name), ind)
        self.group_w(group, ind, locals_)
        rules = self.mod.record_rules(con)
        if rules is not None:
            fault = self.fresh("fault")
            value = "{" + ", ".join(f"{name!r}: {locals_[name]}" for name in names) + "}"
            # Looked up in the codec at each call: a test may replace it there, to forge what a hostile writer writes.
            self.emit(ind, f"{fault} = {rules.function_name}({value}, _NO_CTX)")
            self.emit(ind, f"if {fault} is not None:")
            self.emit(ind + 1, f"raise WriteValueError(FORMAT, {fault}[0], {fault}[1])")
            return
        for check in con.checks:
            if isinstance(check, Rule):
                expr = RULE_FIELD_RE.sub(lambda m: locals_[m.group(1)], repr(check.expr))
                self.emit(ind, f"if not {expr}:")
                self.emit(ind + 1, f"raise WriteValueError(FORMAT, {check.field!r}, {check.reason!r})")
            else:
                fault = self.fresh("fault")
                self.emit(ind, f"{fault} = {self.mod.check(check.check)}(v, _NO_CTX)")
                self.emit(ind, f"if {fault} is not None:")
                self.emit(ind + 1, f"raise WriteValueError(FORMAT, {fault}[0], {fault}[1])")

    def group_w(self, group: list[tuple[str, Any]], ind: int, locals_: dict[str, str]) -> None:
        if not group:
            return
        codes = ""
        for name, sub in group:
            local = locals_[name]
            if isinstance(sub, Bool8):
                codes += "B"
                self.emit(ind, f"{local} = as_bool(FORMAT, {name!r}, {local})")
            elif isinstance(sub, Tag):
                codes += sub.scalar.code
                enum_name = self.mod.enum(sub.enum_cls)
                self.emit(ind, f"{local} = tag_member(FORMAT, {name!r}, {local}, _FROM_{enum_name}, {enum_name!r})")
            else:
                codes += sub.code
                self.scalar_w(sub, local, repr(name), ind)
        args = ", ".join(locals_[name] for name, _ in group)
        self.emit(ind, f"out.append({self.mod.struct(codes)}.pack({args}))")

    def scalar_w(self, sub: Scalar, local: str, path: str, ind: int) -> None:
        if sub.is_float:
            self.emit(ind, f"if {local}.__class__ is not float:")
            self.emit(ind + 1, f"{local} = as_float(FORMAT, {path}, {local})")
        else:
            self.emit(ind, f"if {local}.__class__ is not int or not {sub.low} <= {local} <= {sub.high}:")
            self.emit(ind + 1, f"{local} = as_int(FORMAT, {path}, {local}, {sub.low}, {sub.high}, {sub.typename!r})")

    def value_w(self, sub: Any, local: str, path: str, ind: int) -> None:
        if isinstance(sub, (Record, Union, Recursive)):
            if isinstance(sub, Recursive):
                if self.nested or sub.max_depth < 1:
                    self.emit(ind, f"if depth >= {sub.max_depth}:")
                    self.emit(ind + 1, f"raise WriteValueError(FORMAT, {path}, \"nesting exceeds max_depth({sub.max_depth})\")")
                call = f"{self.mod.writer(_target(sub))}({local}, out, depth + 1)"
            else:
                call = f"{self.mod.writer(sub)}({local}, out, depth)"
            err = self.fresh("exc")
            self.emit(ind, "try:")
            self.emit(ind + 1, call)
            self.emit(ind, f"except (WriteTypeError, WriteValueError) as {err}:")
            self.emit(ind + 1, f"raise {err}.within({path}){self.attributed(sub)} from None")
        elif isinstance(sub, Scalar):
            self.scalar_w(sub, local, path, ind)
            self.emit(ind, f"out.append({self.mod.struct(sub.code)}.pack({local}))")
        elif isinstance(sub, Utf8):
            data = self.fresh("data")
            self.emit(ind, f"{data} = as_text(FORMAT, {path}, {local}, {sub.max_len})")
            self.emit(ind, f"out.append({self.mod.struct(sub.prefix.code)}.pack(len({data})))")
            self.emit(ind, f"out.append({data})")
        elif isinstance(sub, Bytes):
            data = self.fresh("data")
            self.emit(ind, f"{data} = as_bytes(FORMAT, {path}, {local}, {sub.max_len})")
            self.emit(ind, f"out.append({self.mod.struct(sub.prefix.code)}.pack(len({data})))")
            self.value_w(Padding(sub.align), "None", path, ind)
            self.emit(ind, f"out.append({data})")
        elif isinstance(sub, MsgPack):
            data = self.fresh("data")
            self.emit(ind, f"{data} = pack_value(FORMAT, {path}, {local}, {sub.max_len}, {sub.max_depth})")
            self.emit(ind, f"out.append({self.mod.struct(sub.prefix.code)}.pack(len({data})))")
            self.emit(ind, f"out.append({data})")
        elif isinstance(sub, Padding):
            if sub.align > 1:
                self.emit(ind, f"out.append(bytes(-out_size(out) % {sub.align}))")
        elif isinstance(sub, Magic):
            self.emit(ind, f"out.append({sub.value!r})")
        elif isinstance(sub, Optional):
            self.emit(ind, f"if {local} is None:")
            self.emit(ind + 1, "out.append(b'\\x00')")
            self.emit(ind, "else:")
            self.emit(ind + 1, "out.append(b'\\x01')")
            self.value_w(sub.element, local, path, ind + 1)
        elif isinstance(sub, Array):
            self.emit(ind, f"{local} = as_list(FORMAT, {path}, {local}, {sub.max_count})")
            self.emit(ind, f"out.append({self.mod.struct(sub.prefix.code)}.pack(len({local})))")
            index, item = self.fresh("i"), self.fresh("item")
            element = sub.element
            item_path = _item_path(path, index)
            if isinstance(element, Scalar):
                self.emit(ind, f"{local} = list({local})")
                self.emit(ind, f"for {index}, {item} in enumerate({local}):")
                self.scalar_w(element, item, item_path, ind + 1)
                self.emit(ind + 2, f"{local}[{index}] = {item}")
                self.emit(ind, f"out.append(struct.pack(f'<{{len({local})}}{element.code}', *{local}))")
                return
            self.emit(ind, f"for {index}, {item} in enumerate({local}):")
            self.value_w(element, item, item_path, ind + 1)
        else:
            raise TypeError(f"the generator cannot write {type(sub).__name__}")


_HEADER = '''\
# Generated by `inert gen` from {spec} (spec hash {digest}).
# Do not edit: change the spec or the generator, then run `inert gen`.
"""Codec for the ``{name}`` format (generated from {spec}; its specification: docs/spec/{module}.md).

{doc}

{types}

``decode(data)`` takes ``bytes``, ``bytearray`` or ``memoryview`` and returns the value; any fault of the
bytes is an ``InertError`` subclass naming format, offset and field.  ``encode(value)`` returns the bytes; a
value it cannot write is a ``WriteTypeError`` or ``WriteValueError`` naming the field's path, a missing key
and a key the record does not have (a typo) included.  A tag decodes to its enum member, which equals its
name as well as its integer; ``encode`` takes the member, the name or the integer, so
``decode(encode(v)) == v`` for a value written with names.  An enum member hashes as its integer: do not mix
names and members as keys of one set or dict (``member.name`` is the name).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Union

from inert import _checks
from inert._codec_runtime import (
    TagEnum,
    as_bool,
    as_buffer,
    as_dict,
    as_float,
    as_int,
    as_list,
    as_text,
    cached_text,
    for_version,
    missing_key,
    private_bytes,
    refuse_unknown,
    run_struct,
    tag_member,
    truncated,
)
from inert._errors import (
    InertError,
    InvalidValueError,
    LimitError,
    TrailingBytesError,
    TruncatedError,
    UnknownTagError,
    WriteTypeError,
    WriteValueError,
    byte_count,
)

if TYPE_CHECKING:
    from typing_extensions import NotRequired

__all__ = ["FORMAT", "VERSIONS", "LATEST", "decode", "encode"{enum_names}]

FORMAT = {name!r}
VERSIONS = {versions!r}
LATEST = {latest}
SPEC_HASH = {digest!r}

Buffer = Union[bytes, bytearray, memoryview]
_NO_CTX: dict[str, Any] = {{}}
'''

_FOOTER = '''

_READERS = {readers}
_WRITERS = {writers}
{accel_setup}

def decode(data: Buffer, *, version: int = LATEST{param_sig}) -> {value_type}:
    """Decode one ``{name}`` value; raise an ``InertError`` subclass on any fault."""
    value: {value_type}
    buf = data if data.__class__ is bytes else private_bytes(data)
{accel_call}    reader = {latest_reader} if version == LATEST else for_version(FORMAT, _READERS, version)
    value, off = reader(buf, 0, 0, {ctx})
    if off != len(buf):
        raise TrailingBytesError(FORMAT, off, "", f"{{byte_count(len(buf) - off)}} after the end of the value")
    return value
{accel_bind}

def encode(value: {value_type}, *, version: int = LATEST) -> bytes:
    """Encode one ``{name}`` value; raise ``WriteTypeError``/``WriteValueError`` naming the field."""
{accel_encode}    writer = for_version(FORMAT, _WRITERS, version)
    out: list[Buffer] = []
    writer(value, out, 0)
    return b"".join(out)
'''

# File formats: the version comes from the header, the input has a size limit.
_FILE_FOOTER = '''

_READERS = {readers}
_WRITERS = {writers}
MAGIC = {magic!r}
HEADER_SIZE = {header_size}
MAX_SIZE = {max_size}
{accel_setup}

def decode(data: Buffer, *, version: int | None = None, max_size: int = MAX_SIZE{param_sig}) -> {value_type}:
    """Decode one ``{name}`` file; raise an ``InertError`` subclass on any fault.

    The version is the file's own; ``version``, when given, is the one the caller
    requires.  ``max_size`` may lower the limit on the input's size, not raise it.
    """
    value: {value_type}
    buf = as_buffer(data)
{accel_call}    limit = min(max_size, MAX_SIZE)
    if len(buf) > limit:
        raise LimitError(FORMAT, 0, "", f"input of {{byte_count(len(buf))}} exceeds max_size({{limit}})")
    version = read_file_header(FORMAT, buf, MAGIC, VERSIONS, version)
    value, off = _READERS[version](buf, HEADER_SIZE, 0, {ctx})
    if off != len(buf):
        raise TrailingBytesError(FORMAT, off, "", f"{{byte_count(len(buf) - off)}} after the end of the value")
    return value


def encode_parts(value: {value_type}, *, version: int = LATEST) -> list[Buffer]:
    """The encoding of one ``{name}`` file as a list of buffers (large payloads are not copied)."""
    writer = for_version(FORMAT, _WRITERS, version)
    out: list[Buffer] = [file_header(MAGIC, version)]
    writer(value, out, 0)
    return out


def encode(value: {value_type}, *, version: int = LATEST) -> bytes:
    """Encode one ``{name}`` file; raise ``WriteTypeError``/``WriteValueError`` naming the field."""
    return b"".join(encode_parts(value, version=version))
'''

# A part of a format, read and written on its own (e.g. one record fetched by its byte range).
_PART_FOOTER = '''

_{upper}_READERS = {readers}
_{upper}_WRITERS = {writers}


def decode_{part}(data: Buffer, *, version: int = LATEST{param_sig}) -> {value_type}:
    """Decode one ``{part}`` of ``{name}`` on its own; offsets count from the start of ``data``."""
    value: {value_type}
    buf = data if data.__class__ is bytes else as_buffer(data)
    reader = {latest_reader} if version == LATEST else for_version(FORMAT, _{upper}_READERS, version)
    value, off = reader(buf, 0, 0, {ctx})
    if off != len(buf):
        raise TrailingBytesError(FORMAT, off, "", f"{{byte_count(len(buf) - off)}} after the end of the value")
    return value


def encode_{part}_parts(value: {value_type}, *, version: int = LATEST) -> list[Buffer]:
    """The encoding of one ``{part}`` as a list of buffers (large payloads are not copied)."""
    writer = for_version(FORMAT, _{upper}_WRITERS, version)
    out: list[Buffer] = []
    writer(value, out, 0)
    return out


def encode_{part}(value: {value_type}, *, version: int = LATEST) -> bytes:
    """Encode one ``{part}`` of ``{name}`` on its own."""
    return b"".join(encode_{part}_parts(value, version=version))
'''

_FILE_IMPORTS = '''
import zlib

from inert._codec_runtime import (
    as_bytes,
    check_zero,
    crc_parts,
    file_header,
    out_size,
    pack_value,
    read_file_header,
    unpack_value,
)
from inert._errors import ChecksumError, ForeignFormatError, VersionError
'''


def _uses_file_elements(fmt: Format) -> bool:
    """Whether the format needs the file-format run-time (magic, checksums, raw bytes, value documents)."""
    return fmt.magic is not None or bool(fmt.parts)


def generate(fmt: Format) -> str:
    """The source of ``inert.codecs.<format>``."""
    mod = _Module(fmt)
    for con in fmt.versions.values():
        if not isinstance(con, (Record, Union)):
            raise TypeError(f"{fmt.name}: a version's top level must be a Record or a Union")
        mod.reader(con)
        mod.writer(con)
    for versions in fmt.parts.values():
        for con in versions.values():
            mod.reader(con)
            mod.writer(con)
    mod.drain()
    # What a shared declaration brings from its owner's codec: its functions (imported as the calls need
    # them), its value types and its enumerations (one class: a member decoded by either codec is the same).
    shared_enums: dict[str, type[enum.IntEnum]] = {}
    named: dict[str, list[str]] = {}
    for con, owner in mod.imported.values():
        owner_types = ValueTypes(owner, [], shared=frozenset(py_shared.imported(owner)))
        held = [*owner_types.names_within(con), *sorted(py_shared.enums_within(con))]
        named.setdefault(owner.module_name, []).extend(n for n in held if n not in named.get(owner.module_name, []))
        mod.imports.setdefault(owner.module_name, set()).update(held)
        shared_enums.update(py_shared.enums_within(con))
    if c_python.accelerated(fmt):  # their tables here too: the accelerator's builder takes them by name
        mod.enums.update(shared_enums)
    clash = {name for names in mod.imports.values() for name in names} & {*mod.readers.values(), *mod.writers.values()}
    if clash:
        raise TypeError(f"{fmt.name}: {sorted(clash)} are the names of shared declarations of another format")
    types = ValueTypes(fmt, sorted(mod.enums), named, frozenset(mod.imported))
    parts = []
    # The functions only: the enums and value types are importable by name and listed in the docstring
    # (help() on an enum class is a page of int's methods).
    funcs = ["encode_parts"] if fmt.magic is not None else []
    for part in fmt.parts:
        funcs += [f"decode_{part}", f"encode_{part}", f"encode_{part}_parts"]
    names = "".join(f", {n!r}" for n in funcs)
    doc = fmt.doc.strip().split("\n\n")[0].replace('"""', "'''")  # the rest: the specification page
    parts.append(
        _HEADER.format(
            spec=f"inert/spec/{fmt.module_name}.py",
            module=fmt.module_name,
            types=types.doc(),
            digest=_spec_hash(fmt),
            name=fmt.name,
            doc=doc,
            enum_names=names,
            versions=tuple(sorted(fmt.versions)),
            latest=fmt.latest,
        )
    )
    for module, taken in sorted(mod.imports.items()):
        listed = "".join(f"    {name},\n" for name in sorted(taken))
        parts.append(f"\nfrom inert.codecs.{module} import (  # declared by its format, shared with this one\n{listed})\n")
    for enum_name in sorted(mod.enums):
        enum_cls = mod.enums[enum_name]
        body = "\n".join(f"    {m.name} = {int(m)}" for m in enum_cls)
        if enum_name not in shared_enums:
            parts.append(f"\n\nclass {enum_name}(TagEnum):\n{body}\n")
        # Members as module constants: a global load is cheaper than an attribute lookup per value.
        parts.append("\n" + "".join(f"_{enum_name}_{m.name} = {enum_name}.{m.name}\n" for m in enum_cls))
        parts.append(f"_BY_VALUE_{enum_name} = {{int(m): m for m in {enum_name}}}")
        parts.append(
            f"\n_FROM_{enum_name}: dict[Any, {enum_name}] = {{**_BY_VALUE_{enum_name}, **{{m.name: m for m in {enum_name}}}}}\n"
        )
    parts.append("\n" + types.source() + "\n")
    for source, cname in mod.consts.items():
        parts.append(f"{cname} = {source}\n")
    for function in mod.functions:
        parts.append("\n\n" + function + "\n")
    quick = {name: rules.quick_test() for name, rules in sorted(mod.compiled.items()) if rules.quick_test() is not None}
    if quick:
        parts.append("\n\n#: The inline tests of the records' rules, over ``this.<field>``, ``ctx`` and ``_checks``.\n")
        parts.append("_QUICK_TESTS = {\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in quick.items()) + "}\n")
    readers = "{" + ", ".join(f"{v}: {mod.readers[id(c)]}" for v, c in sorted(fmt.versions.items())) + "}"
    writers = "{" + ", ".join(f"{v}: {mod.writers[id(c)]}" for v, c in sorted(fmt.versions.items())) + "}"
    param_sig = "".join(f", {p}: Any = None" for p in fmt.params)
    ctx = "{" + ", ".join(f"{p!r}: {p}" for p in fmt.params) + "}" if fmt.params else "_NO_CTX"
    footer = _FILE_FOOTER if fmt.magic is not None else _FOOTER
    parts.append(footer.format(
        readers=readers, writers=writers, name=fmt.name, param_sig=param_sig, ctx=ctx,
        value_type=types.annotation_of(types.tops),
        magic=fmt.magic, header_size=fmt.header_size, max_size=fmt.size_limit,
        latest_reader=mod.readers[id(fmt.versions[fmt.latest])],
        accel_setup=c_python.setup_line(fmt, sorted(mod.enums)),
        accel_call=c_python.call_lines(fmt, ctx),
        accel_bind=c_python.bind_lines(fmt),
        accel_encode=c_python.encode_lines(fmt),
    ))
    for part, versions in fmt.parts.items():
        parts.append(
            _PART_FOOTER.format(
                part=part,
                upper=part.upper(),
                readers="{" + ", ".join(f"{v}: {mod.readers[id(c)]}" for v, c in sorted(versions.items())) + "}",
                writers="{" + ", ".join(f"{v}: {mod.writers[id(c)]}" for v, c in sorted(versions.items())) + "}",
                latest_reader=mod.readers[id(versions[max(versions)])],
                name=fmt.name,
                param_sig=param_sig,
                ctx=ctx,
                value_type=types.annotation_of(types.parts[part]),
            )
        )
    text = "".join(parts)
    if c_python.accelerated(fmt):
        text = text.replace("\n    as_bool,\n", "\n    accelerator,\n    as_bool,\n", 1)
        if c_python.bind_lines(fmt):
            text = text.replace("\n    as_text,\n", "\n    as_text,\n    bind_decode,\n", 1)
        if c_python.encoded(fmt):
            text = text.replace("\n    cached_text,\n", "\n    cached_text,\n    encoder,\n", 1)
    if _uses_file_elements(fmt):
        text = text.replace("\nfrom inert import _checks\n", _FILE_IMPORTS + "from inert import _checks\n", 1)
    return text.replace("\n\n\n\n", "\n\n\n")


def _package_init() -> str:
    modules = ", ".join(repr(f.module_name) for f in FORMATS.values())
    return (
        "# Generated by `inert gen`. Do not edit: change the spec or the generator, then run `inert gen`.\n"
        '"""The generated codecs of Inert\'s formats, one module per format (installed as ``inert.codecs``).\n\n'
        "Each module exposes ``decode(data) -> value`` and ``encode(value) -> bytes`` and needs only the\n"
        'standard library (and msgpack for the formats that carry value documents)."""\n\n'
        f"__all__ = [{modules}]\n\n"
        f"#: Format name -> module name, for the formats this package holds.\n"
        f"MODULES = {{{', '.join(f'{f.name!r}: {f.module_name!r}' for f in FORMATS.values())}}}\n\n"
        "#: The hash of the generated C these codecs go with (inert/gen/grammar_hash.py): the accelerator is bound\n"
        "#: only when its build carries the same (inert._accelerator).\n"
        f"GRAMMAR_HASH = {grammar_hash.grammar_hash()!r}\n"
    )


def outputs() -> dict[Path, str]:
    """Every file ``inert gen`` writes, with its text."""
    files = {CODECS_DIR / "__init__.py": _package_init(), CODECS_DIR / "_tables.py": py_tables.source()}
    for fmt in FORMATS.values():
        files[CODECS_DIR / f"{fmt.module_name}.py"] = generate(fmt)
    docs_dir = CODECS_DIR.parents[1] / "docs" / "spec"
    if (CODECS_DIR.parents[1] / "pyproject.toml").is_file() and docs_dir.parent.is_dir():  # a source checkout: the specification document is generated too
        from inert.gen import docs as _docgen

        files.update(_docgen.outputs(FORMATS, docs_dir))
    return files


def run(check: bool) -> int:
    """Write (or with ``check``, compare) every generated file; the CLI's exit code."""
    stale = []
    for path, text in outputs().items():
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if check and stale:
        for path in stale:
            print(f"inert: gen: {path.name} is stale; run `inert gen`", file=sys.stderr)
        return 1
    if not check:
        print(f"inert: gen: {len(stale)} file(s) written")
    return 0
