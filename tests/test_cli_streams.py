"""The command line's streams: data on stdout, errors and hints on stderr; a reader that goes away
(``| head``) ends a command quietly (exit 141, nothing on stderr); the hint line for common mistakes."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file

import inert.torch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def inert_cli(*argv: str | Path, stdout: int = subprocess.PIPE, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inert", *map(str, argv)], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, timeout=300, cwd=cwd)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli_streams")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inert.torch.save({f"layer{i}.weight": torch.zeros(2, 3) for i in range(300)}, root / "ckpt")
        dcp.save({"w": torch.ones(4)}, storage_writer=dcp.FileSystemWriter(root / "legacy"), no_dist=True)
    for step in (100, 200, 300, 400):
        inert.torch.save({"w": torch.full((2,), float(step))}, root / "run" / f"step-{step}")
    save_file({"w": torch.zeros(2)}, str(root / "model.safetensors"))
    torch.save({"w": torch.zeros(2)}, root / "model.pt")
    (root / "empty").mkdir()
    (root / "notes.txt").write_text("hello\n")
    return root


def _closed_pipe_run(*argv: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``inert argv`` writing into a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    try:
        return inert_cli(*argv, stdout=write, cwd=cwd)
    finally:
        os.close(write)


@pytest.mark.parametrize("argv", [
    ["formats"],
    ["conformance", "list"],
    ["conformance", "path"],
    ["inspect", "ckpt"],
    ["inspect", "--json", "ckpt"],
    ["inspect", "legacy"],
    ["verify", "ckpt"],
    ["decode", "--format", "checkpoint-metadata", "ckpt/.metadata"],
    ["--help"],
], ids=" ".join)
def test_a_closed_stdout_ends_the_command_quietly(made: Path, argv: list[str]) -> None:
    result = _closed_pipe_run(*argv, cwd=made)
    assert result.stderr == "", result.stderr
    assert result.returncode in (141, 0), result.returncode  # 0: argparse's --help itself ignores the closed pipe
    if argv[0] != "--help":
        assert result.returncode == 141


def test_a_closed_stdout_after_encode_is_quiet(made: Path) -> None:
    shard = made / "ckpt" / "__0_0.distcp"
    decoded = inert_cli("decode", "--format", "checkpoint-shard", shard)
    assert decoded.returncode == 0, decoded.stderr
    (made / "shard.json").write_text(decoded.stdout)
    result = _closed_pipe_run("encode", "--format", "checkpoint-shard", "shard.json", cwd=made)
    assert (result.returncode, result.stderr) == (141, "")


def test_a_head_of_a_long_listing_prints_no_traceback(made: Path) -> None:
    command = f"{shlex.quote(sys.executable)} -m inert decode --format checkpoint-metadata ckpt/.metadata | head -c 16"
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, cwd=made,
                            timeout=300)
    assert len(result.stdout) == 16
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr, result.stderr
    assert result.returncode in (0, 141)  # 0 when all of it fitted in the pipe before head left


def test_data_on_stdout_and_nothing_on_stderr_when_all_is_well(made: Path) -> None:
    listing = inert_cli("inspect", "ckpt", cwd=made)
    assert listing.returncode == 0 and listing.stderr == "" and listing.stdout.startswith("ckpt: Inert checkpoint")
    verdict = inert_cli("verify", "ckpt", cwd=made)
    assert verdict.returncode == 0 and verdict.stderr == ""
    assert verdict.stdout.startswith("inert: verify: OK: 2 files, 300 records")


def _error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("inert: ")]


def test_a_safetensors_file_to_verify_gets_the_migrate_line(made: Path) -> None:
    result = inert_cli("verify", "model.safetensors", cwd=made)
    assert result.returncode == 1 and result.stdout == ""
    first, hint = _error_lines(result)
    assert first.startswith("inert: verify: FAILED: model.safetensors: not an Inert file: a safetensors file")
    assert hint == ("inert: verify: hint: a safetensors file: `inert migrate model.safetensors DST` converts it "
                    "(it holds no code: no --trust-source)")


def test_a_torch_save_file_to_verify_gets_the_trusted_migrate_line(made: Path) -> None:
    result = inert_cli("verify", "model.pt", cwd=made)
    assert result.returncode == 1
    assert _error_lines(result)[-1] == (
        "inert: verify: hint: if it is a torch.save file from a source you trust, `inert migrate --trust-source "
        "model.pt DST` converts it (`inert inspect model.pt` lists what its pickle would import)")


@pytest.mark.parametrize("command", ["inspect", "verify", "migrate"])
def test_a_folder_of_checkpoints_names_them(made: Path, command: str) -> None:
    argv = [command, "--trust-source", "run", "new"] if command == "migrate" else [command, "run"]
    result = inert_cli(*argv, cwd=made)
    assert result.returncode == 1, result.stderr
    assert _error_lines(result)[-1] == (f"inert: {command}: hint: give one checkpoint, not the folder of them: "
                                        "run/step-100, run/step-200, run/step-300 and 1 more")
    assert not (made / "new").exists()


def test_a_directory_that_is_no_checkpoint_says_what_one_is(made: Path) -> None:
    result = inert_cli("verify", "empty", cwd=made)
    assert result.returncode == 1
    assert _error_lines(result)[-1] == (
        "inert: verify: hint: a checkpoint is the directory a save wrote (FileSystemWriter's path, dcp.save's "
        "checkpoint_id), holding .metadata and its __N_M.distcp files; a dump holds a MANIFEST")


@pytest.mark.parametrize("argv", [["verify", "ckpt"], ["inspect", "notes.txt"], ["verify", "absent"], ["verify", "legacy"],
                                  ["migrate", "--trust-source", "ckpt", "new"]], ids=" ".join)
def test_no_hint_where_there_is_nothing_to_add(made: Path, argv: list[str]) -> None:
    """(A legacy checkpoint's own refusal already names `inert migrate`: one line, no hint.)"""
    result = inert_cli(*argv, cwd=made)
    assert "hint:" not in result.stderr, result.stderr
