"""The dump formats on their own: both reference codecs agree, round trips, hostile bytes give InertError only.

``DUMP_MANIFEST`` and ``DUMP_SHARD`` are ready-made ``fuzz.registry`` entries
(strategies for valid values, examples, decode keywords, tokens).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from inert.codecs import dump_manifest, dump_shard
from inert.spec import FORMATS
from inert.spec._grammar import interpret_decode, interpret_encode

from fuzz.oracle import differential, mutate, mutations
from fuzz.registry import FormatUnderTest
from inert._canonical import to_json

BOUNDED = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
U64 = (1 << 64) - 1
DTYPES = ("BOOL", "UINT8", "INT16", "INT64", "FLOAT16", "BFLOAT16", "FLOAT32", "COMPLEX128", "FLOAT8_E4M3FN")
ITEMSIZE = {"BOOL": 1, "UINT8": 1, "INT16": 2, "INT64": 8, "FLOAT16": 2, "BFLOAT16": 2, "FLOAT32": 4, "COMPLEX128": 16,
            "FLOAT8_E4M3FN": 1}

_name = st.text(max_size=12)
_shape = st.lists(st.integers(0, 4), max_size=3)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(1 << 63), U64), st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=8)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
    ),
    max_leaves=8,
)


@st.composite
def _tensor(draw: Callable[..., Any]) -> dict[str, Any]:
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(_shape)
    count = 1
    for dim in shape:
        count *= dim
    size = count * ITEMSIZE[dtype]
    if dtype == "BOOL":  # one spelling of true: only 0 and 1 bytes are valid
        data = bytes(draw(st.lists(st.integers(0, 1), min_size=size, max_size=size)))
    else:
        data = draw(st.binary(min_size=size, max_size=size))
    return {"kind": "TENSOR", "dtype": dtype, "shape": shape, "data": data}


_value_body = st.fixed_dictionaries({"kind": st.just("VALUE"), "value": _values})
_field = st.fixed_dictionaries({"name": _name, "body": _tensor() | _value_body})
_record = st.fixed_dictionaries({"global_index": st.integers(0, U64), "fields": st.lists(_field, max_size=3)})
_shard = st.fixed_dictionaries({"rows": st.lists(st.fixed_dictionaries({"row": _record}), max_size=3)})

_layout = st.one_of(
    st.fixed_dictionaries({"kind": st.just("DENSE"), "dtype": st.sampled_from(DTYPES), "shape": _shape}),
    st.fixed_dictionaries({"kind": st.just("NESTED"), "dtype": st.sampled_from(DTYPES), "ndim": st.integers(0, 64)}),
    st.fixed_dictionaries({"kind": st.just("VALUE")}),
)
_field_schema = st.fixed_dictionaries({"name": _name, "layout": _layout})


@st.composite
def _manifest(draw: Callable[..., Any]) -> dict[str, Any]:
    """A manifest whose parts agree with each other (check_dump_manifest): unique names, keys and files,
    ascending field indexes with one shape per nested field, every key in one shard, records in file order."""
    fields = draw(st.lists(_field_schema, max_size=3, unique_by=lambda f: f["name"]))
    keys = []
    for key in draw(st.lists(_name, max_size=3, unique=True)):
        chosen = sorted(draw(st.sets(st.integers(0, len(fields) - 1), max_size=len(fields)))) if fields else []
        shapes = [
            draw(st.lists(st.integers(0, 4), min_size=fields[i]["layout"]["ndim"], max_size=fields[i]["layout"]["ndim"]))
            for i in chosen
            if fields[i]["layout"]["kind"] == "NESTED"
        ]
        keys.append({"key": key, "global_index": draw(st.integers(0, U64)), "fields": chosen, "nested_shapes": shapes,
                     "tag": draw(st.dictionaries(st.text(max_size=4), _values, max_size=3))})
    shard_count = draw(st.integers(1 if keys else 0, 2))
    owners = [draw(st.integers(0, shard_count - 1)) for _ in keys] if shard_count else []
    shards = []
    for index in range(shard_count):
        rows = [row for row, owner in enumerate(owners) if owner == index]
        offsets, lengths, end = [], [], 64
        for _ in rows:
            offset = end + (-end % 64)
            length = draw(st.integers(16, 1 << 20))
            offsets.append(offset)
            lengths.append(length)
            end = offset + length
        shards.append({"file": f"shard-{index:05d}.bin", "owner": draw(st.integers(0, (1 << 32) - 1)),
                       "rows": rows, "offsets": offsets, "lengths": lengths})
    return {"partition_id": draw(_name), "fields": fields, "keys": keys, "shards": shards}


_EXAMPLE_RECORD = {"global_index": 7, "fields": [
    {"name": "ids", "body": {"kind": "TENSOR", "dtype": "INT64", "shape": [2], "data": bytes(16)}},
    {"name": "note", "body": {"kind": "VALUE", "value": {"a": (1, 2)}}},
]}
_EXAMPLE_MANIFEST = {
    "partition_id": "train",
    "fields": [
        {"name": "ids", "layout": {"kind": "DENSE", "dtype": "INT64", "shape": [2]}},
        {"name": "note", "layout": {"kind": "VALUE"}},
    ],
    "keys": [{"key": "k", "global_index": 7, "fields": [0, 1], "nested_shapes": [], "tag": {"step": 3}}],
    "shards": [{"file": "shard-00000.bin", "owner": 0, "rows": [0], "offsets": [64], "lengths": [160]}],
}

DUMP_MANIFEST = FormatUnderTest(
    name="dump-manifest",
    values=_manifest(),
    examples=(_EXAMPLE_MANIFEST,),
    decode_kwargs=({}, {"verify_checksums": False}),
    tokens=(dump_manifest.MAGIC, b"\x01\x00", b"\x01", b"\x02", b"\x03"),
)
DUMP_SHARD = FormatUnderTest(
    name="dump-shard",
    values=_shard,
    examples=({"rows": [{"row": _EXAMPLE_RECORD}]},),
    decode_kwargs=({}, {"verify_checksums": False}),
    tokens=(dump_shard.MAGIC, b"\x01\x00", b"\x01", b"\x02"),
)
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
    assert differential(entry, encoded) == ("value", to_json(decoded))


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
    assert to_json(dump_shard.decode_record(alone)) == to_json(interpret_decode(FORMATS["dump-shard"], alone, part="record"))


def test_the_checksum_covers_every_byte_of_a_record() -> None:
    alone = bytearray(dump_shard.encode_record(_EXAMPLE_RECORD))
    for position in range(len(alone)):
        damaged = bytearray(alone)
        damaged[position] ^= 0x01
        with pytest.raises(ValueError) as info:
            dump_shard.decode_record(bytes(damaged))
        assert type(info.value).__module__ == "inert._errors", position
