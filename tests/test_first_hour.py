"""What a new user runs first: the quickstart, and what it keeps for ``inert inspect`` and ``inert verify``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_quickstart_keep_leaves_a_checkpoint_that_verifies(tmp_path: Path) -> None:
    kept = tmp_path / "made" / "ckpt"
    result = run(ROOT / "examples" / "quickstart.py", "--keep", kept, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"kept in {kept}" in result.stdout
    assert sorted(p.name for p in kept.iterdir()) == [".metadata", "__0_0.distcp"]
    verify = run("-m", "inert", "verify", kept, cwd=tmp_path)
    assert verify.returncode == 0 and verify.stdout.startswith("inert: verify: OK: 2 files"), verify.stdout + verify.stderr
    inspect = run("-m", "inert", "inspect", kept, cwd=tmp_path)
    assert inspect.returncode == 0 and "model.0.weight  float32  (32, 16)" in inspect.stdout
    again = run(ROOT / "examples" / "quickstart.py", "--keep", kept, cwd=tmp_path)  # nothing of the user's overwritten
    assert again.returncode != 0 and "the directory is not empty" in again.stderr
