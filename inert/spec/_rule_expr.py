"""The language of a declared rule's ``check``: a small, restricted subset of Python expressions.

A rule that names the record it is checked on (``SpecRule.on``) states its check as one
expression over that record's fields, which the generators compile (``inert gen`` writes it
as Python and C) and the interpreted grammar's host evaluates (:mod:`inert._rule_eval`).  This module
defines the language and what a rule sees; it imports nothing of the runtime.  The language, parsed with :mod:`ast`:

* names: the record's fields (a number, a tag, a string, a byte string, or an array of
  numbers), the caller's parameters (``chunk_size``, compared with ``is None``), the format's
  constants (``MAX_INFLATED``) and the members of a tag's enumeration (``BOOL``);
* integers, ``**`` of constants, ``+ - * // %`` (``//`` and ``%`` of operands 0 to 2**64 - 1, else 0;
  a divisor 0 gives 0), unary ``-``, comparisons (chained), ``in`` of
  a tuple of constants, ``and``, ``or``, ``not``, ``x is None``; arithmetic is exact (the C
  compiler uses 128-bit integers, and a product saturates at a bound above every constant a
  rule compares it with);
* ``len(x)``, ``x[i]``, ``max(a, b)``, ``min(a, b)``, ``itemsize(dtype)`` (the bytes per
  element of a dtype tag, or of a numpy dtype string, 0 for one the format does not accept),
  and ``all``/``any``/``prod``/``sum`` of a generator ``E for x in ARRAY`` or
  ``E for i in range(N) [for j in range(M)]``, each ``for`` with an optional ``if C`` (an element
  failing ``C`` is skipped); ``zip(A, B)`` of arrays, columns, ranges or generators (``x for x in A
  if C``), taken pairwise up to the shorter (``for a, b in zip(A, B)``); an index beyond its array
  breaks the rule;
* named checks written once per target (:data:`NAMED`), each saying what an expression cannot;
* in a rule's ``message`` only (Python, never compiled to C): ``A if C else B``, ``str(x)`` and
  ``plural(N, 'word'[, 'words'])``, the count and its noun (``1 byte``, ``2 bytes``; the plural is ``word``
  and ``s`` unless given): a message states a count that may be 1 with it, never as ``{N} bytes``.  A C
  reader's reason is the rule's id and sentence, which state no count: the message has no C translation.

Columns: ``ARRAY.field`` is the field of every record of an array of records (``tensors.fqn``);
``ARRAY.union.field`` is, for every record, the tag (``fields.layout.kind``) or a case's field of its
union, 0 or an empty array where the record's case has no such field (``fields.layout.shape``).
An array of arrays (``keys.nested_shapes``: per key, its shapes) is iterated, never indexed.
``distinct(items[, earlier])`` holds when no item repeats one before it or one of ``earlier``.

The field a fault names: ``SpecRule.field``'s last path segments below the record; when the
field lists ``k`` alternatives (``a|b``), the check is an ``and`` of ``k`` conjuncts, the
``n``-th naming the ``n``-th field; each ``[i]`` in the field takes, in order, the index of the
first element of ``all(... for x in ARRAY)`` that fails (then of an ``all`` inside it), or of
the first repeat of ``distinct``.  The index of a generator's element is its position in what
the generator iterates: in ``ARRAY`` (counting the elements ``if`` skips), or the pair's in ``zip``.
"""

from __future__ import annotations

import ast
import enum
import functools
import string
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._grammar import Array, Bytes, Optional, Record, Recursive, Tag, Union, Utf8, Validate, _host

__all__ = [
    "NAMED", "SATURATE", "Step", "RuleSyntaxError", "parse", "steps", "relative_field", "constants",
    "record_rules", "columns", "environment", "tag_members", "union_columns", "ABSENT", "TAGS", "bind", "member",
    "field_depth", "messages", "records", "INDEX_NAMES", "tag_itemsize", "attach", "targets",
]

#: Where the C compiler's products stop growing: above every constant a rule compares with (2**64).
SATURATE = 1 << 100

