"""Uniform runs: the generator's fast path for an array of records that all share one layout.

A batch's samples are usually alike: the same case, the same dtype string
length, the same number of dimensions.  When every element of an array has
the first element's layout, the whole array is one repeated ``struct`` format,
and ``Struct.iter_unpack`` reads all of it in one C loop instead of a bounds
check and an ``unpack_from`` per field per element.

The generated ``_run_<Record>`` function reads the first element's length and
count prefixes, builds (and remembers) the Struct of that layout, and checks
every element against it: the tag, every prefix, every boolean, enum tag and
rule.  At the first doubt it returns ``None`` and the caller reads the array
element by element, which raises the precise error.  So a run never accepts or
rejects anything the element-wise reader would not, and never produces an
error of its own.

Eligible records hold only fixed-size scalars, booleans and tags, UTF-8
strings, and at most one array of scalars (read as the starred target of the
unpack).  Anything else (nested records, padding, checksums, bytes, MessagePack
documents) keeps the element-wise reader.
"""

from __future__ import annotations

import enum
import re
from typing import Any, Protocol

from inert.spec._grammar import Array, Bool8, Record, Rule, Scalar, Tag, Utf8, Validate


class _Module(Protocol):
    """What a run function needs of the codec module being generated (``inert.gen.python._Module``)."""

    functions: list[str]
    run_functions: set[str]

    def record_rules(self, con: Record | None) -> Any: ...

    def const(self, source: str, hint: str) -> str: ...

    def struct(self, codes: str) -> str: ...

    def enum(self, enum_cls: type[enum.IntEnum]) -> str: ...

    def check(self, fn: Any) -> str: ...


__all__ = ["RULE_FIELD_RE", "RUN_MIN", "eligible", "quick_test", "run_function"]

#: Arrays shorter than this are read element by element: setting up a run costs about two elements.
RUN_MIN = 8

RULE_FIELD_RE = re.compile(r"this\['(\w+)'\]")  # a Rule's expression (repr of a Construct ``this`` expression)
_THIS_ATTR_RE = re.compile(r"\bthis\.(\w+)")  # a Validate's quick test
_CHECKS_ATTR_RE = re.compile(r"\b_checks\.\w+")


def _plus(expr: str, number: int) -> str:
    return f"{expr} + {number}" if number else expr


def quick_test(mod: _Module, check: Any, fields: dict[str, str]) -> str | None:
    """The inline Python test that holds exactly when ``check`` accepts (None: the check must be called).

    ``fields`` maps field names to the locals that hold them.
    """
    if isinstance(check, Rule):
        return RULE_FIELD_RE.sub(lambda m: fields[m.group(1)], repr(check.expr))
    accept = getattr(check.check, "accept", None)
    if accept is None:
        return None
    test = _THIS_ATTR_RE.sub(lambda m: fields[m.group(1)], accept)
    return _CHECKS_ATTR_RE.sub(lambda m: mod.const(m.group(0), "C"), test)  # one global load, not two


def eligible(record: Record | None) -> bool:
    """Whether an array of ``record`` can be read as a uniform run."""
    if record is None:
        return False
    arrays = 0
    for _, sub in record.fields:
        if isinstance(sub, Array) and isinstance(sub.element, Scalar):
            arrays += 1
        elif not isinstance(sub, (Scalar, Bool8, Tag, Utf8)):
            return False
    return arrays <= 1


