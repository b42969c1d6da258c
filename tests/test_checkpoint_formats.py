"""The checkpoint formats and the file-format grammar elements (Magic, version header, Bytes,
Padding, Crc32, MsgPack): both reference codecs agree, pinned layouts hold, hostile bytes
give the project's errors."""

from __future__ import annotations

import pickle
import struct
import zipfile
import zlib
from io import BytesIO
from typing import Any

import msgpack
import pytest

from inert import (
    ChecksumError,
    ForeignFormatError,
    InertError,
    InvalidValueError,
    LimitError,
    TruncatedError,
    UnknownTagError,
    VersionError,
)
from inert._checks import _DTYPE_NAMES, CHECKPOINT_ITEMSIZES
from inert._interpret import interpret_decode, interpret_encode
from inert.codecs import checkpoint_metadata as cm
from inert.codecs import checkpoint_shard as cs
from inert.spec import FORMATS

SHARD = FORMATS["checkpoint-shard"]
META = FORMATS["checkpoint-metadata"]

TENSOR = {"body": {"kind": "TENSOR", "dtype": "FLOAT32", "shape": [2, 3], "data": bytes(range(24))}}
VALUE = {
    "body": {
        "kind": "VALUE",
        "value": {"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1], "c": 1 + 2j, "ba": bytearray(b"x"), "3": {"s": {"1", "2"}},
                  "f": frozenset({"a", b"a"}), "none": None, "b": b"\x00", "big": (1 << 64) - 1, b"k": 1, "neg": -(1 << 63)},
    }
}


def entry(fqn: str = "w", chunks: int = 1) -> dict[str, Any]:
    return {
        "fqn": fqn, "dtype": "BFLOAT16", "layout": "STRIDED", "memory_format": "CONTIGUOUS", "requires_grad": False,
        "pin_memory": False, "size": [4 * chunks, 3], "chunk_offsets": [v for i in range(chunks) for v in (4 * i, 0)],
        "chunk_sizes": [4, 3] * chunks, "chunk_files": [0] * chunks, "chunk_byte_offsets": [64 * (i + 1) for i in range(chunks)],
        "chunk_byte_lengths": [96] * chunks, "chunk_crcs": [7] * chunks,
        "strides_recorded": True, "strides": [3, 1],  # version 2, the latest: the strides 2.15 records
    }


METADATA = {
    "dcp_version": "1.0.0",
    "storage_meta": {"checkpoint_id": "/tmp/ckpt", "save_id": "s", "load_id": None, "modules": []},
    "planner_data": {"w": ("w",), "opt.step": ("opt", "step")},
    "files": ["__0_0.distcp"],
    "tensors": [entry("w", 3)],
    "values": [{"fqn": "opt.step", "file": 0, "byte_offset": 512, "byte_length": 20, "crc": 1}],
}


def _norm(value: Any) -> Any:
    """Decoded values with tags by name and byte views as bytes (the codecs have their own enums)."""
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if isinstance(value, memoryview):
        return bytes(value)
    if hasattr(value, "name") and isinstance(value, int):
        return value.name
    return value


@pytest.mark.parametrize("value", [TENSOR, VALUE], ids=["tensor", "value"])
def test_record_codecs_agree(value: dict[str, Any]) -> None:
    data = cs.encode_record(value)
    assert data == interpret_encode(SHARD, value, part="record")
    decoded = cs.decode_record(data)
    assert _norm(decoded) == _norm(interpret_decode(SHARD, data, part="record"))
    assert _norm(decoded["body"]) == _norm({**value["body"], "kind": value["body"]["kind"], "dtype": "FLOAT32"}
                                           if value is TENSOR else value["body"])
    assert decoded["crc32"] == zlib.crc32(data[:-4])


def test_tensor_record_layout_is_pinned() -> None:
    data = cs.encode_record(TENSOR)
    # kind, dtype, ndim, shape, nbytes, zero padding to 64, payload, crc
    assert data[:3] == bytes([1, 12, 2])
    assert struct.unpack_from("<QQQ", data, 3) == (2, 3, 24)
    assert data[27:64] == bytes(37)
    assert data[64:88] == bytes(range(24))
    assert len(data) == 92
    view = cs.decode_record(data)["body"]["data"]
    assert isinstance(view, memoryview) and view.obj is not None  # zero-copy view of the input


