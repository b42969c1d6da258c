"""The C99 reader generator: walks the grammar in ``inert.spec`` and writes ``c/inert_<format>.{h,c}``.

Each generated reader validates a buffer and reports its values to a visitor
(``c/inert_runtime.h``), with one explicit bounds check per field, every count
and length compared with its declared limit and the bytes that remain before
anything is read, and faults of the same kind, offset and field path as the
Python readers.  The run-time (``c/inert_runtime.c``, ``c/inert_msgpack.c``) is
written once by hand; this module writes the per-format readers, the CRC-32
table and the registry ``c/inert_formats.{h,c}`` that the conformance testee and
the fuzz targets dispatch through.

The declared rules checked on a record (``SpecRule.on``) become C through the rule language
(:mod:`inert.spec._rule_expr`, compiled by :mod:`inert.gen.c_rules`); the grammar's own ``Rule``
expressions of a record without declared rules too.  A rule held only as a Python function is
listed in its source's header as not checked, and :func:`missing_rules` names them all.
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import operator
import sys
from pathlib import Path
from typing import Any

from construct.expr import BinExpr, UniExpr
from construct.expr import Path as ExprPath

from inert.gen.c_rules import CField, StepCompiler
from inert.gen.emitter import LineEmitter
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
    Scalar,
    Tag,
    Union,
    Utf8,
    min_size,
)

__all__ = ["C_DIR", "outputs", "generate", "missing_rules"]

C_DIR = Path(__file__).resolve().parents[2] / "c"

#: What a reader may be told beyond the bytes, as the run-time's ``inert_params`` holds it.
_KNOWN_PARAMS = {"chunk_size", "verify_checksums", "max_size"}

_COMPARE = {operator.lt: "<", operator.le: "<=", operator.gt: ">", operator.ge: ">=", operator.eq: "==", operator.ne: "!="}
_ARITH = {operator.add: "inert_i128_add", operator.sub: "inert_i128_sub"}
_LOGIC = {operator.and_: "&&", operator.or_: "||"}
#: The run-time's constant of each error kind a rule may declare.
_KINDS = {"invalid-value": "INERT_INVALID_VALUE", "limit": "INERT_LIMIT", "unknown-tag": "INERT_UNKNOWN_TAG",
          "truncated": "INERT_TRUNCATED", "checksum": "INERT_CHECKSUM"}


class Untranslatable(Exception):
    """A rule expression the C emitter has no translation for."""


def _spec_hash(fmt: Format) -> str:
    digest = hashlib.sha256()
    for module in (f"inert.spec.{fmt.module_name}", "inert.spec._grammar", __name__):
        digest.update(inspect.getsource(sys.modules[module]).encode())
    return digest.hexdigest()[:16]


def _c_string(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    out = []
    for byte in data:
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= byte < 0x7F and ch != "?":  # '?' could start a trigraph
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _target(con: Recursive) -> Record | Union:
    target = con.target()
    if not isinstance(target, (Record, Union)):
        raise TypeError("Recursive must refer to a Record or a Union")
    return target


def _check_name(check: Any) -> str:
    """How a check is named in the list of those not emitted: its declared id, its function, or its rule's field."""
    for name in (getattr(check, "id", None), getattr(getattr(check, "check", None), "__name__", None)):
        if isinstance(name, str) and name:
            return name
    return f"the rule on {getattr(check, 'field', '?')}"


def missing_rules() -> dict[str, list[str]]:
    """Per format, the checks its C reader does not make (``<declaration>: <check> (why)``): rules the
    grammar holds only as Python functions, or as expressions the C emitter cannot translate."""
    missing = {}
    for name, fmt in FORMATS.items():
        mod = _Module(fmt)
        for versions in (fmt.versions, *fmt.parts.values()):
            for con in versions.values():
                mod.reader(con)
        mod.drain()
        if mod.unchecked:
            missing[name] = sorted(set(mod.unchecked))
    return missing


