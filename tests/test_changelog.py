"""CHANGELOG.md: each entry of the Unreleased section is one bullet line, and every relative link resolves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHANGELOG = ROOT / "CHANGELOG.md"


def _unreleased() -> list[str]:
    lines = CHANGELOG.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Unreleased") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def test_every_unreleased_entry_is_one_line() -> None:
    section = _unreleased()
    assert any(line.startswith("- ") for line in section)
    stray = [line for line in section if line.strip() and not line.startswith(("- ", "### "))]
    assert not stray, f"continuation or stray lines in the Unreleased section: {stray[:5]}"


def test_every_relative_link_resolves() -> None:
    text = CHANGELOG.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    relative = [t for t in targets if not re.match(r"[a-z]+:", t)]
    assert relative
    missing = [t for t in relative if not (ROOT / t).exists()]
    assert not missing, f"CHANGELOG.md links files that do not exist: {missing}"