#: The named checks, each with what it holds for: each target's runtime writes it once (Python:
#: ``inert._checks.<name>``; C: ``inert_named_<name>``, ``inert_distinct``).
NAMED: dict[str, str] = {
    "plain_file_name": "a file name inside a checkpoint or dump directory (``FILE_NAME_SENTENCE``)",
    "distinct": "no item (of a column of arrays: no element) repeats one before it or one of ``earlier``",
}

_FUNCTIONS = {"len", "max", "min", "itemsize", "all", "any", "prod", "sum", "range", "align", "zip", "str", "plural",
              *NAMED}
#: A function of a message only: no check computes with it.
_MESSAGE_ONLY = frozenset({"plural"})


class RuleSyntaxError(ValueError):
    """A check that is not an expression of the rule language."""


_ALLOWED = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp, ast.Add, ast.Sub,
    ast.Mult, ast.FloorDiv, ast.Mod, ast.Pow, ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
    ast.Is, ast.In, ast.Call, ast.Name, ast.Load, ast.Constant, ast.Subscript, ast.Tuple, ast.GeneratorExp,
    ast.comprehension, ast.Store, ast.Attribute, ast.IfExp,
)


def parse(check: str) -> ast.expr:
    """The expression of ``check``, or :class:`RuleSyntaxError` naming what the language lacks."""
    try:
        tree = ast.parse(check, mode="eval")
    except SyntaxError as exc:
        raise RuleSyntaxError(f"{check!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise RuleSyntaxError(f"{check!r}: {type(node).__name__} is not in the rule language")
        if isinstance(node, ast.Call) and (not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS):
            raise RuleSyntaxError(f"{check!r}: calls only {sorted(_FUNCTIONS)}")
        if isinstance(node, ast.Constant) and not (node.value is None or type(node.value) in (int, str)):
            raise RuleSyntaxError(f"{check!r}: constants are integers, strings and None")
        if isinstance(node, ast.Attribute) and _chain(node) is None:
            raise RuleSyntaxError(f"{check!r}: a column is ARRAY.field or ARRAY.union.field, of an array of records")
        if isinstance(node, ast.comprehension) and (node.is_async or len(node.ifs) > 1 or targets(node) is None):
            raise RuleSyntaxError(f"{check!r}: a generator is `E for x in ARRAY [if C]` or `for a, b in zip(A, B)`")
    return tree.body


def _chain(node: ast.Attribute) -> list[str] | None:
    """The names of a column, ``ARRAY.field`` or ``ARRAY.union.field`` (``["fields", "layout", "kind"]``)."""
    names = [node.attr]
    value = node.value
    if isinstance(value, ast.Attribute):
        names.insert(0, value.attr)
        value = value.value
    return [value.id, *names] if isinstance(value, ast.Name) else None


def targets(comp: ast.comprehension) -> list[str] | None:
    """The names a generator binds: ``x``, or ``a, b`` of a ``zip``."""
    target = comp.target
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
        is_zip = isinstance(comp.iter, ast.Call) and isinstance(comp.iter.func, ast.Name) and comp.iter.func.id == "zip"
        return [e.id for e in target.elts if isinstance(e, ast.Name)] if is_zip else None
    return None


def bind(comp: ast.comprehension, item: Any, scope: dict[str, Any]) -> dict[str, Any]:
    names = targets(comp)
    assert names is not None
    return {**scope, **(dict(zip(names, item, strict=True)) if isinstance(comp.target, ast.Tuple) else {names[0]: item})}


@dataclass(frozen=True)
class Step:
    """One conjunct of a rule: the fault's field (below the record) and the expression that must hold."""

    field: str
    expr: ast.expr


def relative_field(path: str, names: Sequence[str]) -> str:
    """``path`` (a rule's field, from the format's root) from the first segment that names one of the
    record's fields: ``tensors[i].size[i]`` on a TensorEntry is ``size[i]``."""
    segments = path.split(".")
    for k, segment in enumerate(segments):
        if segment.split("[", 1)[0] in names:
            return ".".join(segments[k:])
    return segments[-1] if path else ""


def steps(field: str, check: str, names: Sequence[str]) -> list[Step]:
    """The conjuncts of a rule's check, each with the field its fault names."""
    expr = parse(check)
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _MESSAGE_ONLY:
            raise RuleSyntaxError(f"{check!r}: {node.func.id}() is for messages only")
    fields = [relative_field(path, names) for path in field.split("|")]
    if len(fields) == 1:
        return [Step(fields[0], expr)]
    if not (isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And) and len(expr.values) == len(fields)):
        raise RuleSyntaxError(f"{check!r}: {len(fields)} fields need an `and` of {len(fields)} conjuncts")
    return [Step(name, value) for name, value in zip(fields, expr.values, strict=True)]


