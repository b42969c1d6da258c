"""Crash consistency in small: saves killed with SIGKILL leave no torn state.

``fuzz/crashes.py`` runs hundreds of trials per kind; here a few per kind keep
the guarantee under test in every run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from fuzz.crashes import Kind, checkpoint_kind, dump_kind, run_trials

TRIALS = 12


@pytest.mark.parametrize("make", [checkpoint_kind, dump_kind], ids=["checkpoint", "dump"])
def test_killed_saves_leave_the_old_state_the_new_one_or_nothing(make: Callable[[], Kind]) -> None:
    lines: list[str] = []
    result = run_trials(make(), TRIALS, seed=3, report=lines.append)
    assert result.torn == [], "\n".join(lines)
    assert sum(result.states.values()) == TRIALS
    assert set(result.states) <= {"absent", "previous", "new"}
    assert result.killed > 0  # some kills landed while the save ran


def test_a_torn_destination_is_reported(tmp_path: Path) -> None:
    kind = dump_kind()
    dest = tmp_path / "dump"
    kind.save(dest)
    assert kind.judge(dest) == "new"
    shard = next(p for p in dest.iterdir() if p.name != "MANIFEST")
    shard.write_bytes(shard.read_bytes()[:-1])  # what a save that published before its data was whole would leave
    assert kind.judge(dest).startswith("torn: the dump exists but verify says FAILED")
