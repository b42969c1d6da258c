"""``plural(N, 'word')`` in a rule's message: a count that may be 1 never reads "1 bytes"."""

from __future__ import annotations

import re

import pytest

from inert import _checks
from inert._errors import InvalidValueError
from inert.codecs import checkpoint_shard
from inert.spec import FORMATS
from inert.spec._rule_expr import RuleSyntaxError, messages, steps
from inert.spec._rules import SpecRule


def test_plural_spells_one_and_many() -> None:
    assert [_checks.plural(n, "byte") for n in (0, 1, 2)] == ["0 bytes", "1 byte", "2 bytes"]
    assert _checks.plural(1, "index", "indexes") == "1 index" and _checks.plural(3, "index", "indexes") == "3 indexes"


def test_a_tensor_of_one_byte_too_few_says_one_byte() -> None:
    record = checkpoint_shard.encode_record({"body": {"kind": "TENSOR", "dtype": "UINT8", "shape": [1], "data": b"\x07"}})
    data = bytearray(record)
    data[3] = 2  # after kind, dtype and ndim, shape [2]: two bytes expected, one present
    with pytest.raises(InvalidValueError) as info:
        checkpoint_shard.decode_record(bytes(data), verify_checksums=False)
    assert info.value.reason == "1 byte present, shape and dtype give 2"


def test_plural_is_for_messages_and_takes_words() -> None:
    with pytest.raises(RuleSyntaxError, match="messages only"):
        steps("data", "plural(len(data), 'byte') == 'x'", ["data"])
    bad = SpecRule("t.bad", "s", "invalid-value", "data", "len(data) == 0", "x", on="TensorRecord",
                   message="{plural(len(data), len(data))}")
    with pytest.raises(RuleSyntaxError, match="one or two words"):
        messages(bad, 1)


def test_no_declared_message_states_a_length_as_a_bare_plural() -> None:
    bare = re.compile(r"\{len\([^{}]*\)\} [a-z]+s\b")
    found = [(rule.id, text) for fmt in FORMATS.values() for rule in fmt.declared
             for text in (rule.message if isinstance(rule.message, tuple) else (rule.message,)) if bare.search(text)]
    assert not found, f"state these counts with plural(N, 'word'): {found}"
