"""``inert gen`` refuses an unsafe tree before writing anything, naming the file, the format and the rule.

Each test changes ``inert/spec/shm_descriptor.py`` of one scratch copy of the checkout as a maintainer might, runs
``python -m inert gen`` there, and checks the exit code, the message and that no generated file (nor
``inert/spec/frozen.json``) changed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from scratch_tree import copy_tree, restore, run, snapshot

SPEC = "inert/spec/shm_descriptor.py"
FILE = "inert/spec/shm_descriptor.py: shm-descriptor"
OLD_RULES = ("shm-descriptor.ids", "shm-descriptor.inside", "shm-descriptor.capacity")

#: Version 3 of shm-descriptor: v2's fields and a reserved ``flags`` word.
V3 = '''
DescriptorV3 = Record(
    "DescriptorV3", *_PLACE, "message_crc32" / Int32ul, "meta_crc32" / Int32ul, "flags" / Int32ul
)
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_tree(tmp_path_factory.mktemp("refusals") / "inert")


@pytest.fixture()
def spec(tree: Path) -> Iterator[Path]:
    """The scratch copy's inert/spec/shm_descriptor.py, restored after the test."""
    path = tree / SPEC
    original = path.read_text()
    yield path
    path.write_text(original)


def _declare_v3(text: str, on_v3: bool = False, extra: str = "") -> str:
    text = text.replace("\nFORMAT = Format(", V3 + extra + "\nFORMAT = Format(", 1)
    versions = "versions={1: DescriptorV1, 2: DescriptorV2"
    text = text.replace(versions + "}", versions + ", 3: DescriptorV3}")
    if on_v3:
        text = text.replace('on="Descriptor|DescriptorV2"', 'on="Descriptor|DescriptorV2|DescriptorV3"')
    return text


def _refused(tree: Path, *lines: str, check: bool = False) -> str:
    """Run ``inert gen`` in ``tree``: it must exit 1, name every one of ``lines`` and leave every file as it was."""
    before = snapshot(tree)
    result = run(tree, "python", "-m", "inert", "gen", *(["--check"] if check else []))
    assert result.returncode == 1, result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    for line in lines:
        assert line in result.stderr, result.stderr
    assert result.stderr.rstrip().endswith("refusal(s); nothing written"), result.stderr
    assert snapshot(tree) == before
    assert not list(tree.rglob(".*.inert-gen-*"))
    return result.stderr


def test_a_new_version_that_loses_its_predecessors_rules_is_refused(tree: Path, spec: Path) -> None:
    spec.write_text(_declare_v3(spec.read_text()))  # a new typename, and on= not told
    stderr = _refused(tree, *(f"{FILE}: {rule}: v3 (DescriptorV3) does not carry this rule of v2" for rule in OLD_RULES))
    assert "DROPS = {3: ('shm-descriptor.ids',)}" in stderr


def test_a_new_version_reusing_an_older_records_typename_is_refused(tree: Path, spec: Path) -> None:
    # Rules and columns are keyed by typename: a v3 "Descriptor" of other fields would take v1's rules blindly.
    spec.write_text(_declare_v3(spec.read_text()).replace('"DescriptorV3", *_PLACE', '"Descriptor", *_PLACE'))
    _refused(tree, f"{FILE}: v3: declares a Record Descriptor other than the one of v1: give it a typename of its own")


def test_declared_drops_let_a_version_carry_fewer_rules(tree: Path, spec: Path) -> None:
    # What a version drops is said in the module; a name there that is no rule is refused.
    spec.write_text(_declare_v3(spec.read_text()) + f"\nDROPS = {{3: {OLD_RULES + ('shm-descriptor.typo',)!r}}}\n")
    _refused(tree, f"{FILE}: DROPS[3]: shm-descriptor.typo is no rule of the format")
    spec.write_text(_declare_v3(spec.read_text().partition("\nDROPS")[0]) + f"\nDROPS = {{3: {OLD_RULES!r}}}\n")
    result = run(tree, "python", "-m", "inert", "gen", "--check")  # not refused: stale, since v3 is new
    assert result.returncode == 1 and "refusal" not in result.stderr, result.stderr
    assert "inert/codecs/shm_descriptor.py is stale" in result.stderr


FLAGS_RULE = (
    '\nRULES = (*RULES, SpecRule("shm-descriptor.flags", "No reserved flag is set.", "invalid-value", "flags", '
    '"{check}", r"reserved flags are set$", on="DescriptorV3"))\n'
)


def test_a_rule_over_a_field_the_record_lacks_is_refused_before_any_file(tree: Path, spec: Path) -> None:
    # The C compiler finds the wrong name (the parser does not): the refusal still names the rule.
    spec.write_text(_declare_v3(spec.read_text(), on_v3=True) + FLAGS_RULE.format(check="flagz == 0"))
    stderr = _refused(tree, f"{FILE}: shm-descriptor.flags: RuleSyntaxError: 'flagz' is no field")
    # one line per target that cannot compile it (Python and C), then the count
    assert stderr.count("'flagz' is no field") == 2 and stderr.count("\n") == 3, stderr


