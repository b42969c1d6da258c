"""One-point deviations of the generated Python reader, and which of them the conformance corpus misses.

``python tools/mutants/run.py [--format NAME ...] [--limit N] [--timeout S] [--match TEXT]`` (from a checkout; see README.md).

Each mutant is a copy of one generated codec module (``inert/codecs/<format>.py``) with one deviation, served
by the same request loop as the ``inert-generated`` testee and run against that format's vectors (rule
ids compared).  The deviations, each named by the rule or line it comes from:

* ``skip <rule>``: a check of a record's declared rules (``_rules_<Record>``) never refuses;
* ``swap <rule> <rule>``: two neighbouring checks of one record's rules run in the other order;
* ``limit+1 <line>`` / ``limit-1 <line>``: an integer constant a reader's comparison tests against moves by one.

The readers' inline fast tests are first replaced by the rule functions they shortcut (the same refusals,
by construction), so a deviation in a rule function is the reader's.  A mutant the corpus passes whole is a
survivor: the corpus cannot tell it from the reference reader, so either a vector is owed or the deviation
is equivalent (no input tells them apart).
"""

from __future__ import annotations

import argparse
import ast
import copy
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODECS = ROOT / "inert" / "codecs"
TESTEE = Path(__file__).resolve().parent / "_testee.py"


@dataclass(frozen=True)
class Mutant:
    name: str
    source: str


def _neutralise_fast_tests(tree: ast.Module) -> None:
    """``if not (<inline test>): fault = _rules_X(...); assert fault is not None; raise ...`` becomes
    ``fault = _rules_X(...); if fault is not None: raise ...``: the rule functions decide alone."""
    for node in ast.walk(tree):
        for field in ("body", "orelse"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            new: list[ast.stmt] = []
            for stmt in block:
                body = stmt.body if isinstance(stmt, ast.If) and not stmt.orelse else None
                if (body and len(body) == 3 and isinstance(body[0], ast.Assign) and isinstance(body[1], ast.Assert)
                        and isinstance(body[2], ast.Raise) and isinstance(body[0].value, ast.Call)
                        and isinstance(body[0].value.func, ast.Name) and body[0].value.func.id.startswith("_rules_")):
                    target = body[0].targets[0]
                    test = ast.Compare(copy.deepcopy(target), [ast.IsNot()], [ast.Constant(None)])
                    for part in (target, test):
                        if isinstance(part, ast.Name):
                            part.ctx = ast.Load() if part is not target else ast.Store()
                    new += [body[0], ast.If(test, [body[2]], [])]
                else:
                    new.append(stmt)
            setattr(node, field, new)


def _rule_checks(func: ast.FunctionDef, lines: list[str]) -> list[tuple[int, str]]:
    """(index in the body, rule id) of each check of a ``_rules_*`` function (the comment above names it)."""
    checks = []
    for i, stmt in enumerate(func.body):
        if isinstance(stmt, (ast.If, ast.For)):
            comment = lines[stmt.lineno - 2].strip()
            rule = comment[2:] if comment.startswith("# ") else f"line {stmt.lineno}"
            checks.append((i, rule))
    return checks


def mutants(path: Path) -> Iterator[Mutant]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    base = ast.parse(text)
    _neutralise_fast_tests(base)

    def emit(tree: ast.Module, name: str) -> Mutant:
        return Mutant(name, ast.unparse(ast.fix_missing_locations(tree)))

    funcs = [(i, f) for i, f in enumerate(base.body) if isinstance(f, ast.FunctionDef)]
    for index, func in funcs:
        if func.name.startswith("_rules_"):
            checks = _rule_checks(func, lines)
            for k, (at, rule) in enumerate(checks):
                tree = copy.deepcopy(base)
                target = tree.body[index]
                assert isinstance(target, ast.FunctionDef)
                target.body[at] = ast.Pass()
                yield emit(tree, f"skip {rule} ({func.name})")
                if k + 1 < len(checks) and checks[k + 1][0] == at + 1:
                    tree = copy.deepcopy(base)
                    target = tree.body[index]
                    assert isinstance(target, ast.FunctionDef)
                    target.body[at], target.body[at + 1] = target.body[at + 1], target.body[at]
                    yield emit(tree, f"swap {rule} / {checks[k + 1][1]} ({func.name})")
        elif func.name.startswith("_read_"):
            for n_const, (line, value) in enumerate((c.lineno, int(str(c.value))) for c in _compared_ints(func)):
                for delta in (1, -1):
                    tree = copy.deepcopy(base)
                    target = tree.body[index]
                    assert isinstance(target, ast.FunctionDef)
                    _compared_ints(target)[n_const].value = value + delta
                    yield emit(tree, f"limit{delta:+d} {value} at line {line} ({func.name})")


def _compared_ints(func: ast.FunctionDef) -> list[ast.Constant]:
    """The integer constants above 1 a comparison in ``func`` tests against, in walk order."""
    return [c for n in ast.walk(func) if isinstance(n, ast.Compare) for c in n.comparators
            if isinstance(c, ast.Constant) and type(c.value) is int and c.value > 1]


def _format_of(path: Path) -> str:
    match = re.search(r"^FORMAT = '([^']+)'", path.read_text(encoding="utf-8"), re.M)
    assert match, path
    return match.group(1)


def run(formats: list[str] | None, limit: int | None, timeout: float, match: str | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    from inert.conformance._runner import run as run_corpus

    modules = sorted(p for p in CODECS.glob("*.py") if not p.name.startswith("_"))
    survivors = total = 0
    os.environ["INERT_PURE_PYTHON"] = "1"  # the mutated Python reader, never the accelerator
    with tempfile.TemporaryDirectory() as tmp:
        for path in modules:
            fmt = _format_of(path)
            if formats and fmt not in formats:
                continue
            for k, mutant in enumerate(mutants(path)):
                if limit is not None and k >= limit:
                    break
                if match is not None and match not in mutant.name:
                    continue
                mutated = Path(tmp) / path.name
                mutated.write_text(mutant.source, encoding="utf-8")
                report = run_corpus([sys.executable, str(TESTEE), path.stem, str(mutated)], [fmt], timeout=timeout)
                total += 1
                # The reference answers every vector: a mutant that calls one unsupported (an IndexError of a
                # table sized for the real limit is a LookupError, which the request loop reports so) is told apart.
                failed, unsupported = report.count("failed"), report.count("unsupported")
                if report.ok and not unsupported:
                    survivors += 1
                    print(f"SURVIVES {fmt}: {mutant.name}", flush=True)
                else:
                    print(f"killed   {fmt}: {mutant.name} ({failed} tests fail, {unsupported} unsupported)", flush=True)
    print(f"{survivors} of {total} mutants survive the corpus")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/mutants/run.py", description=__doc__.split("\n")[0])
    parser.add_argument("--format", action="append", dest="formats", metavar="NAME", help="only this format (repeatable)")
    parser.add_argument("--limit", type=int, help="at most this many mutants per format")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per response (default 20)")
    parser.add_argument("--match", help="only the mutants whose name contains this text")
    args = parser.parse_args(argv)
    return run(args.formats, args.limit, args.timeout, args.match)


if __name__ == "__main__":
    sys.exit(main())
