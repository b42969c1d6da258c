"""docs/versioning.md works as written: its procedure, performed on a scratch copy of the repository.

The test makes the page's edits for its example (``shm-descriptor`` v3: a ``flags`` field, the rule
``shm-descriptor.flags``) step by step and runs every command of the page's ``sh`` blocks in order, as a
maintainer would; then checks that the Python readers (pure and accelerated) and the C readers (the
conformance testee) refuse a set flag as that rule, that the older vectors and bytes keep their
meaning, and that the channel's writers write the new version its readers accept.

About 30 s on two cores (the accelerator and the C testee are built).  The page's ``sh long`` block
(the rule, corpus and reader tests: minutes) runs only with ``INERT_VERSIONING_LONG=1``.
"""

from __future__ import annotations

import json
import os
import re
import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from scratch_tree import ROOT, copy_tree, run, snapshot

PAGE = ROOT / "docs" / "versioning.md"
LONG = os.environ.get("INERT_VERSIONING_LONG", "") not in ("", "0")


def _steps() -> dict[int, list[tuple[str, list[str]]]]:
    """The page's numbered steps, each with its ``sh`` blocks: (tag, command lines)."""
    steps: dict[int, list[tuple[str, list[str]]]] = {}
    for match in re.finditer(r"^## (\d+)\. .*?(?=^## |\Z)", PAGE.read_text(), re.M | re.S):
        blocks = re.findall(r"^```sh ?(\w*)\n(.*?)^```", match[0], re.M | re.S)
        steps[int(match[1])] = [(tag, [line for line in body.splitlines() if line.strip()]) for tag, body in blocks]
    return steps


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r} not found (the page's example no longer fits the tree)"
    path.write_text(text.replace(old, new, 1))


def _declare(tree: Path) -> None:
    """Step 1: the record of v3 with a typename of its own, on= of the kept rules, the new rule."""
    spec = tree / "inert" / "spec" / "shm_descriptor.py"
    _edit(spec, "\nFORMAT = Format(", '''
DescriptorV3 = Record(
    "DescriptorV3",
    *_PLACE,
    "message_crc32" / Int32ul,
    "meta_crc32" / Int32ul,
    "flags" / Int32ul,
)

FORMAT = Format(''')
    _edit(spec, "versions={1: DescriptorV1, 2: DescriptorV2}", "versions={1: DescriptorV1, 2: DescriptorV2, 3: DescriptorV3}")
    spec.write_text(spec.read_text().replace('on="Descriptor|DescriptorV2"', 'on="Descriptor|DescriptorV2|DescriptorV3"'))
    text = spec.read_text().rstrip()
    assert text.endswith(")")
    rule = (
        '    SpecRule("shm-descriptor.flags", "No flag is set: every bit of flags is reserved.", "invalid-value", "flags",\n'
        '             "flags == 0", r"reserved flags are set$", on="DescriptorV3",\n'
        '             message="{flags:#x}: reserved flags are set"),\n'
    )
    spec.write_text(text[:-1] + rule + ")\n")


def _vectors(tree: Path) -> None:
    """Step 2: the vectors of v3 (v2's, then the flags), registered."""
    vectors = tree / "inert" / "conformance" / "_vectors_shm_descriptor.py"
    _edit(vectors, '_LAYOUTS = {1: "<iiQQQ", 2: "<iiQQQII"}', '_LAYOUTS = {1: "<iiQQQ", 2: "<iiQQQII", 3: "<iiQQQIII"}')
    _edit(vectors, "        fields.update({**_CRCS, **crcs})\n", '''        fields.update({**_CRCS, **crcs})
    if version >= 3:
        fields["flags"] = fields.pop("flags", 0)
''')
    _edit(vectors, "\ndef _build(version: int) -> Corpus:", '''
def build_v3() -> Corpus:
    """Version 3: version 2, then the reserved flags (0)."""
    c = _build(3)
    c.reject("FlagSet", "the lowest reserved flag set", _descriptor(3, flags=1).data, "invalid-value")
    c.reject("FlagsAll", "every reserved flag set", _descriptor(3, flags=0xFFFFFFFF).data, "invalid-value")
    c.reject("VersionTwoBytes", "the 40 bytes of a version 2 descriptor: the flags are missing",
             _descriptor(2, 1, 3, 8192, 4096, 100).data, "truncated")
    rep = c.docs["Representative"]["expect"]["accept"]
    c.refuse_write("FlagsMissing", "a descriptor without flags", {k: v for k, v in rep.items() if k != "flags"}, "write-type")
    return c


def _build(version: int) -> Corpus:''')
    _edit(tree / "inert" / "conformance" / "_generate_vectors.py", "    _vectors_shm_descriptor.build_v2,\n",
          "    _vectors_shm_descriptor.build_v2,\n    _vectors_shm_descriptor.build_v3,\n")


def _writers(tree: Path) -> None:
    """Step 4: the channel's worker gives the new field in the descriptors it sends."""
    worker = tree / "inert" / "shm" / "_worker.py"
    for last in ('"meta_crc32": 0,', '"num_bytes": size,'):
        _edit(worker, f"            {last}\n        }}", f'            {last}\n            "flags": 0,\n        }}')


EDITS: dict[int, Callable[[Path], None]] = {1: _declare, 2: _vectors, 4: _writers}

#: Decodes every shm-descriptor v1/v2 decode vector with the codecs it imports: {test name: outcome}.
OUTCOMES = """
import json, sys
from inert.conformance._corpus import load_corpus
from inert.codecs import shm_descriptor
from inert import InertError
out = {}
for v in load_corpus():
    if v.format != "shm-descriptor" or v.version > 2 or v.value is not None:
        continue
    try:
        out[v.test_name] = ["accept", shm_descriptor.decode(v.data, version=v.version, **v.params)]
    except InertError as exc:
        out[v.test_name] = ["reject", exc.kind, exc.offset, exc.field, exc.reason]
json.dump(out, sys.stdout, sort_keys=True)
"""

#: Decodes a v3 descriptor with flags 1 (argv[1] hex) and prints what the codec says.
PROBE = """
import json, sys
from inert.codecs import shm_descriptor
from inert import InertError
try:
    print(json.dumps(["accept", shm_descriptor.decode(bytes.fromhex(sys.argv[1]), version=3)]))
except InertError as exc:
    print(json.dumps(["reject", exc.kind, exc.offset, exc.field, str(exc)]))
"""


def _descriptor_v3(flags: int) -> bytes:
    return struct.pack("<iiQQQIII", 1, 3, 8192, 4096, 100, zlib.crc32(b""), 0, flags)


def _shell(tree: Path, line: str) -> str:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    result = run(tree, "bash", "-c", f"set -o pipefail; {line}", env={"PATH": path}, timeout=600)
    assert result.returncode == 0, f"`{line}` failed in the scratch copy:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout + result.stderr


def test_the_documented_procedure_adds_a_version_whose_rule_every_reader_enforces(tmp_path: Path) -> None:
    steps = _steps()
    assert sorted(steps) == list(range(1, 8)), "the page's steps are numbered 1 to 7"
    assert set(EDITS) <= set(steps)
    tree = copy_tree(tmp_path / "inert")
    _shell(tree, "python3 setup.py build_ext --inplace -q")  # where a maintainer starts: the accelerator built
    before = snapshot(tree, ("inert/conformance/corpus/shm-descriptor/v1", "inert/conformance/corpus/shm-descriptor/v2"))
    old_outcomes = run(tree, "python", "-c", OUTCOMES)
    assert old_outcomes.returncode == 0, old_outcomes.stderr
    printed: dict[int, str] = {}
    for number, blocks in sorted(steps.items()):
        if number in EDITS:
            EDITS[number](tree)
        for tag, lines in blocks:
            if tag == "long" and not LONG:
                continue
            printed[number] = printed.get(number, "") + "".join(_shell(tree, line) for line in lines)

    # Step 3 generated v3, said it is not frozen yet and that the accelerator is stale; step 4's search found
    # the channel's writers; step 7 froze v3.
    assert re.search(r"not frozen yet: [^\n]*\bshm-descriptor v3\b", printed[3]), printed[3]
    assert "is built from another grammar" in printed[3] and "rebuild it" in printed[3]
    assert "inert/shm/_worker.py:" in printed[4] and "inert/shm/_pool.py:" in printed[4]
    for version in (1, 2, 3):  # on each of the three testees
        assert len(re.findall(rf"^shm-descriptor v{version}: \d+ passed, 0 failed", printed[6], re.M)) == 3, printed[6]
    assert re.search(r'"v3": "[0-9a-f]{32}"', (tree / "inert" / "spec" / "frozen.json").read_text())
    assert "shm-descriptor v3" not in _shell(tree, "python3 -m inert gen --check")

    # The new rule, in every reader: pure Python, the accelerator (generated C), the C testee.
    flagged = _descriptor_v3(1).hex()
    for env in ({"INERT_PURE_PYTHON": "1"}, {"INERT_ACCEL": "require"}):
        result = run(tree, "python", "-c", PROBE, flagged, env=env)
        assert result.returncode == 0, result.stderr
        outcome = json.loads(result.stdout)
        assert outcome[:4] == ["reject", "invalid-value", 0, "flags"], (env, outcome)
        accepted = json.loads(run(tree, "python", "-c", PROBE, _descriptor_v3(0).hex(), env=env).stdout)
        assert accepted[0] == "accept" and accepted[1]["flags"] == 0
    probe_c = (
        "from inert.conformance._testee import Testee; from inert.conformance._protocol import Request; import sys\n"
        "with Testee(['c/build/testee']) as t:\n"
        "    r = t.ask(Request('decode', 'shm-descriptor', 3, bytes.fromhex(sys.argv[1]), {}))\n"
        "    print(r.result, r.kind, r.message)\n"
    )
    c_answer = run(tree, "python", "-c", probe_c, flagged).stdout
    assert c_answer.startswith("reject invalid-value shm-descriptor: offset 0: flags: shm-descriptor.flags: "), c_answer

    # The older vectors keep their meaning: the same files, decoded to the same outcomes by the new codecs.
    assert snapshot(tree, ("inert/conformance/corpus/shm-descriptor/v1", "inert/conformance/corpus/shm-descriptor/v2")) == before
    new_outcomes = run(tree, "python", "-c", OUTCOMES)
    assert new_outcomes.returncode == 0, new_outcomes.stderr
    assert json.loads(new_outcomes.stdout) == json.loads(old_outcomes.stdout)
    assert len(json.loads(new_outcomes.stdout)) > 100

    # The writers of step 4: the channel's worker writes v3, its parent reads it (the accelerator bound).
    channel = run(tree, "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_shm_channel.py",
                  "-k", "round_trip or reach_the_callback", env={"INERT_ACCEL": "require"})
    assert channel.returncode == 0 and " passed" in channel.stdout, channel.stdout[-3000:]


@pytest.mark.parametrize("number", [1, 2, 4])
def test_each_edit_of_the_test_is_the_one_the_page_shows(number: int) -> None:
    """The test's edits are the page's example: the lines it adds appear on the page."""
    page = PAGE.read_text()
    shown = {1: ['"DescriptorV3",', '"flags" / Int32ul,', 'on="Descriptor|DescriptorV2|DescriptorV3"', 'on="DescriptorV3"'],
             2: ['_LAYOUTS[3] = "<iiQQQIII"', 'c.reject("FlagSet"', "BUILDERS"],
             4: ['"flags": 0', "inert/shm/_worker.py"]}
    for text in shown[number]:
        assert text in page, text