def test_a_rule_checked_on_no_record_is_refused(tree: Path, spec: Path) -> None:
    ids = 'r"is negative$", on="Descriptor|DescriptorV2",'
    assert ids in spec.read_text()  # the ids rule as declared (the edits below must apply)
    spec.write_text(spec.read_text().replace(ids, 'r"is negative$",', 1))
    _refused(tree, f"{FILE}: shm-descriptor.ids: the rule names no record to be checked on")
    spec.write_text(spec.read_text().replace('r"is negative$",', 'r"is negative$", on="Descripter",', 1))
    _refused(tree, f"{FILE}: shm-descriptor.ids: on= names Descripter, no record of any version")


def test_a_changed_frozen_version_is_refused(tree: Path, spec: Path) -> None:
    # An unsigned worker id changes v1 and v2; so does a check that means something else.
    spec.write_text(spec.read_text().replace('"worker_id" / Int32sl', '"worker_id" / Int32ul'))
    _refused(tree, f"{FILE}: v1: the frozen declaration changed", f"{FILE}: v2: the frozen declaration changed")
    spec.write_text(spec.read_text().replace('"worker_id" / Int32ul', '"worker_id" / Int32sl')
                    .replace('"offset + num_bytes <= shm_capacity"', '"offset + num_bytes < shm_capacity"'))
    _refused(tree, f"{FILE}: v1: the frozen declaration changed")
    # --check refuses it too (CI runs that).
    _refused(tree, f"{FILE}: v2: the frozen declaration changed", check=True)


def test_a_declaration_that_does_not_run_is_one_line_naming_where(tree: Path, spec: Path) -> None:
    spec.write_text(spec.read_text().replace('"worker_id" / Int32sl', '"worker_id" / Int64sl'))  # not imported
    before = snapshot(tree)
    result = run(tree, "python", "-m", "inert", "gen")
    assert result.returncode == 2
    assert re.fullmatch(rf"inert: gen: {re.escape(str(spec))}:\d+: NameError: name 'Int64sl' is not defined.*; nothing written\n",
                        result.stderr), result.stderr
    assert snapshot(tree) == before


def test_freeze_records_new_versions_and_keeps_recorded_ones(tree: Path, spec: Path) -> None:
    frozen = tree / "inert" / "spec" / "frozen.json"
    original, saved = frozen.read_text(), snapshot(tree)
    spec.write_text(_declare_v3(spec.read_text(), on_v3=True))
    try:
        result = run(tree, "python", "-m", "inert", "gen", "--freeze")
        assert result.returncode == 0, result.stderr
        before, after = json.loads(original), json.loads(frozen.read_text())
        assert re.fullmatch(r"[0-9a-f]{32}", after["shm-descriptor"]["v3"])
        # every recorded hash kept; the versions not yet released (v3 here, and any of the tree) added
        assert all(after[fmt][v] == digest for fmt, table in before.items() for v, digest in table.items())
        # v3 is frozen now: changing it is refused like any released version.
        spec.write_text(spec.read_text().replace('"flags" / Int32ul', '"flags" / Int64ul'))
        _refused(tree, f"{FILE}: v3: the frozen declaration changed")
    finally:
        restore(tree, saved)


def test_a_failed_write_leaves_every_file_as_it_was(tree: Path, spec: Path) -> None:
    """All or nothing: the docs pages cannot be written (docs/spec is a file), so no codec is replaced either."""
    spec.write_text(spec.read_text().replace("Version 1 is 32 bytes", "Version 1 is 32 bytes long"))
    pages = tree / "docs" / "spec"
    moved = tree / "docs" / "spec.moved"
    pages.rename(moved)
    pages.write_text("not a directory\n")
    try:
        before = snapshot(tree, ("inert/codecs", "c"))
        result = run(tree, "python", "-m", "inert", "gen")
        assert result.returncode == 2, result.stderr
        assert re.fullmatch(r"inert: gen: cannot write: .*; nothing written\n", result.stderr), result.stderr
        assert snapshot(tree, ("inert/codecs", "c")) == before
        assert not list(tree.rglob(".*.inert-gen-*"))
    finally:
        pages.unlink()
        moved.rename(pages)


def test_the_python_and_c_outputs_carry_one_grammar_hash(tree: Path) -> None:
    codecs = (tree / "inert" / "codecs" / "__init__.py").read_text()
    header = (tree / "c" / "inert_grammar_hash.h").read_text()
    python_hash = re.search(r"^GRAMMAR_HASH = '([0-9a-f]{16})'$", codecs, re.M)
    c_hash = re.search(r'^#define INERT_GRAMMAR_HASH "([0-9a-f]{16})"$', header, re.M)
    assert python_hash and c_hash and python_hash[1] == c_hash[1]
    result = run(tree, "python", "-c", "from inert.gen.grammar_hash import grammar_hash; print(grammar_hash())")
    assert result.stdout.strip() == python_hash[1], result.stderr
