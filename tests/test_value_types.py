"""The typed extensions 6-12 of the value subset against arbitrary payloads: a value or an InertError, nothing else."""

from __future__ import annotations

import struct
import zlib

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from inert import InertError
from inert._value_types import TYPED_CODES, DTypeValue
from inert.codecs import checkpoint_shard as cs

_PAYLOADS = st.one_of(
    st.binary(max_size=64),
    # plausible array heads: a dtype code, a rank, dims, then some bytes
    st.builds(lambda code, dims, tail: struct.pack(f"<BB{len(dims)}Q", code, len(dims), *dims) + tail,
              st.integers(0, 25), st.lists(st.integers(0, 1 << 64 - 1) | st.integers(0, 4), max_size=4), st.binary(max_size=32)),
    st.builds(msgpack.packb, st.recursive(st.none() | st.integers(-3, 1 << 40) | st.text(max_size=4),
                                          lambda inner: st.lists(inner, max_size=3), max_leaves=6)),
)


def framed(code: int, payload: bytes) -> bytes:
    """A value record holding one typed extension: kind, document length, document, CRC-32."""
    document = msgpack.packb(msgpack.ExtType(code, payload))
    body = bytes([cs.RecordKind.VALUE]) + struct.pack("<I", len(document)) + document
    return body + struct.pack("<I", zlib.crc32(body))


def test_framing_is_the_codecs() -> None:
    assert framed(10, bytes([cs.DType.FLOAT32])) == cs.encode_record({"body": {"kind": "VALUE", "value": DTypeValue("FLOAT32")}})


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(TYPED_CODES)), _PAYLOADS)
def test_typed_payloads_decode_or_raise_inert_errors(code: int, payload: bytes) -> None:
    data = framed(code, payload)
    try:
        value = cs.decode_record(data)["body"]["value"]
    except InertError:
        return
    # what decodes encodes back to the same bytes (one spelling per value)
    assert cs.encode_record({"body": {"kind": "VALUE", "value": value}}) == data
