"""The conformance runner: sends every vector to a testee and judges its answers.

``inert conformance run --testee CMD [--format NAME] [--failure-list FILE]``.
For each vector the testee decodes the input; a vector whose only outcome is
accept also asks it to encode the expected value back to the input bytes (test
name suffix ``.Encode``).  A testee may answer ``unsupported``: such tests are
counted apart, neither passed nor failed.

A failure list names tests known to fail, one per line (``#`` starts a
comment).  A listed test that fails is reported but not counted as failed; a
listed test that passes, or a listed name the corpus does not hold, fails the
run, so lists never go stale.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from inert._errors import HarnessError

from ._corpus import CORPUS_DIR, Outcome, Vector, _input_parts, canonical_text, load_corpus
from ._protocol import Request, Response
from ._testee import BUILTIN_TESTEES, Testee, TesteeFault, resolve_testee

__all__ = ["Case", "Result", "Report", "add_arguments", "cases", "first_difference", "read_failure_list", "run", "run_command",
           "main"]

PASS, FAIL, UNSUPPORTED, KNOWN = "passed", "failed", "unsupported", "known failures"
#: After this many faults in a row (a testee that dies or hangs at once) the rest of the run is not asked.
MAX_FAULTS_IN_A_ROW = 20


@dataclass(frozen=True)
class Case:
    """One test: a request and the outcomes that pass it."""

    name: str
    vector: Vector
    request: Request
    outcomes: tuple[Outcome, ...]

    @property
    def group(self) -> str:
        return f"{self.vector.format} v{self.vector.version}"


@dataclass(frozen=True)
class Result:
    name: str
    group: str
    status: str
    detail: str = ""
    #: The vector the test comes from (None for a failure-list entry the corpus lacks).
    vector: Vector | None = None


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def ok(self) -> bool:
        return self.count(FAIL) == 0 and self.count(PASS) > 0

    def write(self, out: TextIO, verbose: bool = False) -> None:
        """The report: per group its counts, then each failure with its vector file, description, the
        rule it pins, expected versus got (and with ``verbose`` the input bytes in hex)."""
        groups: dict[str, list[Result]] = {}
        for result in self.results:
            groups.setdefault(result.group, []).append(result)
        for group, results in groups.items():
            counts = {s: sum(r.status == s for r in results) for s in (PASS, FAIL, UNSUPPORTED, KNOWN)}
            print(f"{group}: " + ", ".join(f"{n} {s}" for s, n in counts.items()), file=out)
            for r in results:
                if r.status in (FAIL, KNOWN):
                    print(f"  {'FAIL' if r.status == FAIL else 'known'} {r.name}: {r.detail}", file=out)
                    if r.vector is not None:
                        _explain(r.vector, out, verbose)
        if self.count(UNSUPPORTED) or self.count(KNOWN):
            print(f"{self.count(UNSUPPORTED)} unsupported, {self.count(KNOWN)} known failures (not counted)", file=out)
        print(f"{self.count(PASS)} passed, {self.count(FAIL)} failed", file=out)


def _explain(vector: Vector, out: TextIO, verbose: bool) -> None:
    print(f"    vector: corpus/{vector.format}/v{vector.version}/{vector.name}.json: {vector.description}", file=out)
    rule = vector.rule or _traced_rule(vector)
    if rule:
        print(f"    rule: {rule} (docs/spec: the rules of {vector.format.split('.')[0]})", file=out)
    if verbose:
        label = "value" if vector.value is not None else "input"
        # The corpus's own form (runs of one byte folded into repeats), shortened: never megabytes of hex.
        text = vector.value if vector.value is not None else json.dumps(_input_parts(vector.data))
        print(f"    {label}: {_shorten(str(text))}", file=out)


def _traced_rule(vector: Vector) -> str | None:
    """The rule Inert's own readers refuse the vector by (None for an accepting vector, or without the spec)."""
    if vector.value is not None or vector.accepted is not None:
        return None
    try:
        from ._trace import trace_corpus
    except ImportError:  # pragma: no cover - the spec extra (Construct) is not installed
        return None
    trace = trace_corpus([vector])
    return next((rule for (_, rule) in trace.rejects), None)


