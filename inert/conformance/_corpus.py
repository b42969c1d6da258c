"""The conformance corpus: vectors stored as data, one JSON file each.

Layout: ``corpus/<format>/v<version>/<Name>.json``, each file holding::

    {"name": "<Name>", "description": "<one line>",
     "rule": "<rule id>",                     (the spec rule the vector pins, as docs/spec numbers it: every
                                               refusing vector of one expected kind names the rule it is by)
     "input": "<hex>" | ["<hex>", {"repeat": "<hex>", "times": N}, ...],
     "params": {"chunk_size": N},             (optional: what the reader is told beyond the bytes)
     "expect": {"accept": <canonical JSON value>}
             | {"reject": "<error kind>"}
             | {"either": [<accept or reject>, ...]}}   (the spec leaves the choice open)

or, for a value every writer must refuse, ``"value": <canonical JSON value>``
in place of ``input`` and ``"expect": {"reject": "write-type" | "write-value"}``.

Error kinds are the ``kind`` names of :mod:`inert._errors` (and the two write
kinds).  A vector's test name is ``Required.<format>.v<version>.<Name>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inert._errors import ERROR_CLASSES, HarnessError

__all__ = [
    "CORPUS_DIR",
    "WRITE_KINDS",
    "Outcome",
    "Vector",
    "canonical_text",
    "load_corpus",
    "vector_document",
    "vector_of",
    "write_vector_document",
    "vector_file_text",
]

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"

_NAME_RE = re.compile(r"[A-Za-z0-9_]+\Z")
_VERSION_RE = re.compile(r"v([1-9][0-9]*)\Z")
_KEYS = {"name", "description", "rule", "input", "value", "params", "expect"}
#: Kinds of a writer's refusal (a caller mistake, not bad bytes: builtin TypeError/ValueError).
WRITE_KINDS = ("write-type", "write-value")
#: Runs of one byte at least this long are stored as a repeat, to keep big vectors small on disk.
_RUN = 64


def canonical_text(value: Any) -> str:
    """Canonical JSON of a value already in its JSON spelling (tags as names, ...)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Outcome:
    """One acceptable result: ``accept`` with the canonical JSON text, or ``reject`` with a kind."""

    result: str
    text: str = ""
    kind: str = ""

    def describe(self) -> str:
        if self.result == "accept":
            return f"accept {self.text[:200]}{'...' if len(self.text) > 200 else ''}"
        return f"reject {self.kind}"


@dataclass(frozen=True)
class Vector:
    format: str
    version: int
    name: str
    description: str
    data: bytes
    outcomes: tuple[Outcome, ...]
    params: dict[str, Any] = field(default_factory=dict)
    #: Canonical JSON of the value to encode, for a write vector (then ``data`` is empty).
    value: str | None = None
    #: The identifier of the spec rule the vector pins, when it names one.
    rule: str | None = None

    @property
    def test_name(self) -> str:
        return f"Required.{self.format}.v{self.version}.{self.name}"

    @property
    def accepted(self) -> Outcome | None:
        """The accept outcome when it is the only one (such vectors also test the writer)."""
        if self.value is None and len(self.outcomes) == 1 and self.outcomes[0].result == "accept":
            return self.outcomes[0]
        return None


def _outcome(spec: Any, where: str) -> Outcome:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise HarnessError(f'{where}: an outcome is {{"accept": value}} or {{"reject": kind}}')
    ((key, value),) = spec.items()
    if key == "accept":
        return Outcome("accept", text=canonical_text(value))
    if key == "reject":
        if value not in ERROR_CLASSES:
            raise HarnessError(f"{where}: unknown error kind {value!r}; kinds are {sorted(ERROR_CLASSES)}")
        return Outcome("reject", kind=value)
    raise HarnessError(f"{where}: unknown outcome {key!r}")


def _outcomes(expect: Any, where: str) -> tuple[Outcome, ...]:
    if isinstance(expect, dict) and set(expect) == {"either"}:
        options = expect["either"]
        if not isinstance(options, list) or len(options) < 2:
            raise HarnessError(f"{where}: 'either' lists at least two outcomes")
        return tuple(_outcome(option, where) for option in options)
    return (_outcome(expect, where),)


def _write_refusal(expect: Any, where: str) -> tuple[Outcome, ...]:
    if not isinstance(expect, dict) or set(expect) != {"reject"} or expect["reject"] not in WRITE_KINDS:
        raise HarnessError(f'{where}: a write vector expects {{"reject": kind}}, kind one of {WRITE_KINDS}')
    return (Outcome("reject", kind=expect["reject"]),)


