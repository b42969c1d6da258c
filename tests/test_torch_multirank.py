"""inert.torch across real processes: 2 and 4 gloo ranks save DTensor-sharded and per-rank state, load it
back with the same, a smaller and a single rank (4 -> 2, 4 -> 1, 2 -> 1: resharding), and a rank that fails
during a save leaves nothing loadable.

The ranks run this file as a script; the tensors are small, so 4 processes fit this 2-core machine.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import ranks
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import inert.torch
from inert.torch import FileSystemReader, FileSystemWriter

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
ROWS, COLS = 8, 6


def full() -> torch.Tensor:
    return torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS)


def run_ranks(scenario: str, path: Path, world: int = 2) -> list[subprocess.CompletedProcess[str]]:
    return ranks.run_ranks(__file__, [scenario, str(path)], world)


def test_two_ranks_save_and_load_then_reshard_to_one(tmp_path: Path) -> None:
    ranks.ok(run_ranks("save", tmp_path))
    assert (tmp_path / ".metadata").exists()
    assert {p.name for p in tmp_path.glob("*.distcp")} >= {"__0_0.distcp", "__1_0.distcp"}
    ranks.ok(run_ranks("load", tmp_path))
    # 2 -> 1: one process reads both ranks' shards into whole tensors
    state: dict[str, Any] = {"dt": torch.zeros(ROWS, COLS), "rank0": torch.zeros(3), "rank1": torch.zeros(3),
                             "common": {"step": 0}}
    inert.torch.load(state, tmp_path)
    assert torch.equal(state["dt"], full())
    assert torch.equal(state["rank0"], torch.full((3,), 0.0)) and torch.equal(state["rank1"], torch.full((3,), 1.0))
    assert state["common"] == {"step": 7}


def test_four_ranks_save_then_two_ranks_and_one_load(tmp_path: Path) -> None:
    ranks.ok(run_ranks("save", tmp_path, world=4))
    assert {p.name for p in tmp_path.glob("*.distcp")} >= {f"__{rank}_0.distcp" for rank in range(4)}
    ranks.ok(run_ranks("load", tmp_path, world=2))  # 4 -> 2: each rank reads the halves of two ranks' shards
    state: dict[str, Any] = {"dt": torch.zeros(ROWS, COLS), "common": {"step": 0}}
    state.update({f"rank{rank}": torch.zeros(3) for rank in range(4)})
    inert.torch.load(state, tmp_path)  # 4 -> 1
    assert torch.equal(state["dt"], full())
    assert all(torch.equal(state[f"rank{rank}"], torch.full((3,), float(rank))) for rank in range(4))
    assert state["common"] == {"step": 7}


def test_a_rank_failing_mid_save_leaves_nothing_loadable(tmp_path: Path) -> None:
    ranks.ok(run_ranks("save", tmp_path))  # an older, complete checkpoint in the same directory
    results = run_ranks("fail", tmp_path)
    ranks.ok(results)  # each rank saw the save fail (the ranks check that themselves)
    assert "FAILED AS EXPECTED" in results[0].stdout and "FAILED AS EXPECTED" in results[1].stdout
    assert not (tmp_path / ".metadata").exists()
    with pytest.raises(FileNotFoundError):
        FileSystemReader(tmp_path).read_metadata()


def _rank_state(rank: int, zero: bool) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:  # before 2.5
        from torch.distributed._tensor import Shard, distribute_tensor  # type: ignore[no-redef]

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    tensor = torch.zeros(ROWS, COLS) if zero else full()
    return {
        "dt": distribute_tensor(tensor, mesh, [Shard(0)]),
        f"rank{rank}": torch.zeros(3) if zero else torch.full((3,), float(rank)),
        "common": {"step": 0 if zero else 7},
    }


def _worker(scenario: str, path: str) -> None:
    warnings.filterwarnings("ignore")
    ranks.init_group()
    rank = dist.get_rank()
    try:
        if scenario == "save":
            dcp.save(_rank_state(rank, zero=False), storage_writer=FileSystemWriter(path))
        elif scenario == "load":
            state = _rank_state(rank, zero=True)
            inert.torch.load(state, path)  # 2.3's dcp.load would drop the nested non-tensor value
            rows = ROWS // dist.get_world_size()
            expected = full()[rank * rows:(rank + 1) * rows]
            assert torch.equal(state["dt"].to_local(), expected), state["dt"].to_local()
            assert torch.equal(state[f"rank{rank}"], torch.full((3,), float(rank)))
            assert state["common"] == {"step": 7}
        elif scenario == "fail":
            state = _rank_state(rank, zero=False)
            if rank == 1:  # a tensor only this rank has (2.3 writes non-tensor values from rank 0 only)
                state["rank1_bad"] = torch.zeros(2, dtype=torch.complex32)  # a dtype the format does not carry
            try:
                dcp.save(state, storage_writer=FileSystemWriter(path))
            except BaseException as exc:  # DCP raises a CheckpointException (a BaseException) on every rank
                assert "torch.complex32 has no checkpoint encoding" in str(exc), str(exc)
                print("FAILED AS EXPECTED")
            else:
                raise AssertionError("the save succeeded")
        dist.barrier()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
    ranks.leave()  # every rank passed the barrier above
