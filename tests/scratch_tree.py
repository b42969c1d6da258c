"""A scratch copy of the checkout, for tests that change the spec and run ``inert gen`` as a maintainer would.

The copy holds what the generator, the readers and their build read (not the git data, builds, caches);
commands run in it with it first on ``PYTHONPATH``, so ``import inert`` is the copy's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: What a scratch copy holds: everything ``inert gen``, the vectors, the C build and the tests it runs read.
PARTS = ("inert", "c", "docs", "tests", "setup.py", "pyproject.toml", "README.md",
         "CHANGELOG.md", "MANIFEST.in", "inert-torch.pth")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.so", "build", ".pytest_cache", "*.o")


def copy_tree(dst: Path) -> Path:
    """Copy the checkout's parts into ``dst`` (created); return it."""
    dst.mkdir(parents=True, exist_ok=True)
    for part in PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, dst / part, ignore=_IGNORE, symlinks=True)
        elif src.exists():
            shutil.copy2(src, dst / part)
    return dst


def run(root: Path, *argv: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in ``root`` with the copy first on the import path (``python`` is this interpreter)."""
    full = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
    cmd = [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]
    return subprocess.run(cmd, cwd=root, env=full, capture_output=True, text=True, timeout=timeout)


#: What ``inert gen`` writes (and ``--freeze``).
GENERATED = ("inert/codecs", "c", "docs/spec", "inert/spec/frozen.json")


def snapshot(root: Path, parts: tuple[str, ...] = GENERATED) -> dict[str, bytes]:
    """Every file under ``parts`` of ``root`` with its bytes (what a refused ``inert gen`` must leave as it was)."""
    out = {}
    for part in parts:
        path = root / part
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        out.update({str(p.relative_to(root)): p.read_bytes() for p in files})
    return out


def restore(root: Path, saved: dict[str, bytes], parts: tuple[str, ...] = GENERATED) -> None:
    """Put the files of ``saved`` (a :func:`snapshot` of ``parts``) back, removing any file added since."""
    for name in set(snapshot(root, parts)) - set(saved):
        (root / name).unlink()
    for name, data in saved.items():
        (root / name).write_bytes(data)


def clean_copy(dest: Path) -> Path:
    """The project's tracked and generated files, without anything built (what a fresh clone builds from)."""
    skip = shutil.ignore_patterns(".git", "build", "dist", "*.so", "__pycache__", "*.egg-info", ".hypothesis", ".*_cache")
    shutil.copytree(ROOT, dest, ignore=skip)
    return dest


def build_wheel(source: Path, outdir: Path, env: dict[str, str] | None = None) -> Path:
    """The wheel ``python -m build --wheel`` makes of ``source`` (a user's build: the accelerator compiled in when
    a compiler works); raises with the build's output when it fails."""
    argv = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(outdir), str(source)]
    built = subprocess.run(argv, capture_output=True, text=True, cwd=source, timeout=900, env=env)
    if built.returncode != 0:
        raise RuntimeError(f"the wheel build failed:\n{built.stdout[-2000:]}\n{built.stderr[-2000:]}")
    (wheel,) = outdir.glob("inert-*.whl")
    return wheel