class _Module:
    """The text of one format's reader, built declaration by declaration."""

    def __init__(self, fmt: Format) -> None:
        self.fmt = fmt
        self.prefix = f"inert_{fmt.module_name}"
        self.names: dict[int, str] = {}
        self.used_names: set[str] = set()
        self.pending: list[Record | Union] = []
        self.enums: dict[str, type[enum.IntEnum]] = {}
        self.functions: list[str] = []
        self.prototypes: list[str] = []
        self.unchecked: list[str] = []
        #: The declared rules checked on each record (by typename), and the names their checks may use.
        self.rules = _rule_expr.record_rules(fmt)
        self.constants = _rule_expr.constants(sys.modules[f"inert.spec.{fmt.module_name}"])
        #: Static tables the rules' statements use (name -> C definition).
        self.tables: dict[str, str] = {}
        #: The columns the rules read, (record typename, field) -> slot in ``r->columns``.
        self.slots = _rule_expr.columns(fmt)

    def reader(self, con: Record | Union) -> str:
        if id(con) not in self.names:
            name = f"read_{con.typename}"
            while name in self.used_names:
                name += "_"
            self.used_names.add(name)
            self.names[id(con)] = name
            self.pending.append(con)
        return self.names[id(con)]

    def enum(self, enum_cls: type[enum.IntEnum]) -> str:
        self.enums[enum_cls.__name__] = enum_cls
        return f"name_{enum_cls.__name__}"

    def drain(self) -> None:
        while self.pending:
            con = self.pending.pop(0)
            emitter = _Emitter(self)
            self.prototypes.append(f"static int {self.names[id(con)]}(inert_reader *r, size_t *off, unsigned depth);")
            self.functions.append(emitter.function(con))