# -- what a rule sees --------------------------------------------------------------------------------


#: The key in a rule's environment of the values ``ARRAY.union.field`` takes where a record's case lacks the
#: field (by the column's text: ``{"fields.layout.ndim": 0}``), set by :func:`environment`.
ABSENT = "@absent"
#: The key of the enumerations of the union tags a column reads (by its text): a writer may name a member.
TAGS = "@tags"
_NONE = object()


def member(enum_cls: type[enum.IntEnum], value: Any) -> Any:
    """A tag's member given as member, name or value (a writer's input), else ``value`` as it is."""
    if isinstance(value, str):
        return enum_cls.__members__.get(value, value)
    if type(value) is int:
        return enum_cls._value2member_map_.get(value, value)
    return value


def tag_itemsize(member: enum.IntEnum) -> int:
    """The bytes per element of a dtype tag's member (``DTYPE_ITEMSIZES`` of checkpoint-shard, by name)."""
    from .checkpoint_shard import DTYPE_ITEMSIZES

    by_name = {m.name: size for m, size in DTYPE_ITEMSIZES.items()}
    if member.name not in by_name:
        raise RuleSyntaxError(f"no itemsize for {type(member).__name__}.{member.name}")
    return by_name[member.name]


#: The names a message gives the indexes of its fault, outermost first.
INDEX_NAMES = ("i", "j", "k")


