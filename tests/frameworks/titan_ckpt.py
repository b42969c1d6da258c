"""One torchrun worker driving torchtitan's own CheckpointManager (torchtitan 0.3.0) on CPU with gloo.

Usage: ``torchrun --nproc-per-node N titan_ckpt.py ROUTE ASYNC_MODE PHASE BASE``

ROUTE ``api`` calls ``inert.torch.enable()``; ``env`` and ``off`` never import inert (``env`` is
launched with ``INERT_TORCH_ENABLE=1``, ``off`` is the control).  PHASE ``both`` trains a few steps,
saves through the manager and loads into a fresh model; ``load`` loads an existing checkpoint (on any
world size: resharding).  The loaded state is compared bit for bit with the same training redone
(deterministic, so the reference needs no saved copy), and every ``pickle.find_class`` audit event and
every call of ``pickle.load``/``pickle.loads``/``Unpickler.load`` during the load is recorded, with the
file that made it.  Each rank writes ``result-PHASE-RANK.json`` in BASE.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torch.utils.data import IterableDataset
from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.dataloader import ParallelAwareDataloader
from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer
from torchtitan.components.optimizer.optimizer import ParamGroupConfig
from watch import report, same, watching

ROUTE, ASYNC_MODE, PHASE, BASE = sys.argv[1:5]
STEPS = 3

if ROUTE == "api":
    import inert.torch

    inert.torch.enable()


class Counting(IterableDataset[torch.Tensor]):
    """The integers from a rank's offset, one small tensor each: the data loader's state is its position."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __iter__(self) -> Iterator[torch.Tensor]:
        i = self.rank * 1000
        while True:
            yield torch.tensor([i, i + 1], dtype=torch.int64)
            i += 2


def build(seed: int, rank: int, world: int, mesh: Any) -> dict[str, Any]:
    """A sharded model (every parameter a DTensor split on dim 0), torchtitan's optimizer and LR
    scheduler containers and its data loader."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    for module in model:
        for name, param in list(module.named_parameters(recurse=False)):
            setattr(module, name, nn.Parameter(distribute_tensor(param.detach(), mesh, [Shard(0)])))
    optimizers: OptimizersContainer = OptimizersContainer(
        OptimizersContainer.Config(
            param_groups=[ParamGroupConfig(pattern=r".*", optimizer_name="AdamW", optimizer_kwargs={"lr": 1e-2})],
            implementation="for-loop",
        ),
        model_parts=[model],
    )
    schedulers = LRSchedulersContainer.Config(warmup_steps=2).build(optimizers=optimizers, training_steps=10)
    loader = ParallelAwareDataloader(Counting(rank), dp_rank=rank, dp_world_size=world, batch_size=2)
    return {"model": model, "optimizers": optimizers, "schedulers": schedulers, "loader": loader, "it": iter(loader)}


def train(parts: dict[str, Any], mesh: Any) -> None:
    """STEPS deterministic steps: gradients drawn from one seed, the same on every world size."""
    gen = torch.Generator().manual_seed(1234)
    for _ in range(STEPS):
        next(parts["it"])
        for param in parts["model"].parameters():
            grad = torch.randn(param.shape, generator=gen)
            param.grad = distribute_tensor(grad, mesh, [Shard(0)])
        parts["optimizers"].step()
        parts["schedulers"].step()


def manager(parts: dict[str, Any], exclude: list[str], step: int) -> CheckpointManager:
    config = CheckpointManager.Config(
        enable=True, folder="ckpt", interval=1, keep_latest_k=0, async_mode=ASYNC_MODE, exclude_from_loading=exclude
    )
    return CheckpointManager(
        config,
        dataloader=parts["loader"],
        model_parts=[parts["model"]],
        optimizers=parts["optimizers"],
        lr_schedulers=parts["schedulers"],
        states={"train_state": {"step": torch.tensor(step)}},
        sd_adapter=None,
        base_folder=BASE,
    )


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    reference = build(0, rank, world, mesh)
    train(reference, mesh)
    if PHASE == "both":
        saver = manager(reference, [], STEPS)
        assert saver.save(curr_step=STEPS)
        saver.maybe_wait_for_saving()
        saver.close()
        dist.barrier()
    # The data loader's state cannot be resharded (torchtitan asserts the same dp world size).
    resharded = world != 2
    loaded = build(1, rank, world, mesh)
    loader_mgr = manager(loaded, ["dataloader"] if resharded else [], 0)
    with watching():
        assert loader_mgr.load(step=STEPS)
    loader_mgr.close()
    result = {
        "world": world,
        "model": same(reference["model"].state_dict(), loaded["model"].state_dict()),
        "optimizer": same(reference["optimizers"].state_dict(), loaded["optimizers"].state_dict()),
        "lr_scheduler": same(reference["schedulers"].state_dict(), loaded["schedulers"].state_dict()),
        "last_lr": same(
            [s.get_last_lr() for s in reference["schedulers"]], [s.get_last_lr() for s in loaded["schedulers"]]
        ),
        # The loader resumes at the saved position on its next iterator.
        "dataloader": resharded or same(next(reference["it"]), next(iter(loaded["loader"]))),
        "train_state": bool(loader_mgr.states["train_state"]["step"] == STEPS),
        **report(),
        "inert_imported": "inert.torch" in sys.modules,
    }
    with open(os.path.join(BASE, f"result-{PHASE}-{rank}.json"), "w") as out:
        json.dump(result, out)
    dist.barrier()
    dist.destroy_process_group()


main()
