"""The declared rules' check expressions (:mod:`inert.spec._rule_expr`) as C statements.

A step (one conjunct of a rule) becomes a block of statements that computes its verdict with
the rule language's semantics: 128-bit exact sums and differences (``inert_i128``), products
saturating at ``inert_I128_SATURATE`` (2**100), ``and``/``or`` short-circuited, an index beyond
its array breaking the rule, ``all``/``any``/``prod`` as loops.  The reader function the block
goes into has read the record's fields into locals (:class:`CField`); nothing is allocated.
"""

from __future__ import annotations

import ast
import enum
from dataclasses import dataclass
from typing import Any

from inert.spec._rule_expr import NAMED, RuleSyntaxError, Step, tag_itemsize

__all__ = ["CField", "StepCompiler"]


@dataclass(frozen=True)
class CField:
    """A field read into locals: ``kind`` ``num`` (``value``; ``signed``), ``tag`` (``value``, ``enum``),
    ``str``/``bytes`` (``ptr``, ``length``), ``arr`` (``ptr``, ``length`` elements of ``width`` bytes) or
    ``arrs``, an array of ``length`` arrays of numbers laid end to end from ``ptr`` (each a ``prefix``-byte
    count, then its elements of ``width`` bytes: iterated, never indexed), ``col``, a column (``ptr`` to its
    ``inert_column``, ``length`` items of kind ``elem``), or ``list``, an array of records of which the rules
    read only the ``length``."""

    kind: str
    value: str = ""
    signed: bool = False
    ptr: str = ""
    length: str = ""
    width: int = 0
    enum: Any = None
    elem: str = ""  # a column's items: str, num, arr or arrs
    prefix: int = 0  # arrs: the bytes of each array's count


@dataclass
class _Val:
    """A compiled subexpression: ``kind`` ``num`` (``code``: an inert_i128), ``bool`` (``code``: an int),
    ``none``, ``param`` (``has``/``code``), or a field (``field``), or ``range`` (``code``: its length, i128)."""

    kind: str
    code: str = ""
    has: str = ""
    field: CField | None = None
    enum_member: Any = None


_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_ARITH = {ast.Add: "inert_i128_add", ast.Sub: "inert_i128_sub", ast.Mult: "inert_i128_mul_sat",
          ast.FloorDiv: "inert_i128_div", ast.Mod: "inert_i128_mod"}


def _const(value: int) -> str:
    if 0 <= value < 1 << 64:
        return f"inert_i128_from_u64({value}ull)"
    if -(1 << 63) <= value < 0:
        return f"inert_i128_from_i64(-{-value - 1}ll - 1)"
    if 0 < value < 1 << 126:
        return f"inert_i128_make({value >> 64}, {value & ((1 << 64) - 1)}ull)"
    raise RuleSyntaxError(f"the constant {value} is beyond the C compiler's range")


def _item(f: CField, at: str) -> CField:
    """The item ``at`` (``column->items[i]``) of the column ``f`` of strings or arrays."""
    return CField(f.elem, ptr=f"{at}.p", length=f"(size_t){at}.n", width=f.width, signed=f.signed, prefix=f.prefix)


