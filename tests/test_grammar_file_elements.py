"""The grammar elements of file formats, interpreted by Construct, one by one: Magic, the versioned
file header, Bytes, Padding, Crc32 and MsgPack.  (The generated codecs of the same elements are
held to the interpreter byte for byte in test_checkpoint_formats.py.)"""

from __future__ import annotations

import pickle
import struct
import zlib
from typing import Any

import msgpack
import pytest

from inert import (
    ChecksumError,
    ForeignFormatError,
    InvalidValueError,
    LimitError,
    TrailingBytesError,
    TruncatedError,
    UnknownTagError,
    VersionError,
    WriteTypeError,
    WriteValueError,
)
from inert._interpret import interpret_decode, interpret_encode
from inert.codecs import checkpoint_shard as cs
from inert.spec._grammar import (
    Bytes,
    Crc32,
    Format,
    Int8ul,
    Int32ul,
    Magic,
    MsgPack,
    Padding,
    Record,
    min_size,
)

BODY = Record(
    "Body",
    "tag" / Magic(b"TG"),
    "blob" / Bytes(Int32ul, 16, align=8),
    "pad" / Padding(4),
    "doc" / MsgPack(Int32ul, 64, 3),
    "n" / Int8ul,
    "crc" / Crc32(),
)
FILE = Format("elements-test", {1: BODY, 2: BODY}, "", magic=b"\x89ELEM\r\n", max_size=256)
PLAIN = Format("elements-plain", {1: BODY}, "")
VALUE = {"blob": b"abc", "doc": {"k": (1, 2)}, "n": 5}


def test_round_trip_and_layout() -> None:
    data = interpret_encode(PLAIN, VALUE)
    assert data[:2] == b"TG"
    assert struct.unpack_from("<I", data, 2) == (3,) and data[6:8] == b"\x00\x00" and data[8:11] == b"abc"
    assert data[11] == 0  # Padding(4) after the 3 bytes ending at 11
    assert struct.unpack_from("<I", data, len(data) - 4)[0] == zlib.crc32(data[:-4])
    decoded = interpret_decode(PLAIN, data)
    assert decoded == {"tag": b"TG", "blob": b"abc", "doc": {"k": (1, 2)}, "n": 5, "crc": zlib.crc32(data[:-4])}
    assert "pad" not in decoded  # padding carries no value
    assert min_size(BODY) == 2 + 4 + 0 + 4 + 1 + 4


def test_file_header_versions_and_size_limit() -> None:
    data = interpret_encode(FILE, VALUE)
    assert data[:9] == b"\x89ELEM\r\n\x02\x00"  # writers write the newest version
    assert interpret_decode(FILE, data)["n"] == 5
    old = interpret_encode(FILE, VALUE, version=1)
    assert old[7:9] == b"\x01\x00" and interpret_decode(FILE, old)["n"] == 5
    with pytest.raises(VersionError, match=r"version 3 is not supported \(this reader knows 1, 2\)"):
        interpret_decode(FILE, data[:7] + b"\x03\x00" + data[9:])
    with pytest.raises(LimitError, match=r"max_size\(256\)"):
        interpret_decode(FILE, data + bytes(300))
    with pytest.raises(LimitError, match=r"max_size\(20\)"):
        interpret_decode(FILE, data, max_size=20)
    with pytest.raises(TruncatedError):
        interpret_decode(FILE, data[:8])


@pytest.mark.parametrize(
    ("data", "looks_like"),
    [
        (pickle.dumps([1]), r"a pickle \(protocol"),
        (b"PK\x03\x04" + bytes(20), "zip archive"),
        (struct.pack("<Q", 2) + b"{}", "safetensors"),
        (b"\x89INRTMD\n\x01\x00", "another Inert file"),
        (b"hello world", "unknown bytes 68 65 6c"),
    ],
)
def test_magic_names_what_the_bytes_look_like(data: bytes, looks_like: str) -> None:
    for decode in (lambda d: interpret_decode(FILE, d), cs.decode):
        with pytest.raises(ForeignFormatError, match=looks_like) as info:
            decode(data)
        assert info.value.offset == 0 and info.value.field == "magic"
    with pytest.raises(ForeignFormatError, match="expected b'TG'"):
        interpret_decode(PLAIN, b"XX" + interpret_encode(PLAIN, VALUE)[2:])


