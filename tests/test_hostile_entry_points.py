"""Issue 16's attacks against every entry point, on real files, directories and processes.

``test_hostile_directories`` and ``test_hostile_cost`` hold one test per attack as first
found; this module repeats the directory attacks in every position a reader opens
(``.metadata``, ``__0.metadata``, a data file, ``MANIFEST``, a shard, a legacy checkpoint's
files) against every entry point that opens it (``load_tensors``, ``dcp.load``,
``inert.torch.load``, ``inert.dump.load`` private and mapped, ``inert inspect``, ``verify``,
``migrate``), and measures the cost attacks (keys that hash alike, a million empty maps) in
a process of their own: its CPU time and peak resident memory against 1 s per MiB and 100
bytes per input byte plus 1 MiB.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import torch
import torch.distributed.checkpoint as dcp

import inert.torch
from inert import FileKindError
from inert.codecs import checkpoint_metadata
from inert.conformance import _vectors_dump_manifest as manifest_vectors
from inert.conformance._vectors_checkpoint_metadata import metadata_file
from inert.conformance._vectors_checkpoint_metadata import representative as representative_metadata
from inert.dump import Row, dump, load
from inert.torch import FileSystemWriter, load_tensors
from inert.torch._metadata import METADATA_VERSION

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ONE = {"no_dist": True} if "no_dist" in inspect.signature(dcp.save).parameters else {}
MIB = 1 << 20
#: What a link points to: a file outside the directory, none of whose bytes may reach a message.
SECRET = b"OUTSIDE-SECRET:" + bytes(range(160, 250)) * 30

# -- building the directories ---------------------------------------------------------------------------------


def _checkpoint(path: Path) -> Path:
    dcp.save({"w": torch.randn(32, 32), "v": {"step": 3}}, storage_writer=FileSystemWriter(path), **ONE)
    return path


def _rank_checkpoint(path: Path) -> Path:
    """A checkpoint whose metadata is ``__0.metadata`` only (what a per-rank save leaves)."""
    _checkpoint(path)
    (path / ".metadata").rename(path / "__0.metadata")
    return path


def _legacy(path: Path) -> Path:
    dcp.save({"w": torch.ones(8)}, storage_writer=dcp.FileSystemWriter(path), **ONE)
    return path


def _dump(path: Path) -> Path:
    dump([Row(f"k{i}", i, {"x": torch.arange(8) + i}, {"t": i}) for i in range(6)], path, owners=2)
    return path


def _data_file(path: Path) -> str:
    return next(p.name for p in sorted(path.iterdir()) if p.suffix == ".distcp")


def _shard(path: Path) -> str:
    return next(p.name for p in sorted(path.iterdir()) if p.name != "MANIFEST")


def _replace(path: Path, kind: str, outside: Path) -> None:
    """Make ``path`` a symbolic link to a file outside, a FIFO, or a symbolic link to a FIFO outside."""
    path.unlink()
    if kind == "link":
        outside.write_bytes(SECRET)
        path.symlink_to(outside)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        os.mkfifo(outside)
        path.symlink_to(outside)


def _no_secret(text: str) -> None:
    assert "OUTSIDE-SECRET" not in text
    for at in range(0, len(SECRET) - 4, 4):
        word = SECRET[at : at + 4]
        assert word.hex() not in text and word.hex(" ") not in text
        assert f"{int.from_bytes(word, 'little'):#010x}" not in text and f"{int.from_bytes(word, 'big'):#010x}" not in text


# -- running an entry point without letting it block the test ------------------------------------------------------


def _in_thread(call: Callable[[], Any], seconds: float = 60) -> BaseException | None:
    """What ``call()`` raised (None: it returned); still running after ``seconds`` fails the test (blocked)."""
    result: dict[str, BaseException | None] = {}

    def run() -> None:
        try:
            call()
            result["exc"] = None
        except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
            result["exc"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"blocked for {seconds} s")
    return result["exc"]


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inert", *argv], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def _refused_in_process(exc: BaseException | None, name: str, kind: str) -> None:
    """A FileKindError naming the file and what it is (DCP's wrapper: the same error for the rank)."""
    failures = getattr(exc, "failures", None)
    if failures:  # dcp.load keeps the reader's error per rank
        exc = next(iter(failures.values()))
        exc = exc[0] if isinstance(exc, tuple) else exc
    assert isinstance(exc, FileKindError), repr(exc)
    what = "a FIFO" if kind == "fifo" else "a symbolic link"
    assert f"{name}: {what}, not a regular file" in str(exc), str(exc)
    _no_secret(str(exc))


def _refused_by_cli(result: subprocess.CompletedProcess[str], name: str, kind: str) -> None:
    what = "a FIFO" if kind == "fifo" else "a symbolic link"
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and f"{name}: {what}" in result.stderr, result.stderr
    _no_secret(result.stdout + result.stderr)


KINDS = ["link", "fifo", "link-to-fifo"]


def _target() -> dict[str, Any]:
    return {"w": torch.zeros(32, 32), "v": {"step": 0}}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("position", [".metadata", "data file"])
def test_link_or_fifo_in_a_checkpoint_is_refused_by_load_tensors_dcp_load_inert_load_inspect_verify(
    tmp_path: Path, position: str, kind: str
) -> None:
    path = _checkpoint(tmp_path / "ckpt")
    name = ".metadata" if position == ".metadata" else _data_file(path)
    _replace(path / name, kind, tmp_path / "outside")
    for call in (lambda: load_tensors(path), lambda: inert.torch.load(_target(), path)):
        _refused_in_process(_in_thread(call), name, kind)
    reader = inert.torch.FileSystemReader(path)
    exc = _in_thread(lambda: dcp.load(_target(), storage_reader=reader, **ONE))
    if reader.metadata_error is not None:  # DCP itself keeps only the text of a failed metadata read
        assert exc is not None and str(reader.metadata_error) in repr(exc), repr(exc)
        exc = reader.metadata_error
    _refused_in_process(exc, name, kind)
    for command in ("inspect", "verify"):
        result = _cli(command, str(path))
        if command == "inspect" and position == "data file":  # listed, never opened: no size, no byte of it
            assert result.returncode == 0 and '"bytes": null' in _cli("inspect", "--json", str(path)).stdout
            _no_secret(result.stdout + result.stderr)
            continue
        _refused_by_cli(result, name, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_link_or_fifo_as_rank_metadata_is_refused_by_the_reader_inspect_and_verify(tmp_path: Path, kind: str) -> None:
    path = _rank_checkpoint(tmp_path / "ckpt")
    _replace(path / "__0.metadata", kind, tmp_path / "outside")
    reader = inert.torch.FileSystemReader(path)
    _refused_in_process(_in_thread(lambda: reader.read_metadata(rank=0)), "__0.metadata", kind)
    for command in ("inspect", "verify"):
        _refused_by_cli(_cli(command, str(path)), "__0.metadata", kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("position", ["MANIFEST", "shard"])
def test_link_or_fifo_in_a_dump_is_refused_by_dump_load_private_and_mapped_inspect_verify(
    tmp_path: Path, position: str, kind: str
) -> None:
    path = _dump(tmp_path / "dump")
    name = "MANIFEST" if position == "MANIFEST" else _shard(path)
    _replace(path / name, kind, tmp_path / "outside")
    for mapped in (False, True):
        _refused_in_process(_in_thread(lambda mapped=mapped: load(path, mapped=mapped)), name, kind)
    for command in ("inspect", "verify"):
        result = _cli(command, str(path))
        if command == "inspect" and position == "shard":  # listed from the manifest, never opened
            assert result.returncode == 0, result.stderr
            _no_secret(result.stdout + result.stderr)
            continue
        _refused_by_cli(result, name, kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("position", [".metadata", "data file"])
def test_link_or_fifo_in_a_legacy_checkpoint_is_refused_by_migrate_inspect_verify(
    tmp_path: Path, position: str, kind: str
) -> None:
    src = _legacy(tmp_path / "legacy")
    name = ".metadata" if position == ".metadata" else _data_file(src)
    _replace(src / name, kind, tmp_path / "outside")
    _refused_by_cli(_cli("migrate", str(src), str(tmp_path / "out"), "--trust-source"), name, kind)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    for command in ("inspect", "verify"):
        result = _cli(command, str(src))
        if position == "data file":  # a legacy checkpoint is named as such: its data files are not read
            assert result.returncode in (0, 1) and "Traceback" not in result.stderr, result.stderr
            _no_secret(result.stdout + result.stderr)
            continue
        _refused_by_cli(result, name, kind)


# -- case 8: a rewrite after a load does not reach the tensors -----------------------------------------------------

def test_rewrite_of_a_shard_after_a_default_dump_load_does_not_show_in_the_tensors(tmp_path: Path) -> None:
    path = _dump(tmp_path / "dump")
    rows = load(path).rows
    before = {row.key: row.fields["x"].clone() for row in rows}
    for name in os.listdir(path):
        if name != "MANIFEST":
            data = bytearray((path / name).read_bytes())
            (path / name).write_bytes(bytes(len(data)))  # in place: the same inode, every byte zero
    assert all(torch.equal(row.fields["x"], before[row.key]) for row in rows)


def test_rewrite_of_a_data_file_after_load_tensors_does_not_show_in_the_tensors(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "ckpt")
    loaded = load_tensors(path)
    before = loaded["w"].clone()
    data = path / _data_file(path)
    data.write_bytes(bytes(data.stat().st_size))
    assert torch.equal(loaded["w"], before)


# -- cases 4 and 5 at the entry points: CPU time and peak memory of a process of their own ----------------------------

_MEASURE = """
import json, resource, runpy, sys
import inert, inert.dump, inert.torch

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

def run(entry, path):
    try:
        if entry == "load_tensors":
            inert.torch.load_tensors(path)
        elif entry == "dump.load":
            inert.dump.load(path)
        else:
            sys.argv = ["inert", entry, path]
            runpy.run_module("inert", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return f"exit {exc.code}"
    except (inert.InertError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "returned"

entry, warm, hostile = sys.argv[1:4]
run(entry, warm)  # imports and first-call costs are the program's, not the input's
rss, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, cpu()
outcome = run(entry, hostile)
print(json.dumps({"cpu": cpu() - start, "rss": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024,
                  "outcome": outcome}))
"""


def _measured(entry: str, warm: Path, hostile: Path, size: int) -> str:
    """``entry`` on ``hostile`` (after a run on ``warm``), in its own process, within the cost bounds."""
    result = subprocess.run([sys.executable, "-c", _MEASURE, entry, str(warm), str(hostile)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    cost = json.loads(result.stdout.strip().splitlines()[-1])
    assert cost["cpu"] <= size / MIB + 0.2, (entry, cost, size)
    assert cost["rss"] <= 100 * size + MIB, (entry, cost, size)
    return f"{cost['outcome']}: {result.stderr.strip()}"


def _colliding_keys(count: int) -> bytes:
    """A map whose ``count`` complex keys Python hashes alike (hash(r + i*j) = hash(r) + 1000003 * hash(i))."""
    keys = [msgpack.ExtType(2, __import__("struct").pack("<dd", float(-1000003 * k), float(k))) for k in range(count)]
    assert len({hash(complex(-1000003 * k, k)) for k in range(2000)}) < 20
    return bytes(msgpack.packb(dict.fromkeys(keys, 0)))


@pytest.mark.parametrize("entry", ["load_tensors", "inspect", "verify"])
@pytest.mark.parametrize("document", ["colliding complex keys", "a million empty maps"])
def test_quadratic_and_memory_metadata_stay_within_the_bounds_at_every_entry_point(
    tmp_path: Path, entry: str, document: str
) -> None:
    warm = _checkpoint(tmp_path / "warm")
    hostile = _checkpoint(tmp_path / "hostile")
    if document.startswith("colliding"):  # no writer makes these bytes: the metadata of the conformance vectors
        data = metadata_file({**representative_metadata(), "planner_raw": _colliding_keys(50_000)}).data
    else:  # canonical, within every limit: the checkpoint's own metadata with this planner data
        meta = checkpoint_metadata.decode((hostile / ".metadata").read_bytes())
        meta["planner_data"] = [{} for _ in range(1 << 20)]
        data = checkpoint_metadata.encode(meta, version=METADATA_VERSION)
    (hostile / ".metadata").write_bytes(data)
    assert len(data) > 900_000
    outcome = _measured(entry, warm, hostile, len(data))
    if document.startswith("colliding"):
        assert "str or bin" in outcome, outcome  # refused at the first key that is not a str or bin
    else:
        assert outcome.startswith("returned" if entry == "load_tensors" else "exit 0"), outcome


@pytest.mark.parametrize("entry", ["dump.load", "inspect", "verify"])
def test_quadratic_manifest_tags_stay_within_the_bounds_at_every_entry_point(tmp_path: Path, entry: str) -> None:
    warm = _dump(tmp_path / "warm")
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    manifest = manifest_vectors.representative()
    manifest["keys"][0]["tag_raw"] = _colliding_keys(50_000)
    data = manifest_vectors.manifest_file(manifest).data
    (hostile / "MANIFEST").write_bytes(data)
    assert len(data) > 900_000
    outcome = _measured(entry, warm, hostile, len(data))
    assert "str or bin" in outcome or "exit 1" in outcome, outcome
