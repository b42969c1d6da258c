"""The declared rules' check expressions (:mod:`inert.spec._rule_expr`) as Python, for the generated codecs.

Each record with rules gets one function, ``_rules_<Typename>(v, ctx)``, that checks its rules' steps in
declaration order and returns the first fault, ``(field, reason)``, or None: the field with the indexes of
the failing elements filled in and the rule's ``message`` (the same as :func:`inert._rule_eval.fault`
gives, which a test holds it to).  A record whose steps cannot raise also gets :meth:`RecordRules.accept`,
the conjunction of its steps as one inline expression over the reader's locals: the reader calls the function
only when that is false, for its error.  The semantics are the language's: exact integers, ``//`` and ``%``
0 outside 0..2**64 - 1, an index beyond its array breaking the rule (``_checks.RuleBroken``).  The named
checks and these few semantic helpers are written once, in :mod:`inert._checks`.
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Callable
from typing import Any

from inert.spec._grammar import Array, Bytes, Record, Scalar, Tag, Utf8
from inert.spec._rule_expr import INDEX_NAMES, NAMED, RuleSyntaxError, Step, field_depth, messages, union_columns

__all__ = ["RecordRules"]

_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Is: "is", ast.In: "in"}
_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
_FLIP = {ast.LtE: "max", ast.Lt: "max", ast.GtE: "min", ast.Gt: "min"}
_U64 = 1 << 64


def _unsigned(sub: Any) -> bool:
    return isinstance(sub, Scalar) and sub.code in "BHIQ"


class _Compiler:
    """Rule-language expressions as Python expressions.  ``fields``: field name -> the Python expression of
    its value; ``columns``: column text -> its Python expression; ``hoisted``: ``itemsize(field)`` -> a local."""

    def __init__(self, rules: RecordRules, fields: dict[str, str], columns: dict[str, str], safe: bool) -> None:
        self.r = rules
        self.fields = fields
        self.columns = columns
        self.safe = safe  # subscripts through _checks.at (messages): no IndexError, no negative index
        self.scope: dict[str, str] = {}
        self.nonneg: set[str] = set()  # Python names known to hold 0..2**64 - 1
        self.hoist: dict[str, str] | None = None  # the inline test's locals computed before it

    # -- facts -----------------------------------------------------------------------------------
    def fold(self, node: ast.expr) -> int | None:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return int(node.value)
        if isinstance(node, ast.Name) and node.id not in self.scope and node.id not in self.fields:
            value = self.r.names.get(node.id)
            return int(value) if isinstance(value, int) else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.fold(node.operand)
            return None if inner is None else -inner
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Pow)):
            a, b = self.fold(node.left), self.fold(node.right)
            if a is None or b is None:
                return None
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(type(node.op), a**b if b >= 0 else None)
        return None

    def is_nonneg(self, node: ast.expr) -> bool:
        """Whether ``node`` is surely 0..2**64 - 1 (so ``%`` and ``//`` need no guard, an index no sign test)."""
        folded = self.fold(node)
        if folded is not None:
            return 0 <= folded < _U64
        if isinstance(node, ast.Name):
            if node.id in self.scope:
                return self.scope[node.id] in self.nonneg
            return node.id in self.fields and _unsigned(self.r.element(node.id))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id in ("len", "itemsize")
        return False

    def index_nonneg(self, node: ast.expr) -> bool:
        """Whether an index is surely not negative (a product or sum of such values)."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            return self.index_nonneg(node.left) and self.index_nonneg(node.right)
        return self.is_nonneg(node) or (isinstance(node, ast.Name) and self.scope.get(node.id, "") in self.nonneg)

    # -- expressions -----------------------------------------------------------------------------
    def expr(self, node: ast.expr, boolean: bool = False) -> str:  # noqa: C901 - one case per node type
        folded = self.fold(node)
        if folded is not None:
            return repr(folded)
        if isinstance(node, ast.Constant):
            return repr(node.value)
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.Attribute):
            text = ast.unparse(node)
            if text not in self.columns:
                raise RuleSyntaxError(f"{text} is no column of {self.r.record.typename}")
            return self.columns[text]
        if isinstance(node, ast.Tuple):
            return "(" + "".join(self.expr(e) + ", " for e in node.elts) + ")"
        if isinstance(node, ast.BoolOp):
            op = " and " if isinstance(node.op, ast.And) else " or "
            text = "(" + op.join(self.expr(v, True) for v in node.values) + ")"
            return text if boolean else f"bool{text}"
        if isinstance(node, ast.UnaryOp):
            return f"(not {self.expr(node.operand, True)})" if isinstance(node.op, ast.Not) else f"(-{self.expr(node.operand)})"
        if isinstance(node, ast.BinOp):
            a, b = self.expr(node.left), self.expr(node.right)
            if type(node.op) in _ARITH:
                return f"({a} {_ARITH[type(node.op)]} {b})"
            if isinstance(node.op, ast.Pow):
                return f"({a} ** {b})"
            name = "rule_mod" if isinstance(node.op, ast.Mod) else "rule_div"
            cheap = _simple(node.right) or (self.hoist is not None and isinstance(node.right, ast.Call)
                                            and isinstance(node.right.func, ast.Name) and node.right.func.id == "itemsize")
            if self.is_nonneg(node.left) and self.is_nonneg(node.right) and cheap:
                return f"({a} {'%' if name == 'rule_mod' else '//'} {b} if {b} else 0)"
            return f"{self.r.helper(name)}({a}, {b})"
        if isinstance(node, ast.Compare):
            parts = [self.expr(node.left)]
            for cmp, right in zip(node.ops, node.comparators, strict=True):
                parts += [_CMP[type(cmp)], self.expr(right)]
            return "(" + " ".join(parts) + ")"
        if isinstance(node, ast.Subscript):
            seq, index = self.expr(node.value), self.expr(node.slice)
            if self.safe or not self.index_nonneg(node.slice):
                return f"{self.r.helper('at')}({seq}, {index})"
            self.r.raises = True
            return f"{seq}[{index}]"
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.GeneratorExp):
            return "(" + self.generator(node) + ")"
        if isinstance(node, ast.IfExp):
            return f"({self.expr(node.body)} if {self.expr(node.test, True)} else {self.expr(node.orelse)})"
        raise RuleSyntaxError(f"{type(node).__name__} has no Python translation")

    def name(self, name: str) -> str:
        if name in self.scope:
            return self.scope[name]
        if name in self.fields:
            return self.fields[name]
        if name in self.r.params:
            if self.hoist is not None:
                self.hoist.setdefault(f"param_{name}", f"ctx.get({name!r})")
                return "{param_" + name + "}"
            return f"ctx.get({name!r})"
        raise RuleSyntaxError(f"{name!r} is no field, parameter or constant of {self.r.record.typename}")

    def generator(self, gen: ast.GeneratorExp, elt: Callable[[], str] | None = None) -> str:
        """``E for x in A [if C] ...`` with the names bound (the caller's ``elt`` gives E)."""
        saved = dict(self.scope)
        clauses = []
        for comp in gen.generators:
            iterable = self.expr(comp.iter)
            targets = comp.target.elts if isinstance(comp.target, ast.Tuple) else [comp.target]
            names = []
            for target in targets:
                assert isinstance(target, ast.Name)
                local = f"_v_{target.id}"
                self.scope[target.id] = local
                if self.iterates_nonneg(comp.iter):
                    self.nonneg.add(local)
                names.append(local)
            clause = f"for {', '.join(names)} in {iterable}"
            clause += "".join(f" if {self.expr(cond, True)}" for cond in comp.ifs)
            clauses.append(clause)
        body = elt() if elt is not None else self.expr(gen.elt)
        self.scope = saved
        return f"{body} {' '.join(clauses)}"

    def iterates_nonneg(self, node: ast.expr) -> bool:
        """Whether every element of the iterable ``node`` is 0..2**64 - 1 (``range``, an unsigned array)."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            return True
        if isinstance(node, ast.Name) and node.id in self.fields and not isinstance(node, ast.Attribute):
            sub = self.r.element(node.id)
            return isinstance(sub, Array) and _unsigned(sub.element) or isinstance(sub, Bytes)
        return False

    def call(self, node: ast.Call) -> str:  # noqa: C901 - one case per function
        assert isinstance(node.func, ast.Name)
        fn, args = node.func.id, node.args
        if fn in ("all", "any") and isinstance(args[0], ast.GeneratorExp):
            gen = args[0]
            fast = self.quantifier_fast(fn, gen)
            if fast is not None:
                return fast
            return f"{fn}({self.generator(gen, lambda: self.expr(gen.elt, True))})"
        if fn == "prod" and len(args) == 1:
            return self.product(args[0])
        if fn in ("all", "any", "sum", "max", "min") and len(args) == 1:
            arg = self.generator(args[0]) if isinstance(args[0], ast.GeneratorExp) else self.expr(args[0])
            return f"{self.r.helper('prod') if fn == 'prod' else fn}({arg})"
        if fn == "itemsize":
            return self.r.itemsize(self, args[0])
        if fn == "align":
            return f"{self.r.helper('align')}({self.expr(args[0])}, {self.expr(args[1])})"
        if fn == "distinct":
            return f"{self.r.helper('distinct')}({', '.join(self.expr(a) for a in args)})"
        if fn in NAMED:
            return f"{self.r.helper(fn)}({self.expr(args[0])})"
        if fn == "plural":  # a message's count and noun: the one spelling both hosts share (inert._checks.plural)
            return f"{self.r.helper('plural')}({', '.join(self.expr(a) for a in args)})"
        if fn in ("len", "max", "min", "range", "zip", "str"):
            return f"{fn}({', '.join(self.expr(a) for a in args)})"
        raise RuleSyntaxError(f"{fn}() has no Python translation")

    def product(self, arg: ast.expr) -> str:
        """``prod(F)`` of an array field (once, before the inline test), and ``prod(max(x, 1) for x in F)`` of an
        unsigned one as ``prod(F) or ...``: a product that is not 0 has no 0 to count as 1."""
        prod = self.r.helper("prod")
        if isinstance(arg, ast.Name) and arg.id in self.fields and arg.id not in self.scope:
            code = f"{prod}({self.fields[arg.id]})"
            if self.hoist is None:
                return code
            self.hoist.setdefault(f"prod_{arg.id}", code)
            return "{prod_" + arg.id + "}"
        if isinstance(arg, ast.GeneratorExp) and len(arg.generators) == 1 and not arg.generators[0].ifs:
            comp, elt = arg.generators[0], arg.elt
            if (isinstance(comp.iter, ast.Name) and self.iterates_nonneg(comp.iter) and isinstance(comp.target, ast.Name)
                    and isinstance(elt, ast.Call) and isinstance(elt.func, ast.Name) and elt.func.id == "max"
                    and len(elt.args) == 2 and isinstance(elt.args[0], ast.Name) and elt.args[0].id == comp.target.id
                    and self.fold(elt.args[1]) == 1):
                return f"({self.product(comp.iter)} or {prod}({self.generator(arg)}))"
        if isinstance(arg, ast.GeneratorExp):
            return f"{prod}({self.generator(arg)})"
        return f"{prod}({self.expr(arg)})"

    def strided(self, gen: ast.GeneratorExp) -> str | None:
        """``all(X[c * B + d] + Y[c * B + d] <= Z[d] for c in range(A) for d in range(B))`` (every chunk in every
        dim) as one ``max`` of a strided slice per ``d``: C loops, where the arrays hold the ``A * B`` (and ``B``)
        elements the loops read; else None (or, at run time, the loops as written)."""
        if len(gen.generators) != 2 or any(comp.ifs for comp in gen.generators):
            return None
        outer, inner = gen.generators
        ranges = []
        for comp in (outer, inner):
            it = comp.iter
            if not (isinstance(comp.target, ast.Name) and isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                    and it.func.id == "range" and len(it.args) == 1):
                return None
            ranges.append((comp.target.id, it.args[0]))
        (c, count), (d, width) = ranges
        elt = gen.elt
        if not (isinstance(elt, ast.Compare) and len(elt.ops) == 1 and isinstance(elt.ops[0], ast.LtE)):
            return None
        terms = [elt.left.left, elt.left.right] if isinstance(elt.left, ast.BinOp) and isinstance(elt.left.op, ast.Add) \
            else [elt.left]
        stride = ast.dump(ast.BinOp(ast.BinOp(ast.Name(c, ast.Load()), ast.Mult(), width), ast.Add(), ast.Name(d, ast.Load())))
        arrays = []
        for term in terms:
            if not (isinstance(term, ast.Subscript) and isinstance(term.value, ast.Name) and term.value.id in self.fields
                    and ast.dump(term.slice) == stride):
                return None
            arrays.append(self.fields[term.value.id])
        right = elt.comparators[0]
        if not (isinstance(right, ast.Subscript) and isinstance(right.value, ast.Name) and right.value.id in self.fields
                and isinstance(right.slice, ast.Name) and right.slice.id == d):
            return None
        limit = self.fields[right.value.id]
        a, b = self.expr(count), self.expr(width)
        ends = f"map({self.r.helper('add')}, {', '.join(f'{x}[_v_{d}:{a} * {b}:{b}]' for x in arrays)})" \
            if len(arrays) == 2 else f"{arrays[0]}[_v_{d}:{a} * {b}:{b}]"
        fast = f"all(max({ends}) <= {limit}[_v_{d}] for _v_{d} in range({b}))"
        guard = " and ".join([f"{b} > 0", f"{a} > 0", *(f"len({x}) >= {a} * {b}" for x in arrays), f"len({limit}) >= {b}"])
        general = f"all({self.generator(gen, lambda: self.expr(gen.elt, True))})"
        return f"(({fast}) if {guard} else {general})"

    def quantifier_fast(self, fn: str, gen: ast.GeneratorExp) -> str | None:
        """``all(x <= C for x in A)`` as ``max``, ``all(b in (..) for b in BYTES)`` as a byte filter: C loops."""
        if fn == "all" and len(gen.generators) == 2:
            return self.strided(gen)
        if fn != "all" or len(gen.generators) != 1 or gen.generators[0].ifs:
            return None
        comp, elt = gen.generators[0], gen.elt
        if not (isinstance(comp.target, ast.Name) and isinstance(elt, ast.Compare) and len(elt.ops) == 1):
            return None
        if not (isinstance(elt.left, ast.Name) and elt.left.id == comp.target.id):
            return None
        op, right = elt.ops[0], elt.comparators[0]
        seq = self.expr(comp.iter)
        if type(op) in _FLIP and self.fold(right) is not None:
            return f"(not {seq} or {_FLIP[type(op)]}({seq}) {_CMP[type(op)]} {self.fold(right)})"
        element = self.r.element(comp.iter.id) if isinstance(comp.iter, ast.Name) else None
        if isinstance(op, ast.In) and isinstance(right, ast.Tuple) and isinstance(element, Bytes):
            allowed = [self.fold(e) for e in right.elts]
            if all(a is not None and 0 <= a < 256 for a in allowed):
                return f"{self.r.helper('bytes_within')}({seq}, {bytes(a for a in allowed if a is not None)!r})"
        return None


def _simple(node: ast.expr) -> bool:
    """A name or a constant: cheap to evaluate twice."""
    return isinstance(node, (ast.Name, ast.Constant))


class RecordRules:
    """The rules declared on one record, compiled for one generated module.

    ``mod``: the module being generated (its ``const`` gives one global per helper); ``names``: the format's
    constants and the record's tag members; ``params``: the parameters the format takes."""

    def __init__(self, mod: Any, record: Record, rules: list[tuple[Any, list[Step]]], names: dict[str, Any],
                 params: tuple[str, ...]) -> None:
        self.mod = mod
        self.record = record
        self.rules = rules
        self.names = names
        self.params = params
        self.raises = False
        self.elements = dict(record.fields)
        self.unions = union_columns(record)
        self.hoisted: dict[str, str] = {}
        self.portable = False
        self.accept_text = self._accept()

    def quick_test(self) -> str | None:
        """The inline test as an expression of ``this.<field>``, ``ctx`` and ``_checks`` alone (exported by
        the codec as ``_QUICK_TESTS``: what a property test evaluates against the rules' function)."""
        if self.accept_text is None:
            return None
        self.portable = True
        try:
            compiler = _Compiler(self, {name: f"this.{name}" for name in self.elements}, {}, safe=False)
            return " and ".join(compiler.expr(step.expr, True) for _rule, steps in self.rules for step in steps)
        finally:
            self.portable = False

    @property
    def function_name(self) -> str:
        return f"_rules_{self.record.typename}"

    def element(self, name: str) -> Any:
        return self.elements.get(name)

    def helper(self, name: str) -> str:
        if self.portable:
            return f"_checks.{name}"
        return self.mod.const(f"_checks.{name}", "C")

    def itemsize(self, compiler: _Compiler, node: ast.expr) -> str:
        sub = self.element(node.id) if isinstance(node, ast.Name) and node.id not in compiler.scope else None
        value = compiler.expr(node)
        if isinstance(sub, Tag):
            code = f"{self.table(sub.enum_cls)}[{value}]"
        elif isinstance(sub, Utf8):
            code = f"({self.helper('dtype_itemsize')}({value}) or 0)"
        else:
            code = ""
        if code and compiler.hoist is not None:  # computed once before the test (pure, cannot fail)
            assert isinstance(node, ast.Name)
            compiler.hoist.setdefault(f"isz_{node.id}", code)
            return "{isz_" + node.id + "}"
        if code:
            return code
        raise RuleSyntaxError(f"{self.record.typename}: itemsize() of a dtype tag or a numpy dtype string field")

    def table(self, enum_cls: type[enum.IntEnum]) -> str:
        """The itemsizes of a tag's members as a tuple indexed by value (the tag is read and valid)."""
        from inert.spec._rule_expr import tag_itemsize

        top = max(int(m) for m in enum_cls)
        cells = [0] * (top + 1)
        for member in enum_cls:
            cells[int(member)] = tag_itemsize(member)
        return repr(tuple(cells)) if self.portable else self.mod.const(repr(tuple(cells)), "ITEMSIZE")

    # -- the inline test -------------------------------------------------------------------------
    def _uses(self, node: ast.AST, kinds: tuple[type, ...]) -> bool:
        return any(isinstance(n, kinds) for n in ast.walk(node))

    def _accept(self) -> str | None:
        """The conjunction of every step over placeholders ``{field}``, or None when a step may raise or reads
        a column (the function is called then)."""
        fields = {name: "{" + name + "}" for name in self.elements}
        compiler = _Compiler(self, fields, {}, safe=False)
        compiler.hoist = self.hoisted = {}
        tests = []
        for _rule, steps in self.rules:
            for step in steps:
                if self._uses(step.expr, (ast.Subscript, ast.Attribute)) or "distinct" in ast.unparse(step.expr):
                    return None
                tests.append(compiler.expr(step.expr, True))
        return " and ".join(tests)

    def accept(self, locals_: dict[str, str], fresh: Callable[[str], str]) -> tuple[list[str], str] | None:
        """The inline test over the reader's locals (field name -> local), after the statements returned
        (the itemsizes it reads), or None when the function must be called."""
        if self.accept_text is None:
            return None
        names = {**locals_, **{key: fresh(key) for key in self.hoisted}}
        pre = [f"{names[key]} = {code.format(**names)}" for key, code in self.hoisted.items()]
        return pre, self.accept_text.format(**names)

    # -- the function ----------------------------------------------------------------------------
    def function(self) -> str:
        """``def _rules_<Typename>(v, ctx)``: the first fault of the record's fields ``v``, or None."""
        lines: list[str] = [f"def {self.function_name}(v: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:"]
        exprs = [s.expr for _r, steps in self.rules for s in steps]
        exprs += [piece[1] for rule, steps in self.rules for pieces in messages(rule, len(steps)) for piece in pieces
                  if piece[1] is not None]
        used = {n.id for e in exprs for n in ast.walk(e) if isinstance(n, ast.Name)}
        fields = {}
        for name in self.elements:
            if name in used:
                fields[name] = f"f_{name}"
                lines.append(f"    f_{name} = v[{name!r}]")
        columns: dict[str, str] = {}
        attributes = [n for e in exprs for n in ast.walk(e) if isinstance(n, ast.Attribute)]
        inner = {id(n.value) for n in attributes}  # fields.layout of fields.layout.kind: no column of its own
        texts = {ast.unparse(n) for n in attributes if id(n) not in inner}
        for text in sorted(texts):
            parts = text.split(".")
            if len(parts) == 2 and parts[0] in fields:
                local = f"c_{len(columns)}"
                lines.append(f"    {local} = [r[{parts[1]!r}] for r in {fields[parts[0]]}]")
                columns[text] = local
            elif len(parts) == 3 and text in self.unions:
                union, name, sub = self.unions[text]
                local = f"c_{len(columns)}"
                if name == union.tag_field:  # a writer may name the member: as the reader gives it
                    table = f"_FROM_{self.mod.enum(union.tag.enum_cls)}"
                    tags = f"[r[{parts[1]!r}][{name!r}] for r in {fields[parts[0]]}]"
                    lines.append(f"    {local} = [{table}.get(t, t) for t in {tags}]")
                    columns[text] = local
                    continue
                else:
                    absent = "[]" if isinstance(sub, (Array, Utf8, Bytes)) else "0"
                    item = f"r[{parts[1]!r}].get({name!r}, {absent})"
                lines.append(f"    {local} = [{item} for r in {fields[parts[0]]}]")
                columns[text] = local
        for rule, steps in self.rules:
            templates = messages(rule, len(steps))
            for number, step in enumerate(steps):
                lines.append(f"    # {rule.id}")
                lines.extend(self._step(step, templates[number], fields, columns))
        lines.append("    return None")
        return "\n".join(lines)

    def _step(self, step: Step, template: list[tuple[str, ast.expr | None, str | None, str]], fields: dict[str, str],
              columns: dict[str, str]) -> list[str]:
        compiler = _Compiler(self, fields, columns, safe=False)
        self.raises = False
        test = compiler.expr(step.expr, True)
        out = []
        if self.raises:
            out += ["    try:", f"        ok = {test}", f"    except (IndexError, {self.helper('RuleBroken')}):",
                    "        ok = False", "    if not ok:"]
        else:
            out.append(f"    if not {test}:")
        body: list[str] = []
        locate = _Locator(self, fields, columns, body)
        indexes = locate.expr(step.expr, 2)
        if indexes != "[]":
            body.append(f"ix = {indexes}")
        depth = min(field_depth(step.expr), len(INDEX_NAMES))
        if "[i]" in step.field:
            field = f"{self.helper('fill_indexes')}({step.field!r}, ix[:{depth}])"
        else:
            field = repr(step.field)
        msg = _Compiler(self, fields, columns, safe=True)
        msg.scope = {name: f"ix[{n}]" for n, name in enumerate(INDEX_NAMES)}
        pieces = []
        for literal, expr, conversion, spec in template:
            pieces.append(literal.replace("{", "{{").replace("}", "}}"))
            if expr is not None:
                pieces.append("{" + msg.expr(expr) + ("!r" if conversion == "r" else "") + (f":{spec}" if spec else "") + "}")
        body.append(f"return {field}, f{''.join(pieces)!r}")
        out.extend("        " + line if not line.startswith(" ") else "        " + line for line in body)
        return out


class _Locator:
    """The indexes of a step's fault as :func:`inert._rule_eval.locate` finds them: statements (nested
    functions, on the error path only) whose value is the list of indexes."""

    def __init__(self, rules: RecordRules, fields: dict[str, str], columns: dict[str, str], lines: list[str]) -> None:
        self.r = rules
        self.fields = fields
        self.columns = columns
        self.lines = lines
        self.count = 0
        self.scope: dict[str, str] = {}

    def compiler(self) -> _Compiler:
        c = _Compiler(self.r, self.fields, self.columns, safe=True)
        c.scope = dict(self.scope)
        return c

    def holds(self, node: ast.expr) -> str:
        return f"{self.r.helper('holds')}(lambda: {self.compiler().expr(node, True)})"

    def expr(self, node: ast.expr, ind: int) -> str:
        """An expression of the indexes list of ``node`` (which fails), after statements it emits."""
        if isinstance(node, ast.BoolOp):
            if isinstance(node.op, ast.Or):
                return self.expr(node.values[-1], ind)
            name = self.fresh()
            self.emit(0, f"def {name}() -> list[int]:")
            for value in node.values:
                self.emit(1, f"if not {self.holds(value)}:")
                self.lines.append("    " * 2 + f"return {self.nested(value, 2)}")
            self.emit(1, "return []")
            return f"{name}()"
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("all", "distinct")):
            return "[]"
        if node.func.id == "distinct":
            args = ", ".join(self.compiler().expr(a) for a in node.args)
            return f"{self.r.helper('repeat_at')}({args})"
        gen = node.args[0]
        if not isinstance(gen, ast.GeneratorExp):
            return "[]"
        name = self.fresh()
        self.emit(0, f"def {name}() -> list[int]:")
        saved = dict(self.scope)
        depth = 1
        positions: list[str] = []
        for comp in gen.generators:
            iterable = self.compiler().expr(comp.iter)
            targets = comp.target.elts if isinstance(comp.target, ast.Tuple) else [comp.target]
            names = []
            for target in targets:
                assert isinstance(target, ast.Name)
                self.scope[target.id] = f"_v_{target.id}"
                names.append(f"_v_{target.id}")
            position = f"_k{len(positions)}_{self.count}"
            positions.append(position)
            item = f"_item{len(positions)}_{self.count}"
            self.emit(depth, f"for {position}, {item} in {self.r.helper('steps')}(lambda: {iterable}):")
            self.emit(depth + 1, f"if {item} is {self.r.helper('RuleBroken')}:")
            self.emit(depth + 2, f"return [{', '.join(positions)}]")
            self.emit(depth + 1, f"{', '.join(names)} = {item}")
            for cond in comp.ifs:
                self.emit(depth + 1, f"if not {self.holds(cond)}:")
                self.emit(depth + 2, "continue")
            depth += 1
        self.emit(depth, f"if not {self.holds(gen.elt)}:")
        self.lines.append("    " * (depth + 1) + f"return [{', '.join(positions)}, *{self.nested(gen.elt, depth + 1)}]")
        self.emit(1, "return []")
        self.scope = saved
        return f"{name}()"

    def nested(self, node: ast.expr, ind: int) -> str:
        """The indexes expression of ``node`` from inside a function at indent ``ind`` (its statements there)."""
        inner: list[str] = []
        locator = _Locator(self.r, self.fields, self.columns, inner)
        locator.scope = dict(self.scope)
        locator.count = self.count + 100
        text = locator.expr(node, 0)
        self.count = locator.count
        for line in inner:
            self.lines.append("    " * ind + line)
        return text

    def fresh(self) -> str:
        self.count += 1
        return f"_locate{self.count}"

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)
