"""Which declared rule each vector pins: the bridge between the corpus and the spec's rules.

A refusing vector is traced by decoding it with the generated readers (the grammar's interpreter for a
version not generated yet) and matching
the refusal (error kind, field, reason) against the rules the format declares
(:meth:`inert.spec._grammar.Format.rules`): exactly one must match.  A vector that
names its rule (``"rule"`` in the file) must be traced to that rule.  Accepting
vectors pin the rules they name.  The spec's traceability table and the tests that
hold the spec and the readers together are built from this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inert._errors import InertError

from ._corpus import Vector, load_corpus
from ._rule_match import base_format, matching_rules

__all__ = ["Trace", "trace_corpus"]


@dataclass
class Trace:
    """Vector names by (format, rule id), for refusals and acceptances, and what could not be traced."""

    rejects: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    accepts: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    #: (test name, refusal message, ids of the rules that matched: none or several).
    untraced: list[tuple[str, str, list[str]]] = field(default_factory=list)


def _decode(vector: Vector) -> None:
    from inert.conformance.testees import inert_construct, inert_generated

    try:
        inert_generated._module(vector.format, vector.version)
    except LookupError:
        # A version the spec declares before `inert gen` has written its codec (docs/versioning.md: the
        # vectors come first): the grammar's own interpreter reads it, with the same rules.
        inert_construct.decode(vector.format, vector.version, vector.data, vector.params)
        return
    inert_generated.decode(vector.format, vector.version, vector.data, vector.params)


def trace_corpus(vectors: list[Vector] | None = None, formats: dict[str, Any] | None = None) -> Trace:
    """Trace every decode vector of the corpus to the rules of its format."""
    result = Trace()
    for vector in load_corpus() if vectors is None else vectors:
        if vector.value is not None:
            continue
        fmt = base_format(vector.format)
        if vector.accepted is not None:
            if vector.rule is not None:
                result.accepts.setdefault((fmt, vector.rule), []).append(vector.test_name)
            continue
        try:
            _decode(vector)
        except InertError as exc:
            matched = matching_rules(fmt, exc.kind, exc.field, exc.reason, formats)
            if len(matched) != 1 or (vector.rule is not None and matched != [vector.rule]):
                result.untraced.append((vector.test_name, str(exc), matched))
                continue
            result.rejects.setdefault((fmt, matched[0]), []).append(vector.test_name)
        else:
            continue  # an "either" vector the reader accepts: it pins no refusal
    return result
