"""One torchrun worker driving Lightning Fabric's ModelParallelStrategy sharded checkpoint on CPU with gloo.

Usage: ``torchrun --nproc-per-node N fabric_ckpt.py ROUTE PHASE BASE`` (ROUTE and PHASE as in
titan_ckpt.py).  ``fabric.save`` writes the model and optimizer through Fabric's own
``_distributed_checkpoint_save`` (``dcp.save(state, checkpoint_id=path)`` on torch >= 2.3) and the rest
of the state to ``meta.pt`` with ``torch.save``; ``fabric.load`` reads both back.  Each rank writes
``result-PHASE-RANK.json`` in BASE.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from lightning_fabric import Fabric
from lightning_fabric.strategies import ModelParallelStrategy
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Shard, distribute_tensor
from watch import report, same, watching

ROUTE, PHASE, BASE = sys.argv[1:4]
STEPS = 3

if ROUTE == "api":
    import inert.torch

    inert.torch.enable()


def shard(model: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """Fabric's parallelize_fn: every parameter a DTensor split on dim 0 over the tensor-parallel ranks."""
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            setattr(module, name, nn.Parameter(distribute_tensor(param.detach(), mesh["tensor_parallel"], [Shard(0)])))
    return model


def build(fabric: Fabric, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = fabric.setup_module(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)))
    optimizer = fabric.setup_optimizers(torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False))
    return model, optimizer


def train(model: nn.Module, optimizer: torch.optim.Optimizer, mesh: Any) -> None:
    gen = torch.Generator().manual_seed(1234)
    for _ in range(STEPS):
        for param in model.parameters():
            param.grad = distribute_tensor(torch.randn(param.shape, generator=gen), mesh, [Shard(0)])
        optimizer.step()


def main() -> None:
    world = int(os.environ["WORLD_SIZE"])
    fabric = Fabric(accelerator="cpu", devices=world, strategy=ModelParallelStrategy(parallelize_fn=shard))
    fabric.launch()
    mesh = fabric.strategy.device_mesh["tensor_parallel"]
    path = os.path.join(BASE, "fabric-ckpt")
    model, optimizer = build(fabric, 0)
    train(model, optimizer, mesh)
    if PHASE == "both":
        fabric.save(path, {"model": model, "optimizer": optimizer, "step": STEPS})
        fabric.barrier()
    loaded_model, loaded_optimizer = build(fabric, 1)
    state: dict[str, Any] = {"model": loaded_model, "optimizer": loaded_optimizer, "step": 0}
    with watching():
        fabric.load(path, state)
    result = {
        "world": world,
        "model": same(model.state_dict(), loaded_model.state_dict()),
        "optimizer": same(optimizer.state_dict()["state"], loaded_optimizer.state_dict()["state"]),
        "step": state["step"] == STEPS,
        **report(),
        "inert_imported": "inert.torch" in sys.modules,
    }
    with open(os.path.join(BASE, f"result-{PHASE}-{fabric.global_rank}.json"), "w") as out:
        json.dump(result, out)
    fabric.barrier()


main()