def test_file_and_metadata_codecs_agree() -> None:
    shard = {"records": [{"record": TENSOR}, {"record": VALUE}]}
    for version in (1, 2):  # version 2 only adds a record kind: tensors and values keep version 1's bytes
        data = cs.encode(shard, version=version)
        assert data == interpret_encode(SHARD, shard, version=version)
        assert data[:10] == b"\x89INRTSH\n" + bytes([version, 0])
        assert data[10:] == cs.encode(shard, version=1)[10:]
        first = data.index(bytes([1, 12, 2]))
        assert first % 64 == 0
        assert _norm(cs.decode(data)) == _norm(interpret_decode(SHARD, data))
    assert data == cs.encode(shard)  # the writers' default: the newest
    meta = cm.encode(METADATA)
    assert meta == interpret_encode(META, METADATA)
    assert _norm(cm.decode(meta)) == _norm(interpret_decode(META, meta))
    assert cm.decode(meta)["planner_data"] == {"w": ("w",), "opt.step": ("opt", "step")}


def test_dtype_table_matches_enum() -> None:
    assert [m.name for m in cs.DType] == list(_DTYPE_NAMES) == list(CHECKPOINT_ITEMSIZES)
    assert [int(m) for m in cs.DType] == list(range(1, len(_DTYPE_NAMES) + 1))


def both(fn: Any, data: bytes, **kw: Any) -> list[InertError]:
    """The errors both codecs raise for ``data``; they must be of the same class at the same place."""
    errors = []
    for decode in (fn, lambda d, **k: interpret_decode(SHARD if fn in (cs.decode, cs.decode_record) else META, d,
                                                      part="record" if fn is cs.decode_record else None, **k)):
        with pytest.raises(InertError) as info:
            decode(data, **kw)
        errors.append(info.value)
    assert type(errors[0]) is type(errors[1]), errors
    assert errors[0].offset == errors[1].offset, errors
    return errors


def test_foreign_files_are_named() -> None:
    buf = BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("data.pkl", b"x")
    cases = {
        pickle.dumps({"a": 1}, protocol=2): "a pickle (protocol 2)",
        buf.getvalue(): "zip archive, e.g. a torch.save file",
        struct.pack("<Q", 20) + b'{"a":{"dtype":"F32"}}': "safetensors",
        b"": "no bytes",
    }
    for data, needle in cases.items():
        for fn in (cm.decode, cs.decode):
            err = both(fn, data)[0]
            assert isinstance(err, ForeignFormatError) and needle in str(err) and err.field == "magic"


def test_unknown_version_names_supported() -> None:
    data = bytearray(cm.encode(METADATA))
    data[8] = 7
    err = both(cm.decode, bytes(data))[0]
    known = ", ".join(map(str, sorted(cm.VERSIONS)))
    assert isinstance(err, VersionError) and f"version 7 is not supported (this reader knows {known})" in str(err)


def test_every_flipped_byte_is_detected() -> None:
    """No single flipped bit in a record or the metadata decodes to a different value."""
    for encode, decode, value in ((cs.encode_record, cs.decode_record, TENSOR), (cs.encode_record, cs.decode_record, VALUE),
                                  (cm.encode, cm.decode, METADATA)):
        data = encode(value)
        for index in range(len(data)):
            bad = bytearray(data)
            bad[index] ^= 0x10
            with pytest.raises(InertError):
                decode(bytes(bad))


def test_checksum_mismatch_and_opt_out() -> None:
    data = bytearray(cs.encode_record(TENSOR))
    data[70] ^= 1  # inside the payload: only the checksum can see it
    err = both(cs.decode_record, bytes(data))[0]
    assert isinstance(err, ChecksumError) and err.offset == len(data) - 4 and "stored CRC-32" in str(err)
    assert cs.decode_record(bytes(data), verify_checksums=False)["body"]["data"][6] == 7


def test_hostile_tensor_records() -> None:
    good = cs.encode_record(TENSOR)
    # shape whose product overflows 64 bits
    over = bytearray(good)
    struct.pack_into("<QQ", over, 3, 1 << 40, 1 << 40)
    over[-4:] = struct.pack("<I", zlib.crc32(over[:-4]))
    err = both(cs.decode_record, bytes(over))[0]
    assert isinstance(err, InvalidValueError) and err.field == "body.shape" and "overflows" in str(err)
    # a payload length beyond the bytes present
    longer = bytearray(good)
    struct.pack_into("<Q", longer, 19, 1 << 40)
    assert isinstance(both(cs.decode_record, bytes(longer))[0], TruncatedError)
    # a length over the declared maximum
    struct.pack_into("<Q", longer, 19, 1 << 60)
    assert isinstance(both(cs.decode_record, bytes(longer))[0], LimitError)
    # non-zero padding
    padded = bytearray(good)
    padded[40] = 1
    err = both(cs.decode_record, bytes(padded))[0]
    assert isinstance(err, InvalidValueError) and err.offset == 40 and "padding" in str(err)
    # shape and length disagree
    with pytest.raises(ValueError, match="shape and dtype give 24"):
        cs.encode_record({"body": {**TENSOR["body"], "data": bytes(20)}})
    # unknown dtype and kind tags
    for index in (0, 1):
        bad = bytearray(good)
        bad[index] = 99
        assert isinstance(both(cs.decode_record, bytes(bad))[0], UnknownTagError)


