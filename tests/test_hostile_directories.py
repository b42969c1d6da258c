"""Hostile directories: links, FIFOs and devices where a reader expects a file, and files changed underneath.

Each case is named after what an attacker puts in a checkpoint or dump directory (or
does to it from another process).  Every reader and CLI command must refuse it with an
``InertError`` naming the file (the CLI: one line, exit 1), never follow a link out of the
directory, never print a byte of a file it refused, and never block.
"""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

import inert.torch
from inert import FileKindError, InertError
from inert._files import open_in, read_stream
from inert.dump import Row, dump, load
from inert.torch import FileSystemWriter, load_tensors

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ONE = {"no_dist": True} if "no_dist" in inspect.signature(dcp.save).parameters else {}
#: The bytes of a file outside the directory that a link points to: none may reach a message.
SECRET = b"TOP-SECRET-KEY:" + bytes(range(200, 250)) * 40


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "ckpt"
    dcp.save({"w": torch.randn(64, 64), "v": {"step": 3}}, storage_writer=FileSystemWriter(path), **ONE)
    return path


@pytest.fixture
def dumped(tmp_path: Path) -> Path:
    path = tmp_path / "dump"
    dump([Row(f"k{i}", i, {"x": torch.arange(8) + i}, {"t": i}) for i in range(6)], path, owners=2)
    return path


def _data_file(checkpoint: Path) -> Path:
    return next(checkpoint.glob("*.distcp"))


def _shard(dumped: Path) -> Path:
    return next(p for p in sorted(dumped.iterdir()) if p.name != "MANIFEST")


def _no_secret(text: str) -> None:
    """No byte of the outside file, in any spelling an error could use (text, hex, a CRC-32 word)."""
    assert "TOP-SECRET" not in text
    for at in range(0, len(SECRET) - 4, 4):
        word = SECRET[at : at + 4]
        assert word.hex() not in text and f"{int.from_bytes(word, 'little'):#010x}" not in text


def _link_to(path: Path, target: Path) -> None:
    path.unlink()
    path.symlink_to(target)


