"""``inert decode`` on every conformance vector: the expected JSON, or exactly one error line, never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from inert.cli.main import main
from inert.conformance._corpus import CORPUS_DIR, Outcome, Vector, load_corpus
from inert.conformance._runner import read_failure_list

VECTORS = [v for v in load_corpus() if v.value is None]  # byte vectors; write vectors have nothing to decode
# The CLI is the generated codecs: their known failures are known here too, and must keep failing.
KNOWN = read_failure_list(CORPUS_DIR.parent / "failure_lists" / "inert_generated.txt")


def _argv(vector: Vector, path: Path) -> list[str]:
    argv = ["decode", "--format", vector.format, "--version", str(vector.version), str(path)]
    for name, value in vector.params.items():
        if value is False:
            argv.append(f"--no-{name.replace('_', '-')}")
        else:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


def _matches(vector: Vector, outcome: Outcome, code: int, out: str, err: str) -> bool:
    if outcome.result == "accept":
        return (code, out, err) == (0, outcome.text + "\n", "")
    lines = err.splitlines()
    if code != 1 or out or len(lines) != 1 or not err.endswith("\n"):
        return False
    fmt = re.escape(vector.format.partition('.')[0])
    match = re.fullmatch(rf"inert: decode: {fmt}: offset (\d+): (the whole value|[^ ]+): (.+)", lines[0])
    return match is not None and int(match.group(1)) <= len(vector.data)


def _meets(vector: Vector, path: Path, capsys: pytest.CaptureFixture[str]) -> str | None:
    """None when ``inert decode`` of ``vector`` gives one of its outcomes, else what it gave instead."""
    path.write_bytes(vector.data)
    code = main(_argv(vector, path))
    out, err = capsys.readouterr()
    if any(_matches(vector, o, code, out, err) for o in vector.outcomes):
        return None
    expected = " or ".join(o.describe() for o in vector.outcomes)
    return f"{vector.test_name}: expected {expected}; exit {code}, {out[:300]!r} {err!r}"


# One test per corpus folder, the folder's vectors in a loop (a test per vector cost two minutes of
# per-test set-up in CI for the same checks); every mismatch is listed, not only the first.
FOLDERS = sorted({(v.format, v.version) for v in VECTORS})


@pytest.mark.parametrize("folder", FOLDERS, ids=[f"{fmt}/v{version}" for fmt, version in FOLDERS])
def test_decode_cli_meets_every_vector(folder: tuple[str, int], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    vectors = [v for v in VECTORS if (v.format, v.version) == folder]
    failures = {v.test_name: _meets(v, tmp_path / "input.bin", capsys) for v in vectors}
    unexpected = [problem for name, problem in failures.items() if problem is not None and name not in KNOWN]
    fixed = [name for name, problem in failures.items() if problem is None and name in KNOWN]
    assert not unexpected, f"{len(unexpected)} of {len(vectors)} vectors:\n" + "\n".join(unexpected[:20])
    assert not fixed, f"known failures that now pass (remove them from the failure list): {fixed}"


def _one_of_each(fmt: str) -> list[Vector]:
    mine = [v for v in VECTORS if v.format == fmt and len(v.outcomes) == 1]
    return [next(v for v in mine if v.outcomes[0].result == result) for result in ("accept", "reject")]


@pytest.mark.parametrize(
    "vector", [v for fmt in sorted({v.format for v in VECTORS}) for v in _one_of_each(fmt)], ids=lambda v: v.test_name
)
def test_decode_cli_as_a_process(vector: Vector, tmp_path: Path) -> None:
    """The same through a real ``inert`` process: exit status and the single stderr line."""
    path = tmp_path / "input.bin"
    path.write_bytes(vector.data)
    proc = subprocess.run([sys.executable, "-m", "inert", *_argv(vector, path)], capture_output=True, text=True, timeout=60)
    (outcome,) = vector.outcomes
    assert _matches(vector, outcome, proc.returncode, proc.stdout, proc.stderr), (proc.returncode, proc.stdout[:300], proc.stderr)
