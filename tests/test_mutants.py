"""The mutation check (tools/mutants/): a fixed sample of the mutants of every format's generated reader is run
against the corpus, and tools/mutants/survivors.txt must name exactly the sampled mutants that survive; the
list's counts must be the number of mutants generated now, and the score table of docs/conformance.md must
be the one the list gives.  The whole set is ``python tools/mutants/run.py`` (docs/conformance.md)."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The sample's budget on the 2-core CI machine (measured well below it: docs/conformance.md).
SAMPLE_SECONDS = 90


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutants_run", ROOT / "tools" / "mutants" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_list_counts_the_mutants_generated_now_and_names_only_generated_ones(tool: ModuleType) -> None:
    generated = tool.generate()
    listed = tool.read_survivors()
    assert tool.stale_counts(generated, listed) == []
    assert tool.problems({}, generated, listed, whole=True) == []


def test_the_score_table_in_the_docs_is_the_one_the_list_gives(tool: ModuleType) -> None:
    assert tool.doc_region(tool.DOC.read_text(encoding="utf-8")) == tool.render_scores(tool.read_survivors())


def test_a_sample_of_every_formats_mutants_survives_exactly_as_listed(tool: ModuleType) -> None:
    generated = tool.generate()
    listed = tool.read_survivors()
    chosen = tool.sample(generated, listed)
    assert {m.format for m in chosen} == set(generated)
    assert any(m.key in listed.reasons for m in chosen) and any(m.key not in listed.reasons for m in chosen)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        outcomes = {m.key: tool.survives(m, Path(tmp), 20.0)[0] for m in chosen}
    assert tool.problems(outcomes, generated, listed, whole=False) == []
    assert time.monotonic() - started < SAMPLE_SECONDS, "the sample outgrew its budget: lower SAMPLE_PER_FORMAT"


def test_the_check_fails_on_an_unexplained_survivor_and_on_a_stale_entry(tool: ModuleType) -> None:
    generated = tool.generate(["shm-descriptor"])
    first, second = generated["shm-descriptor"][:2]
    listed = tool.SurvivorList({"shm-descriptor": len(generated["shm-descriptor"])},
                               {second.key: "said equivalent", "shm-descriptor: skip nothing (check 9 of _rules_X)": "gone"})
    found = tool.problems({first.key: True, second.key: False}, generated, listed, whole=False)
    assert found == [f"unexplained survivor: {first.key}",
                     f"stale (killed): {second.key}",
                     "stale (no longer generated): shm-descriptor: skip nothing (check 9 of _rules_X)"]


def test_the_list_refuses_an_entry_without_its_reason(tool: ModuleType, tmp_path: Path) -> None:
    bad = tmp_path / "survivors.txt"
    bad.write_text("mutants shm-descriptor 14\nshm-descriptor: skip shm-descriptor.ids (check 1 of _rules_Descriptor)\n")
    with pytest.raises(ValueError, match="why it is equivalent"):
        tool.read_survivors(bad)
