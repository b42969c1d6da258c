"""A dumping process killed with SIGKILL at any point leaves no published dump (real processes, real files)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inert.dump import load

# Enough rows that writing them takes a while; fsync on, as in production.
CHILD = """
import sys, torch
from inert.dump import Row, dump
batch = torch.arange(600 * 16384, dtype=torch.int64).reshape(600, 16384)
rows = [Row(f"k{i}", i, {"ids": batch[i], "note": str(i)}, {"i": i}) for i in range(600)]
print("ready", flush=True)
dump(rows, sys.argv[1], owners=4)
print("done", flush=True)
"""


def _staging(parent: Path) -> list[Path]:
    return [p for p in parent.iterdir() if p.name.startswith(".d.staging-")]


def _reached(parent: Path, point: str) -> bool:
    staging = _staging(parent)
    if point == "staging":
        return bool(staging)
    if point == "shard bytes":
        return any(f.stat().st_size > 0 for s in staging for f in s.glob("shard-*.bin"))
    if point == "manifest":
        return any((s / "MANIFEST").exists() for s in staging)
    raise AssertionError(point)


@pytest.mark.parametrize("point", ["staging", "shard bytes", "manifest", "0.05s"])
def test_sigkill_during_dump_publishes_nothing(tmp_path: Path, point: str) -> None:
    dest = tmp_path / "d"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(dest)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        start = time.monotonic()
        while child.poll() is None:
            if point.endswith("s") and point[0].isdigit():
                if time.monotonic() - start >= float(point[:-1]):
                    break
            elif _reached(tmp_path, point):
                break
            time.sleep(0.0005)
        child.send_signal(signal.SIGKILL)  # a no-op if the dump already finished (and poll() reaped it)
        code = child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if point in ("staging", "shard bytes"):
        assert code == -signal.SIGKILL, f"the dump finished before {point!r} was observed; the test did not exercise it"
    if dest.exists():
        # The kill landed after the rename (while the parent directory was synced, or later): the dump is whole.
        assert len(load(dest, owners=2).rows) == 600
    # Besides a whole dump, what remains is at most a hidden staging directory.
    assert all(p.name.startswith(".d.staging-") for p in tmp_path.iterdir() if p != dest)
