"""``inert migrate`` from real torch.save and safetensors files into checkpoints dcp.load and load_tensors read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

import inert.torch
from inert.cli.main import main
from inert.torch._compat import dcp_load
from tests.test_cli_tools import Evil

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(5, 8)).sum().backward()
    optim.step()
    return model, optim


def test_torch_save_file_into_a_checkpoint_dcp_loads(tmp_path: Path, capsys: Any) -> None:
    model, optim = trained()
    torch.save({"model": model.state_dict(), "optim": optim.state_dict(), "epoch": 3}, tmp_path / "ckpt.pt")
    code, _, err = run(capsys, "migrate", str(tmp_path / "ckpt.pt"), str(tmp_path / "out"))
    assert code == 2 and err.startswith("inert: migrate: refusing to read") and "--trust-source" in err
    assert not (tmp_path / "out").exists()
    code, out, err = run(capsys, "migrate", str(tmp_path / "ckpt.pt"), str(tmp_path / "out"), "--trust-source")
    assert code == 0, err
    assert "inert: migrate: verify: OK" in out and "16 tensors read back equal to the source" in out
    # A fresh model and optimizer, restored as a training script would (DCP fills the state that exists).
    fresh = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    fresh_optim = torch.optim.AdamW(fresh.parameters(), lr=0.5)
    fresh(torch.randn(5, 8)).sum().backward()
    fresh_optim.step()
    state = {"model": fresh.state_dict(), "optim": fresh_optim.state_dict(), "epoch": 0}
    inert.torch.load(state, tmp_path / "out")
    fresh.load_state_dict(state["model"])
    fresh_optim.load_state_dict(state["optim"])
    assert state["epoch"] == 3
    for a, b in zip(fresh.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert fresh_optim.param_groups[0]["lr"] == 1e-3
    assert torch.equal(fresh_optim.state[fresh[0].weight]["exp_avg"], optim.state[model[0].weight]["exp_avg"])
    tensors = inert.torch.load_tensors(tmp_path / "out")
    assert torch.equal(tensors["model.0.weight"], model[0].weight.detach())


def test_safetensors_file_and_directory_need_no_trust(tmp_path: Path, capsys: Any) -> None:
    torch.manual_seed(1)
    one = {"a.weight": torch.randn(3, 4), "a.bias": torch.zeros(3, dtype=torch.bfloat16)}
    save_file(one, tmp_path / "model.safetensors")
    code, out, err = run(capsys, "migrate", str(tmp_path / "model.safetensors"), str(tmp_path / "out1"))
    assert code == 0, err
    got = inert.torch.load_tensors(tmp_path / "out1")
    assert got.keys() == one.keys() and all(torch.equal(got[k], one[k]) and got[k].dtype == one[k].dtype for k in one)
    # a sharded model: a directory of safetensors files, one state dict
    shards = tmp_path / "sharded"
    shards.mkdir()
    save_file({"layers.0.w": torch.arange(6, dtype=torch.int32).reshape(2, 3)}, shards / "model-00001-of-00002.safetensors")
    save_file({"layers.1.w": torch.ones(4, dtype=torch.float16)}, shards / "model-00002-of-00002.safetensors")
    (shards / "model.safetensors.index.json").write_text("{}")
    code, out, err = run(capsys, "migrate", str(shards), str(tmp_path / "out2"))
    assert code == 0, err
    target = {"layers.0.w": torch.zeros(2, 3, dtype=torch.int32), "layers.1.w": torch.zeros(4, dtype=torch.float16)}
    dcp_load(target, inert.torch.FileSystemReader(tmp_path / "out2"))  # dcp.load, or what works on 2.2/2.3
    assert target["layers.0.w"].tolist() == [[0, 1, 2], [3, 4, 5]] and target["layers.1.w"].tolist() == [1.0] * 4


def test_refusals_name_the_file_and_leave_no_output(tmp_path: Path, capsys: Any) -> None:
    marker = tmp_path / "ran"
    torch.save({"w": torch.ones(1), "x": Evil(marker)}, tmp_path / "evil.pt")
    code, _, err = run(capsys, "migrate", str(tmp_path / "evil.pt"), str(tmp_path / "o1"), "--trust-source")
    assert code == 1 and "torch.load(weights_only=True) refuses it" in err and "posix.system" in err
    assert not marker.exists() and not (tmp_path / "o1").exists()
    torch.save(torch.ones(2), tmp_path / "tensor.pt")
    code, _, err = run(capsys, "migrate", str(tmp_path / "tensor.pt"), str(tmp_path / "o2"), "--trust-source")
    assert code == 1 and "holds a torch.Tensor, not a dict" in err
    twice = tmp_path / "twice"
    twice.mkdir()
    save_file({"w": torch.ones(1)}, twice / "a.safetensors")
    save_file({"w": torch.zeros(1)}, twice / "b.safetensors")
    code, _, err = run(capsys, "migrate", str(twice), str(tmp_path / "o3"))
    assert code == 1 and "tensor 'w' is also in" in err
    for line in err.splitlines():
        assert line.startswith("inert: migrate: ")
    assert not any(p.name.startswith("o") for p in tmp_path.iterdir())


@pytest.mark.parametrize("entry", ["link", "fifo"])
def test_safetensors_directory_entry_that_is_not_a_regular_file_inside_is_refused(tmp_path: Path, capsys: Any,
                                                                                  entry: str) -> None:
    # A link to a file outside SRC would bring that file's tensors into DST without any trust flag.
    import os

    save_file({"secret": torch.ones(3)}, tmp_path / "outside.safetensors")
    src = tmp_path / "src"
    src.mkdir()
    save_file({"w": torch.zeros(2)}, src / "a.safetensors")
    if entry == "link":
        (src / "b.safetensors").symlink_to(tmp_path / "outside.safetensors")
    else:
        os.mkfifo(src / "b.safetensors")
    code, _, err = run(capsys, "migrate", str(src), str(tmp_path / "out"))
    assert code == 1 and err.startswith("inert: migrate: ") and "b.safetensors" in err, err
    assert "not a regular file" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_safetensors_shape_past_int64_is_one_line(tmp_path: Path, capsys: Any) -> None:
    import json
    import struct

    header = json.dumps({"t": {"dtype": "F32", "shape": [0, 2**63], "data_offsets": [0, 0]}}).encode()
    (tmp_path / "huge.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    code, _, err = run(capsys, "migrate", str(tmp_path / "huge.safetensors"), str(tmp_path / "out"))
    assert code == 1 and err.startswith("inert: migrate: ") and "not a readable safetensors file" in err, err
    assert err.count("\n") == 1 and "frame #" not in err, err


def test_torch_save_pickle_appending_to_an_empty_stack_is_one_line(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "bad.pt").write_bytes(b"\x80\x02a.")  # APPEND with nothing on the stack: IndexError inside torch.load
    code, _, err = run(capsys, "migrate", str(tmp_path / "bad.pt"), str(tmp_path / "out"), "--trust-source")
    assert code == 1 and err.startswith("inert: migrate: ") and "refuses it" in err, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
