"""Resharded loads across real gloo process groups: saved with N ranks, loaded with M.

One save holds the same tensor under several layouts (whole, DTensor split by rows and by
columns, ShardedTensor with two local shards per rank by rows and by columns, and with
uneven shards); each load
reads every saved key into each destination layout in turn.  So every load both splits
saved chunks (several read items on one record: each takes its slice, the record is read
and checked once) and merges them (one destination chunk filled from several records,
saved by several ranks).  At most 3 ranks: this machine has 2 cores.

The ranks run this file as a script.
"""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import ranks
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from dcp_features import ZStandard, dtensor, dtensor_utils, needs_zstandard
from torch.distributed.checkpoint.api import CheckpointException

import inert.torch._reader as reader_module
from inert import InvalidValueError
from inert.codecs import checkpoint_metadata as cm
from inert.torch import FileSystemReader, FileSystemWriter
from inert.torch._compat import dcp_load, dcp_save
from inert.torch._metadata import METADATA_VERSION

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
SIZE = (12, 12)  # divides evenly among 1, 2, 3, 4 and 6 shards
LAYOUTS = ("whole", "dt_rows", "dt_cols", "dt_replicated", "st_rows", "st_cols", "st_uneven")
SAVED = ("whole", "dt_rows", "dt_cols", "st_rows", "st_cols", "st_uneven")
#: Rows of the uneven shards (``st_uneven``), placed on the ranks in turn.
UNEVEN = (2, 1, 3, 3, 3)


def full() -> torch.Tensor:
    return torch.arange(SIZE[0] * SIZE[1], dtype=torch.float32).reshape(SIZE)


def _make(layout: str, zero: bool) -> Any:
    """``full()`` (or zeros) in ``layout`` on this rank's group."""
    source = torch.zeros(SIZE) if zero else full()
    if layout == "whole":
        return source
    world = dist.get_world_size()
    if layout.startswith("dt_"):
        from torch.distributed.device_mesh import init_device_mesh

        dt = dtensor()
        placement = {"dt_rows": dt.Shard(0), "dt_cols": dt.Shard(1), "dt_replicated": dt.Replicate()}[layout]
        return dt.distribute_tensor(source, init_device_mesh("cpu", (world,)), [placement])
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec, EnumerableShardingSpec, ShardMetadata

    spec: Any
    if layout == "st_uneven":  # shards of 2, 1, 3, 3 and 3 rows, on the ranks in turn
        starts = [sum(UNEVEN[:i]) for i in range(len(UNEVEN))]
        spec = EnumerableShardingSpec([ShardMetadata([start, 0], [rows, SIZE[1]], f"rank:{i % world}/cpu")
                                       for i, (start, rows) in enumerate(zip(starts, UNEVEN, strict=True))])
    else:  # two shards per rank, not side by side: rank r holds shards r and r + world
        spec = ChunkShardingSpec(dim=0 if layout == "st_rows" else 1,
                                 placements=[f"rank:{i % world}/cpu" for i in range(2 * world)])
    tensor = sharded_tensor.zeros(spec, *SIZE)
    for shard in tensor.local_shards():
        shard.tensor.copy_(_slice(source, shard.metadata.shard_offsets, shard.metadata.shard_sizes))
    return tensor


def _slice(tensor: torch.Tensor, offsets: Any, sizes: Any) -> torch.Tensor:
    for dim, (start, length) in enumerate(zip(offsets, sizes, strict=True)):
        tensor = tensor.narrow(dim, start, length)
    return tensor


