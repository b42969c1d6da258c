"""The language of a declared rule's ``check``: a small, restricted subset of Python expressions.

A rule that names the record it is checked on (``SpecRule.on``) states its check as one
expression over that record's fields, which the generators compile (``inert gen`` writes it
as C) and :func:`first_fault` evaluates in Python.  The language, parsed with :mod:`ast`:

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
* named checks written once per target (:data:`NAMED`), each saying what an expression cannot.

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
import itertools
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from inert._checks import CHECKPOINT_ITEMSIZES, checkpoint_dtype_name, dtype_itemsize

__all__ = [
    "NAMED", "SATURATE", "Step", "RuleSyntaxError", "parse", "steps", "first_fault", "relative_field", "constants",
    "record_rules", "columns", "fill_indexes", "environment", "tag_members", "union_columns", "ABSENT",
]

#: Where the C compiler's products stop growing: above every constant a rule compares with (2**64).
SATURATE = 1 << 100

_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}\Z")


def _plain_name(text: str) -> bool:
    return bool(_FILE_NAME.match(text)) and text not in (".", "..")


def _first_repeat(items: Sequence[Any], earlier: Sequence[Any] = ()) -> int | None:
    """The index of the first of ``items`` that is among ``earlier`` or the items before it, else None."""
    seen = set(earlier)
    for index, item in enumerate(items):
        if item in seen:
            return index
        seen.add(item)
    return None


#: The named checks: the Python of each; the C runtime holds the same, written once (``inert_named_<name>``,
#: ``inert_distinct``).
NAMED: dict[str, Callable[..., Any]] = {
    "plain_file_name": _plain_name,
    "distinct": lambda items, earlier=(): _first_repeat(_flat(items), earlier) is None,
}

_FUNCTIONS = {"len", "max", "min", "itemsize", "all", "any", "prod", "sum", "range", "align", "zip", *NAMED}


def _flat(items: Sequence[Any]) -> list[Any]:
    """A column of arrays as one sequence (``distinct(shards.rows)``: no row in two places)."""
    return [x for item in items for x in item] if items and isinstance(items[0], list) else list(items)


class RuleSyntaxError(ValueError):
    """A check that is not an expression of the rule language."""


_ALLOWED = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.BinOp, ast.Add, ast.Sub,
    ast.Mult, ast.FloorDiv, ast.Mod, ast.Pow, ast.Compare, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE,
    ast.Is, ast.In, ast.Call, ast.Name, ast.Load, ast.Constant, ast.Subscript, ast.Tuple, ast.GeneratorExp,
    ast.comprehension, ast.Store, ast.Attribute,
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
        if isinstance(node, ast.comprehension) and (node.is_async or len(node.ifs) > 1 or _targets(node) is None):
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


def _targets(comp: ast.comprehension) -> list[str] | None:
    """The names a generator binds: ``x``, or ``a, b`` of a ``zip``."""
    target = comp.target
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
        is_zip = isinstance(comp.iter, ast.Call) and isinstance(comp.iter.func, ast.Name) and comp.iter.func.id == "zip"
        return [e.id for e in target.elts if isinstance(e, ast.Name)] if is_zip else None
    return None


def _bind(comp: ast.comprehension, item: Any, scope: dict[str, Any]) -> dict[str, Any]:
    names = _targets(comp)
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
    fields = [relative_field(path, names) for path in field.split("|")]
    if len(fields) == 1:
        return [Step(fields[0], expr)]
    if not (isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And) and len(expr.values) == len(fields)):
        raise RuleSyntaxError(f"{check!r}: {len(fields)} fields need an `and` of {len(fields)} conjuncts")
    return [Step(name, value) for name, value in zip(fields, expr.values, strict=True)]


# -- the Python evaluator ------------------------------------------------------------------------


#: The key in a rule's environment of the values ``ARRAY.union.field`` takes where a record's case lacks the
#: field (by the column's text: ``{"fields.layout.ndim": 0}``), set by :func:`environment`.
ABSENT = "@absent"
_NONE = object()


class _Broken(Exception):
    """An index beyond its array: the rule does not hold."""


def _itemsize(value: Any) -> int:
    if isinstance(value, str) and value not in CHECKPOINT_ITEMSIZES:
        return dtype_itemsize(value) or 0
    return CHECKPOINT_ITEMSIZES[checkpoint_dtype_name(value)]


def _iterate(gen: ast.GeneratorExp, env: dict[str, Any]) -> Iterator[Any]:
    def walk(k: int, scope: dict[str, Any]) -> Iterator[Any]:
        if k == len(gen.generators):
            yield _eval(gen.elt, scope)
            return
        comp = gen.generators[k]
        for item in _eval(comp.iter, scope):
            inner = _bind(comp, item, scope)
            if all(_eval(cond, inner) for cond in comp.ifs):
                yield from walk(k + 1, inner)

    return walk(0, env)


def _eval(node: ast.expr, env: dict[str, Any]) -> Any:  # noqa: C901 - one case per node type
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.Attribute):  # a column: the field of every record of an array (or of its union)
        absent = env.get(ABSENT, {}).get(ast.unparse(node), _NONE)
        if absent is _NONE:
            return [record[node.attr] for record in _eval(node.value, env)]
        return [record.get(node.attr, absent) for record in _eval(node.value, env)]
    if isinstance(node, ast.GeneratorExp):  # an argument of zip(), taken as the pairs are
        return _iterate(node, env)
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e, env) for e in node.elts)
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(_eval(v, env) for v in node.values)
        return any(_eval(v, env) for v in node.values)
    if isinstance(node, ast.UnaryOp):
        operand = _eval(node.operand, env)
        return (not operand) if isinstance(node.op, ast.Not) else -operand
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env), _eval(node.right, env)
        ops: dict[type, Callable[[Any, Any], Any]] = {
            ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y,
            ast.FloorDiv: lambda x, y: x // y if 0 < y < 1 << 64 and 0 <= x < 1 << 64 else 0,
            ast.Mod: lambda x, y: x % y if 0 < y < 1 << 64 and 0 <= x < 1 << 64 else 0,
            ast.Pow: lambda x, y: x**y,
        }
        return ops[type(node.op)](a, b)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, env)
            if isinstance(op, ast.Is):
                ok = left is right
            elif isinstance(op, ast.In):
                ok = left in right
            else:
                cmp: dict[type, Callable[[Any, Any], bool]] = {
                    ast.Eq: lambda x, y: x == y, ast.NotEq: lambda x, y: x != y, ast.Lt: lambda x, y: x < y,
                    ast.LtE: lambda x, y: x <= y, ast.Gt: lambda x, y: x > y, ast.GtE: lambda x, y: x >= y,
                }
                ok = cmp[type(op)](left, right)
            if not ok:
                return False
            left = right
        return True
    if isinstance(node, ast.Subscript):
        seq, index = _eval(node.value, env), _eval(node.slice, env)
        if not 0 <= index < len(seq):
            raise _Broken
        return seq[index]
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        name = node.func.id
        if name in ("all", "any", "prod", "sum"):
            arg = node.args[0]
            items = _iterate(arg, env) if isinstance(arg, ast.GeneratorExp) else iter(_eval(arg, env))
            reducers: dict[str, Callable[..., Any]] = {"all": all, "any": any, "prod": math.prod, "sum": sum}
            return reducers[name](items)
        args = [_eval(a, env) for a in node.args]
        if name == "itemsize":
            return _itemsize(args[0])
        if name == "align":
            return args[0] + (-args[0] % args[1])
        if name in NAMED:
            return NAMED[name](*args)
        builtins: dict[str, Callable[..., Any]] = {"len": len, "max": max, "min": min, "range": range,
                                                   "zip": zip}
        builtin = builtins[name]
        return builtin(*args)
    raise RuleSyntaxError(f"{type(node).__name__} is not in the rule language")


def _holds(expr: ast.expr, env: dict[str, Any]) -> bool:
    try:
        return bool(_eval(expr, env))
    except _Broken:
        return False


def _failing_indexes(expr: ast.expr, env: dict[str, Any]) -> list[int]:
    """The indexes a fault names: of the first element that fails ``all(E for x in ARRAY)`` (then those of
    ``E`` when it is such an ``all`` too), or of the first repeat of ``distinct(...)``."""
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("all", "distinct")):
        return []
    if expr.func.id == "distinct":
        columns = [_eval(arg, env) for arg in expr.args]
        index = _first_repeat(_flat(columns[0]), *columns[1:])
        if index is None:
            return []
        if columns[0] and isinstance(columns[0][0], list):  # (array, element) of a column of arrays
            for outer, item in enumerate(columns[0]):
                if index < len(item):
                    return [outer, index]
                index -= len(item)
        return [index]
    gen = expr.args[0]
    if not (isinstance(gen, ast.GeneratorExp) and len(gen.generators) == 1):
        return []
    comp = gen.generators[0]
    items = iter(_eval(comp.iter, env))
    for index in itertools.count():
        try:
            item = next(items)
        except StopIteration:
            return []
        except _Broken:  # a zip() whose next pair reads beyond an array: this pair breaks the rule
            return [index]
        scope = _bind(comp, item, env)
        try:
            if not all(_eval(cond, scope) for cond in comp.ifs):
                continue
        except _Broken:
            return [index]
        if not _holds(gen.elt, scope):
            return [index, *_failing_indexes(gen.elt, scope)]
    return []


def fill_indexes(field: str, indexes: Sequence[int]) -> str:
    """``field`` with its ``[i]`` replaced by ``indexes`` in order (one left without an index is dropped)."""
    parts = field.split("[i]")
    out = parts[0]
    for k, part in enumerate(parts[1:]):
        out += (f"[{indexes[k]}]" if k < len(indexes) else "") + part
    return out


def first_fault(rule_steps: Sequence[Step], env: dict[str, Any]) -> str | None:
    """The field (below the record, indexes filled in) of the first step that does not hold in ``env``
    (the record's fields, the parameters and the constants), or None when all hold."""
    for step in rule_steps:
        if _holds(step.expr, env):
            continue
        return fill_indexes(step.field, _failing_indexes(step.expr, env) if "[i]" in step.field else [])
    return None


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
            if typename not in records:
                raise RuleSyntaxError(f"{rule.id}: {fmt.name} has no record {typename}")
            names = [name for name, _ in records[typename].fields]
            if rule.check.startswith("check:"):  # every target checks a rule on a record: it is stated here
                raise RuleSyntaxError(f"{rule.id}: a rule on a record states its check in the rule language")
            out.setdefault(typename, []).append((rule, steps(rule.field, rule.check, names)))
    return out


def _records(con: Any, out: dict[str, Any], seen: set[int]) -> None:
    from inert.spec._grammar import Array, Optional, Record, Recursive, Union

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
    from inert.spec._grammar import Tag

    return {m.name: m for _, sub in record.fields if isinstance(sub, Tag) for m in sub.enum_cls}


def environment(fmt: Any, record: Any, fields: dict[str, Any], ctx: dict[str, Any]) -> dict[str, Any]:
    """What a rule on ``record`` sees: the format's constants, the tag members, the caller's parameters
    (None when not passed) and the record's fields."""
    import sys

    from inert.spec._grammar import Array, Bytes, Utf8

    env = constants(sys.modules[f"inert.spec.{fmt.module_name}"])
    env.update(tag_members(record))
    env[ABSENT] = {text: [] if isinstance(sub, (Array, Utf8, Bytes)) else 0
                   for text, (_union, _name, sub) in union_columns(record).items()}
    env.update({name: ctx.get(name) for name in fmt.params})
    env.update(fields)
    return env


def union_columns(record: Any) -> dict[str, tuple[Any, str, Any]]:
    """The columns ``ARRAY.union.field`` of ``record``: by their text, the union, the field's name (the tag's or
    a case's) and its grammar element."""
    from inert.spec._grammar import Array, Record, Tag, Union

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
    from inert.spec._grammar import Array, Record, Utf8

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