def _without_crc32(text: str) -> str:
    """The value an encode test sends: the writer computes a top-level ``crc32`` (PROTOCOL.md), so an even one is
    left out (it is not required) and an odd one replaced by its complement (a given one is ignored)."""
    value = json.loads(text)
    if not isinstance(value, dict) or not isinstance(value.get("crc32"), int):
        return text
    crc = value.pop("crc32")
    if crc % 2:
        value["crc32"] = crc ^ 0xFFFFFFFF
    return canonical_text(value)


def cases(vectors: Iterable[Vector]) -> Iterator[Case]:
    """The tests of each vector: decode it (and encode its value back when it must be accepted), or encode a refused value."""
    for v in vectors:
        if v.value is not None:
            yield Case(v.test_name, v, Request("encode", v.format, v.version, v.value.encode("utf-8")), v.outcomes)
            continue
        yield Case(v.test_name, v, Request("decode", v.format, v.version, v.data, v.params), v.outcomes)
        accepted = v.accepted
        # A reader told to skip its checksums accepts bytes that are no value's encoding: nothing to encode back.
        if accepted is not None and v.params.get("verify_checksums") is not False:
            request = Request("encode", v.format, v.version, _without_crc32(accepted.text).encode("utf-8"))
            yield Case(v.test_name + ".Encode", v, request, (Outcome("accept", text=v.data.hex()),))


def _matches(case: Case, response: Response) -> bool:
    for outcome in case.outcomes:
        if outcome.result != response.result:
            continue
        if outcome.result == "reject" and outcome.kind == response.kind:
            # The rule is compared when both sides name one: a rule masked by another of the same kind shows.
            return not (case.vector.rule and response.rule) or case.vector.rule == response.rule
        if outcome.result == "accept":
            got = response.payload.hex() if case.request.op == "encode" else response.payload.decode("utf-8", "replace")
            if got == outcome.text:
                return True
    return False


def _expected(case: Case) -> str:
    expected = " or ".join(o.describe() for o in case.outcomes)
    refused = [o for o in case.outcomes if o.result == "reject"]
    return expected + (f" by rule {case.vector.rule}" if refused and case.vector.rule else "")


def _judge(case: Case, testee: Testee) -> tuple[str, str]:
    try:
        response = testee.ask(case.request)
    except TesteeFault as fault:
        return FAIL, f"{fault}; expected {_expected(case)}"
    if response.result == "unsupported":
        return UNSUPPORTED, response.message
    if _matches(case, response):
        return PASS, ""
    return FAIL, _mismatch(case, response)


def first_difference(testee_argv: list[str], tests: Iterable[Case], timeout: float = 10.0) -> Result | None:
    """The first of ``tests`` the testee does not pass (failed or unsupported), or None when it passes them all:
    tells a deviation from a reader apart without asking the rest (the mutation check)."""
    with Testee(testee_argv, timeout=timeout) as testee:
        for case in tests:
            status, detail = _judge(case, testee)
            if status != PASS:
                return Result(case.name, case.group, status, detail, case.vector)
    return None


#: Values longer than this are shown as the difference around their first differing character.
_SHOWN = 160


def _mismatch(case: Case, response: Response) -> str:
    """Expected versus got, in full when short; for long values the first difference with context."""
    wanted = [o for o in case.outcomes if o.result == "accept"]
    if response.result != "accept" or not wanted:
        got = response.describe() if response.result != "accept" else f"accept {_shorten(_payload_text(case, response))}"
        return f"expected {_expected(case)}, got {got}"
    expected, got = wanted[0].text or "", _payload_text(case, response)
    if len(expected) <= _SHOWN and len(got) <= _SHOWN:
        return f"expected accept {expected}, got accept {got}"
    at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), min(len(expected), len(got)))
    start = max(0, at - 40)
    what = "bytes (hex)" if case.request.op == "encode" else "canonical JSON"
    return (f"expected accept, got another value: the {what} differ at character {at} "
            f"(expected {len(expected)} characters, got {len(got)}): "
            f"expected ...{expected[start:at + 60]}..., got ...{got[start:at + 60]}...")


def _payload_text(case: Case, response: Response) -> str:
    return response.payload.hex() if case.request.op == "encode" else response.payload.decode("utf-8", "replace")


