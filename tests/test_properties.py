"""Properties of every format in ``fuzz.registry``: round trips, and both reference codecs agree.

Each test runs once per registered format; a new format is covered by adding
its entry to the registry.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.oracle import Mutation, differential, mutate, mutations, outcome, same_value
from fuzz.registry import FORMATS, FormatUnderTest, codec, spec, spec_kwargs
from inert._interpret import interpret_encode

ENTRIES = [pytest.param(entry, id=name) for name, entry in FORMATS.items()]

BOUNDED = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

def _kwargs(entry: FormatUnderTest) -> st.SearchStrategy[Any]:
    return st.sampled_from(entry.decode_kwargs)


@pytest.mark.parametrize("entry", ENTRIES)
@BOUNDED
@given(data=st.data())
def test_decode_inverts_encode(entry: FormatUnderTest, data: st.DataObject) -> None:
    module = codec(entry)
    value = data.draw(entry.values, label="value")
    encoded = module.encode(value)
    decoded = module.decode(encoded)
    assert same_value(decoded, value)
    assert module.encode(decoded) == encoded


@pytest.mark.parametrize("entry", ENTRIES)
@BOUNDED
@given(data=st.data())
def test_both_codecs_encode_the_same_bytes(entry: FormatUnderTest, data: st.DataObject) -> None:
    value = data.draw(entry.values, label="value")
    encoded = codec(entry).encode(value)
    assert interpret_encode(spec(entry), value, **spec_kwargs(entry)) == encoded
    assert differential(entry, encoded)[0] == "value"
    assert same_value(codec(entry).decode(encoded), value)


@pytest.mark.parametrize("entry", ENTRIES)
@BOUNDED
@given(data=st.data())
def test_both_codecs_agree_on_arbitrary_bytes(entry: FormatUnderTest, data: st.DataObject) -> None:
    # Arbitrary bytes mostly fail at the first field; a valid prefix gets them further in.
    prefix = data.draw(st.sampled_from(entry.examples).map(codec(entry).encode) | st.just(b""), label="prefix")
    raw = prefix[: data.draw(st.integers(0, len(prefix)), label="cut")] + data.draw(st.binary(max_size=96), label="tail")
    differential(entry, raw, data.draw(_kwargs(entry), label="kwargs"))


@pytest.mark.parametrize("entry", ENTRIES)
@BOUNDED
@given(data=st.data())
def test_both_codecs_agree_on_damaged_encodings(entry: FormatUnderTest, data: st.DataObject) -> None:
    encoded = codec(entry).encode(data.draw(entry.values, label="value"))
    damage: list[Mutation] = data.draw(mutations, label="mutations")
    damaged, kwargs = mutate(encoded, damage), data.draw(_kwargs(entry), label="kwargs")
    result = differential(entry, damaged, kwargs)
    # A shared-memory channel hands the reader a memoryview: it must read it exactly as the bytes.
    assert outcome(codec(entry).decode, memoryview(bytearray(damaged)), kwargs) == result


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_prefix_is_refused_alike(entry: FormatUnderTest) -> None:
    """Each proper prefix of an example is an error (no value ends early), the same from both codecs."""
    for value in entry.examples:
        encoded = codec(entry).encode(value)
        for cut in range(len(encoded)):
            kind, message = differential(entry, encoded[:cut])
            assert kind != "value", f"{entry.name}: {encoded[:cut].hex()} decoded to {message}"


def test_an_unknown_tag_before_the_end_of_input_is_reported_as_the_tag() -> None:
    """A struct group cut short reports what a field-by-field read meets first: here the unknown dtype."""
    from inert._interpret import interpret_decode
    from inert.codecs import checkpoint_shard

    entry = FORMATS["checkpoint-shard.record"]
    generated = outcome(checkpoint_shard.decode_record, b"\x01\x00")
    interpreted = outcome(lambda d: interpret_decode(spec(entry), d, part="record"), b"\x01\x00")
    assert generated == interpreted
    assert generated[0] == "UnknownTagError"


def test_mutations_do_what_they_say() -> None:
    assert mutate(b"abc", [("flip", 1, b"\x03")]) == b"aac"
    assert mutate(b"abc", [("set", 4, b"z")]) == b"azc"  # positions wrap
    assert mutate(b"abc", [("insert", 3, b"de")]) == b"abcde"
    assert mutate(b"abc", [("delete", 0, b"xx")]) == b"c"
    assert mutate(b"abc", [("truncate", 1, b"")]) == b"a"
    assert mutate(b"abc", [("overwrite", 2, b"xyz")]) == b"abxyz"
    with pytest.raises(ValueError, match="unknown mutation"):
        mutate(b"abc", [("shuffle", 0, b"")])
