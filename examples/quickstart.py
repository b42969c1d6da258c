"""Save a model and its Adam state with torch.distributed.checkpoint through Inert, load them back bit-exactly.

    python examples/quickstart.py

``inert.torch.save``/``load`` call DCP's entry point for the running PyTorch (2.2 to the
newest): on 2.5+ in one process they are ``dcp.save(state, storage_writer=FileSystemWriter(path),
no_dist=True)`` and ``dcp.load(state, storage_reader=FileSystemReader(path), no_dist=True)``;
docs/torch.md says what they call on 2.2 to 2.4.
"""

from __future__ import annotations

import tempfile
import warnings

import torch

import inert.torch

warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # one process, no process group


def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def main() -> None:
    torch.manual_seed(0)
    model, optim = make()
    loss = model(torch.randn(8, 16)).pow(2).mean()
    loss.backward()
    optim.step()

    with tempfile.TemporaryDirectory() as path:
        inert.torch.save({"model": model.state_dict(), "optim": optim.state_dict()}, path)

        model2, optim2 = make()  # fresh weights, empty optimizer state
        model2(torch.randn(8, 16)).sum().backward()
        optim2.step()  # create the optimizer state that the load fills in
        state = {"model": model2.state_dict(), "optim": optim2.state_dict()}
        inert.torch.load(state, path)
        model2.load_state_dict(state["model"])
        optim2.load_state_dict(state["optim"])

    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, model2.state_dict()[name]), name
    for pid, slots in optim.state_dict()["state"].items():
        for key, value in slots.items():
            assert torch.equal(value, optim2.state_dict()["state"][pid][key]), (pid, key)
    assert optim.state_dict()["param_groups"] == optim2.state_dict()["param_groups"]
    params = sum(p.numel() for p in model.parameters())
    print(f"inert.torch: saved and loaded {params} parameters + Adam state bit-exactly (loss {loss.item():.4f})")


if __name__ == "__main__":
    main()
