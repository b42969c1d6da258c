"""The wheel a user builds (``python -m build``), installed into a fresh environment outside the tree:
a codec round trip, an ``inert.torch`` save/load and one format's conformance suite run from elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("build", reason="the dev extra installs build")

ROUND_TRIP = """
import sys, tempfile, torch, inert, inert.torch
from inert.codecs import checkpoint_shard
assert inert.__file__.startswith(sys.prefix), inert.__file__  # the wheel's copy, not the checkout
data = checkpoint_shard.encode({"records": []})
assert checkpoint_shard.decode(data) == {"records": []}
with tempfile.TemporaryDirectory() as path:
    inert.torch.save({"w": torch.arange(6.0)}, path)
    into = {"w": torch.zeros(6)}
    inert.torch.load(into, path)
    assert torch.equal(into["w"], torch.arange(6.0))
print("round trip ok")
"""


def run(argv: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)


@pytest.mark.filterwarnings("ignore")
def test_built_wheel_installs_and_runs_outside_the_tree(tmp_path: Path, built_wheel: Path) -> None:
    wheel = built_wheel  # `python -m build --wheel` of a clean copy (tests/conftest.py)
    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path).returncode == 0
    python = str(venv / "bin" / "python")
    installed = run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    trip = run([python, "-c", ROUND_TRIP], elsewhere)
    assert trip.returncode == 0 and "round trip ok" in trip.stdout, trip.stderr
    suite = run([python, "-m", "inert", "conformance", "run", "--testee", "inert-generated", "--format", "shm-message"],
                elsewhere)
    assert suite.returncode == 0, suite.stdout[-2000:] + suite.stderr[-2000:]
    import re

    last = re.search(r"^(\d+) passed, (\d+) failed", suite.stdout, re.M)
    assert last and int(last[1]) > 100 and last[2] == "0", suite.stdout[-2000:]
