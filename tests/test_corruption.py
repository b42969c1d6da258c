"""The corruption campaign in small: flipped bits and cut files are refused or load unchanged.

``fuzz/corruption.py`` runs the full campaign (thousands of damaged copies per
file); here a few dozen per file keep the guarantee under test in every run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.corruption import Counts, Subject, campaign, checkpoint_subject, damage, dump_subject, shm_subject

FLIPS, CUTS = 48, 8


def _total(per_file: dict[str, Counts]) -> Counts:
    total = Counts()
    for counts in per_file.values():
        total.add(counts)
    return total


@pytest.mark.parametrize("make", [checkpoint_subject, dump_subject], ids=["checkpoint", "dump"])
def test_damaged_files_are_refused_or_load_the_original(make: object, tmp_path: Path) -> None:
    subject: Subject = make(tmp_path)  # type: ignore[operator]
    per_file = damage(subject, FLIPS, CUTS, seed=1)
    assert len(per_file) >= 2  # metadata or manifest, and at least one data file
    total = _total(per_file)
    assert total.tried == sum(min(FLIPS, n * 8) + min(CUTS, n) for _, n, *_ in subject.files)
    assert (total.changed, total.escaped) == (0, 0), total.examples
    assert total.rejected + total.identical == total.tried and total.rejected > 0


def test_the_shared_memory_structure_never_escapes_the_error_family() -> None:
    total = _total(damage(shm_subject(), FLIPS * 2, CUTS, seed=1))
    assert total.escaped == 0, total.examples
    assert total.rejected > 0


def test_the_shared_memory_structure_detects_every_flip() -> None:
    # Without the descriptor's CRC-32s a flipped offset, zero-size dim or byte-order character gives
    # another valid batch; with them every flip of the structure is refused.
    total = _total(damage(shm_subject(), 400, 0, seed=0))
    assert total.changed == 0, total.examples
    assert total.rejected == total.tried


def test_the_campaign_reports_counts_per_file() -> None:
    lines: list[str] = []
    results = campaign(4, 2, seed=0, only=["dump"], report=lines.append)
    assert list(results) == ["dump"]
    assert {line.split()[1] for line in lines} == set(results["dump"]) and "MANIFEST" in results["dump"]
