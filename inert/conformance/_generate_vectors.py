"""Writes the conformance corpus (``corpus/``) from the vectors declared in ``_vectors_<format>.py``.

Run ``python -m inert.conformance._generate_vectors`` after changing a vector;
``--check`` exits 1 when the committed corpus differs from what this script
writes (the test suite runs it).  Vectors come in two kinds:

* written out one by one, one or more per rule of the spec, each saying what
  it tests;
* generated: the boundaries of the limits and integer ranges the modules list,
  every enum value and the first values beyond, and every truncation point of
  representative messages.

Every refusing vector names the spec rule it pins (``"rule"``): the one the
declaration names, or else the one declared rule the reference reader's refusal
matches, traced when the corpus is written (``with_rule``).

The bytes are built there with ``struct``, independently of ``inert.codecs`` and
of the Construct grammar, so that the corpus tests those codecs rather than
restating them.  Enum tables and limits are copied from the spec on purpose: a
change in the spec then shows up as failing vectors until they are updated.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import (
    _vectors_checkpoint_metadata,
    _vectors_checkpoint_shard,
    _vectors_dump_manifest,
    _vectors_dump_shard,
    _vectors_shm_descriptor,
    _vectors_shm_message,
    _vectors_shm_samples_meta,
)
from ._corpus import CORPUS_DIR, vector_file_text, vector_of
from ._trace import trace_corpus
from ._vectorlib import Corpus

#: Every format's vectors, one module each; a new format (or version) adds its module here.
BUILDERS: tuple[Callable[[], Corpus], ...] = (
    _vectors_shm_message.build,
    _vectors_shm_samples_meta.build,
    _vectors_shm_descriptor.build,
    _vectors_shm_descriptor.build_v2,
    _vectors_checkpoint_shard.build,
    _vectors_checkpoint_shard.build_v2,
    _vectors_checkpoint_shard.build_record,
    _vectors_checkpoint_shard.build_record_v2,
    _vectors_checkpoint_shard.build_inflated,
    _vectors_dump_shard.build,
    _vectors_dump_shard.build_record,
    _vectors_checkpoint_metadata.build,
    _vectors_checkpoint_metadata.build_v2,
    _vectors_dump_manifest.build,
)


def with_rule(doc: dict[str, Any], fmt: str, version: int) -> dict[str, Any]:
    """``doc`` naming the rule it pins: a refusing vector that names none is given the one declared rule the
    reference reader's refusal matches by kind, field and reason (:mod:`._trace`); one that names its rule
    must be refused by that rule.  Testees that report rule ids are then held to the rule, not only the kind."""
    if "input" not in doc or set(doc["expect"]) != {"reject"}:
        return doc
    vector = vector_of(doc, fmt, version, f"{fmt}/v{version}/{doc['name']}", doc["name"])
    trace = trace_corpus([vector])
    if trace.untraced or not trace.rejects:
        problem = trace.untraced[0][1:] if trace.untraced else "accepted"
        raise ValueError(f"{vector.test_name}: refused by no single declared rule: {problem}")
    ((_, rule),) = trace.rejects
    if doc.get("rule", rule) != rule:
        raise ValueError(f"{vector.test_name}: names rule {doc['rule']}, refused by {rule}")
    head = {k: doc[k] for k in ("name", "description")}
    return {**head, "rule": rule, **{k: v for k, v in doc.items() if k not in head and k != "rule"}}


def generate() -> dict[str, str]:
    """Relative path -> file text, for every vector."""
    files = {}
    for build in BUILDERS:
        corpus = build()
        for name, doc in corpus.docs.items():
            doc = with_rule(doc, corpus.fmt, corpus.version)
            files[f"{corpus.fmt}/v{corpus.version}/{name}.json"] = vector_file_text(doc)
    return files


def differences(root: Path = CORPUS_DIR) -> list[str]:
    """How the corpus under ``root`` differs from what this script writes (empty when equal)."""
    wanted = generate()
    present = {p.relative_to(root).as_posix() for p in root.rglob("*.json")} if root.is_dir() else set()
    problems = [f"missing {path}" for path in sorted(set(wanted) - present)]
    problems += [f"not generated {path}" for path in sorted(present - set(wanted))]
    for path in sorted(set(wanted) & present):
        if (root / path).read_text(encoding="utf-8") != wanted[path]:
            problems.append(f"differs {path}")
    return problems


def write(root: Path = CORPUS_DIR) -> int:
    """Write the corpus under ``root``, removing vectors no longer generated; the number of files."""
    files = generate()
    if root.is_dir():
        for stale in root.rglob("*.json"):
            if stale.relative_to(root).as_posix() not in files:
                stale.unlink()
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text(encoding="utf-8") != content:
            target.write_text(content, encoding="utf-8")
    return len(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inert.conformance._generate_vectors", description="Write the conformance corpus."
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed corpus differs from what this writes")
    args = parser.parse_args(argv)
    if args.check:
        problems = differences()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    print(f"{write()} vectors written under {CORPUS_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
