"""What ``inert gen`` refuses before it writes anything: a tree whose readers would be less safe than the spec says.

* **A lost rule.**  A declared rule is checked on the records its ``on=`` names, by typename.  A new
  version declared with a new typename (``DescriptorV3``) carries none of the rules of its predecessor
  until their ``on=`` names it too.  Each version (and versioned part) must carry every declared rule its
  predecessor carries, unless the format module says it drops it:
  ``DROPS = {3: ("shm-descriptor.capacity",)}`` (version -> the ids of the rules it no longer carries).
* **A rule no target enforces.**  Every declared rule names a record (``on=``) of the format; its check
  parses in the rule language over that record's fields; every target's generated reader carries it
  (the C readers name each compiled rule; the Python readers, until they compile the rules, enforce
  them by the record's hand-written check, which tests/test_rule_expressions.py holds to them).
* **A changed frozen version** (:mod:`inert.gen.frozen`).

Each refusal names the file to change, the format and the rule (or version).
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inert.gen import frozen
from inert.spec import _rule_expr
from inert.spec._grammar import Format, Record

__all__ = ["Refusal", "spec_file", "check_spec", "check_targets", "check_frozen", "blame"]

_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Refusal:
    """One reason not to write: the file to change, the format, the rule id or version, and what is wrong."""

    file: str
    format: str
    subject: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.format}: {self.subject}: {self.message}"


def spec_file(fmt: Format) -> str:
    """The declaration's file, relative to the checkout (``inert/spec/shm_descriptor.py``)."""
    module = sys.modules.get(f"inert.spec.{fmt.module_name}")
    path = Path(getattr(module, "__file__", "") or f"inert/spec/{fmt.module_name}.py").resolve()
    try:
        return str(path.relative_to(_ROOT))
    except ValueError:
        return str(path)


def _drops(fmt: Format) -> dict[int, tuple[str, ...]]:
    module = sys.modules.get(f"inert.spec.{fmt.module_name}")
    drops: dict[int, tuple[str, ...]] = getattr(module, "DROPS", {})
    return drops


def _carried(fmt: Format, con: Any) -> dict[str, str]:
    """The declared rules checked on the records ``con`` reaches: rule id -> the typenames its ``on`` names."""
    names = set(frozen.reached(con))
    return {r.id: r.on for r in fmt.declared if names.intersection(filter(None, r.on.split("|")))}


def _records(fmt: Format) -> dict[str, Record]:
    """Every record of every version and part of ``fmt``, by typename."""
    out: dict[str, Record] = {}
    for con in frozen.entries(fmt).values():
        for typename, node in frozen.reached(con).items():
            if isinstance(node, Record):
                out.setdefault(typename, node)
    return out


def _same_names(fmt: Format, file: str) -> list[Refusal]:
    """Two different records (or unions) of one typename: rules and columns, keyed by typename, would mix them."""
    first: dict[str, tuple[str, Any, Any]] = {}
    out = []
    for key, con in frozen.entries(fmt).items():
        for node in frozen.walk(con):
            earlier = first.setdefault(node.typename, (key, node, frozen.describe(node)))
            if earlier[1] is not node and earlier[2] != frozen.describe(node):
                out.append(Refusal(file, fmt.name, key, f"declares a {type(node).__name__} {node.typename} other than "
                                   f"the one of {earlier[0]}: give it a typename of its own (and add it to the on= of the "
                                   "rules it keeps)"))
    return out


def check_spec(fmt: Format) -> list[Refusal]:
    """The refusals of ``fmt``'s declarations alone: rules attached to no record, rules that do not parse,
    rules a version lost without ``DROPS`` saying so."""
    file, out = spec_file(fmt), []
    records = _records(fmt)
    for rule in fmt.declared:
        if not rule.on:
            out.append(Refusal(file, fmt.name, rule.id, "the rule names no record to be checked on: give it "
                               "on=\"<Typename>|...\" (every record of every version that carries it)"))
            continue
        for typename in filter(None, rule.on.split("|")):
            if typename not in records:
                out.append(Refusal(file, fmt.name, rule.id, f"on= names {typename}, no record of any version"))
                continue
            try:
                _rule_expr.steps(rule.field, rule.check, [name for name, _ in records[typename].fields])
            except Exception as exc:  # whatever the parser raises is a fault of this rule's text
                out.append(Refusal(file, fmt.name, rule.id, f"on {typename}: {exc}"))
    out.extend(_same_names(fmt, file))
    drops = _drops(fmt)
    known = {r.id for r in fmt.declared}
    for version, ids in drops.items():
        for rule_id in ids:
            if rule_id not in known:
                out.append(Refusal(file, fmt.name, f"DROPS[{version}]", f"{rule_id} is no rule of the format"))
    for table, label in [(fmt.versions, "")] + [(t, f"{p}.") for p, t in fmt.parts.items()]:
        for before, after in itertools.pairwise(sorted(table)):
            had, has = _carried(fmt, table[before]), _carried(fmt, table[after])
            for rule_id in sorted(set(had) - set(has) - set(drops.get(after, ()))):
                typename = getattr(table[after], "typename", "?")
                out.append(Refusal(
                    file, fmt.name, rule_id,
                    f"{label}v{after} ({typename}) does not carry this rule of {label}v{before} (on={had[rule_id]!r}): "
                    f"add the record of v{after} that should carry it to on=, or declare "
                    f"DROPS = {{{after}: ({rule_id!r},)}} in the format module",
                ))
    return out


def check_targets(fmt: Format, texts: dict[str, str]) -> list[Refusal]:
    """The declared rules some target does not enforce: ``texts`` holds each target's generated reader of
    ``fmt`` (``"c"``, ``"python"``)."""
    file, out = spec_file(fmt), []
    records = _records(fmt)
    for rule in fmt.declared:
        on = [records[t] for t in filter(None, rule.on.split("|")) if t in records]
        if "c" in texts and on and f"/* {rule.id} */" not in texts["c"]:
            out.append(Refusal(file, fmt.name, rule.id, "the C reader does not check it (inert/gen/c.py compiles "
                               "no rule whose record it does not read)"))
        if "python" in texts and on and f"# {rule.id}" not in texts["python"]:
            out.append(Refusal(file, fmt.name, rule.id, "the Python reader does not check it (inert/gen/py_rules.py "
                               "compiled no test for it on its records)"))
    return out


def check_frozen(recorded: dict[str, dict[str, str]], current: dict[str, dict[str, str]],
                 formats: dict[str, Format]) -> list[Refusal]:
    """Every recorded version whose declaration hashes differently now, or that is gone."""
    out = []
    for name, versions in sorted(recorded.items()):
        file = spec_file(formats[name]) if name in formats else "inert/spec/"
        for key, digest in sorted(versions.items()):
            now = current.get(name, {}).get(key)
            if now is None:
                out.append(Refusal(file, name, key, f"a frozen version is no longer declared ({frozen.FROZEN_FILE.name})"))
            elif now != digest:
                out.append(Refusal(file, name, key, f"the frozen declaration changed (hash {now}, recorded {digest} in "
                                   f"spec/{frozen.FROZEN_FILE.name}): declare a new version instead"))
    return out


def blame(fmt: Format, exc: BaseException) -> Refusal:
    """A generator's failure on ``fmt`` as a refusal, naming the rule when its id is in the message."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    subject = next((r.id for r in fmt.declared if r.id in text), "generation")
    return Refusal(spec_file(fmt), fmt.name, subject, f"{type(exc).__name__}: {text}")
