"""``inert inspect``, ``inert verify`` and ``inert migrate`` on real checkpoints, dumps and foreign files.

Checkpoints are made here: Inert's (``dcp.save`` with ``inert.torch.FileSystemWriter``)
and legacy ones (DCP's own ``FileSystemWriter``), each by one process and by 2
gloo ranks (this file run as a script, like tests/test_torch_multirank.py),
and a dump (``inert.dump``).  Damaged copies must fail verification with the
right one-line verdict; a migrated checkpoint must load bit-exactly; a
``.metadata`` naming ``os.system`` must be refused without running it.
"""

from __future__ import annotations

import importlib
import inspect as pyinspect
import io
import json
import os
import pickle
import re
import shutil
import socket
import struct
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from inert import _audit
from inert.cli.main import main
from inert.cli.support import Progress
from inert.dump import Row, dump
from inert.torch import TORCH_VERSION, FileSystemReader, FileSystemWriter, loads_metadata
from inert.torch._compat import dcp_save
from inert.torch._metadata import METADATA_VERSION
from inert.torch._writer import UNCOMPRESSED_VERSION

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled", "ignore::UserWarning")
ROWS, COLS = 8, 6
#: DCP 2.4+ flattens a nested dict of values into one value per leaf; 2.3 stores the dict as one value.
FLATTENS = TORCH_VERSION >= (2, 4)
OPTIM_VALUES = {"optim.step", "optim.lr", "optim.betas", "optim.name"} if FLATTENS else {"optim"}
#: ``inert migrate`` reads DCP's own files through 2.4's planner API.
needs_migrate = pytest.mark.skipif(TORCH_VERSION < (2, 4), reason="inert migrate needs PyTorch 2.4 or later (by design)")
VERDICT_OK = re.compile(r"inert: verify: OK: (\d+) files, (\d+) records, (\d+) bytes\n\Z")


def make_state() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    return {
        "model": {
            "w": torch.randn(16, 8, generator=g),
            "b": torch.randn(8, generator=g).to(torch.bfloat16),
            "mask": torch.rand(5, generator=g) > 0.5,
            "idx": torch.arange(6, dtype=torch.int64),
            "t": torch.randn(4, 6, generator=g).t(),  # saved non-contiguous
            "scalar": torch.tensor(3.5, dtype=torch.float64),
        },
        "optim": {"step": 12, "lr": 1e-3, "betas": (0.9, 0.999), "name": "adam"},
    }


def blank(state: Any) -> Any:
    """A template of the same structure: zero tensors, placeholder values."""
    if isinstance(state, dict):
        return {k: blank(v) for k, v in state.items()}
    if isinstance(state, torch.Tensor):
        return torch.zeros_like(state.contiguous())
    return None