def _input(spec: Any, where: str) -> bytes:
    parts = [spec] if isinstance(spec, str) else spec
    if not isinstance(parts, list):
        raise HarnessError(f"{where}: input is a hex string or a list of parts")
    out = bytearray()
    try:
        for part in parts:
            if isinstance(part, str):
                out += bytes.fromhex(part)
            elif isinstance(part, dict) and set(part) == {"repeat", "times"} and type(part["times"]) is int:
                out += bytes.fromhex(part["repeat"]) * part["times"]
            else:
                raise HarnessError(f"{where}: bad input part {part!r}")
    except ValueError as exc:
        raise HarnessError(f"{where}: input is not hex: {exc}") from None
    return bytes(out)


def _load(path: Path, fmt: str, version: int) -> Vector:
    where = str(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise HarnessError(f"{where}: {exc}") from None
    return vector_of(doc, fmt, version, where, path.stem)


def vector_of(doc: Any, fmt: str, version: int, where: str, stem: str) -> Vector:
    """The vector a corpus document declares (``stem``: the name its file must have)."""
    if (
        not isinstance(doc, dict)
        or not {"name", "description", "expect"} <= set(doc) <= _KEYS
        or ("input" in doc) == ("value" in doc)
        or ("value" in doc and "params" in doc)
    ):
        raise HarnessError(f"{where}: a vector holds name, description, input or value, expect, and optionally params")
    name, description, params = doc["name"], doc["description"], doc.get("params", {})
    if name != stem or not _NAME_RE.match(name):
        raise HarnessError(f"{where}: name {name!r} must be the file's stem, letters, digits and _")
    if not isinstance(description, str) or not description or "\n" in description:
        raise HarnessError(f"{where}: description is one non-empty line")
    if not isinstance(params, dict):
        raise HarnessError(f"{where}: params is an object")
    rule = doc.get("rule")
    if rule is not None and not isinstance(rule, str):
        raise HarnessError(f"{where}: rule is a string")
    if "value" in doc:
        value = canonical_text(doc["value"])
        return Vector(fmt, version, name, description, b"", _write_refusal(doc["expect"], where), value=value, rule=rule)
    return Vector(
        fmt, version, name, description, _input(doc["input"], where), _outcomes(doc["expect"], where), params, rule=rule
    )


def load_corpus(root: Path = CORPUS_DIR, formats: Iterable[str] | None = None) -> list[Vector]:
    """Every vector under ``root`` (or only those of ``formats``: a format's name also selects its parts,
    ``checkpoint-shard`` gives ``checkpoint-shard.record`` too), by format, version and name."""
    wanted = None if formats is None else set(formats)
    if not root.is_dir():
        raise HarnessError(f"no corpus at {root}")
    vectors = []
    for fmt_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        if wanted is not None and fmt_dir.name not in wanted and fmt_dir.name.split(".")[0] not in wanted:
            continue
        for version_dir in sorted(p for p in fmt_dir.iterdir() if p.is_dir()):
            match = _VERSION_RE.match(version_dir.name)
            if match is None:
                raise HarnessError(f"{version_dir}: version folders are named v<N>")
            for path in sorted(version_dir.glob("*.json")):
                vectors.append(_load(path, fmt_dir.name, int(match.group(1))))
    vectors.sort(key=lambda v: (v.format, v.version, v.name))
    return vectors


def _input_parts(data: bytes) -> str | list[Any]:
    """``data`` as hex, long runs of one byte folded into repeats."""
    parts: list[Any] = []
    start = i = 0
    while i < len(data):
        j = i
        while j < len(data) and data[j] == data[i]:
            j += 1
        if j - i >= _RUN:
            if start < i:
                parts.append(data[start:i].hex())
            parts.append({"repeat": data[i : i + 1].hex(), "times": j - i})
            start = j
        i = j
    if start < len(data) or not parts:
        parts.append(data[start:].hex())
    return parts[0] if len(parts) == 1 and isinstance(parts[0], str) else parts


def vector_document(
    name: str, description: str, data: bytes, expect: dict[str, Any], params: dict[str, Any] | None = None,
    rule: str | None = None,
) -> dict[str, Any]:
    """The JSON document of one vector; ``expect`` values are already canonical JSON values.

    ``rule`` is the identifier of the spec rule the vector pins (as the spec pages number them).
    """
    doc: dict[str, Any] = {"name": name, "description": description}
    if rule is not None:
        doc["rule"] = rule
    doc["input"] = _input_parts(data)
    if params:
        doc["params"] = params
    doc["expect"] = json.loads(canonical_text(expect))  # keys sorted, as the runner compares them
    return doc


def write_vector_document(name: str, description: str, value: Any, kind: str) -> dict[str, Any]:
    """The JSON document of a value every writer must refuse with ``kind``."""
    return {"name": name, "description": description, "value": json.loads(canonical_text(value)), "expect": {"reject": kind}}


def vector_file_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