class StepCompiler:
    """Compiles the steps of the rules on one record into statements of one reader function.

    ``fields``: the record's fields read into locals; ``names``: the format's constants and tag
    members; ``params``: the parameters the format takes; ``tables``: where the itemsize tables the
    statements use are collected (name -> C definition)."""

    def __init__(self, fields: dict[str, CField], names: dict[str, Any], params: tuple[str, ...],
                 tables: dict[str, str], fresh: Any) -> None:
        self.fields = fields
        self.names = names
        self.params = params
        self.tables = tables
        self.fresh = fresh
        self.lines: list[str] = []
        self.ind = 0
        self.broken = ""
        self.used_broken = False
        #: Values computed once before the steps (the itemsize of a dtype: pure, cannot fail), by their C.
        self.hoisted: dict[str, str] = {}
        self.scope: dict[str, _Val] = {}

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.ind + line)

    def step(self, step: Step, ind: int, fail: str) -> list[str]:
        """The statements of ``step``: on a fault they run ``fail`` (a statement using ``index``, the first
        failing element of a top-level ``all`` over an array, for a field ending in ``[i]``)."""
        self.lines, self.ind = [], ind
        label = self.fresh("broken")
        self.broken, self.used_broken = label, False
        indexes = [self.fresh("index") for _ in range(step.field.count("[i]"))]
        fail = fail.replace("@INDEXES@", "".join(f", (unsigned long long){i}" for i in indexes))
        self.emit("{")
        self.ind += 1
        for index in indexes:
            self.emit(f"uint64_t {index} = 0;")
        verdict = self.boolean(step.expr, indexes)
        if not self.used_broken:  # no index that may lie beyond its array
            self.emit(f"if (!({verdict})) {{ {fail} }}")
            self.ind -= 1
            self.emit("}")
            return self.lines
        self.emit(f"if (!({verdict})) goto {label};")
        self.emit(f"goto {label}_held;")
        self.emit(f"{label}: {{ {fail} }}")
        self.emit(f"{label}_held:;")
        self.ind -= 1
        self.emit("}")
        return self.lines

    # -- values ----------------------------------------------------------------------------------

    def value(self, node: ast.expr) -> _Val:  # noqa: C901 - one case per node type
        if isinstance(node, ast.Constant):
            if node.value is None:
                return _Val("none")
            assert type(node.value) is int  # parse() admits integers and None only
            return _Val("num", _const(node.value))
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.Attribute):
            text = ast.unparse(node)  # ARRAY.field or ARRAY.union.field
            column = self.fields.get(text)
            if column is None:
                raise RuleSyntaxError(f"{text} is no column of the record")
            return _Val("field", field=column)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            folded = self.fold(node)
            if folded is not None:
                return _Val("num", _const(folded))
            return _Val("num", f"inert_i128_neg({self.num(node.operand)})")
        if isinstance(node, ast.BinOp):
            folded = self.fold(node)
            if folded is not None:
                return _Val("num", _const(folded))
            if type(node.op) not in _ARITH:
                raise RuleSyntaxError(f"{type(node.op).__name__} of values read from the input")
            left, right = self.num(node.left), self.num(node.right)
            return _Val("num", self.temp("inert_i128", f"{_ARITH[type(node.op)]}({left}, {right})"))
        if isinstance(node, ast.Subscript):
            seq = self.value(node.value)
            if seq.field is None or seq.field.kind not in ("arr", "bytes", "str", "col"):
                raise RuleSyntaxError("only an array field is indexed (an array of arrays is iterated)")
            at = self.temp("inert_i128", self.num(node.slice))
            f = seq.field
            if f.kind == "col":
                self.emit(f"if ({at}.hi != 0 || {at}.lo >= (uint64_t){f.length}) goto {self.broken};")
                self.used_broken = True
                item = f"{f.ptr}->items[(size_t){at}.lo]"
                if f.elem == "num":
                    return _Val("num", f"inert_i128_from_u64({item}.n)")
                return _Val("field", field=_item(f, item))
            self.emit(f"if ({at}.hi != 0 || {at}.lo >= (uint64_t){f.length}) goto {self.broken};")
            self.used_broken = True
            return _Val("num", self.element(f, f"(size_t){at}.lo"))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            return _Val("bool", self.boolean(node))
        raise RuleSyntaxError(f"{type(node).__name__} has no C translation")

    def fold(self, node: ast.expr) -> int | None:
        """The value of an expression of constants only (``2**63 - 1``), else None."""
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return int(node.value)
        if isinstance(node, ast.Name):
            value = self.names.get(node.id) if node.id not in self.fields and node.id not in self.scope else None
            return int(value) if isinstance(value, int) else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner = self.fold(node.operand)
            return None if inner is None else -inner
        if isinstance(node, ast.BinOp):
            a, b = self.fold(node.left), self.fold(node.right)
            if a is None or b is None:
                return None
            ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
            if isinstance(node.op, ast.Pow):
                return int(a**b)
            return ops.get(type(node.op))
        return None

    def name(self, name: str) -> _Val:
        if name in self.scope:
            return self.scope[name]
        if name in self.fields:
            return _Val("field", field=self.fields[name])
        if name in self.params:
            return _Val("param", f"inert_i128_from_u64(r->params->{name})", has=f"r->params->has_{name}")
        if name in self.names:
            value = self.names[name]
            return _Val("num", _const(int(value)), enum_member=value if isinstance(value, enum.Enum) else None)
        raise RuleSyntaxError(f"{name!r} is no field, parameter or constant of the record")

    def element(self, f: CField, index: str) -> str:
        if f.kind in ("bytes", "str"):
            return f"inert_i128_from_u64({f.ptr}[{index}])"
        load = f"inert_load_le({f.ptr} + ({index}) * {f.width}, {f.width})"
        if f.signed:
            return f"inert_i128_from_i64(inert_load_le_signed({f.ptr} + ({index}) * {f.width}, {f.width}))"
        return f"inert_i128_from_u64({load})"

    def num(self, node: ast.expr) -> str:
        val = self.value(node)
        if val.kind == "num":
            return val.code
        if val.kind == "param":
            return val.code
        if val.kind == "bool":
            return f"inert_i128_from_u64((uint64_t)({val.code}))"
        if val.field is not None and val.field.kind in ("num", "tag"):
            f = val.field
            return f"inert_i128_from_{'i' if f.signed else 'u'}64({f.value})"
        raise RuleSyntaxError(f"{ast.unparse(node)} is not a number")

    def temp(self, ctype: str, code: str) -> str:
        name = self.fresh("e")
        self.emit(f"{ctype} {name} = {code};")
        return name

    def sequence(self, node: ast.expr) -> tuple[str, Any]:
        """An array field, a column or ``range(N)``: (its length as a C size, the value of element ``i``)."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            bound = self.temp("inert_i128", self.num(node.args[0]))
            length = self.fresh("n")
            self.emit(f"uint64_t {length} = {bound}.hi < 0 ? 0 : {bound}.hi > 0 ? UINT64_MAX : {bound}.lo;")
            return length, lambda i: _Val("num", self.temp("inert_i128", f"inert_i128_from_u64({i})"))
        val = self.value(node)
        f = val.field
        if f is not None and f.kind == "col":
            def item(i: str) -> _Val:
                at = f"{f.ptr}->items[{i}]"
                if f.elem == "num":
                    return _Val("num", self.temp("inert_i128", f"inert_i128_from_u64({at}.n)"))
                return _Val("field", field=_item(f, at))
            return f"(uint64_t){f.length}", item
        if f is not None and f.kind == "arrs":  # a cursor from one array to the next: called once per i, in order
            cursor = self.temp("const uint8_t *", f.ptr)

            def array(i: str) -> _Val:
                at, count = self.fresh("at"), self.fresh("count")
                self.emit(f"const uint8_t *{at} = {cursor};")
                self.emit(f"uint64_t {count} = inert_load_le({at}, {f.prefix});")
                self.emit(f"{cursor} = {at} + {f.prefix} + (size_t){count} * {f.width};")
                return _Val("field", field=CField("arr", ptr=f"({at} + {f.prefix})", length=f"(size_t){count}",
                                                  width=f.width, signed=f.signed))
            return f"(uint64_t){f.length}", array
        if f is None or f.kind not in ("arr", "bytes", "str"):
            raise RuleSyntaxError(f"{ast.unparse(node)} is not an array")
        return f"(uint64_t){f.length}", lambda i: _Val("num", self.temp("inert_i128", self.element(f, f"(size_t){i}")))

    def loop(self, gen: ast.GeneratorExp, body: Any, index: str | None = None) -> None:
        """Nested loops over ``gen``'s generators; ``body()`` emits the innermost statements (its
        ``break`` leaves the innermost loop only: the caller uses a flag).  ``index``: set to the position
        of the first generator's element (before its ``if``, which skips with ``continue``)."""
        saved = dict(self.scope)
        ends: list[str] = []  # per loop, the label after it ("" for none)
        for k, comp in enumerate(gen.generators):
            it = comp.iter
            i = self.fresh("i")
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "zip":
                if not isinstance(comp.target, ast.Tuple) or len(comp.target.elts) != len(it.args):
                    raise RuleSyntaxError("`for a, b in zip(A, B)`: one name per sequence")
                streams = [self.stream(arg) for arg in it.args]
                end = self.fresh("zip_end")
                self.emit(f"for (uint64_t {i} = 0;; {i}++) {{")
                self.ind += 1
                if k == 0 and index is not None:  # before the pair is taken: a broken index names it
                    self.emit(f"{index} = {i};")
                for target, stream in zip(comp.target.elts, streams, strict=True):
                    assert isinstance(target, ast.Name)
                    self.scope[target.id] = stream(end)
                ends.append(end)
            else:
                if not isinstance(comp.target, ast.Name):
                    raise RuleSyntaxError("a tuple of names is bound by zip() only")
                length, element = self.sequence(it)
                self.emit(f"for (uint64_t {i} = 0; {i} < {length}; {i}++) {{")
                self.ind += 1
                if k == 0 and index is not None:
                    self.emit(f"{index} = {i};")
                self.scope[comp.target.id] = element(i)
                ends.append("")
            for cond in comp.ifs:
                self.emit(f"if (!({self.boolean(cond)})) continue;")
        body()
        for end in reversed(ends):
            self.ind -= 1
            self.emit("}")
            if end:
                self.emit(f"{end}:;")
        self.scope = saved

    def stream(self, node: ast.expr) -> Any:
        """One sequence of a zip(): its state is set up here, before the loop; the function returned emits,
        in the loop, the statements that take its next element (or leave the loop by ``goto end``)."""
        gen = node if isinstance(node, ast.GeneratorExp) else None
        if gen is not None and (len(gen.generators) != 1 or not isinstance(gen.generators[0].target, ast.Name)):
            raise RuleSyntaxError("a generator in zip() is `E for x in A [if C]`")
        length, element = self.sequence(gen.generators[0].iter if gen is not None else node)
        pos = self.fresh("pos")
        self.emit(f"uint64_t {pos} = 0;")

        def take(end: str) -> _Val:
            if gen is None:
                self.emit(f"if ({pos} >= {length}) goto {end};")
                at = self.temp("uint64_t", f"{pos}++")
                self.emit(f"(void){at};")  # an array of arrays takes its next one from a cursor
                return element(at)
            comp = gen.generators[0]
            assert isinstance(comp.target, ast.Name)
            decl_at = len(self.lines)  # the declarations of the element, taken inside the search below
            self.emit("for (;;) {")
            self.ind += 1
            self.emit(f"if ({pos} >= {length}) goto {end};")
            at = self.temp("uint64_t", f"{pos}++")
            saved = dict(self.scope)
            self.scope[comp.target.id] = element(at)
            for cond in comp.ifs:
                self.emit(f"if (!({self.boolean(cond)})) continue;")
            decls, taken = self.hold(self.value(gen.elt))
            self.scope = saved
            self.emit("break;")
            self.ind -= 1
            self.emit("}")
            self.lines[decl_at:decl_at] = ["    " * self.ind + line for line in decls]
            return taken

        return take

    def hold(self, val: _Val) -> tuple[list[str], _Val]:
        """Copies ``val`` into variables declared by the lines returned (to be placed before the block that
        assigns them here): what a loop found, used after it."""
        name = self.fresh("held")
        if val.kind == "num":
            self.emit(f"{name} = {val.code};")
            return [f"inert_i128 {name};"], _Val("num", name)
        if val.kind == "bool":
            self.emit(f"{name} = {val.code};")
            return [f"int {name};"], _Val("bool", name)
        f = val.field
        if f is not None and f.kind in ("num", "tag"):
            ctype = "int64_t" if f.signed else "uint64_t"
            self.emit(f"{name} = {f.value};")
            return [f"{ctype} {name};"], _Val("field", field=CField(f.kind, name, signed=f.signed, enum=f.enum))
        if f is not None and f.kind in ("arr", "arrs", "str", "bytes"):
            self.emit(f"{name}_p = {f.ptr};")
            self.emit(f"{name}_n = (size_t)({f.length});")
            return ([f"const uint8_t *{name}_p;", f"size_t {name}_n;"],
                    _Val("field", field=CField(f.kind, ptr=f"{name}_p", length=f"{name}_n", width=f.width,
                                               signed=f.signed, prefix=f.prefix)))
        raise RuleSyntaxError("a generator in zip() yields numbers, strings or arrays")

    def call(self, node: ast.Call) -> _Val:
        assert isinstance(node.func, ast.Name)
        fn = node.func.id
        if fn == "len":
            val = self.value(node.args[0])
            if val.field is None or val.field.kind not in ("arr", "arrs", "bytes", "str", "col", "list"):
                raise RuleSyntaxError("len() of an array, a string or bytes")
            return _Val("num", f"inert_i128_from_u64((uint64_t){val.field.length})")
        if fn in ("max", "min"):
            a, b = self.num(node.args[0]), self.num(node.args[1])
            ta, tb = self.temp("inert_i128", a), self.temp("inert_i128", b)
            op = ">" if fn == "max" else "<"
            return _Val("num", f"(inert_i128_cmp({ta}, {tb}) {op}= 0 ? {ta} : {tb})")
        if fn == "align":
            folded = self.fold(node.args[1])
            if folded is None or folded < 1 or folded & (folded - 1) or folded >= 1 << 63:
                raise RuleSyntaxError("align(x, a): a is a constant power of two")
            return _Val("num", self.temp("inert_i128", f"inert_i128_align({self.num(node.args[0])}, {folded}ull)"))
        if fn == "itemsize":
            val = self.value(node.args[0])
            f = val.field
            if f is not None and f.kind == "tag":
                code = f"{self.itemsize_table(f.enum)}[{f.value}]"
            elif f is not None and f.kind == "str":
                code = f"inert_numpy_itemsize({f.ptr}, {f.length})"
            else:
                raise RuleSyntaxError("itemsize() of a dtype tag or a numpy dtype string")
            if code not in self.hoisted:
                self.hoisted[code] = self.fresh("itemsize")
            return _Val("num", f"inert_i128_from_u64({self.hoisted[code]})")
        if fn == "prod":
            total = self.fresh("prod")
            self.emit(f"inert_i128 {total} = inert_i128_from_u64(1);")
            arg = node.args[0]
            gen = arg if isinstance(arg, ast.GeneratorExp) else ast.GeneratorExp(
                elt=ast.Name("_x"), generators=[ast.comprehension(ast.Name("_x"), arg, [], 0)])

            def multiply() -> None:
                self.emit(f"{total} = inert_i128_mul_sat({total}, {self.num(gen.elt)});")

            self.loop(gen, multiply)
            return _Val("num", total)
        if fn in ("all", "any"):
            return _Val("bool", self.quantifier(node, None))
        if fn == "distinct":
            return _Val("bool", self.distinct(node, None))
        if fn == "sum":
            total = self.fresh("sum")
            self.emit(f"inert_i128 {total} = inert_i128_from_u64(0);")
            summed = node.args[0]
            if not isinstance(summed, ast.GeneratorExp):
                raise RuleSyntaxError("sum() takes a generator")

            def add() -> None:
                self.emit(f"{total} = inert_i128_add({total}, {self.num(summed.elt)});")

            self.loop(summed, add)
            return _Val("num", total)
        if fn in NAMED:
            val = self.value(node.args[0])
            if val.field is None or val.field.kind != "str":
                raise RuleSyntaxError(f"{fn}() of a string field")
            return _Val("bool", f"inert_named_{fn}({val.field.ptr}, {val.field.length})")
        raise RuleSyntaxError(f"{fn}() has no C translation here")

    def distinct(self, node: ast.Call, indexes: list[str] | None) -> str:
        """``distinct(column[, earlier])`` of strings, or of a column of arrays of numbers (one index for
        the item, one for the element): the run-time sorts (it may fail for memory)."""
        cols = []
        for arg in node.args:
            val = self.value(arg)
            if val.field is None or val.field.kind != "col" or val.field.elem not in ("str", "arr"):
                raise RuleSyntaxError("distinct() of columns of strings or of arrays of numbers")
            cols.append(val.field)
        wanted = 2 if cols[0].elem == "arr" else 1
        spare = [self.fresh("unused") for _ in range(wanted)]
        for name in spare:
            self.emit(f"uint64_t {name} = 0; (void){name};")
        slots = (list(indexes or []) + spare)[:wanted]
        verdict = self.fresh("d")
        if cols[0].elem == "arr":
            if len(cols) > 1:
                raise RuleSyntaxError("distinct() of arrays takes one column")
            call = f"inert_distinct_numbers(r, {cols[0].ptr}, {cols[0].width}, &{slots[0]}, &{slots[1]})"
        else:
            earlier = cols[1].ptr if len(cols) > 1 else "NULL"
            call = f"inert_distinct(r, {cols[0].ptr}, {earlier}, &{slots[0]})"
        self.emit(f"int {verdict} = {call};")
        self.emit(f"if ({verdict} < 0) return -1;")
        return verdict

    def quantifier(self, node: ast.Call, indexes: list[str] | None) -> str:
        assert isinstance(node.func, ast.Name)
        index = indexes[0] if indexes else None
        gen = node.args[0]
        if not isinstance(gen, ast.GeneratorExp):
            raise RuleSyntaxError("all() and any() take a generator")
        is_all = node.func.id == "all"
        flag = self.fresh("q")
        self.emit(f"int {flag} = {int(is_all)};")

        def test() -> None:
            verdict = self.boolean(gen.elt, indexes[1:] if indexes else None)
            self.emit(f"if ({'!' if is_all else ''}({verdict})) {{ {flag} = {int(not is_all)}; goto {flag}_out; }}")

        self.loop(gen, test, index)
        self.emit(f"{flag}_out:;")
        return flag

    def itemsize_table(self, enum_cls: type[enum.IntEnum]) -> str:
        name = f"itemsize_{enum_cls.__name__}"
        if name not in self.tables:
            top = max(int(m) for m in enum_cls)
            cells = ["0"] * (top + 1)
            for member in enum_cls:  # the declared itemsizes (inert/spec/checkpoint_shard.py's DTYPE_ITEMSIZES)
                cells[int(member)] = str(tag_itemsize(member))
            self.tables[name] = f"static const uint8_t {name}[{top + 1}] = {{{', '.join(cells)}}};"
        return name

    # -- conditions ------------------------------------------------------------------------------

    def boolean(self, node: ast.expr, indexes: list[str] | None = None) -> str:
        """A C int (an expression of locals set by the statements emitted so far) that is the verdict."""
        if isinstance(node, ast.BoolOp):
            result = self.fresh("c")
            is_and = isinstance(node.op, ast.And)
            first = self.boolean(node.values[0])
            self.emit(f"int {result} = {first};")
            for later in node.values[1:]:
                self.emit(f"if ({'' if is_and else '!'}{result}) {{")
                self.ind += 1
                self.emit(f"{result} = {self.boolean(later)};")
                self.ind -= 1
                self.emit("}")
            return result
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return f"!({self.boolean(node.operand)})"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("all", "any"):
            return self.quantifier(node, indexes)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "distinct":
            return self.distinct(node, indexes)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        val = self.value(node)
        if val.kind == "bool":
            return val.code
        return f"(inert_i128_cmp({self.num(node)}, inert_i128_from_u64(0)) != 0)"

    def compare(self, node: ast.Compare) -> str:
        """The comparisons of a chain, each operand computed once (they have no effects: computing one a
        false comparison before makes unneeded changes no verdict)."""
        tests = []
        left_node = node.left
        operands = [node.left, *node.comparators]
        values: dict[int, str] = {}
        if len(node.ops) > 1:
            for k, operand in enumerate(operands):
                plain = isinstance(operand, ast.Tuple) or (isinstance(operand, ast.Constant) and operand.value is None)
                if not plain and not (isinstance(operand, ast.Name) and operand.id in self.params):
                    values[k] = self.temp("inert_i128", self.num(operand))
        for k, (op, right_node) in enumerate(zip(node.ops, node.comparators, strict=True)):
            if isinstance(op, ast.Is):
                param = self.value(left_node)
                if param.kind != "param" or self.value(right_node).kind != "none":
                    raise RuleSyntaxError("`is` compares a parameter with None")
                test = f"!{param.has}"
            elif any(isinstance(x, ast.Constant) and type(x.value) is str for x in (left_node, right_node)):
                if not isinstance(op, (ast.Eq, ast.NotEq)):
                    raise RuleSyntaxError("a string is compared with == or !=")
                text, other = (left_node, right_node) if isinstance(left_node, ast.Constant) else (right_node, left_node)
                assert isinstance(text, ast.Constant)
                f = self.value(other).field
                if f is None or f.kind != "str":
                    raise RuleSyntaxError("a string constant is compared with a string")
                data = str(text.value).encode()
                literal = '"' + "".join(f"\\x{b:02x}" for b in data) + '"'
                equal = f"({f.length} == {len(data)} && memcmp({f.ptr}, {literal}, {len(data)}) == 0)"
                test = equal if isinstance(op, ast.Eq) else f"!{equal}"
            elif isinstance(op, ast.In):
                if not isinstance(right_node, ast.Tuple):
                    raise RuleSyntaxError("`in` takes a tuple of constants")
                left = self.temp("inert_i128", self.num(left_node))
                options = []
                for elt in right_node.elts:
                    folded = self.fold(elt)
                    if folded is None:
                        raise RuleSyntaxError("`in` takes a tuple of constants")
                    options.append(f"inert_i128_cmp({left}, {_const(folded)}) == 0")
                test = "(" + " || ".join(options) + ")"
            else:
                left = values.get(k) or self.num(left_node)
                right = values.get(k + 1) or self.num(right_node)
                test = f"(inert_i128_cmp({left}, {right}) {_CMP[type(op)]} 0)"
            tests.append(test)
            left_node = right_node
        return tests[0] if len(tests) == 1 else "(" + " && ".join(tests) + ")"
