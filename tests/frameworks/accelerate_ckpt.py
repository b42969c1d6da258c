"""One torchrun worker driving Accelerate's own FSDP sharded-checkpoint functions (accelerate 1.16.0) on CPU with gloo.

Usage: ``torchrun --nproc-per-node N accelerate_ckpt.py ROUTE PHASE BASE`` (ROUTE and PHASE as in titan_ckpt.py).

Accelerate never takes its FSDP path on a machine without an accelerator: ``Accelerator(cpu=True,
fsdp_plugin=...)`` settles on ``DistributedType.MULTI_CPU`` (the FSDP branch of ``AcceleratorState`` is only
reached for GPU-like device types), wraps the model in DDP, and ``save_state`` writes safetensors and
``torch.save`` files, no DCP.  So this worker builds a real ``Accelerator(cpu=True)`` (its gloo process group),
shards the model itself with torch's FSDP2 ``fully_shard`` on a CPU mesh, and calls the functions
``Accelerator.save_state``/``load_state`` call on the FSDP path: ``accelerate.utils.save_fsdp_model``,
``save_fsdp_optimizer``, ``load_fsdp_model``, ``load_fsdp_optimizer`` with a ``FullyShardedDataParallelPlugin``
(FSDP2, ``SHARDED_STATE_DICT``).  Those construct ``torch.distributed.checkpoint.FileSystemWriter(dir)`` /
``FileSystemReader(dir)`` by name and call ``dcp.save``/``dcp.load``: the classes the switch replaces.

PHASE ``both`` saves then loads into a fresh model; ``load`` loads an existing checkpoint (any world size:
resharding).  The loaded state is compared bit for bit with the same training redone.  Each rank writes
``result-PHASE-RANK.json`` in BASE.
"""

from __future__ import annotations

import json
import os
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import (
    FullyShardedDataParallelPlugin,
    load_fsdp_model,
    load_fsdp_optimizer,
    save_fsdp_model,
    save_fsdp_optimizer,
)
from torch import nn
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor
from watch import report, same, watching

ROUTE, PHASE, BASE = sys.argv[1:4]
STEPS = 3

if ROUTE == "api":
    import inert.torch

    inert.torch.enable()


def build(seed: int, mesh: DeviceMesh) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)


def train(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """STEPS deterministic steps: gradients drawn from one seed, the same on every world size."""
    gen = torch.Generator().manual_seed(1234)
    for _ in range(STEPS):
        for param in model.parameters():
            assert isinstance(param, DTensor)
            grad = torch.randn(param.shape, generator=gen)
            param.grad = distribute_tensor(grad, param.device_mesh, param.placements)
        optimizer.step()


def main() -> None:
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT")
    # The plugin is passed as a user would; on CPU Accelerate ignores it (the result records the type it chose).
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
    world = accelerator.num_processes
    mesh = init_device_mesh("cpu", (world,))
    reference, reference_opt = build(0, mesh)
    train(reference, reference_opt)
    if PHASE == "both":
        save_fsdp_model(plugin, accelerator, reference, BASE)
        save_fsdp_optimizer(plugin, accelerator, reference_opt, reference, BASE)
        accelerator.wait_for_everyone()
    model, optimizer = build(1, mesh)
    with watching():
        load_fsdp_model(plugin, accelerator, model, BASE)
        load_fsdp_optimizer(plugin, accelerator, optimizer, model, BASE)
    result = {
        "world": world,
        "distributed_type": str(accelerator.distributed_type),
        "model": same(reference.state_dict(), model.state_dict()),
        "optimizer": same(get_optimizer_state_dict(reference, reference_opt), get_optimizer_state_dict(model, optimizer)),
        **report(),
        "inert_imported": "inert.torch" in sys.modules,
    }
    with open(os.path.join(BASE, f"result-{PHASE}-{accelerator.process_index}.json"), "w") as out:
        json.dump(result, out)
    accelerator.wait_for_everyone()
    accelerator.end_training()


main()
