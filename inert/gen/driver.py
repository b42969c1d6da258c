"""``inert gen``: every target generated in memory, the refusals checked, then every changed file replaced.

The order is what makes the tree safe: (1) the declarations alone (:func:`inert.gen.refusals.check_spec`)
and the frozen versions (:mod:`inert.gen.frozen`); (2) each format through each generator, a failure
named by format and rule; (3) what each target's reader of each format enforces
(:func:`inert.gen.refusals.check_targets`); (4) every file's text, the specification pages last: they
trace the corpus through the codecs just generated (staged in a temporary directory), so one run after
the vectors is enough; only then (5) the files.  Any refusal writes nothing.

Writing is all or nothing: every changed file is first written beside itself under a temporary name,
and only when all are written is each moved over its old self (``os.replace``, atomic per file); a
failure while writing the temporary files removes them and leaves the tree as it was.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from inert._accelerator import PURE_PYTHON_ENV, REBUILD
from inert.gen import c, c_writer, frozen, grammar_hash, py_shared, python, refusals
from inert.gen.refusals import Refusal
from inert.spec import FORMATS
from inert.spec._grammar import Format

__all__ = ["outputs", "run", "write_all"]


def _c_text(fmt: Format) -> str:
    return "\n".join(c.generate(fmt))


def _c_writer_text(fmt: Format) -> str:
    return "\n".join(c_writer.generate(fmt))


def _culprits(fmt: Format, make: Callable[[Format], str]) -> list[Refusal]:
    """The rules of ``fmt`` the generator ``make`` fails on when each is the format's only declared rule."""
    declared, out = fmt.declared, []
    try:
        for rule in declared:
            fmt.declared = (rule,)
            try:
                make(fmt)
            except Exception as exc:  # this rule alone breaks the generator: name it
                refusal = refusals.blame(fmt, exc)
                refusal.subject = rule.id
                out.append(refusal)
    finally:
        fmt.declared = declared
    return out


def _probe(refused: list[Refusal]) -> None:
    """Each format through each generator on its own, so that a failure names the format (and the rule)."""
    for fmt in FORMATS.values():
        texts: dict[str, str] = {}
        steps: list[tuple[str, Callable[[Format], str]]] = [("python", python.generate), ("c", _c_text)]
        if fmt.name in c_writer.WRITTEN:
            steps.append(("c-writer", _c_writer_text))
        for target, make in steps:
            try:
                texts[target] = make(fmt)
            except Exception as exc:  # any failure of a generator on this format stops the whole run
                refused.extend(_culprits(fmt, make) or [refusals.blame(fmt, exc)])
        if "python" in texts:  # a shared declaration's rules are checked in the codec that holds it
            owners = {owner.name: owner for _, owner in py_shared.imported(fmt).values()}
            texts["python"] += "".join("\n" + python.generate(owner) for owner in owners.values())
        refused.extend(refusals.check_targets(fmt, texts))


@contextlib.contextmanager
def _staged_codecs() -> Iterator[None]:
    """``inert.codecs``, in this process, the codecs being generated (staged in a temporary directory), read
    in pure Python (the built accelerator is the previous grammar's); the committed ones again after."""
    import inert

    names = [name for name in sys.modules if name == "inert.codecs" or name.startswith("inert.codecs.")]
    saved = {name: sys.modules.pop(name) for name in names}
    pure = os.environ.get(PURE_PYTHON_ENV)
    with tempfile.TemporaryDirectory(prefix="inert-gen-") as tmp:
        package = Path(tmp) / "codecs"
        package.mkdir()
        (package / "__init__.py").write_text(python._package_init())
        for fmt in FORMATS.values():
            (package / f"{fmt.module_name}.py").write_text(python.generate(fmt))
        spec = importlib.util.spec_from_file_location("inert.codecs", package / "__init__.py",
                                                      submodule_search_locations=[str(package)])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["inert.codecs"] = module
        os.environ[PURE_PYTHON_ENV] = "1"
        try:
            spec.loader.exec_module(module)
            yield
        finally:
            for name in [n for n in sys.modules if n == "inert.codecs" or n.startswith("inert.codecs.")]:
                del sys.modules[name]
            sys.modules.update(saved)
            if "inert.codecs" in saved:
                inert.codecs = saved["inert.codecs"]  # type: ignore[attr-defined]
            if pure is None:
                os.environ.pop(PURE_PYTHON_ENV, None)
            else:
                os.environ[PURE_PYTHON_ENV] = pure


