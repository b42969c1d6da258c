"""Save a model and its Adam state with torch.distributed.checkpoint through Inert, load them back bit-exactly.

    python examples/quickstart.py              # in a temporary directory, removed afterwards
    python examples/quickstart.py --keep DIR   # kept in DIR (made if missing, must be empty):
    python -m inert inspect DIR && python -m inert verify DIR

``inert.torch.save``/``load`` call DCP's entry point for the running PyTorch (2.2 to the
newest): on 2.5+ in one process they are ``dcp.save(state, storage_writer=FileSystemWriter(path),
no_dist=True)`` and ``dcp.load(state, storage_reader=FileSystemReader(path), no_dist=True)``;
docs/torch.md says what they call on 2.2 to 2.4.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

import inert.torch

warnings.filterwarnings("ignore", message="torch.distributed is disabled")  # one process, no process group


def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


@contextlib.contextmanager
def checkpoint_dir(keep: Path | None) -> Iterator[str]:
    """``keep`` (made if missing; refused unless empty, so that nothing of the user's is overwritten), else a temporary one."""
    if keep is None:
        with tempfile.TemporaryDirectory() as path:
            yield path
        return
    keep.mkdir(parents=True, exist_ok=True)
    if any(keep.iterdir()):
        raise SystemExit(f"quickstart: --keep {keep}: the directory is not empty")
    yield str(keep)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, metavar="DIR", help="save the checkpoint in DIR and keep it there")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model, optim = make()
    loss = model(torch.randn(8, 16)).pow(2).mean()
    loss.backward()
    optim.step()

    with checkpoint_dir(args.keep) as path:
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
    if args.keep is not None:
        print(f"kept in {args.keep}: python -m inert inspect {args.keep}; python -m inert verify {args.keep}")


if __name__ == "__main__":
    main()
