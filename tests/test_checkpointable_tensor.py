"""PyTorch 2.14's ``CheckpointableTensor``: a plain tensor carrying ``global_shape``, ``global_offsets``,
``local_offsets`` and ``local_sizes``, saved by DCP as the shards those name, inside its own buffer.

DCP's planner makes the chunks and slices the buffer; the storage classes store and read them.  Each
state is saved once through torch's ``FileSystemWriter`` and once through Inert's, and everything is
compared: the metadata's chunks, the values loaded as full tensors, and the values loaded back into
``CheckpointableTensor`` buffers of every layout (the padding between and around shards left alone).
The layouts: one shard inside a padded buffer; two shards side by side in one padded buffer (column
slices: views that are not contiguous); two shards stacked out of global order with padding rows.
Two gloo ranks, each holding one shard, are checked the same way, loaded by one process.

Gated by the release number (2.14 and later), not by an import: on 2.14+ a missing class fails.
tools/compat runs this file on 2.14.1 and 2.15.0.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ranks
import torch
import torch.distributed.checkpoint as dcp

import inert.torch
from inert.torch._compat import TORCH_VERSION

RELEASE = f"PyTorch {torch.__version__.split('+')[0]}"
pytestmark = [
    pytest.mark.skipif(TORCH_VERSION < (2, 14), reason=f"{RELEASE} has no torch.distributed.checkpoint."
                                                       "CheckpointableTensor (PyTorch 2.14 and later)"),
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled"),
]

GLOBAL_SHAPE = (4, 8)
PAD = -7.0  # what padding holds before and after every load
#: (global offset, local offset, size) of one shard
Shard = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
#: layout name -> (buffer shape, its shards)
Layout = tuple[tuple[int, ...], list[Shard]]
LAYOUTS: dict[str, Layout] = {
    "one-shard-padded": ((5, 9), [((0, 0), (1, 1), (4, 8))]),
    "two-shards-side-by-side": ((4, 10), [((0, 0), (0, 0), (4, 4)), ((0, 4), (0, 5), (4, 4))]),
    "two-shards-stacked-out-of-order": ((6, 8), [((2, 0), (0, 0), (2, 8)), ((0, 0), (3, 0), (2, 8))]),
}
SIDES: dict[str, tuple[Callable[[Path], Any], Callable[[Path], Any]]] = {
    "torch": (dcp.FileSystemWriter, dcp.FileSystemReader),
    "inert": (inert.torch.FileSystemWriter, inert.torch.FileSystemReader),
}


def full() -> torch.Tensor:
    return torch.arange(GLOBAL_SHAPE[0] * GLOBAL_SHAPE[1], dtype=torch.float32).reshape(GLOBAL_SHAPE) + 1


def region(offset: tuple[int, ...], size: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(o, o + s) for o, s in zip(offset, size, strict=True))


def padded(shape: tuple[int, ...], shards: list[Shard], values: torch.Tensor | None) -> torch.Tensor:
    """A PAD-filled buffer made a CheckpointableTensor of ``shards``, each holding its region of ``values``."""
    from torch.distributed.checkpoint import CheckpointableTensor  # type: ignore[attr-defined,unused-ignore]

    buffer = torch.full(shape, PAD)
    if values is not None:
        for global_offset, local_offset, size in shards:
            buffer[region(local_offset, size)] = values[region(global_offset, size)]
    buffer.global_shape = GLOBAL_SHAPE  # type: ignore[attr-defined]
    buffer.global_offsets = tuple(g for g, _, _ in shards)  # type: ignore[attr-defined]
    buffer.local_offsets = tuple(lo for _, lo, _ in shards)  # type: ignore[attr-defined]
    buffer.local_sizes = tuple(s for _, _, s in shards)  # type: ignore[attr-defined]
    assert isinstance(buffer, CheckpointableTensor)  # 2.14+: the class missing there is a failure, not a skip
    return buffer


def checkpointable(layout: str, values: torch.Tensor | None) -> torch.Tensor:
    return padded(*LAYOUTS[layout], values)


def padding_mask(layout: str) -> torch.Tensor:
    shape, shards = LAYOUTS[layout]
    mask = torch.ones(shape, dtype=torch.bool)
    for _, local_offset, size in shards:
        mask[region(local_offset, size)] = False
    return mask


def holds(buffer: torch.Tensor, layout: str, values: torch.Tensor) -> bool:
    """Every shard of ``buffer`` holds its region of ``values`` and every padding element PAD."""
    _, shards = LAYOUTS[layout]
    return all(torch.equal(buffer[region(lo, s)], values[region(g, s)]) for g, lo, s in shards) and bool(
        (buffer[padding_mask(layout)] == PAD).all())


def chunks(reader: Any, key: str = "w") -> tuple[tuple[int, ...], list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    entry = reader.read_metadata().state_dict_metadata[key]
    return tuple(entry.size), sorted((tuple(c.offsets), tuple(c.sizes)) for c in entry.chunks)


def save(side: str, layout: str, path: Path) -> None:
    writer, _ = SIDES[side]
    dcp.save({"w": checkpointable(layout, full()), "step": torch.tensor(3)}, storage_writer=writer(path))


@pytest.fixture(params=list(LAYOUTS))
def saved(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Path]]:
    """Both sides' checkpoints of one saved layout."""
    paths = {side: tmp_path / side for side in SIDES}
    for side, path in paths.items():
        save(side, request.param, path)
    return request.param, paths


