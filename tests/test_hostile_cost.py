"""Inputs chosen for cost, and the errors they must end in.

Cost is bounded by the input: about 1 s of CPU per MiB and at most 100 bytes of memory per
input byte plus 1 MiB, for every reader and CLI command.  Each case is named after what a
hostile file declares (a length, a dimension, a compressed member, an endless stream) and
asserts the ``InertError`` (the CLI: one line, exit 1) that must come before the cost.
"""

from __future__ import annotations

import contextlib
import copyreg
import inspect
import io
import os
import pickle
import subprocess
import sys
import tempfile
import tracemalloc
import zipfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import torch.distributed.checkpoint as dcp

import inert.torch
from inert import InertError, InvalidValueError, LimitError, WriteTypeError
from inert._allowlist import RefusedGlobal, load_legacy_metadata
from inert.cli.inspect import inspect_path
from inert.codecs import checkpoint_metadata as cm
from inert.codecs import dump_manifest
from inert.dump import Row, dump, load
from inert.torch import FileSystemWriter, load_tensors
from inert.torch._metadata import METADATA_VERSION
from inert.torch._reader import MAX_VALUE_LEN

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ONE = {"no_dist": True} if "no_dist" in inspect.signature(dcp.save).parameters else {}


def _cli(*argv: str, stdin: Any = subprocess.DEVNULL, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inert", *argv], capture_output=True, text=True, timeout=timeout,
                          stdin=stdin)


def _forged(codec: Any, typename: str) -> Any:
    """A writer that skips the rules of one record (the codec's compiled ``_rules_<Typename>``), as a hostile
    peer's would (honest writers refuse)."""
    return mock.patch.object(codec, f"_rules_{typename}", lambda value, ctx: None)


def _edit_metadata(path: Path, change: Any, *skip: str) -> None:
    meta = cm.decode((path / ".metadata").read_bytes())
    change(meta)
    with contextlib.ExitStack() as stack:
        for typename in skip:
            stack.enter_context(_forged(cm, typename))
        (path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))


def test_spec_value_cap_is_the_reader_cap() -> None:
    from inert.spec import checkpoint_shard

    assert checkpoint_shard.MAX_VALUE_LEN == MAX_VALUE_LEN


# -- endless input -------------------------------------------------------------------------------------------

def test_decode_of_dev_zero_reads_at_most_the_format_maximum_plus_one_byte() -> None:
    result = _cli("decode", "--format", "checkpoint-metadata", "/dev/zero")
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "max_size(67108864)" in result.stderr, result.stderr


def test_decode_of_endless_stdin_reads_at_most_the_limit_plus_one_byte() -> None:
    with open("/dev/zero", "rb") as zero:
        result = _cli("decode", "--format", "checkpoint-metadata", "--max-size", "4096", "-", stdin=zero)
    assert result.returncode == 1 and "longer than max_size(4096)" in result.stderr, result.stderr
    with open("/dev/zero", "rb") as zero:  # a format without a size limit: the CLI's stream limit
        result = _cli("decode", "--format", "shm-message", "-", stdin=zero)
    assert result.returncode == 1 and f"longer than max_size({256 << 20})" in result.stderr, result.stderr


# -- a zip member that inflates far beyond the file --------------------------------------------------------------

