"""Compressed checkpoints and the constructor arguments of torch's storage classes.

``FileSystemWriter(_extensions=[ZStandard()])`` writes ``checkpoint-shard`` version 2 files whose
records are ZSTD bodies (a CRC-32 over the stored frame, a declared inflated length checked
before inflating); ``None`` and ``[]`` do not compress; any other stream transform, and
``serialization_format=SAFETENSORS``, are refused.  ``FileSystemReader`` takes torch's
``_extension_registry``.  The signatures are torch's own, read from the installed release.
"""

from __future__ import annotations

import inspect
import struct
import zlib
from pathlib import Path
from typing import IO, Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
import zstandard as zstd
from torch.distributed.checkpoint.api import CheckpointException

from inert.codecs import checkpoint_metadata as cm
from inert.codecs import checkpoint_shard as cs
from inert.conformance._filelib import tensor_body, value_body, zstd_body, zstd_frame

try:  # a capability gate: compressed records ride on DCP's stream extensions and SerializationFormat
    from torch.distributed.checkpoint._extension import ExtensionRegistry, StreamTransformExtension, ZStandard
    from torch.distributed.checkpoint.filesystem import SerializationFormat
except ImportError:  # before 2.8
    pytest.skip("compressed checkpoints need DCP's stream extensions and SerializationFormat (PyTorch 2.8 and later)",
                allow_module_level=True)

from inert import ChecksumError, InertError, InvalidValueError, LimitError, UnknownTagError, VersionError
from inert._checks import MAX_INFLATED
from inert._codec_runtime import read_file_header
from inert._zstd import Inflation, deflate, inflate
from inert.torch import FileSystemReader, FileSystemWriter, load_tensors
from inert.torch._metadata import METADATA_VERSION

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def state() -> dict[str, Any]:
    torch.manual_seed(0)
    return {
        "zeros": torch.zeros(256, 64),
        "ramp": torch.arange(4096, dtype=torch.int64),
        "noise": torch.randn(64, 64),  # does not shrink: stored as a plain tensor record
        "flags": torch.tensor([True, False, True]),
        "half": torch.ones(33, dtype=torch.bfloat16),
        "empty": torch.zeros(0, 5),
        "step": torch.tensor(7),
        "opt": {"lr": 0.1, "betas": (0.9, 0.999), "note": "x" * 500, "blob": b"SomeBlobForTesting"},
    }


def blank(like: dict[str, Any]) -> dict[str, Any]:
    out = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None for k, v in like.items()}
    out["opt"] = {"lr": 0.0, "betas": (0.0, 0.0), "note": "", "blob": b""}
    return out


def save(state: dict[str, Any], path: Path, **writer: Any) -> None:
    dcp.save(state, storage_writer=FileSystemWriter(path, **writer), no_dist=True)


def load(state: dict[str, Any], path: Path, **reader: Any) -> None:
    dcp.load(state, storage_reader=FileSystemReader(path, **reader), no_dist=True)


def failure(call: Any, *args: Any, **kw: Any) -> BaseException:
    with pytest.raises(CheckpointException) as info:
        call(*args, **kw)
    inner = info.value.failures[0]
    return inner[0] if isinstance(inner, tuple) else inner


def kinds(path: Path) -> list[str]:
    """The kind of every record in the checkpoint's data files, in file order."""
    out = []
    for data_file in sorted(path.glob("*.distcp")):
        out += [r["record"]["body"]["kind"].name for r in cs.decode(data_file.read_bytes())["records"]]
    return out


def test_signatures_are_torchs() -> None:
    import torch.distributed.checkpoint.filesystem as fs

    for ours, theirs in ((FileSystemWriter, fs.FileSystemWriter), (FileSystemReader, fs.FileSystemReader)):
        mine = inspect.signature(ours).parameters
        torchs = [p for p in inspect.signature(theirs).parameters.values() if p.kind is not p.VAR_POSITIONAL
                  and p.kind is not p.VAR_KEYWORD]
        positional = [p for p in mine.values() if p.kind is not p.KEYWORD_ONLY]
        assert [p.name for p in positional] == [p.name for p in torchs], ours
        for param in torchs:
            assert mine[param.name].default == param.default, (ours, param.name)


@pytest.mark.parametrize("extensions", [None, []])
def test_no_extension_stores_records_as_they_are(tmp_path: Path, extensions: Any) -> None:
    s = state()
    save(s, tmp_path, _extensions=extensions)
    assert "ZSTD" not in kinds(tmp_path)
    into = blank(s)
    load(into, tmp_path)
    assert all(torch.equal(into[k], s[k]) for k in s if k != "opt") and into["opt"] == s["opt"]


