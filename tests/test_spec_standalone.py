"""The normative grammar stands alone: inert/spec/ imports Construct and the standard library, never the runtime.

The runtime and the generator import inert/spec/, never the reverse.  Checked twice: statically (every import
statement of spec/*.py) and by importing inert/spec/ in a fresh interpreter whose import system refuses
everything but the standard library, Construct and inert/spec/ itself, then walking every format's declarations
and rules as the generator does.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "inert" / "spec"
ALLOWED = {"construct", "__future__"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``path`` (relative ones are inert/spec/'s own)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            out.append((node.lineno, node.module))
    return out


def test_spec_imports_only_the_standard_library_and_construct() -> None:
    foreign = [
        f"{path.name}:{line}: {module}"
        for path in sorted(SPEC.glob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0] not in sys.stdlib_module_names | ALLOWED
    ]
    assert foreign == []


def test_spec_loads_no_module_by_name_at_run_time() -> None:
    """No ``importlib``/``__import__`` of the runtime behind the import statements, and no module ``__getattr__``
    handing out the runtime's names (the interpreter's entry points live in ``inert._interpret`` alone)."""
    found = []
    for path in sorted(SPEC.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
                name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                if name in ("import_module", "__import__"):
                    found.append(f"{path.name}:{node.lineno}")
        found += [f"{path.name}:{n.lineno}" for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]
    assert found == []
    import inert.spec._grammar as grammar

    assert not hasattr(grammar, "interpret_decode") and not hasattr(grammar, "interpret_encode")


WALK = textwrap.dedent(
    """
    import importlib.abc, sys

    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in ("construct", "spec"):
                return None
            raise ImportError(f"inert/spec/ imported {name}")

    sys.meta_path.insert(0, Refuse())
    sys.path.insert(0, sys.argv[1])
    import spec
    from spec import _rule_expr
    from spec._grammar import min_size

    for name, fmt in spec.FORMATS.items():
        assert fmt.rules(), name
        for table in (fmt.versions, *fmt.parts.values()):
            for con in table.values():
                min_size(con)
        for typename, rules in _rule_expr.record_rules(fmt).items():
            for rule, steps in rules:
                _rule_expr.messages(rule, len(steps))
        _rule_expr.columns(fmt)
    loaded = sorted(m for m in sys.modules if m == "inert" or m.startswith(("inert.", "msgpack", "numpy", "torch")))
    print(len(spec.FORMATS), loaded)
    """
)


def test_spec_imports_and_walks_with_the_runtime_refused() -> None:
    run = subprocess.run([sys.executable, "-I", "-c", WALK, str(ROOT / "inert")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["7", "[]"]


def test_the_interpreter_outside_a_host_says_where_it_runs() -> None:
    """Interpreting a declaration needs the runtime's host: without one the grammar says so (never a NameError)."""
    run = subprocess.run(
        [sys.executable, "-I", "-c", WALK + "\nspec.FORMATS['shm-descriptor'].versions[1].parse(b'')", str(ROOT / "inert")],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1].startswith("RuntimeError: a declaration is interpreted through inert._interpret")
