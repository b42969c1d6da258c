"""One-point deviations of the generated Python reader, and which of them the conformance corpus misses.

``python tools/mutants/run.py [--format NAME ...] [--limit N] [--match TEXT] [--sample] [--timeout S]``
(from a checkout; see README.md).

Each mutant is a copy of one generated codec module (``inert.codecs.<format>``) with one deviation, served
by the same request loop as the ``inert-generated`` testee and run against that format's vectors (rule
ids compared).  The deviations, each named by the rule or constant it comes from:

* ``skip <rule>``: a check of a record's declared rules (``_rules_<Record>``) never refuses;
* ``swap <rule> / <rule>``: two neighbouring checks of one record's rules run in the other order;
* ``limit+1`` / ``limit-1``: an integer constant a reader's comparison tests against moves by one.

The readers' inline fast tests are first replaced by the rule functions they shortcut (the same refusals,
by construction), so a deviation in a rule function is the reader's.  A mutant the corpus passes whole is a
survivor: the corpus cannot tell it from the reference reader, so either a vector is owed or the deviation
is equivalent (no input tells them apart).  Each equivalent survivor is listed with its reason in
``survivors.txt``; a run fails on a survivor not listed and on a listed one that is killed or no longer
generated.  The whole set (no option) also records the number of mutants per format in that list and
writes the score table of docs/conformance.md from it.
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the checkout's inert, not an installed one

import inert.codecs  # noqa: E402

CODECS = Path(inert.codecs.__file__).resolve().parent
TESTEE = Path(__file__).resolve().parent / "_testee.py"
SURVIVORS = Path(__file__).resolve().parent / "survivors.txt"
DOC = ROOT / "docs" / "conformance.md"
BEGIN = "<!-- mutation scores: written by python tools/mutants/run.py from tools/mutants/survivors.txt -->"
END = "<!-- end of mutation scores -->"
#: The CI sample: this many mutants of each format, evenly spread over its list, and its first listed survivor.
SAMPLE_PER_FORMAT = 4


@dataclass(frozen=True)
class Mutant:
    format: str
    name: str
    build: Callable[[], str]  # the mutated module's source, built on demand (counting the set stays cheap)

    @property
    def key(self) -> str:
        return f"{self.format}: {self.name}"


def _neutralise_fast_tests(tree: ast.Module) -> None:
    """``if not (<inline test>): fault = _rules_X(...); assert fault is not None; raise ...`` becomes
    ``fault = _rules_X(...); if fault is not None: raise ...``: the rule functions decide alone."""
    for node in ast.walk(tree):
        for name in ("body", "orelse"):
            block = getattr(node, name, None)
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
            setattr(node, name, new)


def _rule_checks(func: ast.FunctionDef, lines: list[str]) -> list[tuple[int, str]]:
    """(index in the body, rule id) of each check of a ``_rules_*`` function (the comment above names it)."""
    checks = []
    for i, stmt in enumerate(func.body):
        if isinstance(stmt, (ast.If, ast.For)):
            comment = lines[stmt.lineno - 2].strip()
            rule = comment[2:] if comment.startswith("# ") else f"line {stmt.lineno}"
            checks.append((i, rule))
    return checks


def _compared_ints(func: ast.FunctionDef) -> list[ast.Constant]:
    """The integer constants above 1 a comparison in ``func`` tests against, in walk order."""
    return [c for n in ast.walk(func) if isinstance(n, ast.Compare) for c in n.comparators
            if isinstance(c, ast.Constant) and type(c.value) is int and c.value > 1]


def _format_of(path: Path) -> str:
    match = re.search(r"^FORMAT = '([^']+)'", path.read_text(encoding="utf-8"), re.M)
    assert match, path
    return match.group(1)


def mutants(path: Path) -> Iterator[Mutant]:
    """The mutants of one codec module, named without line numbers (a regenerated module keeps its names:
    the n-th check of a rule function, the n-th compared constant of a reader)."""
    fmt = _format_of(path)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    base = ast.parse(text)
    _neutralise_fast_tests(base)

    def variant(index: int, change: Callable[[ast.FunctionDef], None]) -> Callable[[], str]:
        def build() -> str:
            tree = copy.deepcopy(base)
            target = tree.body[index]
            assert isinstance(target, ast.FunctionDef)
            change(target)
            return ast.unparse(ast.fix_missing_locations(tree))
        return build

    def skip(at: int) -> Callable[[ast.FunctionDef], None]:
        def change(func: ast.FunctionDef) -> None:
            func.body[at] = ast.Pass()
        return change

    def swap(at: int) -> Callable[[ast.FunctionDef], None]:
        def change(func: ast.FunctionDef) -> None:
            func.body[at], func.body[at + 1] = func.body[at + 1], func.body[at]
        return change

    def move(n_const: int, value: int) -> Callable[[ast.FunctionDef], None]:
        def change(func: ast.FunctionDef) -> None:
            _compared_ints(func)[n_const].value = value
        return change

    for index, func in enumerate(base.body):
        if not isinstance(func, ast.FunctionDef):
            continue
        if func.name.startswith("_rules_"):
            checks = _rule_checks(func, lines)
            for k, (at, rule) in enumerate(checks):
                yield Mutant(fmt, f"skip {rule} (check {k + 1} of {func.name})", variant(index, skip(at)))
                if k + 1 < len(checks) and checks[k + 1][0] == at + 1:
                    yield Mutant(fmt, f"swap {rule} / {checks[k + 1][1]} (checks {k + 1}, {k + 2} of {func.name})",
                                 variant(index, swap(at)))
        elif func.name.startswith("_read_"):
            for n_const, const in enumerate(_compared_ints(func)):
                value = int(str(const.value))
                for delta in (1, -1):
                    yield Mutant(fmt, f"limit{delta:+d} {value} (constant {n_const + 1} of {func.name})",
                                 variant(index, move(n_const, value + delta)))


def generate(formats: Iterable[str] | None = None) -> dict[str, list[Mutant]]:
    """Every format's mutants, in order (all formats when ``formats`` is None)."""
    wanted = None if formats is None else set(formats)
    out: dict[str, list[Mutant]] = {}
    for path in sorted(p for p in CODECS.glob("*.py") if not p.name.startswith("_")):
        fmt = _format_of(path)
        if wanted is None or fmt in wanted:
            out[fmt] = list(mutants(path))
    return out