@pytest.mark.parametrize("thread_count", [1, 2])
def test_zstandard_compresses_and_loads_back(tmp_path: Path, thread_count: int) -> None:
    s = state()
    save(s, tmp_path, _extensions=[ZStandard()], thread_count=thread_count)
    for data_file in tmp_path.glob("*.distcp"):
        assert data_file.read_bytes()[:10] == cs.MAGIC + b"\x02\x00"
    found = kinds(tmp_path)
    assert found.count("ZSTD") >= 4 and "TENSOR" in found  # random floats do not shrink
    plain = tmp_path / "plain"
    save(s, plain)
    assert sum(f.stat().st_size for f in tmp_path.glob("*.distcp")) < sum(f.stat().st_size for f in plain.glob("*.distcp")) / 2
    into = blank(s)
    load(into, tmp_path, thread_count=thread_count)
    assert all(torch.equal(into[k], s[k]) for k in s if k != "opt") and into["opt"] == s["opt"]
    tensors = load_tensors(tmp_path)
    assert all(torch.equal(tensors[k], s[k]) for k in s if k != "opt")
    # A planner of the caller's own: bytes re-serialized from the checked value, as for plain records.
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class Planner(DefaultLoadPlanner):
        def resolve_tensor(self, read_item: Any) -> torch.Tensor:
            return super().resolve_tensor(read_item)

    into = blank(s)
    dcp.load(into, storage_reader=FileSystemReader(tmp_path), planner=Planner(), no_dist=True)
    assert all(torch.equal(into[k], s[k]) for k in s if k != "opt") and into["opt"] == s["opt"]


class Rot13(StreamTransformExtension):
    """A stream transform of the caller's own: code that a reader would have to run."""

    @staticmethod
    def registry_name() -> str:
        return "stream.rot13"

    @staticmethod
    def from_descriptor(version: str) -> Rot13:
        return Rot13()

    def get_descriptor(self) -> str:
        return "stream.rot13/1"

    def transform_to(self, output: IO[bytes]) -> IO[bytes]:
        return output

    def transform_from(self, input: IO[bytes]) -> IO[bytes]:
        return input


def test_unknown_stream_transforms_are_refused_naming_what_is_supported(tmp_path: Path) -> None:
    for extensions in ([Rot13()], [ZStandard(), Rot13()], [ZStandard(), ZStandard()]):
        with pytest.raises(ValueError, match=r"_extensions: .*Supported: None, \[\], or \[torch\.distributed\.checkpoint\."
                                             r"_extension\.ZStandard") as info:
            FileSystemWriter(tmp_path, _extensions=extensions)
        assert "Rot13" in str(info.value) or "more than one" in str(info.value)
    with pytest.raises(TypeError, match="_extensions: expected a list"):
        FileSystemWriter(tmp_path, _extensions=ZStandard())  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())  # refused before anything is written


def test_serialization_format(tmp_path: Path) -> None:
    save({"w": torch.ones(3)}, tmp_path, serialization_format=SerializationFormat.TORCH_SAVE)
    with pytest.raises(ValueError, match="not safetensors files"):
        FileSystemWriter(tmp_path, serialization_format=SerializationFormat.SAFETENSORS)


def test_reader_takes_an_extension_registry(tmp_path: Path) -> None:
    save({"w": torch.ones(3)}, tmp_path, _extensions=[ZStandard()])
    registry = ExtensionRegistry()
    registry.register(Rot13)  # never consulted: nothing in an Inert checkpoint names an extension
    into = {"w": torch.zeros(3)}
    load(into, tmp_path, _extension_registry=registry)
    assert torch.equal(into["w"], torch.ones(3))
    reader = FileSystemReader(tmp_path, ExtensionRegistry())  # positional, as torch's
    assert reader.extension_registry is not None
    with pytest.raises(TypeError, match="_extension_registry"):
        FileSystemReader(tmp_path, _extension_registry={"stream.rot13": Rot13})


def _zstd_place(path: Path, fqn: str) -> tuple[Path, int, int, dict[str, Any]]:
    meta = cm.decode((path / ".metadata").read_bytes())
    entry = next(e for e in meta["tensors"] if e["fqn"] == fqn)
    return path / meta["files"][entry["chunk_files"][0]], entry["chunk_byte_offsets"][0], entry["chunk_byte_lengths"][0], meta


