"""``inert conformance list`` and ``path``: an implementer finds the corpus and its formats without reading the tree."""

import subprocess
import sys
from pathlib import Path


def _inert(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inert", *args], capture_output=True, text=True, timeout=120)


def test_list_names_every_format_with_its_count() -> None:
    out = _inert("conformance", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    formats = {line.split()[0] for line in lines}
    assert {"checkpoint-metadata", "dump-manifest", "shm-message"} <= formats
    assert all(line.endswith(" vectors") and int(line.split()[-2]) > 0 for line in lines)


def test_path_is_the_corpus_directory() -> None:
    out = _inert("conformance", "path")
    assert out.returncode == 0, out.stderr
    corpus = Path(out.stdout.strip())
    assert corpus.is_dir() and any(corpus.iterdir())