@dataclass
class SurvivorList:
    """``survivors.txt``: the number of mutants per format at the last whole run, and each equivalent survivor
    with why no input tells it from the reader."""

    counts: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # Mutant.key -> reason

    def survivors_of(self, fmt: str) -> list[str]:
        return [key for key in self.reasons if key.startswith(f"{fmt}: ")]


def read_survivors(path: Path = SURVIVORS) -> SurvivorList:
    listed = SurvivorList()
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("mutants "):
            _, fmt, count = line.split()
            listed.counts[fmt] = int(count)
            continue
        key, sep, reason = line.partition(" -- ")
        if not sep or not reason.strip() or ": " not in key:
            raise ValueError(f"{path}:{number}: want '<format>: <mutant> -- <why it is equivalent>', got {line!r}")
        listed.reasons[key.strip()] = reason.strip()
    return listed


def write_counts(counts: dict[str, int], path: Path = SURVIVORS) -> None:
    """Rewrite the ``mutants <format> <n>`` lines of the list, after its opening comment (its survivors and
    comments stay as written)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith("mutants ")]
    head = 0
    while head < len(lines) and lines[head].startswith("#"):
        head += 1
    rest = lines[head:]
    while rest and not rest[0].strip():
        rest.pop(0)
    block = [f"mutants {fmt} {n}" for fmt, n in sorted(counts.items())]
    path.write_text("\n".join([*lines[:head], "", *block, "", *rest]).rstrip("\n") + "\n", encoding="utf-8")


def problems(outcomes: dict[str, bool], generated: dict[str, list[Mutant]], listed: SurvivorList,
             whole: bool) -> list[str]:
    """What the list gets wrong: a survivor not in it, a listed mutant that was run and killed or that is no
    longer generated, and (``whole``: every mutant was run) a count that is not the number generated."""
    names = {m.key for ms in generated.values() for m in ms}
    found = [f"unexplained survivor: {key}" for key, survived in outcomes.items() if survived and key not in listed.reasons]
    for key in listed.reasons:
        fmt = key.partition(": ")[0]
        if (fmt in generated or whole) and key not in names:
            found.append(f"stale (no longer generated): {key}")
        elif outcomes.get(key) is False:
            found.append(f"stale (killed): {key}")
    for fmt, ms in generated.items():
        if listed.counts.get(fmt) != len(ms) and whole:
            found.append(f"count of {fmt}: {len(ms)} generated, the list says {listed.counts.get(fmt)}")
    return found


def stale_counts(generated: dict[str, list[Mutant]], listed: SurvivorList) -> list[str]:
    """The formats whose number of mutants is not the list's (the codecs changed since the whole run)."""
    return [f"{fmt}: {len(ms)} mutants generated, {listed.counts.get(fmt)} in {SURVIVORS.name} (run the whole set)"
            for fmt, ms in generated.items() if listed.counts.get(fmt) != len(ms)]


