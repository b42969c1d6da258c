"""The Python evaluator of the rule language (:mod:`inert.spec._rule_expr`): the interpreted grammar's rules.

The generated codecs compile every declared rule (``inert.gen.py_rules``, ``inert.gen.c_rules``); the
interpreter (reference codec #1, :mod:`inert._interpret`) evaluates the same declarations here, so the two
reference codecs read one source and a test can hold the compiled rules to the evaluated ones.  The named
checks are the runtime's (:mod:`inert._checks`, written once for Python beside the C runtime's).
"""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from inert._checks import _flat, distinct, dtype_itemsize, fill_indexes, first_repeat, plain_file_name, plural
from inert.spec._rule_expr import (
    ABSENT,
    INDEX_NAMES,
    NAMED,
    TAGS,
    RuleSyntaxError,
    Step,
    bind,
    field_depth,
    member,
    messages,
    tag_itemsize,
)

__all__ = ["NAMED_CHECKS", "first_fault", "locate", "fault"]

#: The Python of each named check of the language (:data:`inert.spec._rule_expr.NAMED`).
NAMED_CHECKS: dict[str, Callable[..., Any]] = {"plain_file_name": plain_file_name, "distinct": distinct}
assert set(NAMED_CHECKS) == set(NAMED), "every named check of the language has its Python"
_NONE = object()


class _Broken(Exception):
    """An index beyond its array: the rule does not hold."""


def _itemsize(value: Any) -> int:
    if isinstance(value, str):
        return dtype_itemsize(value) or 0
    return tag_itemsize(value)


def _iterate(gen: ast.GeneratorExp, env: dict[str, Any]) -> Iterator[Any]:
    def walk(k: int, scope: dict[str, Any]) -> Iterator[Any]:
        if k == len(gen.generators):
            yield _eval(gen.elt, scope)
            return
        comp = gen.generators[k]
        for item in _eval(comp.iter, scope):
            inner = bind(comp, item, scope)
            if all(_eval(cond, inner) for cond in comp.ifs):
                yield from walk(k + 1, inner)

    return walk(0, env)


def _eval(node: ast.expr, env: dict[str, Any]) -> Any:  # noqa: C901 - one case per node type
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.Attribute):  # a column: the field of every record of an array (or of its union)
        text = ast.unparse(node)
        absent = env.get(ABSENT, {}).get(text, _NONE)
        if absent is _NONE:
            column = [record[node.attr] for record in _eval(node.value, env)]
        else:
            column = [record.get(node.attr, absent) for record in _eval(node.value, env)]
        tag = env.get(TAGS, {}).get(text)
        return column if tag is None else [member(tag, item) for item in column]
    if isinstance(node, ast.GeneratorExp):  # an argument of zip(), taken as the pairs are
        return _iterate(node, env)
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e, env) for e in node.elts)
    if isinstance(node, ast.IfExp):  # messages only: the C compiler has no translation
        return _eval(node.body, env) if _eval(node.test, env) else _eval(node.orelse, env)
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
        if name in NAMED_CHECKS:
            return NAMED_CHECKS[name](*args)
        builtins: dict[str, Callable[..., Any]] = {"len": len, "max": max, "min": min, "range": range,
                                                   "zip": zip, "str": str, "plural": plural}
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
        index = first_repeat(_flat(columns[0]), *columns[1:])
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
        scope = bind(comp, item, env)
        try:
            if not all(_eval(cond, scope) for cond in comp.ifs):
                continue
        except _Broken:
            return [index]
        if not _holds(gen.elt, scope):
            return [index, *_failing_indexes(gen.elt, scope)]
    return []


def first_fault(rule_steps: Sequence[Step], env: dict[str, Any]) -> str | None:
    """The field (below the record, indexes filled in) of the first step that does not hold in ``env``
    (the record's fields, the parameters and the constants), or None when all hold."""
    for step in rule_steps:
        if _holds(step.expr, env):
            continue
        return fill_indexes(step.field, _failing_indexes(step.expr, env) if "[i]" in step.field else [])
    return None


def locate(expr: ast.expr, env: dict[str, Any]) -> list[int]:
    """The indexes of the fault of ``expr`` (which does not hold in ``env``), for its message: those of
    :func:`_failing_indexes`, also through an ``and`` (its first failing operand), an ``or`` (its last) and an
    ``all`` of several generators (one index per generator)."""
    if isinstance(expr, ast.BoolOp):
        values = expr.values if isinstance(expr.op, ast.Or) else [v for v in expr.values if not _holds(v, env)][:1]
        return locate(values[-1], env) if values else []
    if not (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("all", "distinct")):
        return []
    gen = expr.args[0]
    if expr.func.id == "distinct" or (isinstance(gen, ast.GeneratorExp) and len(gen.generators) == 1):
        indexes = _failing_indexes(expr, env)
        if indexes and expr.func.id == "all":
            assert isinstance(gen, ast.GeneratorExp)
            return [indexes[0], *_inner(gen, env, indexes[0])]
        return indexes
    assert isinstance(gen, ast.GeneratorExp)

    def walk(k: int, scope: dict[str, Any]) -> list[int] | None:
        if k == len(gen.generators):
            return None if _holds(gen.elt, scope) else locate(gen.elt, scope)
        comp = gen.generators[k]
        for index, item in enumerate(_eval(comp.iter, scope)):
            inner = bind(comp, item, scope)
            if all(_eval(cond, inner) for cond in comp.ifs):
                found = walk(k + 1, inner)
                if found is not None:
                    return [index, *found]
        return None

    try:
        return walk(0, env) or []
    except _Broken:
        return []


def _inner(gen: ast.GeneratorExp, env: dict[str, Any], index: int) -> list[int]:
    """:func:`locate` of the element of ``gen`` at ``index`` (one that fails)."""
    comp = gen.generators[0]
    try:
        item = next(itertools.islice(iter(_eval(comp.iter, env)), index, None))
    except (_Broken, StopIteration):
        return []
    return locate(gen.elt, bind(comp, item, env))


def fault(rules: Sequence[tuple[Any, list[Step]]], env: dict[str, Any]) -> tuple[str, str] | None:
    """The first fault of ``rules`` (each with its steps) in ``env``: (field below the record, the rule's
    message), or None when every rule holds."""
    for rule, rule_steps in rules:
        for number, step in enumerate(rule_steps):
            if _holds(step.expr, env):
                continue
            indexes = locate(step.expr, env)
            field = fill_indexes(step.field, indexes[:field_depth(step.expr)]) if "[i]" in step.field else step.field
            scope = {**env, **dict(zip(INDEX_NAMES, indexes, strict=False))}
            text = ""
            for literal, expr, conversion, spec in messages(rule, len(rule_steps))[number]:
                text += literal
                if expr is not None:
                    value = _eval(expr, scope)
                    text += format(repr(value) if conversion == "r" else value, spec)
            return field, text
    return None
