"""An unmodified DCP program: it never imports inert.  Saves with ``dcp.save(state, checkpoint_id=dir)``, loads
back into zeroed tensors, and writes result-RANK.json: bit-exact or not, pickle.find_class events and unpickling calls during the
load (tests/frameworks/watch.py), and whether inert was imported (by the INERT_TORCH_ENABLE hook, not by this program)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from watch import report, watching


def main() -> None:
    base = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    generator = torch.Generator().manual_seed(7)
    state = {f"w{rank}": torch.randn(64, 33, generator=generator), "shared": torch.arange(10, dtype=torch.float64)}
    directory = base / "ckpt"
    dcp.save(state, checkpoint_id=str(directory))
    dist.barrier()
    loaded = {name: torch.zeros_like(tensor) for name, tensor in state.items()}
    with watching():
        dcp.load(loaded, checkpoint_id=str(directory))
    exact = all(torch.equal(loaded[k], v) and loaded[k].dtype == v.dtype for k, v in state.items())
    result = {"exact": exact, **report(), "inert_imported": "inert" in sys.modules}
    (base / f"result-{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