def sample(generated: dict[str, list[Mutant]], listed: SurvivorList, per_format: int = SAMPLE_PER_FORMAT) -> list[Mutant]:
    """A fixed sample over every format: ``per_format`` mutants spread evenly over each format's list, and its
    first listed survivor (so each run also tests that a listed mutant still survives)."""
    chosen: list[Mutant] = []
    for ms in generated.values():
        picks = {min(len(ms) - 1, (2 * j + 1) * len(ms) // (2 * per_format)) for j in range(per_format)} if ms else set()
        survivors = [i for i, m in enumerate(ms) if m.key in listed.reasons]
        picks |= set(survivors[:1])
        chosen += [ms[i] for i in sorted(picks)]
    return chosen


def render_scores(listed: SurvivorList) -> str:
    """The score table, from the list alone (after a clean whole run, its survivors are exactly the survivors)."""
    rows = ["| format | mutants | killed | survive (all equivalent, listed) | killed of all | killed of the non-equivalent |",
            "|---|---|---|---|---|---|"]
    total = survive = 0
    for fmt, n in sorted(listed.counts.items()):
        s = len(listed.survivors_of(fmt))
        total, survive = total + n, survive + s
        rows.append(_row(fmt, n, s))
    rows.append(_row("**all**", total, survive))
    return "\n".join(rows)


def _row(label: str, n: int, s: int) -> str:
    def pct(a: int, b: int) -> str:
        return f"{100 * a / b:.1f}%" if b else "-"
    return f"| {label} | {n} | {n - s} | {s} | {pct(n - s, n)} | {pct(n - s, n - s)} |"


def doc_region(text: str) -> str:
    """The generated region of docs/conformance.md (between BEGIN and END)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{DOC.name} has no region {BEGIN!r} ... {END!r}")
    return text[start + len(BEGIN):end].strip("\n")


def write_doc(listed: SurvivorList, path: Path = DOC) -> None:
    text = path.read_text(encoding="utf-8")
    doc_region(text)
    start, end = text.find(BEGIN) + len(BEGIN), text.find(END)
    path.write_text(text[:start] + "\n" + render_scores(listed) + "\n" + text[end:], encoding="utf-8")


_CASES: dict[str, list[Any]] = {}  # each format's tests, loaded once per process


def survives(mutant: Mutant, workdir: Path, timeout: float) -> tuple[bool, str]:
    """Whether the corpus passes ``mutant`` whole, and if not the first test that tells it apart."""
    from inert.conformance._corpus import load_corpus
    from inert.conformance._runner import cases, first_difference

    path = workdir / f"{inert.codecs.MODULES[mutant.format]}.py"
    path.write_text(mutant.build(), encoding="utf-8")
    tests = _CASES.get(mutant.format)
    if tests is None:
        tests = _CASES[mutant.format] = list(cases(load_corpus(formats={mutant.format})))
    # The reference answers every vector: a mutant that calls one unsupported (an IndexError of a table of
    # struct layouts sized for the real limit is a LookupError, which the request loop reports so) is told apart.
    first = first_difference([sys.executable, str(TESTEE), path.stem, str(path)], tests, timeout=timeout)
    return first is None, "" if first is None else f"{first.name} {first.status}"


def run(formats: list[str] | None, limit: int | None, timeout: float, match: str | None = None,
        use_sample: bool = False) -> int:
    listed = read_survivors()
    generated = generate(formats)
    whole = formats is None and limit is None and match is None and not use_sample
    if use_sample:
        chosen = sample(generated, listed)
    else:
        chosen = [m for ms in generated.values() for m in (ms if limit is None else ms[:limit])
                  if match is None or match in m.name]
    outcomes: dict[str, bool] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for mutant in chosen:
            alive, why = survives(mutant, Path(tmp), timeout)
            outcomes[mutant.key] = alive
            print(f"SURVIVES {mutant.key}" if alive else f"killed   {mutant.key} ({why})", flush=True)
    print(f"{sum(outcomes.values())} of {len(outcomes)} mutants survive the corpus ({time.monotonic() - started:.0f} s)")
    found = problems(outcomes, generated, listed, whole)
    if whole and all(p.startswith("count of ") for p in found):
        listed.counts = {fmt: len(ms) for fmt, ms in generated.items()}
        write_counts(listed.counts)
        write_doc(listed)
        print(f"wrote the counts of {SURVIVORS.relative_to(ROOT)} and the score table of {DOC.relative_to(ROOT)}")
        found = []
    for line in found:
        print(line)
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/mutants/run.py", description=__doc__.split("\n")[0])
    parser.add_argument("--format", action="append", dest="formats", metavar="NAME", help="only this format (repeatable)")
    parser.add_argument("--limit", type=int, help="at most this many mutants per format")
    parser.add_argument("--match", help="only the mutants whose name contains this text")
    parser.add_argument("--sample", action="store_true", help="only the fixed sample CI runs (tests/test_mutants.py)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per response (default 20)")
    args = parser.parse_args(argv)
    return run(args.formats, args.limit, args.timeout, args.match, args.sample)


if __name__ == "__main__":
    sys.exit(main())