class _Emitter(LineEmitter):
    """Emits the reader function of one Record or Union."""

    mod: _Module

    def visit(self, ind: int, call: str) -> None:
        self.emit(ind, f"if (r->v) r->v->{call};")

    def function(self, con: Record | Union) -> str:
        self.emit(0, f"static int {self.mod.names[id(con)]}(inert_reader *r, size_t *off, unsigned depth) {{")
        self.emit(1, "(void)depth;")
        if isinstance(con, Record):
            self.visit(1, "begin_object(r->user)")
            self.record(con, 1)
            self.visit(1, "end_object(r->user)")
        else:
            self.union(con, 1)
        self.emit(1, "return 0;")
        self.emit(0, "}")
        return "\n".join(self.lines)

    def union(self, con: Union, ind: int) -> None:
        tag, start = self.fresh("tag"), self.fresh("start")
        field = _c_string(con.tag_field)
        self.visit(ind, "begin_object(r->user)")
        self.emit(ind, f"size_t {start} = *off;")
        self.emit(ind, f"uint64_t {tag};")
        self.emit(ind, f"if (inert_read_uint(r, off, {con.tag.scalar.size}, &{tag})) return inert_within(r, {field});")
        self.emit(ind, f"switch ({tag}) {{")
        enum_name = con.tag.enum_cls.__name__
        # The union's columns the rules read (ARRAY.union.field): one item per union read, for every case.
        pushed = [(name, slot) for (typename, name), slot in sorted(self.mod.slots.items()) if typename == con.typename]
        for member, case in con.cases.items():
            self.emit(ind, f"case {int(member)}: {{")
            self.visit(ind + 1, f"field(r->user, {field})")
            self.visit(ind + 1, f"tag(r->user, {_c_string(enum_name)}, {_c_string(member.name)}, {int(member)})")
            read = self.record(case, ind + 1) if case is not None else {}
            for name, slot in pushed:
                item = CField("num", tag) if name == con.tag_field else read.get(name, CField("num", "0"))
                self.push(ind + 1, slot, item, f"inert_within(r, {_c_string(name)})")
            self.emit(ind + 1, "break;")
            self.emit(ind, "}")
        self.emit(ind, "default:")
        self.emit(
            ind + 1,
            f"return inert_fail(r, INERT_UNKNOWN_TAG, {start}, {field}, \"unknown {enum_name} %llu\", "
            f"(unsigned long long){tag});",
        )
        self.emit(ind, "}")
        self.visit(ind, "end_object(r->user)")

    def record(self, con: Record, ind: int) -> dict[str, CField]:
        """The reads of a record's fields (the caller has begun its object), then its rules; what the rules
        may read of its fields."""
        start = self.fresh("start")
        self.emit(ind, f"size_t {start} = *off;")
        self.emit(ind, f"(void){start};")
        fields: dict[str, CField] = {}  # what the rules may read
        for name, sub in con.fields:
            wrap = f"inert_within(r, {_c_string(name)})"
            if isinstance(sub, Padding):
                self.emit(ind, f"if (inert_read_padding(r, off, {sub.align})) return {wrap};")
                continue
            self.visit(ind, f"field(r->user, {_c_string(name)})")
            if isinstance(sub, Crc32):
                crc = self.fresh("crc")
                self.emit(ind, f"uint32_t {crc};")
                self.emit(ind, f"if (inert_read_crc32(r, off, {start}, &{crc})) return {wrap};")
                self.visit(ind, f"uint64(r->user, {crc})")
                fields[name] = CField("num", crc)
                continue
            slot = self.mod.slots.get((con.typename, name))
            per_element = slot is not None and isinstance(sub, Array) and isinstance(sub.element, Utf8)
            held = self.value(sub, wrap, ind, slot if per_element else None)
            if slot is not None and not per_element:
                assert held is not None, f"{con.typename}.{name}: a column of a field the C reader keeps nothing of"
                self.push(ind, slot, held, wrap)
            if per_element and slot is not None:
                held = _column(slot, sub.element)
            if held is not None:
                fields[name] = held
        if con.typename in self.mod.rules:
            # The declared rules state every check of the record (a test holds them to the Python checks).
            self.rules(con, fields, start, ind)
            return fields
        for check in con.checks:
            name = _check_name(check)
            expr = getattr(check, "expr", None)
            try:
                if expr is None:
                    raise Untranslatable("held only as a Python function")
                test = _expr(expr, fields)
                declared = getattr(check, "kind", "invalid-value")
                kind = _KINDS.get(declared)
                if kind is None:
                    raise Untranslatable(f"no C error kind {declared!r}")
            except Untranslatable as exc:
                self.mod.unchecked.append(f"{con.typename}: {name} ({exc})")
                self.emit(ind, f"/* not checked: {name} ({exc}) */")
                continue
            reason = getattr(check, "reason", None) or getattr(check, "sentence", None) or name
            self.emit(ind, f"if (!({test}))")
            field = _c_string(getattr(check, "field", name))
            self.emit(
                ind + 1,
                f"return inert_fail(r, {kind}, {start}, {field}, \"%s\", {_c_string(reason)});",
            )
        return fields

    def rules(self, con: Record, fields: dict[str, CField], start: str, ind: int) -> None:
        """The steps of the rules declared on ``con``, in declaration order: the first that fails is the fault."""
        names: dict[str, Any] = {**self.mod.constants, **_rule_expr.tag_members(con)}
        columns = {}  # ARRAY.field -> its column
        for name, sub in con.fields:
            if isinstance(sub, Array) and isinstance(sub.element, Record):
                for element_name, element in sub.element.fields:
                    slot = self.mod.slots.get((sub.element.typename, element_name))
                    if slot is not None:
                        columns[f"{name}.{element_name}"] = _column(slot, element)
        for text, (union, field_name, element) in _rule_expr.union_columns(con).items():
            slot = self.mod.slots.get((union.typename, field_name))
            if slot is not None:
                columns[text] = _column(slot, element)
        compiler = StepCompiler({**fields, **columns}, names, self.mod.fmt.params, self.mod.tables, self.fresh)
        body: list[str] = []
        for rule, steps in self.mod.rules[con.typename]:
            kind = _KINDS[rule.kind]
            reason = _c_string(f"{rule.id}: {rule.sentence}")
            for step in steps:
                if "[i]" in step.field:  # the indexes of the failing elements, filled in (@INDEXES@)
                    field = self.fresh("field")
                    pattern = _c_string(step.field.replace("%", "%%").replace("[i]", "[%llu]"))
                    size = len(step.field) + 24 * step.field.count("[i]")
                    fail = (f"char {field}[{size}]; snprintf({field}, sizeof {field}, {pattern}@INDEXES@); "
                            f"return inert_fail(r, {kind}, {start}, {field}, \"%s\", {reason});")
                else:
                    fail = f"return inert_fail(r, {kind}, {start}, {_c_string(step.field)}, \"%s\", {reason});"
                body.append("    " * ind + f"/* {rule.id} */")
                body.extend(compiler.step(step, ind, fail))
        for code, name in compiler.hoisted.items():
            self.emit(ind, f"uint64_t {name} = {code};")
        self.lines.extend(body)

    def push(self, ind: int, slot: int, held: CField, wrap: str) -> None:
        """Append what the rules read of a field to its column."""
        if held.kind in ("str", "bytes", "arr", "arrs"):
            item = f"{held.ptr}, (uint64_t){held.length}"
        else:
            item = f"NULL, (uint64_t){held.value}"
        self.emit(ind, f"if (inert_column_push(r, &r->columns[{slot}], {item})) return {wrap};")

    def value(self, sub: Any, wrap: str, ind: int, slot: int | None = None) -> CField | None:
        """Read one value of ``sub`` and report it; on a fault return ``wrap``.  What the record's rules may
        read of it (:class:`CField`), or None.  ``slot``: an array whose every element goes to that column."""
        if isinstance(sub, (Record, Union)):
            self.emit(ind, f"if ({self.mod.reader(sub)}(r, off, depth)) return {wrap};")
            return None
        if isinstance(sub, Recursive):
            self.emit(ind, f"if (depth >= {sub.max_depth}) {{")
            self.emit(ind + 1, f"inert_fail(r, INERT_LIMIT, *off, \"\", \"nesting exceeds max_depth({sub.max_depth})\");")
            self.emit(ind + 1, f"return {wrap};")
            self.emit(ind, "}")
            self.emit(ind, f"if ({self.mod.reader(_target(sub))}(r, off, depth + 1)) return {wrap};")
            return None
        if isinstance(sub, Scalar):
            local = self.fresh("v")
            if sub.is_float:
                self.emit(ind, f"double {local};")
                self.emit(ind, f"if (inert_read_float64(r, off, &{local})) return {wrap};")
                self.visit(ind, f"float64(r->user, {local})")
                return None
            signed = sub.low < 0
            ctype, fn, event = ("int64_t", "inert_read_int", "int64") if signed else ("uint64_t", "inert_read_uint", "uint64")
            self.emit(ind, f"{ctype} {local};")
            self.emit(ind, f"if ({fn}(r, off, {sub.size}, &{local})) return {wrap};")
            self.visit(ind, f"{event}(r->user, {local})")
            return CField("num", local, signed=signed)
        if isinstance(sub, Bool8):
            local = self.fresh("b")
            self.emit(ind, f"int {local};")
            self.emit(ind, f"if (inert_read_bool(r, off, &{local})) return {wrap};")
            self.visit(ind, f"boolean(r->user, {local})")
            return CField("num", local, signed=True)
        if isinstance(sub, Tag):
            local, at, name = self.fresh("t"), self.fresh("at"), self.fresh("name")
            enum_name = sub.enum_cls.__name__
            self.emit(ind, f"size_t {at} = *off;")
            self.emit(ind, f"uint64_t {local};")
            self.emit(ind, f"if (inert_read_uint(r, off, {sub.scalar.size}, &{local})) return {wrap};")
            self.emit(ind, f"const char *{name} = {self.mod.enum(sub.enum_cls)}({local});")
            self.emit(ind, f"if (!{name}) {{")
            self.emit(
                ind + 1,
                f"inert_fail(r, INERT_UNKNOWN_TAG, {at}, \"\", \"unknown {enum_name} %llu\", (unsigned long long){local});",
            )
            self.emit(ind + 1, f"return {wrap};")
            self.emit(ind, "}")
            self.visit(ind, f"tag(r->user, {_c_string(enum_name)}, {name}, (int64_t){local})")
            return CField("tag", local, enum=sub.enum_cls)
        if isinstance(sub, Utf8):
            text, size = self.fresh("s"), self.fresh("n")
            self.emit(ind, f"const uint8_t *{text};")
            self.emit(ind, f"size_t {size};")
            self.emit(ind, f"if (inert_read_text(r, off, {sub.prefix.size}, {sub.max_len}u, &{text}, &{size})) return {wrap};")
            self.visit(ind, f"text(r->user, {text}, {size})")
            return CField("str", ptr=text, length=size)
        if isinstance(sub, Bytes):
            data, size = self.fresh("d"), self.fresh("n")
            self.emit(ind, f"const uint8_t *{data};")
            self.emit(ind, f"size_t {size};")
            self.emit(
                ind,
                f"if (inert_read_bytes(r, off, {sub.prefix.size}, {sub.max_len}ull, {sub.align}, &{data}, &{size})) "
                f"return {wrap};",
            )
            self.visit(ind, f"bytes(r->user, {data}, {size})")
            return CField("bytes", ptr=data, length=size)
        if isinstance(sub, MsgPack):
            call = f"inert_read_msgpack(r, off, {sub.prefix.size}, {sub.max_len}ull, {sub.max_depth})"
            self.emit(ind, f"if ({call}) return {wrap};")
            return None
        if isinstance(sub, Magic):
            self.emit(ind, f"if (r->n - *off < {sub.size} || memcmp(r->buf + *off, {_c_string(sub.value)}, {sub.size})) {{")
            self.emit(ind + 1, f"inert_fail(r, INERT_FOREIGN_FORMAT, *off, \"\", \"expected the magic {sub.value.hex()}\");")
            self.emit(ind + 1, f"return {wrap};")
            self.emit(ind, "}")
            self.visit(ind, f"bytes(r->user, r->buf + *off, {sub.size})")
            self.emit(ind, f"*off += {sub.size};")
            return None
        if isinstance(sub, Optional):
            flag = self.fresh("present")
            self.emit(ind, f"int {flag};")
            self.emit(ind, f"if (inert_read_bool(r, off, &{flag})) return {wrap};")
            self.emit(ind, f"if (!{flag}) {{")
            self.visit(ind + 1, "null(r->user)")
            self.emit(ind, "} else {")
            self.value(sub.element, wrap, ind + 1)
            self.emit(ind, "}")
            return None
        if isinstance(sub, Array):
            count, index = self.fresh("count"), self.fresh("i")
            self.emit(ind, f"uint64_t {count};")
            self.emit(
                ind,
                f"if (inert_read_count(r, off, {sub.prefix.size}, {sub.max_count}u, {min_size(sub.element)}, &{count})) "
                f"return {wrap};",
            )
            self.visit(ind, f"begin_array(r->user, {count})")
            element = sub.element
            if isinstance(element, Scalar):
                # The count check has seen count * size bytes present: nothing to check per element,
                # and nothing to read when validating only.
                self.emit(ind, "if (r->v) {")
                self.emit(ind + 1, f"for (uint64_t {index} = 0; {index} < {count}; {index}++) {{")
                at = f"r->buf + *off + {index} * {element.size}"
                if element.is_float:
                    bits = self.fresh("bits")
                    real = self.fresh("x")
                    self.emit(ind + 2, f"uint64_t {bits} = inert_load_le({at}, 8);")
                    self.emit(ind + 2, f"double {real};")
                    self.emit(ind + 2, f"memcpy(&{real}, &{bits}, 8);")
                    self.emit(ind + 2, f"r->v->float64(r->user, {real});")
                elif element.low < 0:
                    self.emit(ind + 2, f"r->v->int64(r->user, inert_load_le_signed({at}, {element.size}));")
                else:
                    self.emit(ind + 2, f"r->v->uint64(r->user, inert_load_le({at}, {element.size}));")
                self.emit(ind + 1, "}")
                self.emit(ind, "}")
                start = self.fresh("p")
                self.emit(ind, f"const uint8_t *{start} = r->buf + *off;")
                self.emit(ind, f"(void){start};")
                self.emit(ind, f"*off += (size_t){count} * {element.size};")
                self.visit(ind, "end_array(r->user)")
                return CField("arr", ptr=start, length=count, width=element.size, signed=element.low < 0)
            else:
                ragged = isinstance(element, Array) and isinstance(element.element, Scalar)
                first = self.fresh("p") if ragged else ""  # where an array of arrays of numbers lies, end to end
                if ragged:
                    self.emit(ind, f"const uint8_t *{first} = r->buf + *off;")
                    self.emit(ind, f"(void){first};")
                self.emit(ind, f"for (uint64_t {index} = 0; {index} < {count}; {index}++) {{")
                item = self.value(element, f"(inert_within_index(r, {index}), {wrap})", ind + 1)
                if slot is not None:
                    assert item is not None, "a column of elements the C reader keeps nothing of"
                    self.push(ind + 1, slot, item, f"(inert_within_index(r, {index}), {wrap})")
                self.emit(ind, "}")
            self.visit(ind, "end_array(r->user)")
            if ragged:
                return CField("arrs", ptr=first, length=count, width=int(element.element.size),
                              signed=element.element.low < 0, prefix=int(element.prefix.size))
            return CField("list", length=count)  # the rules may take its length
        # An element the C emitter does not know yet (the grammar grew): the reader says so at run time,
        # and the source lists it, rather than ``inert gen`` failing for every format.
        what = type(sub).__name__
        self.mod.unchecked.append(f"element {what} (not read: the C emitter has no reader for it)")
        self.emit(ind, f"inert_fail(r, INERT_UNSUPPORTED, *off, \"\", \"no C reader of the {what} element\");")
        self.emit(ind, f"return {wrap};")
        return None