def _local_parts(value: Any) -> list[tuple[list[int], torch.Tensor]]:
    """Each part this rank holds, with its offsets in the whole tensor."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    if isinstance(value, ShardedTensor):
        return [(list(s.metadata.shard_offsets), s.tensor) for s in value.local_shards()]
    if isinstance(value, dtensor().DTensor):
        _, offsets = dtensor_utils().compute_local_shape_and_global_offset(value.shape, value.device_mesh, value.placements)
        return [(list(offsets), value.to_local())]
    return [([0, 0], value)]


def _check(value: Any, what: str) -> None:
    parts = _local_parts(value)
    assert parts and sum(part.numel() for _, part in parts) > 0, what
    for offsets, part in parts:
        expected = _slice(full(), offsets, part.shape)
        assert torch.equal(part, expected), f"{what} at {offsets}: {part} != {expected}"


def _worker(scenario: str, path: str) -> None:
    warnings.filterwarnings("ignore")
    ranks.init_group()
    if scenario in ("save", "save_zstd"):
        writer = FileSystemWriter(path, _extensions=[ZStandard()] if scenario == "save_zstd" else None)
        dcp.save({key: _make(key, zero=False) for key in SAVED}, storage_writer=writer)
    elif scenario == "load":
        for layout in LAYOUTS:
            state = {key: _make(layout, zero=True) for key in SAVED}
            dcp.load(state, storage_reader=FileSystemReader(path))
            for key in SAVED:
                _check(state[key], f"saved {key}, loaded {layout}")
    elif scenario == "once":
        # Every record is read once, however many read items take parts of it.
        reads: Counter[tuple[str, int]] = Counter()
        read_into = reader_module.read_into

        def counting(fd: int, offset: int, dest: memoryview, crc: int | None, name: str) -> int | None:
            reads[name, offset] += 1
            return read_into(fd, offset, dest, crc, name)

        reader_module.read_into = counting  # type: ignore[assignment]
        state = {"whole": _make("st_rows", zero=True)}
        dcp.load(state, storage_reader=FileSystemReader(path))
        _check(state["whole"], "whole into st_rows")
        assert len(state["whole"].local_shards()) == 2
        assert reads and max(reads.values()) == 1, reads
        # A planner with its own resolve_tensor: the record's parts are copied on this thread, in order.
        from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

        class Planner(DefaultLoadPlanner):
            def resolve_tensor(self, read_item: Any) -> torch.Tensor:
                return super().resolve_tensor(read_item)

        state = {"whole": _make("st_cols", zero=True)}
        dcp.load(state, storage_reader=FileSystemReader(path), planner=Planner())
        _check(state["whole"], "whole into st_cols, custom planner")
    elif scenario == "damaged":
        state = {"whole": _make("st_rows", zero=True)}
        try:
            dcp.load(state, storage_reader=FileSystemReader(path))
        except BaseException as exc:  # DCP wraps a rank's failure in a CheckpointException
            assert "ChecksumError" in repr(exc) or "CRC-32" in str(exc), repr(exc)
            print("REFUSED")
        for shard in state["whole"].local_shards():  # no byte of the damaged record was used
            assert not shard.tensor.any(), shard.tensor
    dist.barrier()


def _save_and_load(tmp_path: Path, saved_by: int, loaded_by: int, save: str = "save") -> None:
    ranks.ok(ranks.run_ranks(__file__, [save, str(tmp_path)], saved_by))
    assert len(list(tmp_path.glob("*.distcp"))) >= saved_by
    ranks.ok(ranks.run_ranks(__file__, ["load", str(tmp_path)], loaded_by))


@pytest.mark.parametrize(("saved_by", "loaded_by"), [(1, 2), (2, 3), (3, 2)])
def test_saved_by_n_ranks_loads_with_m_into_every_layout(tmp_path: Path, saved_by: int, loaded_by: int) -> None:
    _save_and_load(tmp_path, saved_by, loaded_by)


@needs_zstandard
def test_compressed_checkpoints_reshard_too(tmp_path: Path) -> None:
    _save_and_load(tmp_path, 3, 2, save="save_zstd")
    assert all(data_file.read_bytes()[8:10] == b"\x02\x00" for data_file in tmp_path.glob("*.distcp"))


def test_a_whole_tensor_loads_into_two_local_shards_reading_its_record_once(tmp_path: Path) -> None:
    ranks.ok(ranks.run_ranks(__file__, ["save", str(tmp_path)], 1))  # [12, 12] saved whole
    ranks.ok(ranks.run_ranks(__file__, ["once", str(tmp_path)], 1))  # one rank, two local shards


def test_a_damaged_record_split_between_read_items_is_refused_before_any_byte_is_copied(tmp_path: Path) -> None:
    ranks.ok(ranks.run_ranks(__file__, ["save", str(tmp_path)], 1))
    metadata = FileSystemReader(tmp_path).read_metadata()
    info = next(info for index, info in metadata.storage_data.items() if index.fqn == "whole")
    data_file = tmp_path / info.relative_path
    damaged = bytearray(data_file.read_bytes())
    damaged[info.offset + info.length - 100] ^= 0x10  # a payload byte of the last row
    data_file.write_bytes(bytes(damaged))
    results = ranks.run_ranks(__file__, ["damaged", str(tmp_path)], 2)
    ranks.ok(results)
    assert all("REFUSED" in result.stdout for result in results)


def test_two_chunks_on_one_byte_range_are_refused(tmp_path: Path) -> None:
    dcp_save({"a": torch.ones(4), "b": torch.zeros(4)}, FileSystemWriter(tmp_path))
    doc = cm.decode((tmp_path / ".metadata").read_bytes())
    a, b = sorted(doc["tensors"], key=lambda entry: entry["fqn"])
    for field in ("chunk_files", "chunk_byte_offsets", "chunk_byte_lengths", "chunk_crcs"):
        b[field] = a[field]  # "b" claims "a"'s record: one record read into two places
    (tmp_path / ".metadata").write_bytes(cm.encode(doc, version=METADATA_VERSION))
    state = {"a": torch.zeros(4), "b": torch.zeros(4)}
    with pytest.raises(CheckpointException) as raised:  # DCP wraps a rank's failure
        dcp_load(state, FileSystemReader(tmp_path))
    error = raised.value.failures[0]
    error = error[0] if isinstance(error, tuple) else error
    assert isinstance(error, InvalidValueError) and "overlaps" in str(error), repr(error)
    assert not state["b"].any()


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
    ranks.leave()