def run_function(mod: _Module, record: Record, tag: tuple[Tag, enum.IntEnum, str] | None, text: Any, present: int) -> str:
    """Emit ``record``'s run reader into ``mod`` once; return its name.

    ``tag``: the one-byte union tag before each element (its Tag, the member
    the run holds, and the dict key it goes under), or None for a bare record.
    ``text(sub, raw)`` is the expression that decodes the UTF-8 bytes ``raw``
    of the Utf8 ``sub``, as the element-wise reader does.  ``present``: the
    bytes the caller has already seen to be there (``RUN_MIN`` elements of
    the least size); a prefix that always lies within them needs no bounds check.
    """
    name = f"_run_{record.typename}"
    if name in mod.run_functions:
        return name
    mod.run_functions.add(name)
    lines: list[str] = []

    def emit(ind: int, line: str) -> None:
        lines.append("    " * ind + line)

    emit(0, f"def {name}(buf: Buffer, off: int, count: int, ctx: dict[str, Any]) -> tuple[list[Any], int] | None:")
    emit(1, f'"""``count`` {record.typename} values at ``off`` if all share the first one\'s layout (None: read one by one)."""')
    emit(1, "n = len(buf)")
    # The first element's prefixes give the layout: walk it, without checks beyond the limits.
    codes: list[str] = []  # the Struct format, with {} where a prefix's value goes
    targets: list[str] = []  # the unpack's targets, one per field
    keys: list[str] = []  # the locals holding the first element's prefixes
    checks: list[tuple[str, str]] = []  # (target, the value every element must have there)
    fields: dict[str, str] = {}
    fixed = 0  # bytes of the element known so far beyond ``at``
    most = 0  # the most that ``at - off`` can be, each length and count at its limit
    emit(1, "at = off")
    if tag is not None:
        tag_con, member, key = tag
        codes.append(tag_con.scalar.code)
        targets.append("t0")
        checks.append(("t0", str(int(member))))
        fields[key] = f"_{mod.enum(tag_con.enum_cls)}_{member.name}"
        fixed += tag_con.scalar.size
    post: list[tuple[int, str]] = []  # (indent, line) run per element after the unpack, before the tests
    for field, sub in record.fields:
        local = f"f_{field}"
        if isinstance(sub, (Utf8, Array)):
            prefix, k = sub.prefix, f"k{len(keys)}"
            if most + fixed + prefix.size > present:
                emit(1, f"if at + {fixed + prefix.size} > n:")
                emit(2, "return None")
            emit(1, f"({k},) = {mod.struct(prefix.code)}.unpack_from(buf, {_plus('at', fixed)})")
            limit = sub.max_len if isinstance(sub, Utf8) else sub.max_count
            width = 1 if isinstance(sub, Utf8) else sub.element.size
            emit(1, f"if {k} > {limit}:")
            emit(2, "return None")
            emit(1, f"at += {fixed + prefix.size} + {k}" + (f" * {width}" if width != 1 else ""))
            most += fixed + prefix.size + limit * width
            fixed = 0
            keys.append(k)
            codes.append(prefix.code)
            targets.append(f"p{len(keys)}")
            checks.append((f"p{len(keys)}", k))
            if isinstance(sub, Utf8):
                codes.append("{}s")
                targets.append(local)
                post.append((0, f"{local} = {text(sub, local)}"))
            else:
                codes.append("{}" + sub.element.code)
                targets.append(f"*{local}")
            fields[field] = local
            continue
        codes.append(sub.scalar.code if isinstance(sub, Tag) else "B" if isinstance(sub, Bool8) else sub.code)
        targets.append(local)
        fixed += sub.size
        fields[field] = local
        if isinstance(sub, Bool8):
            post += [(0, f"if {local} > 1:"), (1, "return None"), (0, f"{local} = {local} == 1")]
        elif isinstance(sub, Tag):
            table = f"_BY_VALUE_{mod.enum(sub.enum_cls)}"
            post += [(0, f"{local} = {table}.get({local})"), (0, f"if {local} is None:"), (1, "return None")]
    emit(1, f"end = off + ({_plus('at', fixed)} - off) * count")
    emit(1, "if end > n:")
    emit(2, "return None")
    key = "(" + ", ".join(keys) + ("," if len(keys) == 1 else "") + ")"
    structs = mod.const("dict[tuple[int, ...], struct.Struct]()", "RUN")
    template = "<" + "".join(codes)
    emit(1, f"packer = {structs}.get({key}) or run_struct({structs}, {key}, {template!r})")
    emit(1, "items: list[Any] = []")
    emit(1, "try:")
    emit(2, f"for {', '.join(targets)} in packer.iter_unpack(memoryview(buf)[off:end]):")
    emit(3, "if " + " or ".join(f"{t} != {v}" for t, v in checks) + ":")
    emit(4, "return None")
    for ind, line in post:
        emit(3 + ind, line)
    value = "{" + ", ".join(f"{k!r}: {v}" for k, v in fields.items()) + "}"
    emit(3, f"value = {value}")
    rules = mod.record_rules(record)
    inline = rules.accept(fields, lambda hint: f"r_{hint}") if rules is not None else None
    if rules is not None and inline is None:
        emit(3, f"if {rules.function_name}(value, ctx) is not None:")
        emit(4, "return None")
    elif inline is not None:
        for line in inline[0]:
            emit(3, line)
        emit(3, f"if not ({inline[1]}):")
        emit(4, "return None")
    for check in record.checks if rules is None else ():
        test = quick_test(mod, check, fields)
        if test is None:
            assert isinstance(check, Validate)  # a Rule always has its inline test
            emit(3, f"if {mod.check(check.check)}(value, ctx) is not None:")
        else:
            emit(3, f"if not ({test}):")
        emit(4, "return None")
    emit(3, "items.append(value)")
    emit(1, "except UnicodeDecodeError:")
    emit(2, "return None")
    emit(1, "return items, end")
    mod.functions.append("\n".join(lines))
    return name