def _column(slot: int, element: Any) -> CField:
    """The column ``slot`` of values of ``element``: strings, numbers or arrays of numbers."""
    if isinstance(element, Utf8):
        elem, width = "str", 0
    elif isinstance(element, (Scalar, Tag)):
        elem, width = "num", 0
    elif isinstance(element, Array) and isinstance(element.element, Scalar):
        elem, width = "arr", int(element.element.size)
    elif isinstance(element, Array) and isinstance(element.element, Array) and isinstance(element.element.element, Scalar):
        inner = element.element
        return CField("col", ptr=f"(&r->columns[{slot}])", length=f"r->columns[{slot}].count",
                      width=int(inner.element.size), elem="arrs", prefix=int(inner.prefix.size))
    else:
        raise Untranslatable(f"a column of {type(element).__name__}")
    return CField("col", ptr=f"(&r->columns[{slot}])", length=f"r->columns[{slot}].count", width=width, elem=elem)


def _expr(expr: Any, fields: dict[str, CField]) -> str:
    """A rule's Construct expression as C: comparisons of exact (128-bit) sums of fields and constants."""
    if isinstance(expr, BinExpr):
        if expr.op in _LOGIC:
            return f"({_expr(expr.lhs, fields)} {_LOGIC[expr.op]} {_expr(expr.rhs, fields)})"
        if expr.op in _COMPARE:
            return f"(inert_i128_cmp({_num(expr.lhs, fields)}, {_num(expr.rhs, fields)}) {_COMPARE[expr.op]} 0)"
        raise Untranslatable(f"a condition cannot be {expr.op.__name__}")
    if isinstance(expr, UniExpr) and expr.op is operator.not_:
        return f"!{_expr(expr.operand, fields)}"
    raise Untranslatable(f"{type(expr).__name__} is not a condition")