def _fifo_at(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _unblocked(call: Callable[[], Any], fifos: list[Path], seconds: float = 60) -> BaseException | None:
    """What ``call()`` raised (None: it returned); a call still blocked after ``seconds`` fails the test
    (its FIFOs are then opened for writing and closed, so that it ends)."""
    result: dict[str, BaseException | None] = {}

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - the test inspects whatever it was
            result["exc"] = exc
        else:
            result["exc"] = None

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        thread.join(10)
        pytest.fail(f"blocked for {seconds} s on a FIFO")
    return result["exc"]


def _cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process: a hang is a timeout, a crash a signal."""
    return subprocess.run([sys.executable, "-m", "inert", *argv], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _one_line_refusal(result: subprocess.CompletedProcess[str], *parts: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for part in parts:
        assert part in result.stderr, (part, result.stderr)
    _no_secret(result.stdout + result.stderr)


# -- the module every reader opens files with -----------------------------------------------------------------

@pytest.mark.parametrize("name", ["../x", "a/b", "", ".", ".."])
def test_a_name_of_more_than_one_component_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "x").write_bytes(b"x")
    with pytest.raises(FileKindError, match="one path component"):
        open_in(tmp_path, name, "checkpoint-shard")


def test_each_kind_of_file_that_is_not_regular_is_refused_by_name(tmp_path: Path) -> None:
    import socket

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "dir")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        for name, what in (("fifo", "a FIFO"), ("dir", "a directory"), ("link", "a symbolic link"), ("sock", "a socket")):
            with pytest.raises(FileKindError, match=f"{name}: {what}, not a regular file"):
                open_in(tmp_path, name, "dump-shard")
        with pytest.raises(FileKindError, match="a character device"):
            open_in("/dev", "zero", "dump-shard")
    finally:
        sock.close()


def test_an_endless_stream_is_read_to_the_limit_plus_one_byte() -> None:
    with open("/dev/zero", "rb", buffering=0) as zero, pytest.raises(InertError, match=r"longer than max_size\(1000\)"):
        read_stream(zero.fileno(), 1000, "checkpoint-metadata", "/dev/zero")


# -- links out of the directory ----------------------------------------------------------------------------------

def test_symlinked_data_file_is_refused_and_no_byte_of_its_target_is_printed(checkpoint: Path, secret: Path) -> None:
    data = _data_file(checkpoint)
    secret.write_bytes(SECRET * (data.stat().st_size // len(SECRET) + 1))  # long enough for every record
    _link_to(data, secret)
    for call in (lambda: load_tensors(checkpoint), lambda: inert.torch.load({"w": torch.zeros(64, 64)}, checkpoint)):
        with pytest.raises(FileKindError, match=f"{data.name}: a symbolic link") as info:
            call()
        _no_secret(str(info.value))
    _one_line_refusal(_cli("verify", str(checkpoint)), data.name, "a symbolic link")
    result = _cli("inspect", "--json", str(checkpoint))
    _no_secret(result.stdout + result.stderr)
    assert '"bytes": null' in result.stdout  # the link is listed as holding nothing, its target's size unread


def test_symlinked_metadata_is_refused(checkpoint: Path, secret: Path) -> None:
    secret.write_bytes((checkpoint / ".metadata").read_bytes())  # even a valid metadata outside is not read
    _link_to(checkpoint / ".metadata", secret)
    with pytest.raises(FileKindError, match=r"\.metadata: a symbolic link"):
        load_tensors(checkpoint)
    _one_line_refusal(_cli("inspect", str(checkpoint)), ".metadata: a symbolic link")
    result = _cli("verify", str(checkpoint))
    assert result.returncode == 1 and "a symbolic link" in result.stderr, result.stderr


def test_symlinked_manifest_and_shard_are_refused(dumped: Path, secret: Path) -> None:
    shard = _shard(dumped)
    secret.write_bytes(shard.read_bytes())
    _link_to(shard, secret)
    with pytest.raises(FileKindError, match=f"{shard.name}: a symbolic link"):
        load(dumped)
    _one_line_refusal(_cli("verify", str(dumped)), "a symbolic link")
    _link_to(dumped / "MANIFEST", secret)
    with pytest.raises(FileKindError, match="MANIFEST: a symbolic link"):
        load(dumped)
    _one_line_refusal(_cli("inspect", str(dumped)), "MANIFEST: a symbolic link")


def test_migrate_refuses_a_symlinked_legacy_metadata(tmp_path: Path, secret: Path) -> None:
    src = tmp_path / "legacy"
    dcp.save({"w": torch.ones(4)}, storage_writer=dcp.FileSystemWriter(src), **ONE)
    secret.write_bytes((src / ".metadata").read_bytes())
    _link_to(src / ".metadata", secret)
    result = _cli("migrate", str(src), str(tmp_path / "out"), "--trust-source")
    assert result.returncode == 1 and "a symbolic link" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# -- FIFOs: every reader refuses them without blocking -----------------------------------------------------------

def test_fifo_as_metadata_does_not_block(checkpoint: Path) -> None:
    _fifo_at(checkpoint / ".metadata")
    for call in (lambda: load_tensors(checkpoint), lambda: inert.torch.load({"w": torch.zeros(64, 64)}, checkpoint)):
        exc = _unblocked(call, [checkpoint / ".metadata"])
        assert isinstance(exc, FileKindError) and ".metadata: a FIFO" in str(exc), repr(exc)
    _one_line_refusal(_cli("inspect", str(checkpoint)), ".metadata: a FIFO")
    assert _cli("verify", str(checkpoint)).returncode == 1


def test_fifo_as_rank_metadata_does_not_block(checkpoint: Path) -> None:
    os.mkfifo(checkpoint / "__0.metadata")
    reader = inert.torch.FileSystemReader(checkpoint)
    exc = _unblocked(lambda: reader.read_metadata(rank=0), [checkpoint / "__0.metadata"])
    assert isinstance(exc, FileKindError) and "__0.metadata: a FIFO" in str(exc), repr(exc)


def test_fifo_as_data_file_does_not_block(checkpoint: Path) -> None:
    data = _data_file(checkpoint)
    _fifo_at(data)
    for call in (lambda: load_tensors(checkpoint), lambda: inert.torch.load({"w": torch.zeros(64, 64)}, checkpoint)):
        exc = _unblocked(call, [data])
        assert isinstance(exc, FileKindError) and f"{data.name}: a FIFO" in str(exc), repr(exc)
    _one_line_refusal(_cli("verify", str(checkpoint)), "a FIFO")


def test_symlink_to_a_fifo_as_data_file_does_not_block(checkpoint: Path, tmp_path: Path) -> None:
    data = _data_file(checkpoint)
    os.mkfifo(tmp_path / "fifo")
    _link_to(data, tmp_path / "fifo")
    exc = _unblocked(lambda: load_tensors(checkpoint), [tmp_path / "fifo"])
    assert isinstance(exc, FileKindError) and "a symbolic link" in str(exc), repr(exc)


def test_fifo_as_manifest_or_shard_does_not_block(dumped: Path) -> None:
    shard = _shard(dumped)
    _fifo_at(shard)
    exc = _unblocked(lambda: load(dumped), [shard])
    assert isinstance(exc, FileKindError) and f"{shard.name}: a FIFO" in str(exc), repr(exc)
    _one_line_refusal(_cli("verify", str(dumped)), "a FIFO")
    _fifo_at(dumped / "MANIFEST")
    exc = _unblocked(lambda: load(dumped), [dumped / "MANIFEST"])
    assert isinstance(exc, FileKindError) and "MANIFEST: a FIFO" in str(exc), repr(exc)
    _one_line_refusal(_cli("inspect", str(dumped)), "MANIFEST: a FIFO")


def test_migrate_refuses_a_fifo_as_legacy_metadata_or_data_file(tmp_path: Path) -> None:
    src = tmp_path / "legacy"
    dcp.save({"w": torch.ones(4)}, storage_writer=dcp.FileSystemWriter(src), **ONE)
    data = _data_file(src)
    _fifo_at(data)
    result = _cli("migrate", str(src), str(tmp_path / "out"), "--trust-source")
    assert result.returncode == 1 and "a FIFO" in result.stderr and "Traceback" not in result.stderr, result.stderr
    _fifo_at(src / ".metadata")
    result = _cli("migrate", str(src), str(tmp_path / "out2"), "--trust-source")
    assert result.returncode == 1 and "a FIFO" in result.stderr and "Traceback" not in result.stderr, result.stderr
    result = _cli("inspect", str(src))
    assert result.returncode == 1 and "a FIFO" in result.stderr, result.stderr


# -- a shard truncated by another process while a dump loads -----------------------------------------------------

_TRUNCATE = "import os, sys; os.truncate(sys.argv[1], int(sys.argv[2]))"


def test_dump_load_survives_truncation_by_another_process(dumped: Path) -> None:
    shard = _shard(dumped)
    with inert.dump.open_dump(dumped) as reader:  # the files are open and their sizes checked
        subprocess.run([sys.executable, "-c", _TRUNCATE, str(shard), "100"], check=True)
        with pytest.raises(InertError, match=f"{shard.name}"):
            reader.read(owners=2)


_MAPPED_LOAD = """
import os, subprocess, sys
from inert.dump import open_dump
with open_dump(sys.argv[1], mapped=True) as reader:
    subprocess.run([sys.executable, "-c", sys.argv[3], sys.argv[2], "100"], check=True)
    reader.read(owners=2)
"""


def test_the_mapped_opt_in_is_what_a_truncation_kills(dumped: Path) -> None:
    """Why mapping is not the default: the same truncation is a SIGBUS for ``mapped=True``."""
    shard = _shard(dumped)
    padding = 1 << 16  # a shard longer than a page, so that the truncated records lie on unbacked pages
    dump([Row(f"k{i}", i, {"x": torch.arange(padding // 8) + i}, {}) for i in range(8)], dumped.parent / "big", owners=1)
    shard = _shard(dumped.parent / "big")
    result = subprocess.run([sys.executable, "-c", _MAPPED_LOAD, str(dumped.parent / "big"), str(shard), _TRUNCATE],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGBUS, (result.returncode, result.stderr)


_TRUNCATING_LOOP = """
import os, sys, time
path, data = sys.argv[1], open(sys.argv[1], "rb").read()
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    os.truncate(path, 4096)
    time.sleep(0.0005)
    with open(path, "r+b") as out:
        out.write(data)
"""


def test_dump_load_while_another_process_truncates_and_restores_a_shard(tmp_path: Path) -> None:
    path = tmp_path / "racing"
    dump([Row(f"k{i}", i, {"x": torch.arange(4096) + i}, {}) for i in range(64)], path, owners=1)
    shard = _shard(path)
    expected = {row.key: row.fields["x"].clone() for row in load(path).rows}
    loop = subprocess.Popen([sys.executable, "-c", _TRUNCATING_LOOP, str(shard), "5"])
    outcomes = set()
    try:
        while loop.poll() is None:
            try:
                rows = load(path, owners=2).rows
            except InertError:
                outcomes.add("refused")
            else:
                assert all(torch.equal(row.fields["x"], expected[row.key]) for row in rows)
                outcomes.add("loaded")
    finally:
        loop.kill()
        loop.wait()
    assert outcomes  # the process is alive: no SIGBUS, and every load either checked out whole or was refused


# -- inert.torch.load raises Inert's error, not DCP's wrapper ----------------------------------------------------

def test_inert_torch_load_raises_the_inert_error_with_dcp_exception_as_cause(checkpoint: Path) -> None:
    from torch.distributed.checkpoint.api import CheckpointException

    data = _data_file(checkpoint)
    raw = bytearray(data.read_bytes())
    raw[-10] ^= 0xFF
    data.write_bytes(raw)
    with pytest.raises(InertError) as info:
        inert.torch.load({"w": torch.zeros(64, 64), "v": {"step": 0}}, checkpoint)
    assert isinstance(info.value.__cause__, CheckpointException)
    try:  # caught by `except Exception`, which DCP's BaseException escapes
        inert.torch.load({"w": torch.zeros(64, 64), "v": {"step": 0}}, checkpoint)
    except Exception as exc:  # noqa: BLE001
        assert isinstance(exc, InertError)


# -- inert inspect FILE / inert verify FILE while another process truncates the file ------------------------------

_INSPECT_VERIFY_LOOP = """
import sys, time
from inert import InertError
from inert.cli.support import CommandError
from inert.cli.inspect import inspect_path
from inert.cli.verify import verify_path
end, outcomes = time.monotonic() + float(sys.argv[2]), set()
while time.monotonic() < end:
    try:
        outcomes.add("verified" if verify_path(sys.argv[1], show_progress=False).ok else "refused")
        inspect_path(sys.argv[1])
        outcomes.add("inspected")
    except (InertError, CommandError):
        outcomes.add("refused")
print(sorted(outcomes))
"""


_TRUNCATE_AND_RESTORE = """
import os, sys, time
path, data, hold = sys.argv[1], open(sys.argv[1], "rb").read(), float(sys.argv[3])
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    os.truncate(path, 4096)
    time.sleep(hold)
    with open(path, "r+b") as out:
        out.write(data)
    time.sleep(hold)
"""


def test_inspect_and_verify_of_a_named_file_survive_truncation_by_another_process(tmp_path: Path) -> None:
    """One data file named on the command line is read into private memory, not mapped: a file truncated
    and restored by another process while it is read makes a refusal or a whole result, never a SIGBUS."""
    path = tmp_path / "ckpt"
    dcp.save({"w": torch.randn(2048, 2048)}, storage_writer=FileSystemWriter(path), **ONE)  # 16 MiB
    data = _data_file(path)
    loop = subprocess.Popen([sys.executable, "-c", _TRUNCATE_AND_RESTORE, str(data), "8", "0.01"])
    try:
        result = subprocess.run([sys.executable, "-c", _INSPECT_VERIFY_LOOP, str(data), "6"], capture_output=True,
                                text=True, timeout=300)
    finally:
        loop.kill()
        loop.wait()
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert "refused" in result.stdout or "verified" in result.stdout, result.stdout


# -- a data file or shard rewritten with other bytes while it is read ------------------------------------------------

_REWRITING_LOOP = """
import os, sys, time
path, mine, other = sys.argv[1], open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
assert len(mine) == len(other)
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    for data in (other, mine):  # in place, 1 MiB at a time: a reader sees either file, or both mixed
        with open(path, "r+b") as out:
            for at in range(0, len(data), 1 << 20):
                out.write(data[at : at + (1 << 20)])
                out.flush()
"""


def _rewritten_while(target: Path, other: Path, seconds: float, attempt: Callable[[], str]) -> set[str]:
    """``attempt()`` repeated while another process rewrites ``target`` in place with the bytes of ``other``
    (same length, same layout, other values) and back; the set of what the attempts returned."""
    loop = subprocess.Popen([sys.executable, "-c", _REWRITING_LOOP, str(target), str(other), str(seconds)])
    outcomes: set[str] = set()
    try:
        while loop.poll() is None:
            outcomes.add(attempt())
    finally:
        loop.kill()
        loop.wait()
    return outcomes


def _inert_failure(exc: BaseException) -> bool:
    """An InertError, or DCP's wrapper of one (``dcp.load`` itself keeps the reader's error per rank)."""
    if isinstance(exc, InertError):
        return True
    failures = getattr(exc, "failures", None) or {}
    return bool(failures) and all(isinstance(f[0] if isinstance(f, tuple) else f, InertError) for f in failures.values())


def test_data_file_rewritten_during_load_is_an_inert_error_never_wrong_data(tmp_path: Path) -> None:
    """A data file rewritten in place by another process (another checkpoint's bytes, same layout) during
    ``load_tensors``, ``dcp.load``, ``inert.torch.load`` and ``inert verify``: each load returns exactly the
    saved tensors or raises an InertError (a CRC-32 mismatch), never other values silently."""
    from inert.cli.verify import verify_path

    state = {"big": torch.randn(2048, 2048), "a": torch.randn(300), "b": torch.arange(5000), "v": {"step": 3}}
    dcp.save(state, storage_writer=FileSystemWriter(tmp_path / "a"), **ONE)
    other = {k: (t + 1 if isinstance(t, torch.Tensor) else t) for k, t in state.items()}
    dcp.save(other, storage_writer=FileSystemWriter(tmp_path / "b"), **ONE)
    data, other_data = _data_file(tmp_path / "a"), _data_file(tmp_path / "b")
    assert data.name == other_data.name and data.stat().st_size == other_data.stat().st_size

    def same(loaded: dict[str, Any]) -> bool:
        return all(torch.equal(loaded[k], state[k]) for k in ("big", "a", "b"))

    def one_of_each() -> str:
        seen = []
        for attempt_load in (lambda: same(load_tensors(tmp_path / "a")),
                     lambda: _dcp_load(tmp_path / "a", state),
                     lambda: _inert_load(tmp_path / "a", state)):
            try:
                seen.append("loaded" if attempt_load() else "WRONG DATA")
            except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
                seen.append("refused" if _inert_failure(exc) else f"other: {exc!r}")
        report = verify_path(str(tmp_path / "a"), show_progress=False)
        seen.append("verified" if report.ok else ("refused" if "CRC-32" in report.problems[0] else report.problems[0]))
        return " ".join(sorted(set(seen)))

    outcomes = " ".join(_rewritten_while(data, other_data, 8, one_of_each)).split()
    assert set(outcomes) <= {"loaded", "verified", "refused"}, outcomes
    assert "refused" in outcomes  # the rewrite was seen, and refused


def _dcp_load(path: Path, state: dict[str, Any]) -> bool:
    target = {"big": torch.zeros(2048, 2048), "a": torch.zeros(300), "b": torch.zeros(5000, dtype=torch.int64),
              "v": {"step": 0}}
    dcp.load(target, storage_reader=inert.torch.FileSystemReader(path), **ONE)
    return all(torch.equal(target[k], state[k]) for k in ("big", "a", "b")) and target["v"] == {"step": 3}


def _inert_load(path: Path, state: dict[str, Any]) -> bool:
    target = {"big": torch.zeros(2048, 2048), "a": torch.zeros(300), "b": torch.zeros(5000, dtype=torch.int64),
              "v": {"step": 0}}
    inert.torch.load(target, path)
    return all(torch.equal(target[k], state[k]) for k in ("big", "a", "b")) and target["v"] == {"step": 3}


def test_dump_shard_rewritten_during_load_gives_whole_rows_or_an_inert_error(tmp_path: Path) -> None:
    """The same for ``inert.dump.load`` (default: private memory) and ``inert verify`` of the dump, with the
    bound the format sets: each row record carries its own CRC-32 and the manifest none, so a record is
    read whole from one version or refused, never mixed; a shard wholly replaced by another dump's rows
    of the same layout is not detectable (the rows it returns are then that dump's, each whole)."""
    from inert.cli.verify import verify_path

    rows = [Row(f"k{i}", i, {"x": torch.arange(4096) + i}, {}) for i in range(64)]
    dump(rows, tmp_path / "a", owners=1)
    dump([Row(f"k{i}", i, {"x": torch.arange(4096) + i + 1}, {}) for i in range(64)], tmp_path / "b", owners=1)
    shard, other = _shard(tmp_path / "a"), _shard(tmp_path / "b")
    assert shard.name == other.name and shard.stat().st_size == other.stat().st_size
    mine = {r.key: r.fields["x"] for r in rows}

    def attempt() -> str:
        seen = []
        try:
            for row in load(tmp_path / "a", owners=2).rows:
                x = row.fields["x"]
                seen.append("loaded" if torch.equal(x, mine[row.key]) else
                            "other-whole" if torch.equal(x, mine[row.key] + 1) else "MIXED")
        except InertError:
            seen.append("refused")
        report = verify_path(str(tmp_path / "a"), show_progress=False)
        seen.append("verified" if report.ok else ("refused" if "CRC-32" in report.problems[0] else report.problems[0]))
        return " ".join(sorted(set(seen)))

    outcomes = " ".join(_rewritten_while(shard, other, 6, attempt)).split()
    assert set(outcomes) <= {"loaded", "other-whole", "verified", "refused"}, outcomes
    assert "refused" in outcomes  # records caught mixed are refused by their CRC-32
