"""The dump formats on their own: both reference codecs agree, round trips, hostile bytes give InertError only.

``DUMP_MANIFEST`` and ``DUMP_SHARD`` are the ``fuzz.registry`` entries of the two formats
(strategies for valid values, examples, decode keywords, tokens).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fuzz.oracle import describe, differential, mutate, mutations
from fuzz.registry import DUMP_MANIFEST, DUMP_SHARD, FormatUnderTest
from fuzz.registry import FORMATS as FORMATS_UNDER_TEST
from inert._interpret import interpret_decode, interpret_encode
from inert.codecs import dump_manifest, dump_shard
from inert.spec import FORMATS

BOUNDED = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_record = FORMATS_UNDER_TEST["dump-shard.record"].values
_EXAMPLE_RECORD = FORMATS_UNDER_TEST["dump-shard.record"].examples[0]
ENTRIES = [pytest.param(DUMP_MANIFEST, id="dump-manifest"), pytest.param(DUMP_SHARD, id="dump-shard")]


@pytest.mark.parametrize("entry", ENTRIES)
@BOUNDED
@given(data=st.data())
def test_round_trip_and_both_codecs_agree(entry: FormatUnderTest, data: st.DataObject) -> None:
    module = dump_manifest if entry is DUMP_MANIFEST else dump_shard
    value = data.draw(entry.values, label="value")
    encoded = module.encode(value)
    assert interpret_encode(FORMATS[entry.name], value) == encoded
    decoded = module.decode(encoded)
    assert module.encode(decoded) == encoded
    assert differential(entry, encoded) == ("value", describe(decoded))


@pytest.mark.parametrize("entry", ENTRIES)
@BOUNDED
@given(data=st.data())
def test_damaged_bytes_give_the_same_inert_error_in_both_codecs(entry: FormatUnderTest, data: st.DataObject) -> None:
    module = dump_manifest if entry is DUMP_MANIFEST else dump_shard
    encoded = module.encode(data.draw(st.sampled_from(entry.examples) | entry.values, label="value"))
    damaged = mutate(encoded, data.draw(mutations, label="mutations"))
    # A damaged magic is the grammar's own concern (its two codecs word that error differently today).
    assume(damaged[:8] == encoded[:8])
    differential(entry, damaged, data.draw(st.sampled_from(entry.decode_kwargs), label="kwargs"))


@BOUNDED
@given(record=_record)
def test_a_record_decodes_alone_as_inside_its_file(record: dict[str, Any]) -> None:
    encoded = dump_shard.encode({"rows": [{"row": record}]})
    alone = dump_shard.encode_record(record)
    assert encoded.endswith(alone) and len(encoded) - len(alone) == 64  # header, count, padding: the record starts at 64
    assert describe(dump_shard.decode_record(alone)) == describe(interpret_decode(FORMATS["dump-shard"], alone, part="record"))


def test_the_checksum_covers_every_byte_of_a_record() -> None:
    alone = bytearray(dump_shard.encode_record(_EXAMPLE_RECORD))
    for position in range(len(alone)):
        damaged = bytearray(alone)
        damaged[position] ^= 0x01
        with pytest.raises(ValueError) as info:
            dump_shard.decode_record(bytes(damaged))
        assert type(info.value).__module__ == "inert._errors", position
