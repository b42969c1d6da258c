"""What a new user meets at the command line: missing extras, --version, one error line, record names."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import save_file

import inert
from inert._extras import install_hint
from inert.torch import FileSystemWriter

ROOT = Path(__file__).resolve().parent.parent
ONE = {"no_dist": True} if "no_dist" in inspect.signature(dcp.save).parameters else {}
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

# Hides the torch extra's packages exactly as Python reports a package that is not installed.
_HIDE = """
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name.partition('.')[0] in ('torch', 'numpy', 'safetensors'):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Hide())
"""


def without_torch(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _HIDE + code], capture_output=True, text=True, cwd=cwd, timeout=120)


def cli(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inert", *argv], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("usability")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    dcp.save({"model": model.state_dict(), "step": 5}, storage_writer=FileSystemWriter(root / "ckpt"), **ONE)
    save_file({"w": torch.ones(2)}, root / "w.safetensors")
    torch.save({"w": torch.ones(2)}, root / "w.pt")
    return root


@pytest.mark.parametrize(("argv", "command"), [
    (["migrate", "w.safetensors", "out"], "migrate"),
    (["migrate", "w.pt", "out", "--trust-source"], "migrate"),
])
def test_cli_without_the_torch_extra_names_it_in_one_line(files: Path, argv: list[str], command: str) -> None:
    result = without_torch(f"from inert.cli.main import main\nsys.exit(main({argv!r}))", files)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"inert: {command}: this command needs PyTorch: {install_hint('torch')}"]
    assert not (files / "out").exists()


def test_inspect_needs_no_torch(files: Path) -> None:
    result = without_torch("from inert.cli.main import main\nsys.exit(main(['inspect', 'ckpt']))", files)
    assert result.returncode == 0, result.stderr
    assert "model.weight  float32  (2, 3)" in result.stdout


def test_verify_of_a_checkpoint_needs_no_torch_nor_numpy(files: Path) -> None:
    result = without_torch("from inert.cli.main import main\nsys.exit(main(['verify', 'ckpt']))", files)
    assert result.returncode == 0 and result.stdout.startswith("inert: verify: OK: 2 files, 3 records"), result.stderr


@pytest.mark.parametrize(("argv", "verdict"), [
    (["inspect", "garbage.bin"], "garbage.bin: not a known format: unknown bytes 67 61 72 62"),
    (["inspect", "."], ".: not a known format: a directory without .metadata or MANIFEST"),
])
def test_inspect_of_no_known_kind_is_a_refusal_on_stderr(tmp_path: Path, argv: list[str], verdict: str) -> None:
    (tmp_path / "garbage.bin").write_bytes(b"garbage bytes")
    result = cli(*argv, cwd=tmp_path)
    assert result.returncode == 1 and result.stdout == "", result.stdout
    assert result.stderr.startswith(f"inert: inspect: {verdict}"), result.stderr
    assert all(line.startswith("inert: inspect: ") for line in result.stderr.splitlines())
    as_json = cli("inspect", "--json", "garbage.bin", cwd=tmp_path)  # the document, for programs
    assert as_json.returncode == 1 and '"format": "unknown"' in as_json.stdout


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("argv", [["verify"], ["migrate", "--trust-source"], ["migrate"]])
def test_a_saved_module_gets_the_state_dict_hint(tmp_path: Path, legacy: bool, argv: list[str]) -> None:
    saved = tmp_path / "model.pt"
    torch.save(torch.nn.Sequential(torch.nn.Linear(2, 2)), saved, _use_new_zipfile_serialization=not legacy)
    result = cli(*argv, "model.pt", *(["out"] if argv[0] == "migrate" else []), cwd=tmp_path)
    assert result.returncode in (1, 2) and result.stdout == "", result.stdout
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"inert: {argv[0]}: hint: it is a whole nn.Module (torch.nn.modules."), result.stderr
    assert "save its state_dict() instead" in last and not (tmp_path / "out").exists()
    torch.save({"w": torch.ones(2)}, saved, _use_new_zipfile_serialization=not legacy)  # a state dict: no such hint
    assert "nn.Module" not in cli("verify", "model.pt", cwd=tmp_path).stderr


@pytest.mark.parametrize(("module", "line"), [
    ("inert.dump", f"inert.dump needs PyTorch: {install_hint('torch')}"),
    ("inert.transferqueue", f"inert.transferqueue needs PyTorch: {install_hint('transferqueue')}"),
    ("inert.dali", f"inert.dali needs numpy: {install_hint('dali')}"),
    ("inert.torch", f"inert.torch needs PyTorch (2.2 or later) and msgpack: {install_hint('torch')}"),
])
def test_import_without_the_extra_names_it(files: Path, module: str, line: str) -> None:
    result = without_torch(f"import {module}", files)
    assert result.returncode == 1
    assert line in result.stderr.splitlines()[-1]
    assert result.stderr.splitlines()[-1].partition(":")[0].endswith("Error")


def test_version() -> None:
    result = cli("--version")
    assert result.returncode == 0 and result.stdout == f"inert {inert.__version__}\n" and result.stderr == ""


@pytest.mark.parametrize(("argv", "command", "code"), [
    ([], "usage", 2),
    (["nonsense"], "usage", 2),
    (["decode"], "decode", 2),
    (["decode", "--format", "nope", "-"], "decode", 2),
    (["decode", "--format", "shm-message", "/nonexistent"], "decode", 2),
    (["decode", "--format", "checkpoint-shard", "w.pt"], "decode", 1),
    (["encode", "--format", "shm-message", "w.pt"], "encode", 2),
    (["inspect", "/nonexistent"], "inspect", 2),
    (["verify", "w.safetensors"], "verify", 1),
    (["migrate", "w.pt", "out"], "migrate", 2),
    (["migrate", "ckpt", "out", "--trust-source"], "migrate", 1),
    (["inspect", "--bogus", "ckpt"], "inspect", 2),
])
def test_every_error_is_one_line_with_the_command(files: Path, argv: list[str], command: str, code: int) -> None:
    result = cli(*argv, cwd=files)
    assert result.returncode == code, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith(f"inert: {command}: ") for line in lines), lines
    assert "Traceback" not in result.stderr


def test_inspect_of_a_data_file_names_each_record(files: Path) -> None:
    result = cli("inspect", str(files / "ckpt" / "__0_0.distcp"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  model.weight  tensor  float32  (2, 3)  24 B" in lines
    assert "  model.bias  tensor  float32  (2,)  8 B" in lines
    assert "  step  value  int" in lines
    assert "note: names from .metadata" in lines