def _num(expr: Any, fields: dict[str, CField]) -> str:
    if isinstance(expr, bool):
        raise Untranslatable("a boolean constant in arithmetic")
    if isinstance(expr, int):
        if 0 <= expr < 1 << 64:
            return f"inert_i128_from_u64({expr}ull)"
        if -(1 << 63) <= expr < 0:
            return f"inert_i128_from_i64(-{-expr - 1}ll - 1)"
        raise Untranslatable(f"the constant {expr} is beyond 64 bits")
    if isinstance(expr, ExprPath):
        name = expr._Path__field
        if expr._Path__parent is None or name not in fields or fields[name].kind != "num":
            raise Untranslatable(f"{expr!r} names no fixed-size field read before the rule")
        field = fields[name]
        return f"inert_i128_from_{'i' if field.signed else 'u'}64({field.value})"
    if isinstance(expr, BinExpr) and expr.op in _ARITH:
        return f"{_ARITH[expr.op]}({_num(expr.lhs, fields)}, {_num(expr.rhs, fields)})"
    if isinstance(expr, UniExpr) and expr.op is operator.neg:
        return f"inert_i128_neg({_num(expr.operand, fields)})"
    raise Untranslatable(f"no C for {expr!r}")


def _generated_banner(source: str, digest: str | None) -> str:
    hashed = f" (spec hash {digest})" if digest else ""
    return (
        f"/* Generated by `inert gen` from {source}{hashed}.\n"
        " * Do not edit: change the spec or the generator (inert/gen/c.py), then run `inert gen`. */\n"
    )