def assert_bit_exact(got: Any, want: Any, where: str = "") -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), where
        for key in want:
            assert_bit_exact(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape, where
        assert torch.equal(got.contiguous().view(-1).view(torch.uint8), want.contiguous().view(-1).view(torch.uint8)), where
    else:
        assert got == want and type(got) is type(want), f"{where}: {got!r} != {want!r}"


def run_cli(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def failed_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("inert: verify: FAILED: "), err
    return lines[0]


# -- the checkpoints and the dump (made once) ------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def full() -> torch.Tensor:
    return torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS)


def multi_expected() -> dict[str, Any]:
    return {"dt": full(), "rank0": torch.full((3,), 0.0), "rank1": torch.full((3,), 1.0),
            "common": {"step": 7, "name": "two ranks"}}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tools")
    paths = {name: root / name for name in ("inert", "legacy", "inert2", "legacy2", "dump")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_save(make_state(), FileSystemWriter(paths["inert"]))
        dcp_save(make_state(), dcp.FileSystemWriter(paths["legacy"]))
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, __file__, str(paths["inert2"]), str(paths["legacy2"])],
                              env=dict(env, RANK=str(rank)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(2)]
    for rank, proc in enumerate(procs):
        _out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"rank {rank}: {err[-3000:]}"
    g = torch.Generator().manual_seed(1)
    rows = [Row(f"k{i}", i, {"ids": torch.randint(0, 100, (4 + i % 3,), generator=g), "score": float(i)}, {"t": i})
            for i in range(12)]
    dump(rows, paths["dump"], partition_id="p0", owners=3)
    return paths


def copy(made: dict[str, Path], name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(made[name], target)
    return target


# -- inspect --------------------------------------------------------------------------------------------------

def test_inspect_inert_checkpoint_lists_tensors_values_files_and_totals(made: dict[str, Path], capsys: Any) -> None:
    code, out, _ = run_cli("inspect", "--json", str(made["inert"]), capsys=capsys)
    assert code == 0
    summary = json.loads(out)
    assert summary["format"] == "inert-checkpoint" and summary["metadata"]["version"] == METADATA_VERSION
    tensors = {t["fqn"]: t for t in summary["tensors"]}
    assert tensors["model.w"] == {"fqn": "model.w", "dtype": "float32", "shape": [16, 8], "bytes": 512, "chunks": 1}
    assert tensors["model.b"]["dtype"] == "bfloat16" and tensors["model.t"]["shape"] == [6, 4]
    assert tensors["model.scalar"]["shape"] == [] and tensors["model.scalar"]["bytes"] == 8
    assert {v["fqn"] for v in summary["values"]} == OPTIM_VALUES
    assert summary["totals"]["tensors"] == 6 and summary["totals"]["values"] == len(OPTIM_VALUES)
    assert summary["totals"]["tensor_bytes"] == 512 + 16 + 5 + 48 + 96 + 8
    assert [f["name"] for f in summary["files"]] == ["__0_0.distcp"]
    code, text, _ = run_cli("inspect", str(made["inert"]), capsys=capsys)
    assert code == 0
    assert f"Inert checkpoint (checkpoint-metadata v{METADATA_VERSION}" in text  # v2 where the release records strides
    assert "  model.w  float32  (16, 8)  512 B" in text and ("  optim.betas" if FLATTENS else "  optim") in text


def test_inspect_names_each_inert_file_by_magic_and_version(made: dict[str, Path], capsys: Any) -> None:
    cases = {made["inert"] / ".metadata": "checkpoint-metadata", made["inert"] / "__0_0.distcp": "checkpoint-shard",
             made["dump"] / "MANIFEST": "dump-manifest", made["dump"] / "shard-00000.bin": "dump-shard"}
    for path, fmt in cases.items():
        code, out, _ = run_cli("inspect", "--json", str(path), capsys=capsys)
        summary = json.loads(out)
        written = importlib.import_module(f"inert.codecs.{fmt.replace('-', '_')}").LATEST  # what the writers write
        if fmt == "checkpoint-shard":
            written = UNCOMPRESSED_VERSION  # an uncompressed save writes the oldest version that holds it
        elif fmt == "checkpoint-metadata":
            written = METADATA_VERSION  # v2 only on releases that record strides
        assert code == 0 and summary["format"] == fmt and summary["version"] == written, path
    shard = json.loads(run_cli("inspect", "--json", str(made["inert"] / "__0_0.distcp"), capsys=capsys)[1])
    values = len(OPTIM_VALUES)
    assert shard["totals"] == {"records": 6 + values, "tensors": 6, "tensor_bytes": 685, "values": values}


def test_inspect_dump_directory(made: dict[str, Path], capsys: Any) -> None:
    code, out, _ = run_cli("inspect", "--json", str(made["dump"]), capsys=capsys)
    summary = json.loads(out)
    assert code == 0 and summary["format"] == "dump" and summary["partition_id"] == "p0"
    assert summary["totals"]["keys"] == 12 and summary["totals"]["shards"] == 3
    assert {f["name"]: f["layout"] for f in summary["fields"]} == {"ids": "nested", "score": "value"}
    assert sum(f["rows"] for f in summary["files"]) == 12
    text = run_cli("inspect", str(made["dump"]), capsys=capsys)[1]
    assert "Inert dump (dump-manifest v1)" in text and "ids  nested  int64  ndim 1" in text


class Evil:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


class Custom:
    """A value DCP pickles by reference; torch.load(weights_only=True) refuses it."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Custom)


def test_inspect_foreign_files_without_executing_them(tmp_path: Path, capsys: Any) -> None:
    marker = tmp_path / "ran"
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps({"x": Evil(marker)}))
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(pickle.dumps({"a": [1, 2.5, "s", b"b", (None, True)]}, protocol=4))
    old = tmp_path / "old.pkl"
    old.write_bytes(pickle.dumps([1, "s", {"k": 2.5}], protocol=0))
    zipped = tmp_path / "t.pt"
    torch.save({"w": torch.ones(3)}, zipped)
    st = tmp_path / "m.safetensors"
    header = json.dumps({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                         "__metadata__": {"k": "v"}}).encode()
    st.write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    run_cli("inspect", str(plain), capsys=capsys)  # the command's modules are imported before the guard
    with _audit.no_execution():  # no global resolved, nothing compiled or run
        got = {p.name: run_cli("inspect", "--json", str(p), capsys=capsys) for p in (evil, plain, old, zipped, st)}
    assert not marker.exists()
    code, out, _ = got["evil.pkl"]
    summary = json.loads(out)
    assert code == 0 and summary["format"] == "pickle" and summary["references_globals"]
    assert summary["protocol"] == pickle.DEFAULT_PROTOCOL and summary["globals"] == [f"{os.system.__module__}.system"]
    summary = json.loads(got["plain.pkl"][1])
    assert summary["protocol"] == 4 and not summary["references_globals"] and summary["globals"] == []
    summary = json.loads(got["old.pkl"][1])
    assert summary["format"] == "pickle" and summary["protocol"] == 0 and not summary["references_globals"]
    summary = json.loads(got["t.pt"][1])
    assert summary["format"] == "torch-save-zip" and summary["storages"] == 1
    assert "torch._utils._rebuild_tensor_v2" in summary["data_pkl"]["globals"]
    summary = json.loads(got["m.safetensors"][1])
    assert summary["format"] == "safetensors" and summary["metadata"] == {"k": "v"}
    assert summary["tensors"] == [{"name": "a", "dtype": "F32", "shape": [2, 2], "bytes": 16}]
    text = run_cli("inspect", str(evil), capsys=capsys)[1]
    assert "warning: unpickling this file imports and calls the globals above" in text
    other = tmp_path / "other.bin"
    other.write_bytes(b"\x00\x01garbage")
    code, out, _ = run_cli("inspect", "--json", str(other), capsys=capsys)
    assert code == 1 and json.loads(out)["format"] == "unknown"


def _damaged(data: bytes) -> list[bytes]:
    """Truncations and single-byte flips spread over the whole file."""
    cuts = [data[:cut] for cut in sorted({0, 1, 8, 9, 12, len(data) // 2, len(data) - 1})]
    flips = []
    for pos in range(0, len(data), max(1, len(data) // 24)):
        flipped = bytearray(data)
        flipped[pos] ^= 0xFF
        flips.append(bytes(flipped))
    return cuts + flips


def test_inspect_of_damaged_files_is_a_summary_or_one_line(made: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    zipped = tmp_path / "t.pt"
    torch.save({"w": torch.ones(3), "n": 1}, zipped)
    header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    st = tmp_path / "m.safetensors"
    st.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    sources = [made["inert"] / ".metadata", made["inert"] / "__0_0.distcp", made["dump"] / "MANIFEST",
               made["dump"] / "shard-00000.bin", made["legacy"] / ".metadata", zipped, st]
    run_cli("inspect", str(st), capsys=capsys)  # imports before the guard
    outcomes = set()
    with _audit.no_execution():
        for source in sources:
            for index, data in enumerate(_damaged(source.read_bytes())):
                target = tmp_path / f"{source.name}.{index}"
                target.write_bytes(data)
                code, out, err = run_cli("inspect", "--json", str(target), capsys=capsys)
                assert code in (0, 1), (target, err)
                if err:
                    assert code == 1 and err.startswith("inert: inspect: ") and err.count("\n") == 1, err
                else:
                    outcomes.add(json.loads(out)["format"])
    assert {"pickle", "torch-save-zip", "safetensors", "unknown"} <= outcomes


def test_verify_of_a_damaged_metadata_is_one_line(made: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    path = copy(made, "inert", tmp_path)
    original = (path / ".metadata").read_bytes()
    for data in _damaged(original):
        (path / ".metadata").write_bytes(data)
        code, out, err = run_cli("verify", "--all", str(path), capsys=capsys)
        assert code == 1 and out == "", err
        assert len(err.splitlines()) == 2 and "checkpoint-metadata" in err, err


def test_inspect_legacy_checkpoint_checks_the_globals_against_the_migrate_allowlist(made: dict[str, Path],
                                                                                     capsys: Any) -> None:
    for name in ("legacy", "legacy2"):
        code, out, _ = run_cli("inspect", "--json", str(made[name]), capsys=capsys)
        summary = json.loads(out)
        assert code == 0 and summary["format"] == "legacy-dcp-checkpoint", name
        assert summary["outside_migrate_allowlist"] == [], summary["metadata"]["pickle"]["globals"]
        assert "torch.distributed.checkpoint.metadata.Metadata" in summary["metadata"]["pickle"]["globals"]


def test_inspect_flags_the_one_global_outside_the_allowlist(made: dict[str, Path], tmp_path: Path,
                                                             capsys: Any) -> None:
    from inert._allowlist import ALLOWED

    path = copy(made, "legacy", tmp_path)
    ops = b"".join(b"c%s\n%s\n0" % tuple(n.encode() for n in name.rsplit(".", 1)) for name in sorted(ALLOWED))
    (path / ".metadata").write_bytes(b"\x80\x02" + ops + b"cposix\nsystem\n0N.")
    summary = json.loads(run_cli("inspect", "--json", str(path), capsys=capsys)[1])
    assert summary["metadata"]["pickle"]["globals_total"] == len(ALLOWED) + 1
    assert summary["outside_migrate_allowlist"] == ["posix.system"]


def test_inspect_does_not_import_torch(made: dict[str, Path]) -> None:
    paths = [str(made[name]) for name in ("inert", "inert2", "dump", "legacy")]
    code = ("import sys\nfrom inert.cli.main import main\n"
            f"codes = [main(['inspect', p]) for p in {paths!r}]\n"
            "print(codes, 'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.splitlines()[-1] == "[0, 0, 0, 0] False", result.stderr


def test_inspect_missing_path_is_a_usage_error(tmp_path: Path, capsys: Any) -> None:
    code, out, err = run_cli("inspect", str(tmp_path / "nope"), capsys=capsys)
    assert code == 2 and out == "" and err == f"inert: inspect: {tmp_path / 'nope'}: no such file or directory\n"


# -- verify ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "files", "records"),
    # Two ranks' common dict of two values: flattened from 2.4 on, one value before.
    [("inert", 2, 6 + len(OPTIM_VALUES)), ("inert2", 3, 6 if FLATTENS else 5), ("dump", 4, 12)],
)
def test_verify_whole_directories(made: dict[str, Path], capsys: Any, name: str, files: int, records: int) -> None:
    code, out, err = run_cli("verify", str(made[name]), capsys=capsys)
    match = VERDICT_OK.match(out)
    assert code == 0 and err == "" and match, (out, err)
    assert (int(match[1]), int(match[2])) == (files, records)
    assert int(match[3]) == sum(p.stat().st_size for p in made[name].iterdir())


@pytest.mark.skipif("use_collectives" not in pyinspect.signature(dcp.save).parameters,
                    reason="rank-local metadata (use_collectives) exists from PyTorch 2.9 on")
def test_verify_and_inspect_rank_local_metadata(tmp_path: Path, capsys: Any) -> None:
    dcp.save({"w": torch.ones(3), "v": 3}, storage_writer=FileSystemWriter(tmp_path), use_collectives=False)
    assert (tmp_path / "__0.metadata").exists() and not (tmp_path / ".metadata").exists()
    code, out, _ = run_cli("verify", str(tmp_path), capsys=capsys)
    assert code == 0 and VERDICT_OK.match(out) and " 2 files, 2 records" in out
    summary = json.loads(run_cli("inspect", "--json", str(tmp_path), capsys=capsys)[1])
    assert summary["metadata"]["file"] == "__0.metadata" and summary["totals"]["tensors"] == 1


def _record(path: Path, fqn: str) -> Any:
    metadata = loads_metadata((path / ".metadata").read_bytes())
    return next(info for key, info in metadata.storage_data.items() if key.fqn == fqn)


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def _truncate(path: Path, count: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - count])


@pytest.mark.parametrize("damage", ["flipped-payload", "flipped-metadata", "truncated", "stray", "missing"])
def test_verify_damaged_checkpoint(made: dict[str, Path], tmp_path: Path, capsys: Any, damage: str) -> None:
    path = copy(made, "inert", tmp_path)
    shard = path / "__0_0.distcp"
    if damage == "flipped-payload":
        info = _record(path, "model.w")
        _flip(shard, info.offset + info.length - 20)
        expect = ["checkpoint-shard", "model.w", "CRC-32"]
    elif damage == "flipped-metadata":
        _flip(path / ".metadata", 40)
        expect = ["checkpoint-metadata"]
    elif damage == "truncated":
        _truncate(shard, 100)
        expect = ["__0_0.distcp", "ends beyond"]
    elif damage == "stray":
        (path / "extra.distcp").write_bytes(b"x")
        expect = ["extra.distcp: stray file"]
    else:
        shard.unlink()
        expect = ["__0_0.distcp: missing"]
    code, out, err = run_cli("verify", str(path), capsys=capsys)
    line = failed_line(err)
    assert code == 1 and out == ""
    for text in expect:
        assert text in line, line


@pytest.mark.parametrize("damage", ["flipped", "truncated", "stray", "missing"])
def test_verify_damaged_dump(made: dict[str, Path], tmp_path: Path, capsys: Any, damage: str) -> None:
    path = copy(made, "dump", tmp_path)
    shard = path / "shard-00001.bin"
    if damage == "flipped":
        _flip(shard, shard.stat().st_size - 30)
        expect = ["dump-shard", "shard-00001.bin"]
    elif damage == "truncated":
        _truncate(shard, 10)
        expect = ["shard-00001.bin", "records end at"]
    elif damage == "stray":
        (path / "row_index.pt").write_bytes(b"x")
        expect = ["row_index.pt: stray file"]
    else:
        shard.unlink()
        expect = ["shard-00001.bin: missing"]
    code, out, err = run_cli("verify", str(path), capsys=capsys)
    line = failed_line(err)
    assert code == 1 and out == ""
    for text in expect:
        assert text in line, line


@pytest.mark.parametrize("case", ["overlap", "gap"])
def test_verify_chunks_that_do_not_tile_their_tensor(made: dict[str, Path], tmp_path: Path, capsys: Any,
                                                     case: str) -> None:
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

    from inert.torch import dumps_metadata

    path = copy(made, "inert2", tmp_path)
    metadata = loads_metadata((path / ".metadata").read_bytes())
    entry = metadata.state_dict_metadata["dt"]
    assert isinstance(entry, TensorStorageMetadata)
    chunk = entry.chunks[1]
    assert tuple(chunk.offsets) == (ROWS // 2, 0)
    info = metadata.storage_data.pop(MetadataIndex("dt", chunk.offsets, 1))
    if case == "overlap":
        chunk.offsets = torch.Size([2, 0])
    else:
        chunk.sizes = torch.Size([ROWS // 2 - 1, COLS])
    metadata.storage_data[MetadataIndex("dt", chunk.offsets, 1)] = info
    (path / ".metadata").write_bytes(dumps_metadata(metadata))
    code, _, err = run_cli("verify", str(path), capsys=capsys)
    line = failed_line(err)
    assert code == 1
    if case == "overlap":
        assert line.endswith("dt.chunks[1]: the chunk at (2, 0) overlaps another"), line
    else:
        assert line.endswith(f"dt.chunks: 2 chunks hold {ROWS * COLS - COLS} elements, the tensor has {ROWS * COLS}"), line


def test_verify_of_8000_column_chunks_is_linear_not_quadratic(made: dict[str, Path], tmp_path: Path) -> None:
    """Hostile metadata: 8,000 column chunks of one tensor all share their dim-0 range, so a pairwise sweep
    compares 32 million pairs (over 120 s); the one bounded tiling check draws 8,000 cells."""
    import resource
    import subprocess
    import sys

    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorStorageMetadata

    from inert.torch import dumps_metadata

    path = copy(made, "inert2", tmp_path)
    metadata = loads_metadata((path / ".metadata").read_bytes())
    entry = metadata.state_dict_metadata["dt"]
    assert isinstance(entry, TensorStorageMetadata)
    info = metadata.storage_data.pop(MetadataIndex("dt", entry.chunks[0].offsets, 0))
    metadata.storage_data.pop(MetadataIndex("dt", entry.chunks[1].offsets, 1))
    width = 8000
    entry.size = torch.Size([1, width])
    entry.chunks = [ChunkStorageMetadata(offsets=torch.Size([0, j]), sizes=torch.Size([1, 1])) for j in range(width)]
    for j, chunk in enumerate(entry.chunks):
        metadata.storage_data[MetadataIndex("dt", chunk.offsets, j)] = info
    (path / ".metadata").write_bytes(dumps_metadata(metadata))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    done = subprocess.run([sys.executable, "-m", "inert", "verify", str(path)], capture_output=True, text=True,
                          timeout=120)
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before
    assert done.returncode == 1, done.stderr  # the shared records do not hold 8,000 chunks: refused, not hung
    assert "inert: verify: FAILED" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert cpu < 20, f"verify took {cpu:.1f} s of CPU on 8,000 chunks"


def test_verify_all_reports_every_problem(made: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    path = copy(made, "inert2", tmp_path)
    (path / "stray.txt").write_bytes(b"")
    metadata = loads_metadata((path / ".metadata").read_bytes())
    damaged = [(key.fqn, info) for key, info in metadata.storage_data.items() if info.length > 64][:2]
    for _fqn, info in damaged:
        _flip(path / info.relative_path, info.offset + info.length - 10)
    code, _, err = run_cli("verify", str(path), capsys=capsys)
    assert code == 1 and len(err.splitlines()) == 1
    code, _, err = run_cli("verify", "--all", str(path), capsys=capsys)
    lines = err.splitlines()
    assert code == 1 and len(lines) == 4, err
    assert "stray.txt: stray file" in lines[0]
    for fqn, _info in damaged:
        assert any(f"{fqn}.crc32" in line and "CRC-32" in line for line in lines[1:3]), (fqn, lines)
    assert lines[3].startswith("inert: verify: FAILED: ") and lines[3].endswith("(and 2 more problems)")


def test_verify_refuses_a_legacy_checkpoint_and_names_migrate(made: dict[str, Path], capsys: Any) -> None:
    code, _, err = run_cli("verify", str(made["legacy"]), capsys=capsys)
    assert code == 1 and "legacy pickle checkpoint" in failed_line(err) and "inert migrate" in err


def test_verify_piped_prints_the_verdict_only(made: dict[str, Path]) -> None:
    result = subprocess.run([sys.executable, "-m", "inert", "verify", str(made["inert2"])],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == ""
    assert VERDICT_OK.match(result.stdout), result.stdout


def test_progress_bar_draws_on_a_terminal_and_erases_itself() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal, pipe = Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        bar = Progress("verify", 1000, stream=stream, delay=0)
        bar.advance(500)
        bar.close()
    assert pipe.getvalue() == ""
    assert "verify [###############---------------]  50%" in terminal.getvalue()
    assert terminal.getvalue().endswith("\r\x1b[K")


# -- migrate --------------------------------------------------------------------------------------------------

def test_migrate_without_trust_source_refuses(made: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    code, out, err = run_cli("migrate", str(made["legacy"]), str(tmp_path / "out"), capsys=capsys)
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"inert: migrate: refusing to read {made['legacy']} without --trust-source")
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(TORCH_VERSION >= (2, 4), reason="2.4 and later migrate (the tests below)")
def test_migrate_before_2_4_refuses_before_loading(made: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    code, out, err = run_cli("migrate", "--trust-source", str(made["legacy"]), str(tmp_path / "out"), capsys=capsys)
    assert code == 2 and out == ""
    assert err == f"inert: migrate: migrate needs PyTorch 2.4 or later (found {torch.__version__})\n"
    assert not (tmp_path / "out").exists()


@needs_migrate
def test_migrate_single_rank_loads_bit_exactly(made: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run_cli("migrate", "--trust-source", str(made["legacy"]), str(out_dir), capsys=capsys)
    assert code == 0 and err == "", err
    assert "converted 6 tensors" in out and "4 non-tensor values" in out
    assert re.search(r"verify: OK: 2 files, 10 records, \d+ bytes", out)
    want = make_state()
    state = blank(want)
    dcp.load(state, storage_reader=FileSystemReader(out_dir))
    assert_bit_exact(state, want)
    # the fqns and planner data are the source's
    legacy = dcp.FileSystemReader(made["legacy"]).read_metadata()
    migrated = FileSystemReader(out_dir).read_metadata()
    assert migrated.planner_data == legacy.planner_data
    assert set(migrated.state_dict_metadata) == set(legacy.state_dict_metadata)
    assert main(["verify", str(out_dir)]) == 0


@needs_migrate
def test_migrate_two_ranks_loads_bit_exactly_with_inert_and_dcp(made: dict[str, Path], tmp_path: Path,
                                                                capsys: Any) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run_cli("migrate", "--trust-source", str(made["legacy2"]), str(out_dir), capsys=capsys)
    assert code == 0 and err == "", err
    assert "converted 3 tensors" in out and "in 4 chunks" in out
    want = multi_expected()
    state = blank(want)
    dcp.load(state, storage_reader=FileSystemReader(out_dir))
    assert_bit_exact(state, want)
    # the Inert checkpoint the same ranks saved loads to the same values
    state = blank(want)
    dcp.load(state, storage_reader=FileSystemReader(made["inert2"]))
    assert_bit_exact(state, want)


@needs_migrate
def test_migrate_model_and_adam_state(tmp_path: Path, capsys: Any) -> None:
    """The usual legacy checkpoint: a module's and an optimizer's state dicts (int keys, param groups)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(5, 4)).sum().backward()
    optim.step()
    want = {"model": model.state_dict(), "optim": optim.state_dict()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_save(want, dcp.FileSystemWriter(tmp_path / "legacy"))
    code, _, err = run_cli("migrate", "--trust-source", str(tmp_path / "legacy"), str(tmp_path / "out"), capsys=capsys)
    assert code == 0, err

    def template(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: template(v) for k, v in value.items()}
        if isinstance(value, list):
            return [template(v) for v in value]
        if isinstance(value, tuple):
            return tuple(template(v) for v in value)
        return torch.zeros_like(value) if isinstance(value, torch.Tensor) else None

    state = template(want)
    assert state["optim"]["param_groups"][0]["lr"] is None
    dcp.load(state, storage_reader=FileSystemReader(tmp_path / "out"))
    assert state["optim"]["param_groups"] == want["optim"]["param_groups"]
    assert_bit_exact(state["model"], dict(want["model"]))
    assert_bit_exact(state["optim"]["state"], want["optim"]["state"])


def _malicious_copy(made: dict[str, Path], tmp_path: Path, marker: Path) -> Path:
    """The legacy checkpoint with a .metadata that is DCP's own plus a value that runs ``touch marker``."""
    path = copy(made, "legacy", tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        metadata = dcp.FileSystemReader(path).read_metadata()  # our own file: safe to unpickle here
    metadata.planner_data = {**metadata.planner_data, "x": Evil(marker)}
    (path / ".metadata").write_bytes(pickle.dumps(metadata))
    return path


def test_migrate_refuses_a_metadata_naming_os_system_without_running_it(made: dict[str, Path], tmp_path: Path,
                                                                        capsys: Any) -> None:
    marker = tmp_path / "ran"
    path = _malicious_copy(made, tmp_path, marker)
    code, out, err = run_cli("migrate", "--trust-source", str(path), str(tmp_path / "out"), capsys=capsys)
    assert code == 1 and out == "" and len(err.splitlines()) == 1, err
    assert f"refused by the allowlist: references {os.system.__module__}.system" in err
    assert not marker.exists()
    assert not (tmp_path / "out").exists()
    # inspect names it as outside the allowlist, also without running it
    summary = json.loads(run_cli("inspect", "--json", str(path), capsys=capsys)[1])
    assert summary["outside_migrate_allowlist"] == [f"{os.system.__module__}.system"]
    assert not marker.exists()
    # the control: DCP's own reader does run it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.FileSystemReader(path).read_metadata()
    assert marker.exists()


@needs_migrate
def test_migrate_refuses_a_value_weights_only_refuses(tmp_path: Path, capsys: Any) -> None:
    source = tmp_path / "legacy"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_save({"w": torch.ones(2), "odd": Custom()}, dcp.FileSystemWriter(source))
    code, _, err = run_cli("migrate", "--trust-source", str(source), str(tmp_path / "out"), capsys=capsys)
    assert code == 1 and len(err.splitlines()) == 1
    assert err.startswith(f"inert: migrate: {source}: legacy-dcp-checkpoint: ")
    assert "odd: torch.load(weights_only=True) refused the value: it names " in err
    assert not (tmp_path / "out").exists()


@needs_migrate
def test_migrate_of_a_value_inert_cannot_write_leaves_dst_as_it_was(tmp_path: Path, capsys: Any) -> None:
    source = tmp_path / "legacy"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_save({"w": torch.ones(2), "dev": torch.complex32}, dcp.FileSystemWriter(source))
    empty = tmp_path / "empty"
    empty.mkdir()
    for target in (tmp_path / "absent", empty):
        code, _, err = run_cli("migrate", "--trust-source", str(source), str(target), capsys=capsys)
        assert code == 1 and err.startswith("inert: migrate: cannot be written in Inert's format: checkpoint-shard: dev: "
                                            "dtype torch.complex32 has no checkpoint encoding"), err
    assert not (tmp_path / "absent").exists() and list(empty.iterdir()) == []


def test_migrate_usage_errors(made: dict[str, Path], tmp_path: Path, capsys: Any) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_bytes(b"")
    code, _, err = run_cli("migrate", "--trust-source", str(made["legacy"]), str(taken), capsys=capsys)
    assert code == 2 and err == f"inert: migrate: {taken} exists and is not an empty directory\n"
    code, _, err = run_cli("migrate", "--trust-source", str(made["inert"]), str(tmp_path / "o"), capsys=capsys)
    assert code == 1 and "already an Inert checkpoint" in err


@pytest.mark.parametrize("command", ["inspect", "verify", "migrate"])
def test_every_command_has_help_with_exit_codes(command: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    assert "exit codes: 0" in capsys.readouterr().out


# -- the ranks ------------------------------------------------------------------------------------------------

def _save_two_ranks(inert_path: str, legacy_path: str) -> None:
    """Each rank: one DTensor shard, a tensor of its own, common values; saved by Inert's and by DCP's writer."""
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:  # before 2.5
        from torch.distributed._tensor import Shard, distribute_tensor  # type: ignore[no-redef]

    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for writer in (FileSystemWriter(inert_path), dcp.FileSystemWriter(legacy_path)):
            state = {"dt": distribute_tensor(full(), mesh, [Shard(0)]), f"rank{rank}": torch.full((3,), float(rank)),
                     "common": {"step": 7, "name": "two ranks"}}
            dcp.save(state, storage_writer=writer)
        dist.barrier()
    finally:
        # No teardown (as in test_torch_multirank): it can wait forever for a peer that already exited.
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    _save_two_ranks(sys.argv[1], sys.argv[2])
    os._exit(0)