def field_depth(expr: ast.expr) -> int:
    """How many of :func:`locate`'s indexes the fault's field takes (those :func:`_failing_indexes` gives):
    one per ``all`` of one generator down the chain, every one of a ``distinct``."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        if expr.func.id == "distinct":
            return len(INDEX_NAMES)
        gen = expr.args[0] if expr.args else None
        if expr.func.id == "all" and isinstance(gen, ast.GeneratorExp) and len(gen.generators) == 1:
            return 1 + field_depth(gen.elt)
    return 0


@functools.cache
def messages(rule: Any, count: int) -> list[list[tuple[str, ast.expr | None, str | None, str]]]:
    """The message templates of ``rule``'s ``count`` steps: per step, (text, expression or None, conversion,
    format spec); parsed once (a reader compiles nothing).  A rule without a message gives its sentence."""
    if not rule.message:
        return [[(rule.sentence, None, None, "")]] * count
    texts = rule.message if isinstance(rule.message, tuple) else (rule.message,) * count
    if len(texts) != count:
        raise RuleSyntaxError(f"{rule.id}: {len(texts)} messages for {count} steps")
    out = []
    for text in texts:
        pieces: list[tuple[str, ast.expr | None, str | None, str]] = []
        for literal, field, spec, conversion in string.Formatter().parse(text):
            if conversion not in (None, "r"):
                raise RuleSyntaxError(f"{rule.id}: a message converts with !r only")
            expr = None if field is None else parse(field)
            if expr is not None:
                _check_plurals(rule.id, expr)
            pieces.append((literal, expr, conversion, spec or ""))
        out.append(pieces)
    return out


def _check_plurals(rule_id: str, expr: ast.expr) -> None:
    """Every ``plural`` of a message takes a count and one or two words (string constants)."""
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "plural":
            words = node.args[1:]
            if node.keywords or not 1 <= len(words) <= 2 or not all(
                    isinstance(w, ast.Constant) and type(w.value) is str and w.value for w in words):
                raise RuleSyntaxError(f"{rule_id}: plural(N, 'word'[, 'words']) takes a count and one or two words")


# -- a format's rules, by record -------------------------------------------------------------------


def constants(module: Any) -> dict[str, Any]:
    """The names a rule of ``module`` (a format's spec module) may use besides fields and parameters: its
    upper-case integer constants and the members of every enumeration it names."""
    names: dict[str, Any] = {}
    for name, value in vars(module).items():
        if name.isupper() and type(value) is int:
            names[name] = value
    for value in vars(module).values():
        if isinstance(value, type) and issubclass(value, enum.IntEnum):
            for member in value:
                names.setdefault(member.name, member)
    return names


def records(fmt: Any) -> dict[str, Any]:
    """The records of ``fmt``'s grammar by typename (the first of each typename), in the order first met."""
    out: dict[str, Any] = {}
    for table in (fmt.versions, *fmt.parts.values()):
        for con in table.values():
            _records(con, out, set())
    return out


def record_rules(fmt: Any) -> dict[str, list[tuple[Any, list[Step]]]]:
    """The rules of ``fmt`` (a :class:`inert.spec.Format`) checked on records, by the record's typename,
    each with its steps: the fields are those of the first record of that typename in the grammar."""
    records: dict[str, Any] = {}
    for table in (fmt.versions, *fmt.parts.values()):
        for con in table.values():
            _records(con, records, set())
    out: dict[str, list[tuple[Any, list[Step]]]] = {}
    for rule in fmt.declared:
        for typename in filter(None, rule.on.split("|")):  # the records of every version that carry it
            if typename not in records:  # inert gen refuses it, naming the spec file (refusals.check_spec)
                continue
            names = [name for name, _ in records[typename].fields]
            if rule.check.startswith("check:"):  # every target checks a rule on a record: it is stated here
                raise RuleSyntaxError(f"{rule.id}: a rule on a record states its check in the rule language")
            out.setdefault(typename, []).append((rule, steps(rule.field, rule.check, names)))
    return out


def _records(con: Any, out: dict[str, Any], seen: set[int]) -> None:

    if id(con) in seen:
        return
    seen.add(id(con))
    if isinstance(con, Record):
        out.setdefault(con.typename, con)
        for _, sub in con.fields:
            _records(sub, out, seen)
    elif isinstance(con, Union):
        for case in con.cases.values():
            if case is not None:
                _records(case, out, seen)
    elif isinstance(con, (Array, Optional)):
        _records(con.element, out, seen)
    elif isinstance(con, Recursive):
        _records(con.target(), out, seen)


def tag_members(record: Any) -> dict[str, Any]:
    """The members of the enumerations of ``record``'s tag fields, by name (``dtype != BOOL``)."""

    return {m.name: m for _, sub in record.fields if isinstance(sub, Tag) for m in sub.enum_cls}


def environment(fmt: Any, record: Any, fields: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """What a rule on ``record`` sees: the format's constants, the tag members, the caller's parameters
    (None when not passed) and the record's fields."""
    env = constants(sys.modules[f"{__package__}.{fmt.module_name}"])
    env.update(tag_members(record))
    unions = union_columns(record)
    env[ABSENT] = {text: [] if isinstance(sub, (Array, Utf8, Bytes)) else 0 for text, (_union, _name, sub) in unions.items()}
    env[TAGS] = {text: union.tag.enum_cls for text, (union, name, _sub) in unions.items() if name == union.tag_field}
    env.update({name: ctx.get(name) for name in fmt.params})
    env.update(fields)
    return env


def union_columns(record: Any) -> dict[str, tuple[Any, str, Any]]:
    """The columns ``ARRAY.union.field`` of ``record``: by their text, the union, the field's name (the tag's or
    a case's) and its grammar element."""

    out: dict[str, tuple[Any, str, Any]] = {}
    for name, sub in record.fields:
        if not (isinstance(sub, Array) and isinstance(sub.element, Record)):
            continue
        for union_name, union in sub.element.fields:
            if not isinstance(union, Union):
                continue
            tag: Any = union.tag if isinstance(union.tag, Tag) else None
            out[f"{name}.{union_name}.{union.tag_field}"] = (union, union.tag_field, tag)
            for case in union.cases.values():
                for field, element in case.fields if case is not None else ():
                    out.setdefault(f"{name}.{union_name}.{field}", (union, field, element))
    return out


def columns(fmt: Any) -> dict[tuple[str, str], int]:
    """The columns the rules of ``fmt`` read, ``(record typename, field)`` -> slot: ``ARRAY.field`` of a
    record's array of records (the element record's field), ``ARRAY.union.field`` (the union's typename
    and field), and a record's array of strings named whole (its elements)."""

    records: dict[str, Any] = {}
    for table in (fmt.versions, *fmt.parts.values()):
        for con in table.values():
            _records(con, records, set())
    keys: set[tuple[str, str]] = set()
    for typename, rules in record_rules(fmt).items():
        fields = dict(records[typename].fields)
        unions = union_columns(records[typename])
        for _rule, rule_steps in rules:
            for step in rule_steps:
                inner = {id(n.value) for n in ast.walk(step.expr) if isinstance(n, ast.Attribute)}
                for node in ast.walk(step.expr):
                    if isinstance(node, ast.Attribute) and id(node) not in inner:
                        chain = _chain(node) or []
                        array = fields.get(chain[0])
                        if not (isinstance(array, Array) and isinstance(array.element, Record)):
                            raise RuleSyntaxError(f"{typename}: {chain[0]} is no array of records")
                        if len(chain) == 3:
                            if ".".join(chain) not in unions:
                                raise RuleSyntaxError(f"{typename}: {'.'.join(chain)} is no field of a union")
                            union, name, _sub = unions[".".join(chain)]
                            places = sum(sub is union for r in records.values() for _, sub in r.fields)
                            if places != 1:  # one item per union read: its column must be one array's
                                raise RuleSyntaxError(f"{typename}: {'.'.join(chain)}: the union is read in {places} places")
                            keys.add((union.typename, name))
                        else:
                            keys.add((array.element.typename, node.attr))
                    elif isinstance(node, ast.Name) and isinstance(fields.get(node.id), Array):
                        if isinstance(fields[node.id].element, Utf8):
                            keys.add((typename, node.id))
    return {key: slot for slot, key in enumerate(sorted(keys))}


class _DeclaredRules:
    """The rules declared on one record as the interpreted grammar's check: their first fault, or None."""

    def __init__(self, fmt: Any, record: Any, rules: list[tuple[Any, list[Step]]]) -> None:
        self.fmt, self.record, self.rules = fmt, record, rules
        self.tags = {name: sub.enum_cls for name, sub in record.fields if isinstance(sub, Tag)}
        self.__name__ = f"rules of {record.typename}"
        for rule, rule_steps in rules:
            messages(rule, len(rule_steps))  # parsed now, not while reading
        self.__doc__ = "The rules declared on it: " + ", ".join(f"`{rule.id}`" for rule, _ in rules) + "."

    def __call__(self, fields: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
        values = dict(fields)
        for name, enum_cls in self.tags.items():  # a writer may name a tag's member or give its value
            if name in values:
                values[name] = member(enum_cls, values[name])
        return _host().rule_fault(self.rules, environment(self.fmt, self.record, values, ctx))


def attach(fmt: Any) -> None:
    """Make the rules declared on every record of ``fmt`` (each record of a typename the rules name) its
    interpreted check (``Record.checks``)."""

    by_name = record_rules(fmt)
    seen: set[int] = set()
    stack: list[Any] = [con for table in (fmt.versions, *fmt.parts.values()) for con in table.values()]
    while stack:
        con = stack.pop()
        if id(con) in seen:
            continue
        seen.add(id(con))
        if isinstance(con, Record):
            if con.typename in by_name:
                con.checks = [Validate(_DeclaredRules(fmt, con, by_name[con.typename]))]
            stack.extend(sub for _, sub in con.fields)
        elif isinstance(con, Union):
            stack.extend(case for case in con.cases.values() if case is not None)
        elif isinstance(con, (Array, Optional)):
            stack.append(con.element)
        elif isinstance(con, Recursive):
            stack.append(con.target())