def _shorten(text: str) -> str:
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text) - _SHOWN} more characters left out)"


def read_failure_list(path: Path) -> set[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise HarnessError(f"{path}: {exc.strerror}") from None
    return {line.split("#", 1)[0].strip() for line in lines} - {""}


def _formats_of(name: str) -> set[str]:
    """The format (``checkpoint-shard.record``) and base format (``checkpoint-shard``) a test name belongs to."""
    match = re.match(r"Required\.(([^.]+)(\.[^.]+)?)\.v\d+\.", name)
    return set() if match is None else {match.group(1), match.group(2)}


def run(
    testee_argv: list[str],
    formats: Iterable[str] | None = None,
    failure_list: set[str] | frozenset[str] = frozenset(),
    corpus: Path = CORPUS_DIR,
    timeout: float = 10.0,
) -> Report:
    """Run the corpus (or the vectors of ``formats``) against one testee."""
    selected = None if formats is None else set(formats)
    vectors = load_corpus(corpus, selected)
    if selected is not None and not vectors:
        known = {f for v in load_corpus(corpus) for f in (v.format, v.format.split(".")[0])}
        hints = [m for name in sorted(selected - known) for m in difflib.get_close_matches(name, sorted(known), n=1)]
        hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
        raise HarnessError(f"the corpus holds no vector of {sorted(selected)}{hint}")
    report = Report()
    seen = set()
    with Testee(testee_argv, timeout=timeout) as testee:
        for case in cases(vectors):
            seen.add(case.name)
            if testee.consecutive_faults >= MAX_FAULTS_IN_A_ROW:
                status, detail = FAIL, f"not run: the testee faulted on the {MAX_FAULTS_IN_A_ROW} requests before"
            else:
                status, detail = _judge(case, testee)
            if case.name in failure_list:
                if status == PASS:
                    status, detail = FAIL, "passes but is in the failure list: remove it from the list"
                elif status == FAIL:
                    status = KNOWN
            report.results.append(Result(case.name, case.group, status, detail, case.vector))
    for name in sorted(failure_list - seen):
        if selected is None or _formats_of(name) & selected:
            report.results.append(Result(name, "failure list", FAIL, "no such test in the corpus: remove it from the list"))
    return report


def _parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    builtins = ", ".join(sorted(BUILTIN_TESTEES))
    parser.add_argument(
        "--testee", required=True, help=f"command that speaks the testee protocol, or a built-in name ({builtins})"
    )
    parser.add_argument("--format", action="append", dest="formats", metavar="NAME",
                        help="run only this format and its parts (repeatable; a part, e.g. checkpoint-shard.record, alone)")
    parser.add_argument("--failure-list", type=Path, help="file of test names known to fail, one per line")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each response (default 10)")
    parser.add_argument("--verbose", action="store_true", help="print each failing vector's input bytes in hex")
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR, help=argparse.SUPPRESS)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the options of ``inert conformance run`` on ``parser``."""
    _parser(parser)


def run_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """``inert conformance run``: print the report; 0 when every test passed, 1 otherwise."""
    failures = read_failure_list(args.failure_list) if args.failure_list else set()
    report = run(resolve_testee(args.testee), args.formats, failures, args.corpus, args.timeout)
    print(f"testee: {args.testee}", file=out)
    report.write(out, verbose=getattr(args, "verbose", False))
    out.flush()
    return 0 if report.ok else 1


def list_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """``inert conformance list``: each format and version in the corpus with its vector count."""
    counts: dict[tuple[str, int], int] = {}
    for v in load_corpus(CORPUS_DIR):
        counts[v.format, v.version] = counts.get((v.format, v.version), 0) + 1
    for (fmt, version), n in sorted(counts.items()):
        print(f"{fmt} v{version}: {n} vectors", file=out)
    return 0


def path_command(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """``inert conformance path``: the corpus directory, for testees and scripts that read it directly."""
    print(CORPUS_DIR, file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m inert.conformance._runner``: the same as ``inert conformance run``."""
    parser = _parser(
        argparse.ArgumentParser(prog="inert conformance run", description="Run the conformance corpus against a testee.")
    )
    args = parser.parse_args(argv)
    try:
        return run_command(args)
    except HarnessError as exc:
        print(f"inert: conformance: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