def test_metadata_chunks_are_torchs(saved: tuple[str, dict[str, Path]]) -> None:
    layout, paths = saved
    found = {side: chunks(SIDES[side][1](path)) for side, path in paths.items()}
    assert found["inert"] == found["torch"]
    assert found["inert"] == (GLOBAL_SHAPE, sorted((g, s) for g, _, s in LAYOUTS[layout][1]))
    assert (paths["inert"] / ".metadata").read_bytes()[:4] != (paths["torch"] / ".metadata").read_bytes()[:4]


def test_loads_as_full_tensor(saved: tuple[str, dict[str, Path]]) -> None:
    _, paths = saved
    for side, path in paths.items():
        state = {"w": torch.zeros(GLOBAL_SHAPE), "step": torch.tensor(0)}
        dcp.load(state, storage_reader=SIDES[side][1](path))
        assert torch.equal(state["w"], full()), side
        assert int(state["step"]) == 3, side
    state = {"w": torch.zeros(GLOBAL_SHAPE), "step": torch.tensor(0)}
    inert.torch.load(state, paths["inert"])  # Inert's own entry point and planner
    assert torch.equal(state["w"], full())


@pytest.mark.parametrize("target", list(LAYOUTS))
def test_loads_back_into_checkpointable_tensors(saved: tuple[str, dict[str, Path]], target: str) -> None:
    _, paths = saved
    loaded = {}
    for side, path in paths.items():
        state = {"w": checkpointable(target, None), "step": torch.tensor(0)}
        dcp.load(state, storage_reader=SIDES[side][1](path))
        assert holds(state["w"], target, full()), side
        loaded[side] = state["w"]
    assert torch.equal(loaded["inert"], loaded["torch"])
    state = {"w": checkpointable(target, None), "step": torch.tensor(0)}
    inert.torch.load(state, paths["inert"])
    assert holds(state["w"], target, full())


def test_resaving_a_loaded_checkpointable_tensor_keeps_its_shards(tmp_path: Path) -> None:
    # Loaded into one layout, saved from it again: the second checkpoint's chunks are that layout's.
    save("inert", "two-shards-side-by-side", tmp_path / "a")
    state = {"w": checkpointable("two-shards-stacked-out-of-order", None), "step": torch.tensor(0)}
    inert.torch.load(state, tmp_path / "a")
    dcp.save(state, storage_writer=inert.torch.FileSystemWriter(tmp_path / "b"))
    _, stacked = LAYOUTS["two-shards-stacked-out-of-order"]
    assert chunks(inert.torch.FileSystemReader(tmp_path / "b")) == (GLOBAL_SHAPE, sorted((g, s) for g, _, s in stacked))
    back = {"w": torch.zeros(GLOBAL_SHAPE), "step": torch.tensor(0)}
    inert.torch.load(back, tmp_path / "b")
    assert torch.equal(back["w"], full())


def rank_checkpointable(rank: int, values: torch.Tensor | None) -> torch.Tensor:
    """Two gloo ranks: rank r holds global rows [2r, 2r + 2) at row 1, column 1 of a padded (4, 9) buffer."""
    return padded((4, 9), [((2 * rank, 0), (1, 1), (2, 8))], values)


def rank_main(scenario: str, side: str, path: str) -> None:
    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    ranks.init_group()
    rank = dist.get_rank()
    writer, reader = SIDES[side]
    if scenario == "save":
        dcp.save({"w": rank_checkpointable(rank, full())}, storage_writer=writer(Path(path)))
    else:
        state = {"w": rank_checkpointable(rank, None)}
        dcp.load(state, storage_reader=reader(Path(path)))
        assert torch.equal(state["w"], rank_checkpointable(rank, full())), state["w"]
    dist.barrier()
    ranks.leave()


def test_two_ranks_one_shard_each(tmp_path: Path) -> None:
    for side in SIDES:
        path = tmp_path / side
        ranks.ok(ranks.run_ranks(__file__, ["save", side, str(path)], 2))
        ranks.ok(ranks.run_ranks(__file__, ["load", side, str(path)], 2))  # back into CheckpointableTensors
    found = {side: chunks(SIDES[side][1](tmp_path / side)) for side in SIDES}
    assert found["inert"] == found["torch"] == (GLOBAL_SHAPE, [((0, 0), (2, 8)), ((2, 0), (2, 8))])
    state = {"w": torch.zeros(GLOBAL_SHAPE)}
    inert.torch.load(state, tmp_path / "inert")  # 2 -> 1: a full tensor in one process
    assert torch.equal(state["w"], full())


if __name__ == "__main__":
    rank_main(*sys.argv[1:4])
