"""Refusals pinned by their rule: every refusing vector names one, testees may report it, the runner compares it.

A reader that skips a rule and refuses the same bytes by a later rule of the same kind (a shape whose byte
count overflows, refused instead for its payload length) answers with the right kind: only the rule tells.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from inert._errors import HarnessError
from inert.conformance._corpus import load_corpus, vector_document, vector_file_text
from inert.conformance._protocol import Request, Response
from inert.conformance._runner import FAIL, PASS, run
from inert.conformance._testee import Testee as RunningTestee
from inert.conformance._testee import resolve_testee
from inert.conformance.testees.rule_ids import rule_of_message

VECTORS = load_corpus()


def test_every_refusing_byte_vector_names_its_rule() -> None:
    unnamed = [v.test_name for v in VECTORS if v.value is None and len(v.outcomes) == 1
               and v.outcomes[0].result == "reject" and v.rule is None]
    assert not unnamed, unnamed[:10]


def test_the_masked_vectors_name_the_rule_they_pin() -> None:
    rules = {v.test_name: v.rule for v in VECTORS}
    assert rules["Required.checkpoint-metadata.v1.SizeDimensionHuge"] == "checkpoint-metadata.size-dimension"
    assert rules["Required.dump-manifest.v1.RowInTwoShards"] == "dump-manifest.row-once"
    overflow = [v for v in VECTORS if v.rule == "tensor.shape-overflow" and v.format == "checkpoint-shard.record"]
    assert overflow, "no vector pins tensor.shape-overflow"


@pytest.mark.parametrize("testee", ["inert-generated", "inert-construct"])
def test_the_python_testees_report_the_rule_of_every_refusal(testee: str) -> None:
    refusing = [v for v in VECTORS if v.rule and v.value is None and v.accepted is None][::7]
    with RunningTestee(resolve_testee(testee)) as running:
        for vector in refusing:
            response = running.ask(Request("decode", vector.format, vector.version, vector.data, vector.params))
            if response.result == "reject":
                assert response.rule == vector.rule, (vector.test_name, response.describe())


def _corpus(root: Path) -> Path:
    """One vector refused by tensor.shape-overflow: 2**62 x 8 float64 elements, a payload far too short."""
    vector = next(v for v in VECTORS if v.rule == "tensor.shape-overflow" and v.format == "checkpoint-shard.record")
    doc = vector_document(vector.name, vector.description, vector.data, {"reject": "invalid-value"}, rule=vector.rule)
    path = root / vector.format / f"v{vector.version}" / f"{vector.name}.json"
    path.parent.mkdir(parents=True)
    path.write_text(vector_file_text(doc), encoding="utf-8")
    return root


def _refusing(tmp_path: Path, rule: str) -> list[str]:
    """A testee refusing everything as invalid-value, naming ``rule`` (or none)."""
    path = tmp_path / "testee.py"
    path.write_text(textwrap.dedent(f"""
        import sys
        from inert.conformance._protocol import Response, read_request, write_response
        while read_request(sys.stdin.buffer) is not None:
            write_response(sys.stdout.buffer, Response("reject", kind="invalid-value", rule={rule!r}))
        """))
    return [sys.executable, str(path)]


@pytest.mark.parametrize(("rule", "status"), [("tensor.shape-overflow", PASS), ("", PASS), ("tensor.length", FAIL)],
                         ids=["same-rule", "kind-only", "masked-rule"])
def test_the_runner_compares_the_rule_when_the_testee_names_one(tmp_path: Path, rule: str, status: str) -> None:
    (result,) = run(_refusing(tmp_path, rule), corpus=_corpus(tmp_path / "corpus")).results
    assert result.status == status, result.detail
    if status == FAIL:
        assert result.detail.startswith("expected reject invalid-value by rule tensor.shape-overflow, "
                                        "got reject invalid-value by rule tensor.length"), result.detail


def test_a_rule_on_a_response_that_is_no_refusal_is_a_protocol_fault() -> None:
    import io

    from inert.conformance._protocol import read_response, write_response

    stream = io.BytesIO()
    write_response(stream, Response("accept", payload=b"{}", rule="grammar.truncated"))
    stream.seek(0)
    with pytest.raises(HarnessError, match="only a reject response names a rule"):
        read_response(stream)


@pytest.mark.parametrize(
    ("fmt", "kind", "message", "rule"),
    [
        ("shm-descriptor", "truncated", "shm-descriptor: offset 0: worker_id: 8 bytes needed, 0 present",
         "grammar.truncated"),
        ("checkpoint-shard.record", "invalid-value",
         "checkpoint-shard: offset 3: body.shape: tensor.shape-overflow: The element count times ...",
         "tensor.shape-overflow"),
        ("checkpoint-shard.record", "limit",  # a rule id of another kind is not taken
         "checkpoint-shard: offset 3: body.shape: tensor.shape-overflow: The element count times ...", ""),
        ("shm-descriptor", "truncated", "not worded as Inert words it", ""),
        ("no-such-format", "truncated", "no-such-format: offset 0: x: 8 bytes needed, 0 present", ""),
    ],
)
def test_rule_ids_names_the_rule_of_a_message(fmt: str, kind: str, message: str, rule: str) -> None:
    assert rule_of_message(fmt, kind, message) == rule


def test_writers_refuse_base64_that_is_not_canonical_as_write_type() -> None:
    names = {v.name for v in VECTORS if v.format == "checkpoint-shard.record" and v.name.startswith("WriteBase64")}
    assert names == {"WriteBase64Unpadded", "WriteBase64NonZeroPadBits", "WriteBase64LineBreak",
                     "WriteBase64UrlAlphabet"}
    with RunningTestee(resolve_testee("inert-generated")) as running:
        response = running.ask(Request("encode", "shm-message", 1, b'{"$bytes": "QQ"}'))
        assert (response.result, response.kind) == ("reject", "write-type"), response.describe()
        assert "not a valid spelling" in response.message