def _signatures(fmt: Format) -> list[tuple[str, str]]:
    """(C function, what it reads) of every entry point of ``fmt``: the format, then each part."""
    prefix = f"inert_{fmt.module_name}"
    return [(f"{prefix}_decode", fmt.name), *((f"{prefix}_decode_{part}", f"{fmt.name}.{part}") for part in fmt.parts)]


_SIGNATURE = (
    "int {fn}(const uint8_t *buf, size_t n, unsigned version, const inert_params *params, const inert_visitor *v,\n"
    "        void *user, inert_error *err)"
)


def generate(fmt: Format) -> tuple[str, str]:
    """The header and the source of ``fmt``'s C reader."""
    unknown = set(fmt.params) - _KNOWN_PARAMS
    if unknown:
        raise TypeError(f"{fmt.name}: the C run-time has no parameter {sorted(unknown)}")
    mod = _Module(fmt)
    tops = {v: mod.reader(con) for v, con in sorted(fmt.versions.items())}
    parts = {part: {v: mod.reader(con) for v, con in sorted(versions.items())} for part, versions in fmt.parts.items()}
    mod.drain()
    digest = _spec_hash(fmt)
    guard = f"INERT_{fmt.module_name.upper()}_H"
    upper = fmt.module_name.upper()
    versions = ", ".join(str(v) for v in sorted(fmt.versions))
    header = [
        _generated_banner(f"inert/spec/{fmt.module_name}.py", digest),
        f"/* The C reader of the `{fmt.name}` format, versions {versions}: "
        "see c/inert_runtime.h for the visitor and errors. */\n",
        f"#ifndef {guard}\n#define {guard}\n\n#include \"inert_runtime.h\"\n\n",
        f"#define INERT_{upper}_FORMAT {_c_string(fmt.name)}\n#define INERT_{upper}_SPEC_HASH \"{digest}\"\n\n",
    ]
    for fn, what in _signatures(fmt):
        if what == fmt.name and fmt.magic is not None:
            doc = "a whole file: the version is the file's own (`version`, when nonzero, is the one required)"
        elif what == fmt.name:
            doc = "one value of `version`"
        else:
            doc = f"one `{what.split('.', 1)[1]}` on its own, of `version`; offsets count from `buf`"
        header.append(f"/* Read {doc}.  0, or -1 with `err` set. */\n{_SIGNATURE.format(fn=fn)};\n\n")
    header.append("#endif\n")

    banner = _generated_banner(f"inert/spec/{fmt.module_name}.py", digest)
    if mod.unchecked:  # the banner's comment goes on with the list
        listed = "".join(f" *   {item}\n" for item in sorted(set(mod.unchecked)))
        title = "\n *\n * Not checked (rules held only as Python functions, or expressions the C emitter cannot translate):\n"
        banner = banner[: -len(" */\n")] + title + listed + " */\n"
    source = [banner]
    source.append(f"#include \"inert_{fmt.module_name}.h\"\n\n#include <stdio.h>\n#include <string.h>\n\n")
    for enum_name in sorted(mod.enums):
        cases = "".join(f"        case {int(m)}: return {_c_string(m.name)};\n" for m in mod.enums[enum_name])
        source.append(
            f"static const char *name_{enum_name}(uint64_t value) {{\n    switch (value) {{\n{cases}"
            "        default: return NULL;\n    }\n}\n\n"
        )
    if mod.tables:
        source.append("\n".join(mod.tables[name] for name in sorted(mod.tables)) + "\n\n")
    source.append("\n".join(mod.prototypes) + "\n\n")
    source.append("\n\n".join(mod.functions) + "\n")
    name = _c_string(fmt.name)
    for fn, what in _signatures(fmt):
        table = tops if what == fmt.name else parts[what.split(".", 1)[1]]
        source.append(f"\n{_SIGNATURE.format(fn=fn)} {{\n    inert_reader r;\n    size_t off = 0;\n")
        source.append(f"    inert_reader_init(&r, {name}, buf, n, params, v, user, err);\n")
        if what == fmt.name and fmt.magic is not None:
            source.append(f"    static const unsigned versions[] = {{{versions}}};\n")
            source.append(f"    if (inert_check_size(&r, {fmt.size_limit}ull)) return -1;\n")
            source.append(
                f"    if (inert_read_file_header(&r, &off, {_c_string(fmt.magic)}, {len(fmt.magic)}, versions, "
                f"{len(fmt.versions)}, version, &version)) return -1;\n"
            )
        if mod.slots:  # the columns the rules read, freed on every path
            source.append(f"    inert_column columns[{len(mod.slots)}];\n    int failed;\n")
            source.append("    memset(columns, 0, sizeof columns);\n    r.columns = columns;\n")
            source.append("    switch (version) {\n")
            for v, reader in table.items():
                source.append(f"        case {v}: failed = {reader}(&r, &off, 0); break;\n")
            source.append(
                "        default: failed = inert_fail(&r, INERT_VERSION, 0, \"\", "
                f"\"version %u is not one of {versions}\", version);\n"
            )
            source.append("    }\n    if (!failed) failed = inert_check_end(&r, off);\n")
            source.append(f"    inert_columns_free(columns, {len(mod.slots)});\n    return failed ? -1 : 0;\n}}\n")
            continue
        source.append("    switch (version) {\n")
        for v, reader in table.items():
            source.append(f"        case {v}: if ({reader}(&r, &off, 0)) return -1; break;\n")
        source.append(
            f"        default: return inert_fail(&r, INERT_VERSION, 0, \"\", \"version %u is not one of {versions}\", version);\n"
        )
        source.append("    }\n    return inert_check_end(&r, off);\n}\n")
    return "".join(header), "".join(source)


