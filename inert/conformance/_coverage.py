"""How much of the generated codecs the corpus alone exercises: line and branch coverage.

Every vector is decoded, and every accepted value encoded back, by the
generated codecs under ``coverage`` (branch mode).  Readers (``decode``, the
``_read_*`` functions and the ``_run_*`` fast paths) and writers (``encode`` and ``_write_*``) are counted
apart: the corpus is made of bytes, so it is the readers it must cover fully.

``python -m inert.conformance._coverage`` prints the figures per module.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from inert._canonical import from_json
from inert._errors import InertError, WriteTypeError, WriteValueError

from ._corpus import Vector, load_corpus

__all__ = ["Figures", "measure", "main"]

READER, WRITER = "reader", "writer"


@dataclass
class Figures:
    """Lines and branches of one role in one module; misses as (function, line) and (function, from, to)."""

    statements: int = 0
    missing_lines: list[tuple[str, int]] = field(default_factory=list)
    branches: int = 0
    missing_branches: list[tuple[str, int, int]] = field(default_factory=list)

    @staticmethod
    def _percent(total: int, missing: int) -> float:
        return 100.0 if total == 0 else 100.0 * (total - missing) / total

    @property
    def line_percent(self) -> float:
        return self._percent(self.statements, len(self.missing_lines))

    @property
    def branch_percent(self) -> float:
        return self._percent(self.branches, len(self.missing_branches))

    def add(self, name: str, function: dict[str, Any]) -> None:
        summary = function["summary"]
        self.statements += summary["num_statements"]
        self.missing_lines += [(name, line) for line in function["missing_lines"]]
        self.branches += summary["num_branches"]
        self.missing_branches += [(name, a, b) for a, b in function["missing_branches"]]


def _role(function: str) -> str | None:
    # decode, decode_record (a part read on its own), the _read_* steps and _run_* fast paths; likewise for writers.
    if function.startswith(("decode", "_read_", "_run_")):
        return READER
    if function.startswith(("encode", "_write_")):
        return WRITER
    return None


def _exercise(modules: dict[str, ModuleType], vectors: list[Vector]) -> None:
    for v in vectors:
        name, _, part = v.format.partition(".")
        module = modules.get(name)
        if module is None:
            continue
        suffix = f"_{part}" if part else ""
        decode, encode = getattr(module, f"decode{suffix}"), getattr(module, f"encode{suffix}")
        # A whole file names its version in its header; a message or a part is told it.
        version = {} if hasattr(module, "MAGIC") and not part else {"version": v.version}
        if v.value is not None:
            try:
                encode(from_json(v.value), version=v.version)
            except (WriteTypeError, WriteValueError, ValueError):
                pass  # the refusal the vector expects (a ValueError: no value's spelling); the runner judges it
            continue
        try:
            decode(v.data, **version, **v.params)
        except InertError:
            pass  # a rejection is an outcome like any other here; the runner judges which one
        accepted = v.accepted
        if accepted is not None:
            encode(from_json(accepted.text), version=v.version)


def measure(vectors: list[Vector] | None = None) -> dict[str, dict[str, Figures]]:
    """Figures per generated codec module (``shm_message``, ...) and role (reader, writer)."""
    import coverage

    from inert.codecs import MODULES

    vectors = load_corpus() if vectors is None else vectors
    wanted = {v.format.partition(".")[0] for v in vectors}
    modules = {name: importlib.import_module(f"inert.codecs.{mod}") for name, mod in MODULES.items() if name in wanted}
    for module in modules.values():  # the Python readers' own figures: the accelerator would read accepted inputs in C
        if getattr(module, "_ACCEL", None) is not None:
            module._ACCEL = None  # type: ignore[attr-defined]
    files = {os.path.realpath(str(m.__file__)): m.__name__.rsplit(".", 1)[-1] for m in modules.values()}
    cov = coverage.Coverage(branch=True, data_file=None, include=list(files), config_file=False)
    cov.start()
    try:
        _exercise(modules, vectors)
    finally:
        cov.stop()
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "coverage.json")
        cov.json_report(outfile=report)
        with open(report, encoding="utf-8") as handle:
            data = json.load(handle)
    figures: dict[str, dict[str, Figures]] = {}
    for path, entry in data["files"].items():
        per_role = figures.setdefault(files[os.path.realpath(path)], {READER: Figures(), WRITER: Figures()})
        for name, function in entry["functions"].items():
            role = _role(name)
            if role is not None:
                per_role[role].add(name, function)
    return dict(sorted(figures.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inert.conformance._coverage", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure()
    if args.json:
        doc = {
            module: {
                role: {
                    "line_percent": f.line_percent,
                    "branch_percent": f.branch_percent,
                    "missing_lines": f.missing_lines,
                    "missing_branches": f.missing_branches,
                }
                for role, f in roles.items()
            }
            for module, roles in figures.items()
        }
        print(json.dumps(doc, indent=1))
        return 0
    print(f"{'module':<20} {'reader lines':>13} {'reader branches':>16} {'writer lines':>13} {'writer branches':>16}")
    for module, roles in figures.items():
        r, w = roles[READER], roles[WRITER]
        print(f"{module:<20} {r.line_percent:12.1f}% {r.branch_percent:15.1f}% {w.line_percent:12.1f}% {w.branch_percent:15.1f}%")
        for role, f in roles.items():
            if role == READER and (f.missing_lines or f.missing_branches):
                print(f"  {role} misses lines {f.missing_lines} branches {f.missing_branches}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