def _replace_record(path: Path, fqn: str, record: bytes) -> None:
    """Put ``record`` where ``fqn``'s record is, at the end of its file, with the metadata to match."""
    data_file, _, _, meta = _zstd_place(path, fqn)
    data = bytearray(data_file.read_bytes())
    at = len(data) + -len(data) % 64
    data_file.write_bytes(bytes(data) + bytes(at - len(data)) + record)
    entry = next(e for e in meta["tensors"] if e["fqn"] == fqn)
    entry.update(chunk_byte_offsets=[at], chunk_byte_lengths=[len(record)], chunk_crcs=[zlib.crc32(record[:-4])])
    (path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))


def _zstd_record(inflated_length: int, frame: bytes) -> bytes:
    body = zstd_body(0, inflated_length, frame)
    return body + struct.pack("<I", zlib.crc32(body))


def test_a_damaged_frame_is_refused_before_inflating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    save({"zeros": torch.zeros(256, 64)}, tmp_path, _extensions=[ZStandard()])
    data_file, at, length, _ = _zstd_place(tmp_path, "zeros")
    good = data_file.read_bytes()
    bad = bytearray(good)
    bad[at + length - 10] ^= 0x01  # a byte of the stored frame
    data_file.write_bytes(bytes(bad))
    import inert.torch._reader as reader_module

    inflated = []
    monkeypatch.setattr(reader_module, "Inflation", lambda *a, **k: inflated.append(a) or Inflation(*a, **k))
    into = {"zeros": torch.ones(256, 64)}
    assert isinstance(failure(load, into, tmp_path), ChecksumError)
    assert not inflated and torch.equal(into["zeros"], torch.ones(256, 64))
    with pytest.raises(ChecksumError):
        load_tensors(tmp_path)