def _crc32_table() -> str:
    rows = []
    table0 = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
        table0.append(crc)
    tables = [table0]
    for _ in range(15):  # slicing by sixteen: table k advances a byte k more steps
        previous = tables[-1]
        tables.append([(previous[b] >> 8) ^ table0[previous[b] & 0xFF] for b in range(256)])
    for table in tables:
        cells = [f"0x{value:08x}u" for value in table]
        lines = ",\n".join("        " + ", ".join(cells[i : i + 8]) for i in range(0, 256, 8))
        rows.append("    {\n" + lines + "\n    }")
    return (
        _generated_banner("the CRC-32 polynomial of zlib (0xEDB88320, reflected)", None)
        + "/* Slicing-by-sixteen tables of the CRC-32 that zlib.crc32 computes. */\n"
        "#ifndef INERT_CRC32_TABLE_H\n#define INERT_CRC32_TABLE_H\n\n#include <stdint.h>\n\n"
        "static const uint32_t inert_crc32_table[16][256] = {\n" + ",\n".join(rows) + "\n};\n\n#endif\n"
    )


def _value_types_header() -> str:
    """The tables of the typed extensions of value documents (inert/_value_types.py) for c/inert_msgpack.c."""
    from inert import _value_types as vt
    from inert._checks import _DTYPE_NAMES, CHECKPOINT_ITEMSIZES

    count = len(_DTYPE_NAMES)
    names = ", ".join(["NULL", *(_c_string(n) for n in _DTYPE_NAMES)])
    sizes = ", ".join(["0", *(str(CHECKPOINT_ITEMSIZES[n]) for n in _DTYPE_NAMES)])
    in_array = ", ".join(["0", *("1" if n in vt.ARRAY_DTYPES else "0" for n in _DTYPE_NAMES)])
    top = max(vt.TYPED_CODES)
    typed = ", ".join(_c_string(vt.TYPED_CODES.get(code, "")) for code in range(top + 1))
    return (
        _generated_banner("inert/_value_types.py and the DType of inert/spec/checkpoint_shard.py", None)
        + "/* The typed extensions of value documents: their names and limits, and the DType tables. */\n"
        "#ifndef INERT_VALUE_TYPES_H\n#define INERT_VALUE_TYPES_H\n\n#include <stddef.h>\n#include <stdint.h>\n\n"
        f"#define INERT_DTYPE_COUNT {count}\n#define INERT_DTYPE_BOOL {_DTYPE_NAMES.index('BOOL') + 1}\n"
        f"#define INERT_TYPED_MAX_NDIM {vt.MAX_NDIM}u\n#define INERT_TYPED_MAX_DEVICE_TYPE {vt.MAX_DEVICE_TYPE}u\n"
        f"#define INERT_TYPED_MAX_DEVICE_INDEX {vt.MAX_DEVICE_INDEX}u\n"
        f"#define INERT_TYPED_MAX_OBJECT_NAME {vt.MAX_OBJECT_NAME}u\n\n"
        "/* By extension code: the name its faults give. */\n"
        f"static const char *const inert_typed_names[{top + 1}] = {{{typed}}};\n"
        f"/* By DType value: its name, its itemsize, whether numpy has it (an array's or array scalar's dtype). */\n"
        f"static const char *const inert_dtype_names[{count + 1}] = {{{names}}};\n"
        f"static const uint8_t inert_dtype_itemsize[{count + 1}] = {{{sizes}}};\n"
        f"static const uint8_t inert_dtype_in_array[{count + 1}] = {{{in_array}}};\n\n#endif\n"
    )


