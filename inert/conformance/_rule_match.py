"""Which declared rule a refusal is: its (error kind, field, reason) matched against the rules its format declares.

Used by the testees (each answer may name its rule) and by the corpus trace (``_trace``); it imports neither.
"""

from __future__ import annotations

import functools
from typing import Any

from inert._errors import InertError
from inert.spec._rules import SpecRule

__all__ = ["base_format", "declared_rules", "matching_rules", "rule_of"]


def base_format(name: str) -> str:
    """The format a corpus folder belongs to (``checkpoint-shard.record`` belongs to ``checkpoint-shard``)."""
    return name.split(".", 1)[0]


@functools.cache
def declared_rules(fmt: str) -> tuple[SpecRule, ...]:
    from inert.spec import FORMATS

    rules: tuple[SpecRule, ...] = FORMATS[fmt].rules()
    return rules


def matching_rules(fmt: str, kind: str, field: str, reason: str, formats: dict[str, Any] | None = None) -> list[str]:
    """The ids of the rules of ``fmt`` (or of the format it is a part of) a refusal matches."""
    base = base_format(fmt)
    rules: tuple[SpecRule, ...] = declared_rules(base) if formats is None else formats[base].rules()
    return [rule.id for rule in rules if rule.matches(kind, field, reason)]


def rule_of(fmt: str, error: InertError) -> str | None:
    """The one rule of ``fmt`` an Inert reader's refusal is (None when it matches none or several)."""
    matched = matching_rules(fmt, error.kind, error.field, error.reason)
    return matched[0] if len(matched) == 1 else None
