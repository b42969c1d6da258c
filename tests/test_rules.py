"""The spec's declared rules and the readers agree, in both directions.

* Every refusal of every generated reader over the conformance corpus is traced to exactly one
  rule the format declares (by kind, field and reason).  The corpus reaches every line and branch
  of every generated reader (``test_corpus_alone_covers_every_generated_reader``), so no refusal
  path is left without a rule.
* Every declared rule of every format has a refusing vector in that format's corpus.
* A vector that names its rule is traced to that rule.
"""

from __future__ import annotations

import re

import pytest

from inert.conformance._trace import Trace, trace_corpus
from inert.spec import FORMATS
from inert.spec._rules import ELEMENT_RULES, FILE_RULES, VALUE_RULES, SpecRule

KINDS = {"truncated", "trailing-bytes", "limit", "unknown-tag", "invalid-value", "checksum", "version", "foreign-format"}


@pytest.fixture(scope="module")
def trace() -> Trace:
    return trace_corpus()


def test_every_refusal_of_the_corpus_is_one_declared_rule(trace: Trace) -> None:
    assert not trace.untraced, "\n".join(f"{name}: {message} (rules matched: {ids})" for name, message, ids in trace.untraced)


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_declared_rule_has_a_refusing_vector(trace: Trace, name: str) -> None:
    missing = [rule.id for rule in FORMATS[name].rules() if (name, rule.id) not in trace.rejects]
    assert not missing, f"{name}: rules without a refusing vector: {missing}"


def test_a_trace_with_an_undeclared_refusal_fails() -> None:
    from inert.conformance._corpus import load_corpus

    vectors = [v for v in load_corpus(formats=["shm-descriptor"]) if v.accepted is None and v.value is None]
    stripped = {name: _Without(fmt, "shm-descriptor.inside") for name, fmt in FORMATS.items()}
    result = trace_corpus(vectors, stripped)
    assert any("beyond the capacity" in message for _, message, _ in result.untraced)


class _Without:
    """A format whose rules lack one: what the trace sees if a reader refuses more than the spec says."""

    def __init__(self, fmt: object, rule_id: str) -> None:
        self.fmt, self.rule_id = fmt, rule_id

    def rules(self) -> tuple[SpecRule, ...]:
        return tuple(r for r in self.fmt.rules() if r.id != self.rule_id)  # type: ignore[attr-defined]


def _all_rules() -> list[SpecRule]:
    rules = [r for group in ELEMENT_RULES.values() for r in group] + [*FILE_RULES, *VALUE_RULES]
    for fmt in FORMATS.values():
        rules.extend(fmt.declared)
    return rules


def test_rules_are_data_a_generator_can_read() -> None:
    seen: dict[str, SpecRule] = {}
    for rule in _all_rules():
        assert re.fullmatch(r"[a-z0-9-]+\.[a-z0-9-]+", rule.id), rule.id
        assert seen.get(rule.id, rule) == rule, f"{rule.id} declared twice differently"
        seen[rule.id] = rule
        assert rule.kind in KINDS, rule
        assert rule.sentence[0].isupper() and rule.sentence.endswith("."), rule.sentence
        assert rule.check and rule.field is not None
        re.compile(rule.reason)
