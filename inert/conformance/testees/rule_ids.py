"""A testee in front of another whose refusal messages use Inert's wording: it adds the rule id of each refusal.

``python -m inert.conformance.testees.rule_ids CMD [ARG ...]`` starts ``CMD`` and passes every request to it
and every response back.  A refusal that names no rule but whose message reads
``<format>: offset N: <field>: <reason>`` (as Inert's readers in every language word it) gets the id of the
one declared rule that kind, field and reason match (``inert/conformance/_trace.py``), so the runner compares the
rule and not only the kind.  The generated C readers' testee (``c/testee.c``) is run through it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace

from inert._errors import HarnessError

from .._protocol import Response, read_request, read_response, write_request, write_response
from .._rule_match import base_format, declared_rules, matching_rules

__all__ = ["rule_of_message"]

_MESSAGE = re.compile(r"(?P<format>[^:]+): offset -?\d+: (?P<field>.*?): (?P<reason>.*)\Z", re.S)
_NAMED = re.compile(r"(?P<rule>[a-z0-9-]+\.[a-z0-9-]+): ")


def rule_of_message(fmt: str, kind: str, message: str) -> str:
    """The one rule of ``fmt`` a refusal worded as Inert's readers word it matches ("" for none or several)."""
    match = _MESSAGE.match(message)
    if match is None:
        return ""
    field, reason = ("" if match["field"] == "<root>" else match["field"]), match["reason"]
    try:
        named = _NAMED.match(reason)
        if named is not None and named["rule"] in _ids_of_kind(base_format(fmt), kind):
            return named["rule"]  # the C readers word a declared rule's refusal as "<rule id>: <sentence>"
        matched = matching_rules(fmt, kind, field, reason)
    except KeyError:  # a format the spec does not declare
        return ""
    return matched[0] if len(matched) == 1 else ""


def _ids_of_kind(fmt: str, kind: str) -> set[str]:
    return {rule.id for rule in declared_rules(fmt) if rule.kind == kind}


def _with_rule(fmt: str, response: Response) -> Response:
    if response.result != "reject" or response.rule:
        return response
    return replace(response, rule=rule_of_message(fmt, response.kind, response.message))


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m inert.conformance.testees.rule_ids CMD [ARG ...]", file=sys.stderr)
        return 2
    inner = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert inner.stdin is not None and inner.stdout is not None
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        while (request := read_request(stdin)) is not None:
            write_request(inner.stdin, request)
            write_response(stdout, _with_rule(request.format, read_response(inner.stdout)))
    except (HarnessError, OSError) as exc:  # the inner testee died or broke the protocol: so does this one
        print(f"rule_ids: {exc}", file=sys.stderr)
        inner.kill()
        return 1
    inner.stdin.close()
    return inner.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