def test_a_compressed_tensor_is_inflated_into_its_destination(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaded whole into a contiguous tensor, a compressed record takes no buffer of its inflated length:
    only the stored record's; otherwise one buffer of the inflated length (the frame is never inflated twice over)."""
    from inert.torch import _reader as reader_module

    saved = {"w": torch.arange(1 << 20, dtype=torch.float32).reshape(1024, 1024) % 7}  # 4 MiB, deflates well
    save(saved, tmp_path, _extensions=[ZStandard()])
    taken: list[int] = []
    take = reader_module._Buffers.take
    monkeypatch.setattr(reader_module._Buffers, "take", lambda self, n: taken.append(n) or take(self, n))
    into = {"w": torch.zeros(1024, 1024)}
    load(into, tmp_path)
    assert torch.equal(into["w"], saved["w"])
    stored = next(tmp_path.glob("*.distcp")).stat().st_size
    assert taken and max(taken) < stored < (1 << 20)
    taken.clear()
    into = {"w": torch.zeros(1024, 1024).t()}  # not contiguous: inflated into one buffer of its length, then copied
    load(into, tmp_path)
    assert torch.equal(into["w"], saved["w"]) and max(taken) == 4 * (1 << 20) + 64


def test_declared_lengths_bound_memory_before_inflating(tmp_path: Path) -> None:
    save({"w": torch.zeros(4, 4), "v": {"x": 1}}, tmp_path, _extensions=[ZStandard()])
    body = tensor_body(0, "FLOAT32", [4, 4], bytes(64))
    # A frame declaring 1 GiB for a 4x4 float32 chunk (128 bytes of body): refused before inflating.
    bomb = zstd_frame(b"\x00" * 4, declared=1 << 30, rle=True)
    _replace_record(tmp_path, "w", _zstd_record(1 << 30, bomb))
    error = failure(load, {"w": torch.zeros(4, 4), "v": {"x": 0}}, tmp_path)
    assert isinstance(error, InvalidValueError)
    assert "1073741824 bytes declared, the metadata's dtype and shape give 128" in str(error)
    # The record declares the right length, its frame another: refused before inflating too.
    _replace_record(tmp_path, "w", _zstd_record(len(body), zstd_frame(body, declared=len(body) + 1)))
    error = failure(load, {"w": torch.zeros(4, 4), "v": {"x": 0}}, tmp_path)
    assert isinstance(error, InvalidValueError) and "the frame declares 129, the record 128 bytes" in str(error)
    # What the frame holds must be a version 1 body: a ZSTD body inside is an unknown tag.
    inner = zstd_body(0, 128, b"x" * 64)  # 128 bytes: what the chunk's body takes
    _replace_record(tmp_path, "w", _zstd_record(128, zstd_frame(inner)))
    error = failure(load, {"w": torch.zeros(4, 4), "v": {"x": 0}}, tmp_path)
    assert isinstance(error, UnknownTagError) and ".inflated." in error.field and "of the inflated bytes" in str(error)
    # And it is read when it is one.
    _replace_record(tmp_path, "w", _zstd_record(len(body), zstd_frame(body)))
    into = {"w": torch.ones(4, 4), "v": {"x": 0}}
    load(into, tmp_path)
    assert torch.equal(into["w"], torch.zeros(4, 4)) and into["v"] == {"x": 1}


def test_inflate_checks_the_frame_against_the_record() -> None:
    content = value_body(b"\x93\x01\x02\x03")

    def body(frame: bytes, length: int = len(content)) -> dict[str, Any]:
        return {"inflated_length": length, "data": memoryview(frame)}

    assert inflate(body(zstd_frame(content)), 0, "r", limit=100) == content
    assert inflate(body(zstd.ZstdCompressor().compress(content)), 0, "r", limit=100) == content
    assert inflate(body(deflate([content[:3], memoryview(content)[3:]])), 0, "r", limit=100) == content
    cases = [
        (body(zstd_frame(content), length=200), {"limit": 100}, LimitError, "exceeds the limit of 100"),
        (body(zstd_frame(content)), {"expected": 10, "limit": 100}, InvalidValueError, "the metadata's dtype and shape give 10"),
        (body(b"no frame at all"), {"limit": 100}, InvalidValueError, "not a zstd frame"),
        (body(zstd.ZstdCompressor(write_content_size=False).compress(content)), {"limit": 100}, InvalidValueError,
         "declares no content size"),
        (body(zstd_frame(content) + b"\x00"), {"limit": 100}, InvalidValueError, "does not inflate"),
        (body(zstd_frame(content, declared=len(content) - 1), length=len(content) - 1), {"limit": 100}, InvalidValueError,
         "does not inflate"),
        (body(zstd_frame(content)[:-2]), {"limit": 100}, InvalidValueError, "does not inflate"),
    ]
    for value, limits, error, text in cases:
        with pytest.raises(error, match=text) as info:
            inflate(value, 640, "f.body", **limits)
        assert info.value.offset == 640 and info.value.field.startswith("f.body")
    # A frame naming dictionary 7 (frame header descriptor 0xA1: a 1-byte dictionary id), otherwise valid.
    with_dict = struct.pack("<IBBI", 0xFD2FB528, 0xA1, 7, len(content)) + zstd_frame(content)[9:]
    with pytest.raises(InvalidValueError, match="needs dictionary 7"):
        inflate(body(with_dict), 0, "r", limit=100)
    # Every bit of a real frame flipped: the content or an InertError, nothing else.
    frame = zstd.ZstdCompressor().compress(content * 3)
    for index in range(len(frame) * 8):
        flipped = bytearray(frame)
        flipped[index // 8] ^= 1 << (index % 8)
        try:
            inflate(body(bytes(flipped), len(content) * 3), 0, "r", limit=1000)
        except InertError:
            pass


def test_the_inflated_limit_is_the_specs() -> None:
    from inert.spec import checkpoint_shard

    assert MAX_INFLATED == checkpoint_shard.MAX_INFLATED


def test_a_version_1_reader_refuses_version_2_and_version_2_files_of_plain_records_still_load(tmp_path: Path) -> None:
    save({"w": torch.arange(10.0)}, tmp_path)  # uncompressed: version 1 (tests/test_writer_versions.py)
    data_file = next(tmp_path.glob("*.distcp"))
    data = data_file.read_bytes()
    records = cs.decode(data)
    data_file.write_bytes(cs.encode(records, version=2))  # the same records in a version 2 file
    assert data_file.read_bytes()[10:] == data[10:]
    into = {"w": torch.zeros(10)}
    load(into, tmp_path)
    assert torch.equal(into["w"], torch.arange(10.0))
    squeezed = tmp_path / "zstd"
    save({"w": torch.zeros(4096)}, squeezed, _extensions=[ZStandard()])
    compressed = next(squeezed.glob("*.distcp")).read_bytes()
    with pytest.raises(VersionError, match=r"version 2 is not supported \(this reader knows 1\)"):
        read_file_header("checkpoint-shard", compressed, cs.MAGIC, (1,))  # what a reader of the last release does