def _value_record(doc: bytes) -> bytes:
    body = bytes([2]) + struct.pack("<I", len(doc)) + doc
    return body + struct.pack("<I", zlib.crc32(body))


def test_hostile_value_documents() -> None:
    cases = [
        (msgpack.packb(msgpack.ExtType(42, b"")), UnknownTagError, "unknown extension code 42"),
        (msgpack.packb(msgpack.Timestamp(1, 0)), UnknownTagError, "unknown extension code -1"),
        (b"\x91" * 65 + b"\xc0", LimitError, "max_depth(64)"),
        (b"\x91" * 2000 + b"\xc0", LimitError, "max_depth(64)"),
        (msgpack.packb([1, 2])[:-1], TruncatedError, "present"),
        (msgpack.packb(1) + b"\x01", InertError, ""),
        (b"\xc1", InvalidValueError, "0xc1"),
        (b"\xa2\xff\xfe", InvalidValueError, "UTF-8"),
        (b"\x81\x91\x01\x02", InvalidValueError, "str or bin"),  # a list as a map key
        (msgpack.packb(msgpack.ExtType(2, b"abc")), InvalidValueError, "complex"),
        (b"\xdd\xff\xff\xff\xff", TruncatedError, "elements need"),  # an array claiming 2**32-1 items
    ]
    nested = msgpack.packb(1)
    for _ in range(80):  # tuples nested through extension payloads
        nested = msgpack.packb(msgpack.ExtType(1, b"\x91" + nested))
    cases.append((nested, LimitError, "max_depth(64)"))
    for doc, cls, needle in cases:
        err = both(cs.decode_record, _value_record(doc))[0]
        assert isinstance(err, cls), (doc[:8], err)
        assert needle in str(err) and err.field == "body.value"


def test_values_outside_the_subset_fail_at_write_with_path() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError, match=r"body\.value\['a'\]\[1\].*Opaque is not in the value subset"):
        cs.encode_record({"body": {"kind": "VALUE", "value": {"a": [1, Opaque()]}}})
    with pytest.raises(ValueError, match="outside the 64-bit range"):
        cs.encode_record({"body": {"kind": "VALUE", "value": 1 << 64}})
    deep: Any = 1
    for _ in range(70):
        deep = [deep]
    with pytest.raises(ValueError, match="max_depth"):
        cs.encode_record({"body": {"kind": "VALUE", "value": deep}})


def test_hostile_metadata() -> None:
    good = cm.encode(METADATA)
    # over the size limit, and a reader's own lower limit
    err = both(cm.decode, good + bytes(64), max_size=len(good))[0]
    assert isinstance(err, LimitError) and "max_size" in str(err)
    with pytest.raises(LimitError):
        cm.decode(bytes(cm.MAX_SIZE + 1))
    # a chunk outside its tensor, a path escaping the directory, a duplicate fqn, a bad file index
    bad_entries: list[tuple[dict[str, Any], str]] = [
        ({**METADATA, "tensors": [{**entry("w", 3), "chunk_offsets": [0, 0, 4, 0, 9, 0]}]}, "beyond size"),
        ({**METADATA, "files": ["../../etc/passwd"]}, "not a plain file name"),
        ({**METADATA, "values": [{**METADATA["values"][0], "fqn": "w"}]}, "appears twice"),
        ({**METADATA, "tensors": [{**entry("w", 3), "chunk_files": [0, 0, 5]}]}, "file index 5"),
        ({**METADATA, "tensors": [{**entry("w", 3), "chunk_crcs": [1]}]}, "chunk_crcs"),
    ]
    for meta, needle in bad_entries:
        with pytest.raises(ValueError, match=needle):
            cm.encode(meta)
    # the same faults in bytes are InvalidValueError from both codecs: rebuild the CRC after the edit
    data = bytearray(cm.encode({**METADATA, "files": ["__0_0.distcp"]}))
    at = data.index(b"__0_0.distcp")
    data[at:at + 2] = b".."
    data[at + 2] = ord("/")
    data[-4:] = struct.pack("<I", zlib.crc32(data[10:-4]))
    err = both(cm.decode, bytes(data))[0]
    assert isinstance(err, InvalidValueError) and "not a plain file name" in str(err)
    # a forged chunk count allocates nothing: it is compared with the bytes present
    data = bytearray(good)
    at = data.index(struct.pack("<I", 6) + struct.pack("<QQ", 0, 0))
    struct.pack_into("<I", data, at, 0x7FFFFFF)
    assert isinstance(both(cm.decode, bytes(data))[0], (TruncatedError, LimitError))
