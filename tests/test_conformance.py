"""The conformance suite: corpus, runner, protocol, failure lists, the three testees and the coverage gate."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from inert._errors import ERROR_CLASSES, HarnessError
from inert.conformance import _generate_vectors
from inert.conformance._corpus import CORPUS_DIR, load_corpus, vector_document, vector_file_text, write_vector_document
from inert.conformance._protocol import MAX_FRAME, Request, Response, read_request, read_response, write_request, write_response
from inert.conformance._runner import (
    FAIL,
    KNOWN,
    MAX_FAULTS_IN_A_ROW,
    PASS,
    UNSUPPORTED,
    Report,
    cases,
    read_failure_list,
    run,
)
from inert.gen.c_python import ACCELERATED

CONFORMANCE = CORPUS_DIR.parent
FAILURE_LISTS = CONFORMANCE / "failure_lists"
C_SOURCE = CONFORMANCE / "testees" / "c" / "shm_reader.c"
SHM_FORMATS = ("shm-message", "shm-samples-meta", "shm-descriptor")
SUMMARY_RE = re.compile(r"^(\d+) passed, (\d+) failed$")

VECTORS = load_corpus()


# -- the corpus ------------------------------------------------------------------------------------------


def test_corpus_is_what_the_generator_writes() -> None:
    assert _generate_vectors.differences() == [], "run: python -m inert.conformance._generate_vectors"


def test_corpus_covers_each_shm_format_with_every_kind_of_expectation() -> None:
    for fmt in SHM_FORMATS:
        vectors = [v for v in VECTORS if v.format == fmt]
        results = Counter(o.result for v in vectors for o in v.outcomes)
        kinds = {o.kind for v in vectors for o in v.outcomes if o.result == "reject"}
        assert results["accept"] >= 5 and results["reject"] >= 20, (fmt, results)
        assert {"truncated", "trailing-bytes", "invalid-value"} <= kinds, (fmt, kinds)
    open_ = [v.test_name for v in VECTORS if len(v.outcomes) > 1]
    assert not open_, f"the spec decides every case, but these vectors leave it open: {open_}"
    for fmt in SHM_FORMATS:
        write_kinds = {v.outcomes[0].kind for v in VECTORS if v.format == fmt and v.value is not None}
        assert write_kinds == {"write-type", "write-value"}, (fmt, write_kinds)


def test_test_names_are_unique_and_dotted() -> None:
    names = [case.name for case in cases(VECTORS)]
    assert len(names) == len(set(names))
    for name in names:
        assert re.fullmatch(r"Required\.[a-z-]+(\.[a-z]+)?\.v[1-9][0-9]*\.[A-Za-z0-9_]+(\.Encode)?", name), name


def test_vector_files_round_trip_through_the_loader(tmp_path: Path) -> None:
    data = b"\x01" + b"\x00" * 100 + b"\x02"
    doc = vector_document("Sample", "one line", data, {"reject": "truncated"}, {"chunk_size": 8})
    assert doc["input"] == ["01", {"repeat": "00", "times": 100}, "02"]
    path = tmp_path / "fmt" / "v2" / "Sample.json"
    path.parent.mkdir(parents=True)
    path.write_text(vector_file_text(doc), encoding="utf-8")
    (vector,) = load_corpus(tmp_path)
    assert (vector.format, vector.version, vector.data, vector.params) == ("fmt", 2, data, {"chunk_size": 8})
    assert vector.test_name == "Required.fmt.v2.Sample"
    path.unlink()
    write = write_vector_document("WriteBad", "one line", {"b": [1], "a": True}, "write-type")
    (path.parent / "WriteBad.json").write_text(vector_file_text(write), encoding="utf-8")
    (vector,) = load_corpus(tmp_path)
    assert (vector.value, vector.data, vector.accepted) == ('{"a":true,"b":[1]}', b"", None)
    assert [case.request.op for case in cases([vector])] == ["encode"]


@pytest.mark.parametrize(
    ("doc", "complaint"),
    [
        ({"name": "Other", "description": "d", "input": "", "expect": {"reject": "truncated"}}, "stem"),
        ({"name": "Bad", "description": "two\nlines", "input": "", "expect": {"reject": "truncated"}}, "one non-empty line"),
        ({"name": "Bad", "description": "d", "input": "zz", "expect": {"reject": "truncated"}}, "not hex"),
        ({"name": "Bad", "description": "d", "input": "", "expect": {"reject": "nonsense"}}, "unknown error kind"),
        ({"name": "Bad", "description": "d", "input": "", "expect": {"either": [{"reject": "limit"}]}}, "at least two"),
        ({"name": "Bad", "description": "d", "input": "", "expect": {"reject": "limit"}, "extra": 1}, "optionally params"),
        ({"name": "Bad", "description": "d", "input": "", "value": 1, "expect": {"reject": "write-type"}}, "input or value"),
        ({"name": "Bad", "description": "d", "value": 1, "expect": {"reject": "limit"}}, "write vector"),
        ({"name": "Bad", "description": "d", "input": "", "expect": {"reject": "write-type"}}, "unknown error kind"),
    ],
)
def test_malformed_vectors_are_harness_errors(tmp_path: Path, doc: dict[str, object], complaint: str) -> None:
    path = tmp_path / "fmt" / "v1" / "Bad.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(HarnessError, match=complaint):
        load_corpus(tmp_path)


# -- the protocol ----------------------------------------------------------------------------------------


def test_protocol_messages_round_trip() -> None:
    stream = io.BytesIO()
    request = Request("decode", "shm-descriptor", 1, b"\x00\xff", {"chunk_size": 4096})
    write_request(stream, request)
    stream.seek(0)
    assert read_request(stream) == request
    assert read_request(stream) is None
    stream = io.BytesIO()
    write_response(stream, Response("reject", kind="truncated", message="m"))
    stream.seek(0)
    assert read_response(stream) == Response("reject", kind="truncated", message="m")


@pytest.mark.parametrize(
    "raw",
    [
        b"\x01\x00",  # cut inside a length
        (MAX_FRAME + 1).to_bytes(4, "little"),  # oversized frame
        b"\x02\x00\x00\x00{}" + b"\x00\x00\x00\x00",  # no result
        b'\x14\x00\x00\x00{"result":"reject"} ' + b"\x00\x00\x00\x00",  # reject without a kind
        b'\x13\x00\x00\x00{"result":"accept"}',  # no payload frame
        b"\x04\x00\x00\x00nope\x00\x00\x00\x00",  # not JSON
    ],
)
def test_malformed_responses_are_harness_errors(raw: bytes) -> None:
    with pytest.raises(HarnessError):
        read_response(io.BytesIO(raw))


# -- the runner and the testees --------------------------------------------------------------------------


def _run_cli(*args: str, cwd: Path | None = None) -> tuple[int, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-m", "inert", "conformance", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    lines = proc.stdout.splitlines()
    assert proc.stderr == "", proc.stderr
    return proc.returncode, lines


def _summary(lines: list[str]) -> tuple[int, int]:
    match = SUMMARY_RE.match(lines[-1])
    assert match, lines[-5:]
    return int(match.group(1)), int(match.group(2))


def _counts_of(lines: list[str], group: str) -> dict[str, int]:
    (line,) = [line for line in lines if line.startswith(group + ":")]
    return {status: int(n) for n, status in re.findall(r"(\d+) ([a-z ]+?)(?:,|$)", line.split(": ", 1)[1])}


N_DECODE = sum(v.value is None for v in VECTORS)
N_ENCODE = sum(case.request.op == "encode" for case in cases(VECTORS))
#: What the C reader answers: it decodes the shm formats and nothing else.
N_SHM_DECODE = sum(v.format in SHM_FORMATS and v.value is None for v in VECTORS)


@pytest.mark.parametrize("testee", ["inert-generated", "inert-construct"])
def test_python_testees_pass_the_whole_corpus(testee: str) -> None:
    failure_list = FAILURE_LISTS / f"{testee.replace('-', '_')}.txt"
    code, lines = _run_cli("--testee", testee, "--failure-list", str(failure_list))
    passed, failed = _summary(lines)
    known = len(read_failure_list(failure_list))
    assert (code, failed) == (0, 0), "\n".join(lines[-20:])
    assert passed == N_DECODE + N_ENCODE - known
    for fmt in SHM_FORMATS:
        assert _counts_of(lines, f"{fmt} v1")["unsupported"] == 0


@pytest.fixture(scope="module")
def c_reader(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The independent C reader, built with the sanitizers so that a memory error fails the run."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "the conformance suite needs a C compiler for its independent reader"
    binary = tmp_path_factory.mktemp("c") / "shm_reader"
    flags = ["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    subprocess.run([compiler, *flags, "-o", str(binary), str(C_SOURCE)], check=True, timeout=120)
    return str(binary)


def test_c_reader_passes_every_decode_vector_of_the_shm_formats(c_reader: str) -> None:
    code, lines = _run_cli("--testee", c_reader, "--failure-list", str(FAILURE_LISTS / "shm_reader_c.txt"))
    assert code == 0, "\n".join(lines[-20:])
    assert _summary(lines) == (N_SHM_DECODE, 0)
    # It decodes only, and only the shm formats: everything else is unsupported, never failed.
    assert f"{N_ENCODE + N_DECODE - N_SHM_DECODE} unsupported, 0 known failures (not counted)" in lines


def test_protocol_document_names_every_error_kind() -> None:
    text = (CONFORMANCE / "PROTOCOL.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z-]+)` \|", text, re.MULTILINE))
    assert set(ERROR_CLASSES) - {"invalid"} <= documented  # "invalid" is the family's root, never a vector's answer


def test_format_option_selects_one_format(c_reader: str) -> None:
    code, lines = _run_cli("--testee", c_reader, "--format", "shm-descriptor")
    assert code == 0
    assert [line.split(":")[0] for line in lines if line.endswith("known failures")] == ["shm-descriptor v1", "shm-descriptor v2"]
    assert _summary(lines) == (sum(v.format == "shm-descriptor" and v.value is None for v in VECTORS), 0)


def test_a_known_failure_that_now_passes_fails_the_run(c_reader: str, tmp_path: Path) -> None:
    listed = tmp_path / "list.txt"
    listed.write_text("# comment\nRequired.shm-descriptor.v1.Representative\nRequired.shm-descriptor.v1.NoSuchVector\n")
    code, lines = _run_cli("--testee", c_reader, "--format", "shm-descriptor", "--failure-list", str(listed))
    assert code == 1
    assert any("Representative: passes but is in the failure list" in line for line in lines)
    assert any("NoSuchVector: no such test in the corpus" in line for line in lines)
    assert _summary(lines)[1] == 2


_LENIENT_TESTEE = """
import re
import inert._checks as checks
# A reader with a known deviation: it also takes a leading zero in a dtype's itemsize ("<f08").
checks._DTYPE_RE = re.compile(r"([<>|])([biufc])([0-9]{1,2})\\Z")
checks.ITEMSIZE["<f08"] = 8  # the generated readers' quick test of the rule
from inert.conformance.testees import inert_generated
from inert.conformance.testees._serve import serve
serve((inert_generated.decode, inert_generated.encode))
"""


def test_a_listed_failure_is_reported_but_not_counted(tmp_path: Path) -> None:
    script = tmp_path / "lenient_testee.py"
    script.write_text(_LENIENT_TESTEE)
    testee = [sys.executable, str(script)]
    listed = tmp_path / "lenient.txt"
    listed.write_text("Required.shm-samples-meta.v1.DtypeRefusedLeadingZero\n")
    report = run(testee, ["shm-samples-meta"], read_failure_list(listed))
    known = [r for r in report.results if r.status == KNOWN]
    assert [r.name for r in known] == ["Required.shm-samples-meta.v1.DtypeRefusedLeadingZero"]
    assert "expected reject invalid-value by rule shm-samples-meta.dtype, got accept" in known[0].detail
    assert report.ok
    unlisted = run(testee, ["shm-samples-meta"])
    assert not unlisted.ok and unlisted.count(FAIL) == 1


def _small_corpus(root: Path) -> Path:
    docs = [
        vector_document("Good", "a descriptor", bytes(8) + (16).to_bytes(8, "little") + bytes(16), {"accept": {}}),
        vector_document("Short", "a cut descriptor", b"\x00", {"reject": "truncated"}),
    ]
    for doc in docs:
        path = root / "shm-descriptor" / "v1" / f"{doc['name']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(vector_file_text(doc), encoding="utf-8")
    return root


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "testee.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("import sys; sys.exit(3)\n", "exit status 3"),
        ("import sys; sys.stderr.write('boom\\n'); sys.stdin.buffer.read(4); sys.exit(0)\n", "boom"),
        ("import sys, time; sys.stdin.buffer.read(4); time.sleep(60)\n", "no response within 0.5 s"),
        (
            "import sys; sys.stdout.buffer.write(b'\\xff\\xff\\xff\\xff'); sys.stdout.flush(); sys.stdin.buffer.read()\n",
            "bad response",
        ),
        (
            """
            import sys
            from inert.conformance._protocol import Response, read_request, write_response
            while read_request(sys.stdin.buffer) is not None:
                write_response(sys.stdout.buffer, Response("accept", payload=b"{}"))
            """,
            "expected",
        ),
    ],
    ids=["exits", "dies-after-stderr", "hangs", "garbage", "wrong-answers"],
)
def test_broken_testees_fail_every_test_without_stopping_the_run(tmp_path: Path, body: str, reason: str) -> None:
    report = run(_script(tmp_path, body), corpus=_small_corpus(tmp_path / "corpus"), timeout=0.5)
    assert not report.ok
    assert [r.status for r in report.results if r.name.endswith("Short")] == [FAIL]
    assert all(r.status in (FAIL, PASS) for r in report.results)
    assert any(reason in r.detail for r in report.results), [r.detail for r in report.results]


def test_a_testee_that_stops_reading_neither_blocks_nor_is_asked_for_ever(tmp_path: Path) -> None:
    big = vector_document("Big", "a payload larger than any pipe buffer", b"\x01" * (4 << 20), {"reject": "unknown-tag"})
    path = tmp_path / "corpus" / "shm-message" / "v1" / "Big.json"
    path.parent.mkdir(parents=True)
    path.write_text(vector_file_text(big), encoding="utf-8")
    hangs = _script(tmp_path, "import time; time.sleep(60)\n")
    (result,) = run(hangs, corpus=tmp_path / "corpus", timeout=0.5).results
    assert result.status == FAIL and "no response within 0.5 s" in result.detail
    report = run(hangs, ["shm-descriptor"], timeout=0.1)
    assert report.results[-1].detail == f"not run: the testee faulted on the {MAX_FAULTS_IN_A_ROW} requests before"
    assert report.count(FAIL) == len(report.results)


def test_a_testee_that_supports_nothing_does_not_pass(tmp_path: Path) -> None:
    body = """
        import sys
        from inert.conformance._protocol import Response, read_request, write_response
        while read_request(sys.stdin.buffer) is not None:
            write_response(sys.stdout.buffer, Response("unsupported", message="no"))
        """
    report = run(_script(tmp_path, body), corpus=_small_corpus(tmp_path / "corpus"))
    assert report.count(UNSUPPORTED) == 3 and not report.ok
    out = io.StringIO()
    report.write(out)
    assert out.getvalue().splitlines()[-1] == "0 passed, 0 failed"


def test_report_ends_with_the_summary_line() -> None:
    out = io.StringIO()
    Report().write(out)
    assert out.getvalue() == "0 passed, 0 failed\n"


def test_unknown_format_and_missing_testee_are_usage_errors() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "inert", "conformance", "run", "--testee", "inert-generated", "--format", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("inert: conformance: the corpus holds no vector")
    proc = subprocess.run(
        [sys.executable, "-m", "inert", "conformance", "run", "--testee", "/nonexistent/testee"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "cannot start testee" in proc.stderr


# -- the coverage gate -----------------------------------------------------------------------------------

# Reader lines the corpus cannot reach, by module, function and a piece of the line, each with its
# reason.  An entry the corpus reaches (or that leaves the generated code) fails the gate, so the
# list never goes stale.
# (module, function, a fragment of the line): reader code no byte string can reach, or the line a
# branch no byte string can take leads to.  A fragment names what it quotes by the spec's names (the
# generator names a length after its record and field: len_TensorRecord_data), never by a numbered
# temporary, which a regeneration renumbers.
UNREACHABLE: set[tuple[str, str, str]] = {
    # The branch skipping an empty padding before a tensor payload: the tensor header (kind, dtype, ndim,
    # 8 bytes per dim, 8-byte length) is 11 + 8*ndim bytes, odd, from a 64-aligned record start, so the
    # padding is never empty in version 2's own union (version 1's body, _read_RecordBody, is dump-shard's
    # row fields' too, whose names before it make the padding empty at times).
    ("checkpoint_shard", "_read_ShardRecordV2", "if len_TensorRecord_data > n - off:"),
    # Version 2's ZSTD body: its header (kind, codec, inflated length, frame length) is 18 bytes.
    ("checkpoint_shard", "_read_ShardRecordV2", "if len_CompressedRecord_data > n - off:"),
}
# The accelerator's lines in decode: the coverage tool measures the Python readers (accelerator unbound);
# tests/test_accel.py runs these lines.
_ACCEL_LINES = ("= _ACCEL(buf", "if value is not None:", "return value")
UNREACHABLE |= {(fmt.replace("-", "_"), "decode", line) for fmt in ACCELERATED for line in _ACCEL_LINES}


def test_unreachable_entries_quote_no_numbered_temporary() -> None:
    numbered = [entry for entry in UNREACHABLE if re.search(r"\b[a-z]+\d+\b", entry[2])]
    assert not numbered, f"name these by the spec (a regeneration renumbers temporaries): {numbered}"


def _unreachable_entry(module: str, function: str, line: str) -> tuple[str, str, str]:
    for entry in UNREACHABLE:
        if entry[:2] == (module, function) and entry[2] in line:
            return entry
    raise AssertionError(f"the corpus never reaches {module}.{function}: {line}")


def test_corpus_alone_covers_every_generated_reader() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "inert.conformance._coverage", "--json"], capture_output=True, text=True, timeout=120, check=True
    )
    figures = json.loads(proc.stdout)
    reached_entries = set()
    for module, roles in figures.items():
        reader, writer = roles["reader"], roles["writer"]
        print(
            f"{module}: reader {reader['line_percent']:.1f}% lines, {reader['branch_percent']:.1f}% branches; "
            f"writer {writer['line_percent']:.1f}% lines, {writer['branch_percent']:.1f}% branches"
        )
        source = (CONFORMANCE.parent / "codecs" / f"{module}.py").read_text().splitlines()
        for function, line in reader["missing_lines"]:
            reached_entries.add(_unreachable_entry(module, function, source[line - 1]))
        # Every missed branch leads into a line listed above: no path is skipped silently.
        for function, _start, end in reader["missing_branches"]:
            assert end > 0, (module, function, _start, end)
            if function == "decode" and any(line in source[_start - 1] for line in _ACCEL_LINES):
                continue  # out of an accelerator line, itself listed above
            reached_entries.add(_unreachable_entry(module, function, source[end - 1]))
    assert {m for m in figures if m.startswith("shm_")} == {"shm_descriptor", "shm_message", "shm_samples_meta"}
    assert reached_entries == UNREACHABLE, f"no longer missed, remove from UNREACHABLE: {UNREACHABLE - reached_entries}"


# -- shipped in the wheel --------------------------------------------------------------------------------

# Files of inert/conformance/ that pyproject.toml does not ship yet: it needs "inert.conformance.testees" in
# [tool.setuptools] packages and "failure_lists/*.txt", "testees/c/*.c", "testees/c/Makefile" in the
# package data of "inert.conformance".  Once it does, this test fails until the set is emptied.
KNOWN_UNSHIPPED: set[str] = set()


def test_wheel_ships_the_suite_and_its_runner_works_outside_the_tree(tmp_path: Path, c_reader: str,
                                                                     built_wheel: Path) -> None:
    root = CONFORMANCE.parent
    listing = ["git", "ls-files", "--cached", "--others", "--exclude-standard", "conformance"]
    files = subprocess.run(listing, cwd=root, capture_output=True, text=True, check=True).stdout.splitlines()
    expected = {name.removeprefix("conformance/") for name in files if (root / name).is_file()}
    wheel = built_wheel  # the run's one wheel of a clean copy (tests/conftest.py)
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
        shipped = {n.removeprefix("inert/conformance/") for n in archive.namelist() if n.startswith("inert/conformance/")}
    assert expected - shipped == KNOWN_UNSHIPPED, f"unshipped now: {sorted(expected - shipped)}"

    env = {**os.environ, "PYTHONPATH": str(unpacked)}
    where = subprocess.run(
        [sys.executable, "-c", "import inert.conformance as c; print(c.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.stdout.startswith(str(unpacked)), where
    proc = subprocess.run(
        [sys.executable, "-m", "inert", "conformance", "run", "--testee", c_reader],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert _summary(proc.stdout.splitlines()) == (N_SHM_DECODE, 0)


def test_a_format_name_selects_its_parts_and_a_part_name_only_that_part() -> None:
    whole = {v.format for v in load_corpus(formats=["checkpoint-shard"])}
    assert whole == {"checkpoint-shard", "checkpoint-shard.record", "checkpoint-shard.inflated"}
    assert {v.format for v in load_corpus(formats=["checkpoint-shard.record"])} == {"checkpoint-shard.record"}
    listed = {"Required.checkpoint-shard.record.v1.Nope", "Required.shm-message.v1.Nope"}
    report = run([sys.executable, "-c", "pass"], ["checkpoint-shard.record"], listed, timeout=5.0)
    stale = [r.name for r in report.results if r.group == "failure list"]
    assert stale == ["Required.checkpoint-shard.record.v1.Nope"]  # the other format's entry is not judged here