def test_faults_of_each_element() -> None:
    data = bytearray(interpret_encode(PLAIN, VALUE))
    bad = bytearray(data)
    bad[6] = 1  # Bytes' alignment padding
    with pytest.raises(InvalidValueError, match="padding byte is 1") as info:
        interpret_decode(PLAIN, bytes(bad))
    assert info.value.offset == 6 and info.value.field == "blob"
    bad = bytearray(data)
    bad[11] = 9  # Padding
    with pytest.raises(InvalidValueError, match="padding byte is 9"):
        interpret_decode(PLAIN, bytes(bad))
    bad = bytearray(data)
    bad[-5] ^= 1  # n: only the checksum sees it
    with pytest.raises(ChecksumError, match="stored CRC-32") as info:
        interpret_decode(PLAIN, bytes(bad))
    assert info.value.offset == len(data) - 4 and info.value.field == "crc"
    assert interpret_decode(PLAIN, bytes(bad), verify_checksums=False)["n"] == 4
    bad = bytearray(data)
    struct.pack_into("<I", bad, 2, 17)
    with pytest.raises(LimitError, match=r"max_len\(16\)"):
        interpret_decode(PLAIN, bytes(bad))
    struct.pack_into("<I", bad, 2, 16)
    with pytest.raises(TruncatedError):
        interpret_decode(PLAIN, bytes(bad)[:20])
    with pytest.raises(TrailingBytesError):
        interpret_decode(PLAIN, bytes(data) + b"\x00")


def _with_doc(doc: bytes) -> bytes:
    head = b"TG" + struct.pack("<I", 0) + b"\x00\x00" + struct.pack("<I", len(doc)) + doc + b"\x05"
    return head + struct.pack("<I", zlib.crc32(head))


@pytest.mark.parametrize(
    ("doc", "error", "text"),
    [
        (msgpack.packb([[[[1]]]]), LimitError, r"max_depth\(3\)"),
        (msgpack.packb(msgpack.ExtType(42, b"")), UnknownTagError, "extension code 42"),
        (b"\xd6\xff" + bytes(4), UnknownTagError, "extension code -1"),  # ext -1: a msgpack timestamp
        (msgpack.packb("x" * 70), LimitError, r"max_len\(64\)"),
        (b"\x92\x01", TruncatedError, "2 elements need"),
        (b"\x01\x02", TrailingBytesError, "after the end"),
    ],
)
def test_msgpack_documents(doc: bytes, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text) as info:
        interpret_decode(PLAIN, _with_doc(doc))
    assert info.value.field == "doc"  # type: ignore[attr-defined]
    assert interpret_decode(PLAIN, _with_doc(msgpack.packb([[[1]]])))["doc"] == [[[1]]]  # 3 deep: the limit


@pytest.mark.parametrize(
    ("value", "error", "text"),
    [
        ({**VALUE, "blob": "str"}, WriteTypeError, "expected bytes"),
        ({**VALUE, "blob": bytes(17)}, WriteValueError, r"max_len\(16\)"),
        ({**VALUE, "doc": object()}, WriteTypeError, "builtins.object is not in the value subset"),
        ({**VALUE, "doc": [[[[1]]]]}, WriteValueError, "max_depth"),
        ({**VALUE, "doc": {"k": [1, {"2": {"3"}}]}}, WriteValueError, "max_depth"),
    ],
)
def test_writer_refuses(value: dict[str, Any], error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        interpret_encode(PLAIN, value)


def test_padding_rejects_bad_alignment() -> None:
    with pytest.raises(ValueError, match="power of two"):
        Padding(3)


def test_equal_sets_encode_to_equal_bytes_whatever_the_hash_seed() -> None:
    import subprocess
    import sys

    # String hashes, and so a set's iteration order, change with the interpreter's hash seed.
    script = (
        "import sys; from inert.codecs import checkpoint_shard as cs; "
        "members = [f'param_group_{i}' for i in range(40)]; "
        "value = {'seen': set(members), 'frozen': frozenset(members), 'nested': {'f': frozenset(members[:5])}}; "
        "sys.stdout.write(cs.encode_record({'body': {'kind': 'VALUE', 'value': value}}).hex())"
    )
    runs = {
        seed: subprocess.run(
            [sys.executable, "-c", script], env={"PYTHONHASHSEED": seed, "PATH": ""}, capture_output=True, text=True, check=True
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(set(runs.values())) == 1, "the same set gave different bytes"
    decoded = cs.decode_record(bytes.fromhex(runs["1"]))["body"]["value"]
    assert decoded["seen"] == {f"param_group_{i}" for i in range(40)} and type(decoded["frozen"]) is frozenset