def test_inspect_of_a_zip_bomb_inflates_only_what_is_walked(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.pt"
    pickled = b"\x80\x04" + b"N0" * (32 << 20) + b"N."  # 64 MiB of opcodes, deflated to about 64 KiB
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr("archive/data.pkl", pickled)
        archive.writestr("archive/.data/version", b"3\n")
    size = bomb.stat().st_size
    assert size < 1 << 20
    tracemalloc.start()
    try:
        summary = inspect_path(str(bomb))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summary["format"] == "torch-save-zip"
    walked = summary["data_pkl"]["opcodes"]
    assert 0 < walked <= size + (256 << 10), walked
    assert "only the first" in summary["data_pkl"]["note"]
    assert peak <= 100 * size + (1 << 20), (peak, size)


# -- declared lengths: value records and tensor records ------------------------------------------------------------

@pytest.mark.parametrize("length", [2_300_000_000, 1 << 43], ids=["2.3GB", "2**43"])
def test_value_record_declared_beyond_the_64_MiB_document_cap_is_refused_before_allocation(
    tmp_path: Path, length: int
) -> None:
    dcp.save({"w": torch.ones(4), "v": {"step": 3}}, storage_writer=FileSystemWriter(tmp_path), **ONE)

    def longer(meta: dict[str, Any]) -> None:
        meta["values"][0]["byte_length"] = length

    _edit_metadata(tmp_path, longer)
    data = next(tmp_path.glob("*.distcp"))
    value = cm.decode((tmp_path / ".metadata").read_bytes())["values"][0]
    os.truncate(data, value["byte_offset"] + length)  # a sparse file: the record lies inside it
    with pytest.raises(LimitError, match=r"storage_data\[v\.step\]\.length: record of \d+ bytes exceeds max_len") as info:
        inert.torch.load({"w": torch.zeros(4), "v": {"step": 0}}, tmp_path)
    assert f"{MAX_VALUE_LEN}" in str(info.value)
    result = _cli("verify", str(tmp_path))
    assert result.returncode == 1 and "exceeds max_len" in result.stderr and "Traceback" not in result.stderr


def test_sparse_data_file_tensor_header_is_checked_before_load_tensors_allocates(tmp_path: Path) -> None:
    """A 64 GiB tensor in a sparse file: the record's header (zeros, a hole) is refused before the
    tensor is allocated, which would fail (or reserve 64 GiB) first otherwise."""
    dcp.save({"w": torch.ones(4)}, storage_writer=FileSystemWriter(tmp_path), **ONE)
    numel = 1 << 34

    def huge(meta: dict[str, Any]) -> None:
        entry = meta["tensors"][0]
        entry["size"] = [numel]
        entry["chunk_sizes"] = [numel]
        entry["chunk_byte_lengths"] = [64 + numel * 4 + 4]

    _edit_metadata(tmp_path, huge)
    data = next(tmp_path.glob("*.distcp"))
    offset = cm.decode((tmp_path / ".metadata").read_bytes())["tensors"][0]["chunk_byte_offsets"][0]
    os.truncate(data, offset)  # the record is a hole: 16 KiB on disk or less
    os.truncate(data, offset + 64 + numel * 4 + 4)
    with pytest.raises(InertError) as info:
        load_tensors(tmp_path, verify_checksums=False)
    assert "cannot be allocated" not in str(info.value) and "w.body.kind" in str(info.value), str(info.value)


# -- dimensions torch cannot hold ----------------------------------------------------------------------------------

def test_zero_element_tensor_with_a_dimension_of_2_63_is_refused_by_the_metadata(tmp_path: Path) -> None:
    dcp.save({"w": torch.ones(0, 4)}, storage_writer=FileSystemWriter(tmp_path), **ONE)

    def huge(meta: dict[str, Any]) -> None:
        meta["tensors"][0]["size"] = [0, 1 << 63]
        meta["tensors"][0]["chunk_sizes"] = [0, 1 << 63]

    _edit_metadata(tmp_path, huge, "TensorEntry")
    for call in (lambda: load_tensors(tmp_path), lambda: inert.torch.load({"w": torch.ones(0, 4)}, tmp_path)):
        with pytest.raises(InvalidValueError, match=r"size\[1\]: dimension 9223372036854775808 exceeds 2\*\*63 - 1"):
            call()
    for command in ("verify", "inspect"):
        result = _cli(command, str(tmp_path))
        assert result.returncode == 1 and "exceeds 2**63 - 1" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("copy", [False, True], ids=["default", "mapped"])
def test_zero_element_dump_field_with_a_dimension_of_2_63_is_refused_by_the_manifest(tmp_path: Path, copy: bool) -> None:
    path = tmp_path / "d"
    dump([Row("a", 0, {"x": torch.ones(0, 4)}, {})], path)
    value = dump_manifest.decode((path / "MANIFEST").read_bytes())
    value["fields"][0]["layout"]["shape"] = [0, 1 << 63]
    with _forged(dump_manifest, "DumpManifest"):
        (path / "MANIFEST").write_bytes(dump_manifest.encode(value))
    with pytest.raises(InvalidValueError, match=r"fields\[0\]\.layout\.shape\[1\]: dimension"):
        load(path, mapped=copy)
    result = _cli("verify", str(path))
    assert result.returncode == 1 and "exceeds 2**63 - 1" in result.stderr and "Traceback" not in result.stderr


# -- migrate: a memory-format code torch refuses, and the allowlist's BUILD and SETITEM ------------------------------

def test_migrate_memory_format_code_99_is_one_line(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.metadata import TensorProperties

    src = tmp_path / "legacy"
    dcp.save({"w": torch.ones(4)}, storage_writer=dcp.FileSystemWriter(src), **ONE)
    metadata = pickle.loads((src / ".metadata").read_bytes())

    class Forger(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, TensorProperties):  # the state DCP pickles, with a code no release defines
                return copyreg.__newobj__, (TensorProperties,), (obj.dtype, obj.layout, False, 99, False)
            return NotImplemented

    out = io.BytesIO()
    Forger(out, protocol=2).dump(metadata)
    (src / ".metadata").write_bytes(out.getvalue())
    result = _cli("migrate", str(src), str(tmp_path / "out"), "--trust-source")
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "Invalid torch.memory_format encoding: 99" in result.stderr, result.stderr


def test_allowlist_refuses_build_on_a_class() -> None:
    import pathlib

    before = pathlib.PurePath.__truediv__
    # PurePath, then a dict {"__truediv__": PurePosixPath}, then BUILD: setattr on the class itself.
    data = b"cpathlib\nPurePath\n(dV__truediv__\ncpathlib\nPurePosixPath\nsb."
    with pytest.raises(RefusedGlobal, match="sets the state of the class pathlib.PurePath"):
        load_legacy_metadata(data)
    assert pathlib.PurePath.__truediv__ is before


def test_allowlist_refuses_setitem_on_a_class() -> None:
    data = b"ccollections\nOrderedDict\nVx\nI1\ns."
    with pytest.raises(RefusedGlobal, match="SETITEM on the class collections.OrderedDict"):
        load_legacy_metadata(data)


def test_allowlist_refuses_build_on_a_shared_object() -> None:
    """A dtype answered by find_class is torch's own singleton: a state set on it would stay."""
    data = b"ctorch\nfloat32\n(dVx\nI1\nsb."
    with pytest.raises(RefusedGlobal, match="sets the state of a torch.dtype"):
        load_legacy_metadata(data)
    assert not hasattr(torch.float32, "x")


# -- the shared-memory channel: a chunk that cannot be mapped ---------------------------------------------------------

def test_unmappable_chunk_is_an_inert_error() -> None:
    """A sealed memfd of the declared size that mmap refuses (here: a write-only descriptor of it; a
    hugetlb memfd of another size fails the same call) is refused as the channel's error."""
    import fcntl

    from inert.shm._memory import map_chunk

    fd = os.memfd_create("chunk", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 4096)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    write_only = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
    os.close(fd)
    with pytest.raises(InertError, match=r"chunk\.fd: the chunk cannot be mapped"):
        map_chunk(write_only, 0, 4096, require_seals=True, max_capacity=1 << 20)
    with pytest.raises(OSError):
        os.fstat(write_only)  # closed either way


# -- value documents: the canonical MessagePack form bounds these ---------------------------------------------------

def test_manifest_tags_whose_complex_keys_all_hash_alike_are_refused_at_write(tmp_path: Path) -> None:
    # hash(complex(x, y)) is hash(x) + 1000003 * hash(y): these keys differ and all hash alike.  The canonical
    # form allows only str and bin keys, so no writer makes such a manifest and every reader refuses one
    # (tests/test_value_documents.py feeds the hostile bytes to the readers).
    count = 8_000
    tag = {complex(float(1_000_003 * (count - y)), float(y)): 0 for y in range(count)}
    path = tmp_path / "d"
    with pytest.raises(WriteTypeError, match="map keys must be str or bytes"):
        dump([Row("a", 0, {}, tag)], path)
    assert not path.exists()


def test_metadata_planner_data_of_empty_maps_stays_within_the_memory_bound(tmp_path: Path) -> None:
    from inert.torch import loads_metadata

    dcp.save({"w": torch.ones(4)}, storage_writer=FileSystemWriter(tmp_path), **ONE)

    def empties(meta: dict[str, Any]) -> None:
        meta["planner_data"] = [{} for _ in range(200_000)]

    _edit_metadata(tmp_path, empties)
    data = (tmp_path / ".metadata").read_bytes()
    tracemalloc.start()
    try:
        loads_metadata(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 100 * len(data) + (1 << 20), (peak, len(data))



# -- inert verify of a record that a sparse file makes cheap to declare ------------------------------------------------

def _cli_peak_rss(*argv: str) -> tuple[int, int, str]:
    """The CLI in its own process: its exit code, its peak resident memory in bytes, and its stderr."""
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "inert", *argv], stdout=subprocess.DEVNULL, stderr=err,
                                stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return proc.returncode, usage.ru_maxrss * 1024, err.read()


def _sparse_tensor_record(path: Path, numel: int) -> None:
    """A checkpoint whose one float32 tensor has ``numel`` elements: a valid record header, then a hole
    of ``4 * numel`` bytes, then a CRC-32 the metadata repeats (the hole's bytes do not give it)."""
    dcp.save({"w": torch.ones(4)}, storage_writer=FileSystemWriter(path), **ONE)
    length = 64 + 4 * numel + 4

    def huge(meta: dict[str, Any]) -> None:
        entry = meta["tensors"][0]
        entry["size"] = entry["chunk_sizes"] = [numel]
        entry["chunk_byte_lengths"] = [length]
        entry["chunk_crcs"] = [0x1234_5678]

    _edit_metadata(path, huge)
    offset = cm.decode((path / ".metadata").read_bytes())["tensors"][0]["chunk_byte_offsets"][0]
    header = bytes([1, 12, 1]) + numel.to_bytes(8, "little") + (4 * numel).to_bytes(8, "little")
    data = next(path.glob("*.distcp"))
    with open(data, "r+b") as out:
        out.truncate(offset)
        out.seek(offset)
        out.write(header.ljust(64, b"\0"))
        out.truncate(offset + length - 4)
        out.seek(offset + length - 4)
        out.write((0x1234_5678).to_bytes(4, "little"))


def test_verify_of_a_sparse_data_file_with_a_huge_record_checks_it_in_bounded_blocks(tmp_path: Path) -> None:
    """A 256 MiB record that is a hole behind a valid header: verify reads it a block at a time (the CRC-32
    then fails), its peak memory that of verifying a 4-element checkpoint plus a few MiB, not 256 MiB."""
    small = tmp_path / "small"
    dcp.save({"w": torch.ones(4)}, storage_writer=FileSystemWriter(small), **ONE)
    code, baseline, err = _cli_peak_rss("verify", str(small))
    assert code == 0, err
    _sparse_tensor_record(tmp_path / "sparse", 1 << 26)
    assert os.stat(next((tmp_path / "sparse").glob("*.distcp"))).st_blocks * 512 < 1 << 20  # a hole on disk
    code, peak, err = _cli_peak_rss("verify", str(tmp_path / "sparse"))
    assert code == 1 and "stored CRC-32 0x12345678, bytes give" in err and "Traceback" not in err, err
    assert peak < baseline + (64 << 20), (peak, baseline)
