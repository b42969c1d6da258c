"""docs/README.md is the index of docs/: every page there is listed, with a line saying what it covers."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_every_page_of_docs_is_in_the_index() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", index))
    pages = {p.name for p in DOCS.glob("*.md") if p.name != "README.md"} | {"spec/README.md"}
    assert pages <= linked, f"pages missing from docs/README.md: {sorted(pages - linked)}"
    for target in linked:
        assert (DOCS / target).exists(), f"docs/README.md links {target}, which does not exist"
    rows = [line for line in index.splitlines() if line.startswith("| [")]
    assert all(line.count("|") >= 4 and line.rstrip(" |").split("|")[-1].strip() for line in rows), rows