def outputs(freeze: bool = False) -> tuple[dict[Path, str], list[Refusal], list[str]]:
    """Every file ``inert gen`` writes with its text, the refusals (when any, the files are ``{}``), and notes."""
    refused: list[Refusal] = []
    for fmt in FORMATS.values():
        refused.extend(refusals.check_spec(fmt))
    recorded, current = frozen.load(), frozen.fingerprints()
    refused.extend(refusals.check_frozen(recorded, current, FORMATS))
    if refused:  # the generators would only add noise to faults of the declarations
        return {}, refused, []
    _probe(refused)
    if refused:
        return {}, refused, []
    with _staged_codecs():  # the pages trace the corpus through the codecs being generated, not the committed ones
        files = python.outputs()
    if c.C_DIR.is_dir():  # a source checkout: the C readers and writers live there only
        files.update({**c.outputs(), **c_writer.outputs(), **grammar_hash.outputs(c.C_DIR)})
    unfrozen = sorted(f"{name} {key}" for name, keys in current.items() for key in keys if key not in recorded.get(name, {}))
    notes = []
    if freeze and frozen.FROZEN_FILE.parent.is_dir():
        files[frozen.FROZEN_FILE] = frozen.freeze_text(recorded, current)
    elif unfrozen:
        notes.append(f"not frozen yet: {', '.join(unfrozen)} (`inert gen --freeze` records them once released)")
    return files, [], notes


def write_all(files: dict[Path, str]) -> list[Path]:
    """Replace every file of ``files`` whose text differs, all or none; the files replaced."""
    stale = [path for path, text in files.items() if not (path.is_file() and path.read_text() == text)]
    staged: list[tuple[Path, Path]] = []
    try:
        for path in stale:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.inert-gen-{os.getpid()}")
            tmp.write_text(files[path])
            staged.append((tmp, path))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in staged:
        os.replace(tmp, path)
    return stale


def _accelerator_note() -> list[str]:
    """What to do when the built accelerator is another grammar's (the codecs would read in pure Python)."""
    try:
        from inert import _accel  # type: ignore[attr-defined]
    except ImportError:  # not built: nothing is stale
        return []
    built = getattr(_accel, "GRAMMAR_HASH", None)
    if built == grammar_hash.grammar_hash():
        return []
    return [f"the accelerator {Path(_accel.__file__).name} is built from another grammar ({built}); rebuild it: "
            f"`{REBUILD}`, or in a checkout used through PYTHONPATH `python3 setup.py build_ext --inplace`"]


def _shown(path: Path) -> str:
    root = c.C_DIR.parent
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def run(check: bool, freeze: bool = False) -> int:
    """``inert gen`` (write), ``--check`` (compare: exit 1 when a file is stale) or ``--freeze``; the exit code."""
    files, refused, notes = outputs(freeze=freeze and not check)
    if refused:
        for refusal in refused:
            print(f"inert: gen: {refusal}", file=sys.stderr)
        print(f"inert: gen: {len(refused)} refusal(s); nothing written", file=sys.stderr)
        return 1
    if check:
        stale = [path for path, text in files.items() if not (path.is_file() and path.read_text() == text)]
        for path in stale:
            print(f"inert: gen: {_shown(path)} is stale; run `inert gen`", file=sys.stderr)
        return 1 if stale else 0
    try:
        written = write_all(files)
    except OSError as exc:
        print(f"inert: gen: cannot write: {exc}; nothing written", file=sys.stderr)
        return 2
    for note in [*notes, *_accelerator_note()]:
        print(f"inert: gen: {note}")
    print(f"inert: gen: {len(written)} file(s) written" + (f" ({', '.join(_shown(p) for p in written)})" if written else ""))
    return 0