def _registry() -> tuple[str, str]:
    header = (
        _generated_banner("inert/spec/__init__.py (FORMATS)", None)
        + "/* Every generated reader, by the name the conformance protocol gives it (`<format>` or `<format>.<part>`). */\n"
        "#ifndef INERT_FORMATS_H\n#define INERT_FORMATS_H\n\n#include \"inert_runtime.h\"\n\n"
        "typedef int (*inert_decode_fn)(const uint8_t *buf, size_t n, unsigned version, const inert_params *params,\n"
        "                               const inert_visitor *v, void *user, inert_error *err);\n\n"
        "typedef struct {\n"
        "    const char *name;\n"
        "    unsigned versions[8];   /* the versions it reads, 0-terminated */\n"
        "    int whole_file;         /* the version comes from the file's header */\n"
        "    const char *params;     /* the parameters it takes, space-separated */\n"
        "    inert_decode_fn decode;\n"
        "} inert_format_entry;\n\n"
        "extern const inert_format_entry inert_formats[];\n"
        "extern const size_t inert_format_count;\n\n"
        "/* The entry of `name`, or NULL. */\n"
        "const inert_format_entry *inert_format(const char *name);\n\n#endif\n"
    )
    includes, entries = [], []
    for fmt in FORMATS.values():
        includes.append(f"#include \"inert_{fmt.module_name}.h\"\n")
        params = _c_string(" ".join(fmt.params))
        for fn, what in _signatures(fmt):
            table = fmt.versions if what == fmt.name else fmt.parts[what.split(".", 1)[1]]
            if len(table) > 7:
                raise TypeError(f"{what}: the registry holds at most 7 versions")
            versions = ", ".join(str(v) for v in sorted(table))
            whole = int(what == fmt.name and fmt.magic is not None)
            entries.append(f"    {{{_c_string(what)}, {{{versions}, 0}}, {whole}, {params}, {fn}}},\n")
    source = (
        _generated_banner("inert/spec/__init__.py (FORMATS)", None)
        + "#include \"inert_formats.h\"\n\n#include <string.h>\n\n"
        + "".join(includes)
        + "\nconst inert_format_entry inert_formats[] = {\n"
        + "".join(entries)
        + "};\n\nconst size_t inert_format_count = sizeof inert_formats / sizeof inert_formats[0];\n\n"
        "const inert_format_entry *inert_format(const char *name) {\n"
        "    for (size_t k = 0; k < inert_format_count; k++)\n"
        "        if (strcmp(inert_formats[k].name, name) == 0) return &inert_formats[k];\n"
        "    return NULL;\n}\n"
    )
    return header, source


def outputs() -> dict[Path, str]:
    """Every file of ``c/`` that ``inert gen`` writes, with its text."""
    files = {C_DIR / "inert_crc32_table.h": _crc32_table(), C_DIR / "inert_value_types.h": _value_types_header()}
    for fmt in FORMATS.values():
        header, source = generate(fmt)
        files[C_DIR / f"inert_{fmt.module_name}.h"] = header
        files[C_DIR / f"inert_{fmt.module_name}.c"] = source
    files[C_DIR / "inert_formats.h"], files[C_DIR / "inert_formats.c"] = _registry()
    return files
