"""The fuzz campaign runs every target, finds what a broken reader does wrong, and its seeds are current."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fuzz import harness
from fuzz.campaign import TARGETS, Target, run, write_seeds
from inert import TruncatedError

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"


def test_every_target_runs_clean_for_a_few_seconds(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(FUZZ / "run"), "--seconds", "2", "--jobs", "2"]
        + ["--work", str(tmp_path / "work"), "--findings", str(tmp_path / "findings")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split()[0]: line.split()[1:] for line in proc.stdout.splitlines()[1:-1] if not line.startswith(" ")}
    assert set(rows) == set(TARGETS)
    for name, (executions, per_second, corpus, findings) in rows.items():
        assert int(executions) >= 2 and int(per_second) > 0 and int(corpus) > 0, (name, proc.stdout)
        assert findings == "0"
    assert proc.stdout.splitlines()[-1].startswith("0 finding(s)")
    assert not (tmp_path / "findings").exists()


BROKEN_TARGET = """
import sys
sys.path.append({root!r})
from fuzz import harness
harness.instrument("shm-descriptor", grammar=False)
from inert.codecs import shm_descriptor

def test_one_input(data):
    if data[:2] == b"\\x07\\x07":
        raise KeyError("a reader let this escape")  # what a bug looks like to the harness
    harness.guarded(shm_descriptor.decode, data)

harness.main(test_one_input)
"""


def test_a_finding_is_minimized_and_fails_the_run(tmp_path: Path) -> None:
    script, seeds = tmp_path / "broken.py", tmp_path / "seeds"
    script.write_text(textwrap.dedent(BROKEN_TARGET).format(root=str(FUZZ.parent)))
    seeds.mkdir()
    (seeds / "bad").write_bytes(b"\x07\x07" + bytes(6))
    target = Target("broken", str(script), (), (), seed_dir=seeds)
    result = run(target, 5, tmp_path / "work", tmp_path / "findings", minimize_seconds=1)
    assert len(result.findings) == 1
    (finding,) = result.findings
    assert finding.read_bytes().startswith(b"\x07\x07") and len(finding.read_bytes()) < 8  # minimized
    assert "KeyError: 'a reader let this escape'" in finding.with_suffix(".txt").read_text()


def test_guard_flags_memory_beyond_the_declared_bound() -> None:
    def hoarding(data: bytes) -> bytes:
        return bytes(harness.memory_limit(len(data)) + 1)

    with pytest.raises(harness.ResourceFinding, match="allocated"):
        harness.guarded(hoarding, b"abc")
    assert harness.guarded(lambda data: len(data), b"abc") == ("value", "3")


def test_guard_flags_time_beyond_the_declared_bound() -> None:
    def spinning(data: bytes) -> None:  # CPU time: a reader stuck in a loop
        end = time.thread_time() + harness.time_limit(len(data)) + 0.05
        while time.thread_time() < end:
            pass

    with pytest.raises(harness.ResourceFinding, match="took"):
        harness.guarded(spinning, b"")


def test_guard_does_not_count_time_the_machine_spends_elsewhere() -> None:
    def descheduled(data: bytes) -> int:  # waiting, as a fuzzer on a loaded machine does, burns no CPU
        time.sleep(harness.time_limit(len(data)) + 0.05)
        return 0

    assert harness.guarded(descheduled, b"") == ("value", "0")


def test_guard_passes_reader_errors_and_lets_other_exceptions_out() -> None:
    def refusing(data: bytes) -> None:
        raise TruncatedError("f", 0, "x", "1 bytes needed, 0 present")

    assert harness.guarded(refusing, b"") == ("TruncatedError", "f: offset 0: x: 1 bytes needed, 0 present")
    with pytest.raises(IndexError):
        harness.guarded(lambda data: data[5], b"")


def test_committed_seeds_and_dictionaries_are_current() -> None:
    assert write_seeds(check=True) == [], "run fuzz/seeds and commit fuzz/corpus and fuzz/dicts"


def test_run_refuses_unknown_targets() -> None:
    proc = subprocess.run([sys.executable, str(FUZZ / "run"), "nope"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "unknown target nope" in proc.stderr


def test_harness_bounds_are_the_readers_promise() -> None:
    """1 s of CPU per MiB (plus 1 s for a loaded machine) and 100 bytes per input byte plus 1 MiB."""
    assert harness.time_limit(1 << 20) == 2.0 and harness.time_limit(0) == 1.0
    assert harness.memory_limit(1000) == 100_000 + (1 << 20)


def test_cost_campaign_runs_an_adapter_and_the_cli_on_a_designed_input(tmp_path: Path) -> None:
    from fuzz.cost import cases, measure

    # A 2**43-byte value record and a tensor of 16 GiB, placed in a sparse file: a few KiB on disk.
    (case,) = list(cases(tmp_path, ["declared-sizes"], 4096))
    assert case.size < 64 << 10
    for entry in ("load_tensors", "cli:verify"):
        run = measure(case, entry)
        assert run.finding is None, (entry, run)
        assert run.outcome in ("UnknownTagError", "exit 1"), (entry, run)
