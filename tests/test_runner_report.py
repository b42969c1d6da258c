"""The runner's report says what an implementer needs to act on a failure, without opening files."""

from __future__ import annotations

import argparse
import io
import re
import sys
from pathlib import Path

import pytest

from inert._errors import HarnessError
from inert.conformance._corpus import load_corpus
from inert.conformance._protocol import Response, read_frame
from inert.conformance._runner import FAIL, PASS, UNSUPPORTED, Report, Result, _mismatch, cases, list_command, path_command, run


def _vector(fmt: str, name: str):  # type: ignore[no-untyped-def]
    return next(v for v in load_corpus(formats=[fmt]) if v.name == name)


def test_a_failure_names_the_vector_its_description_and_the_rule_it_pins() -> None:
    vector = _vector("checkpoint-shard.record", "ValueMapKeyRepeated")
    report = Report([Result(vector.test_name, "g", FAIL, "expected reject invalid-value, got accept {}", vector)])
    out = io.StringIO()
    report.write(out, verbose=True)
    text = out.getvalue()
    assert "corpus/checkpoint-shard.record/v1/ValueMapKeyRepeated.json: the key 'a' twice" in text
    assert "rule: value.key-order" in text
    assert f'input: "{vector.data.hex()}"' in text


def test_verbose_input_is_the_corpus_repeat_form_never_megabytes_of_hex() -> None:
    vector = max(load_corpus(), key=lambda v: len(v.data))
    assert len(vector.data) > 100_000
    out = io.StringIO()
    Report([Result(vector.test_name, "g", FAIL, "x", vector)]).write(out, verbose=True)
    line = next(t for t in out.getvalue().splitlines() if "input:" in t)
    assert len(line) < 1000 and '"repeat"' in line


def test_text_on_the_testee_stdout_is_named_as_such() -> None:
    with pytest.raises(HarnessError, match="wrote text to stdout"):
        read_frame(io.BytesIO(b"hello world\n"))


def test_a_testee_printing_text_ends_the_run_with_one_error_naming_the_cause() -> None:
    """Not a "frame of 1819043176 bytes" per vector: the channel itself is wrong, said once."""
    testee = [sys.executable, "-c", "import sys; print('hello world', flush=True); sys.stdin.buffer.read()"]
    with pytest.raises(HarnessError) as raised:
        run(testee, formats=["shm-descriptor"])
    message = str(raised.value)
    assert message.startswith("the testee wrote text to stdout (b'hell'...); frames must be the only bytes"), message
    assert "print anything else to stderr" in message and "1819043176" not in message


def test_verbose_says_how_much_is_left_out() -> None:
    vector = max(load_corpus(), key=lambda v: len(v.data))
    out = io.StringIO()
    Report([Result(vector.test_name, "g", FAIL, "x", vector)]).write(out, verbose=True)
    line = next(t for t in out.getvalue().splitlines() if "input:" in t)
    assert re.search(r"\.\.\. \(\d+ more characters left out\)$", line) or len(line) < 300, line


def test_an_unknown_format_name_gets_a_suggestion() -> None:
    with pytest.raises(HarnessError, match="did you mean checkpoint-shard"):
        run([sys.executable, "-c", "0"], formats=["checkpoint-shrd"])


def test_the_rule_of_a_vector_that_names_none_is_traced() -> None:
    vector = _vector("shm-descriptor", next(v.name for v in load_corpus(formats=["shm-descriptor"])
                                             if v.accepted is None and v.value is None and "Beyond" in v.name))
    out = io.StringIO()
    Report([Result(vector.test_name, "g", FAIL, "x", vector)]).write(out)
    assert "rule: shm-descriptor.inside" in out.getvalue()
    assert "input:" not in out.getvalue()  # hex only with --verbose


def test_long_values_are_shown_as_their_first_difference_never_cut_silently() -> None:
    vector = _vector("checkpoint-shard.record", "ValueMap16Min")
    (decode, *_) = cases([vector])
    expected = decode.outcomes[0].text
    got = expected[:100] + "X" + expected[101:] + "TAIL" * 100
    detail = _mismatch(decode, Response("accept", got.encode()))
    assert "differ at character 100" in detail and f"expected {len(expected)} characters, got {len(got)}" in detail
    assert expected[60:100] in detail and "X" in detail
    short = _mismatch(decode, Response("reject", kind="limit"))
    assert short.startswith("expected accept") and short.endswith("got reject limit")


def test_list_names_each_format_and_version_and_path_is_the_corpus() -> None:
    out = io.StringIO()
    assert list_command(argparse.Namespace(), out) == 0
    assert "checkpoint-shard.record v1: " in out.getvalue() and "shm-descriptor v1: " in out.getvalue()
    out = io.StringIO()
    assert path_command(argparse.Namespace(), out) == 0
    assert Path(out.getvalue().strip(), "checkpoint-shard.record", "v1").is_dir()


def test_the_example_testee_uses_only_the_public_protocol_and_passes_what_it_supports() -> None:
    from inert.conformance.testees import example

    source = Path(example.__file__).read_text(encoding="utf-8")
    assert "._" not in source.replace("__future__", "").replace("__main__", "").replace("__name__", "")
    report = run([sys.executable, "-m", "inert.conformance.testees.example"], formats=["shm-descriptor", "shm-message"])
    assert report.count(PASS) > 100 and report.count(FAIL) == 0
    assert report.count(UNSUPPORTED) > 100
