"""``FileSystemWriter``: DCP's storage writer, writing ``checkpoint-shard`` and ``checkpoint-metadata`` files.

Tensors are written as their raw bytes (made contiguous first: a transposed or
channels_last tensor is saved in C order, which is what DCP's metadata
describes); non-tensor values as MessagePack documents of Inert's value
subset.  The ``.metadata`` file is written last, through a temporary file,
``fsync`` and a rename, and an older one is removed before any data is
written: a checkpoint directory is loadable only once a save has completed.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from inert._codec_runtime import file_header
from inert._errors import WriteTypeError, WriteValueError
from inert.codecs import checkpoint_shard as shard

from ._compat import dtype_name
from ._metadata import InertStorageInfo, dumps_metadata

try:
    from torch.distributed.checkpoint.staging import BlockingAsyncStager as _Stager
except ImportError:  # before 2.3: no async staging
    _Stager = object  # type: ignore[assignment,misc]

try:
    from torch.distributed.checkpoint.metadata import StorageMeta
except ImportError:  # before 2.4
    StorageMeta = None  # type: ignore[assignment,misc]

__all__ = ["FileSystemWriter"]

METADATA_NAME = ".metadata"
SUFFIX = ".distcp"
_COUNT = struct.Struct("<I")
#: Record alignment of checkpoint-shard v1 (``ALIGN`` in ``inert.spec.checkpoint_shard``).
ALIGN = 64


@dataclasses.dataclass
class _Prefix:
    prefix: str


def tensor_bytes(tensor: torch.Tensor) -> tuple[torch.Tensor, memoryview]:
    """A contiguous CPU copy-if-needed of ``tensor`` and a zero-copy byte view of it."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return flat, memoryview(flat.view(torch.uint8).numpy())  # type: ignore[arg-type]


def value_record(fqn: str, value: Any) -> list[Any]:
    """The encoded record of a non-tensor value; a ``TypeError`` names its type and path in the state dict."""
    try:
        return shard.encode_record_parts({"body": {"kind": "VALUE", "value": value}})
    except (WriteTypeError, WriteValueError) as exc:
        inner = exc.field.removeprefix("body.value")
        raise type(exc)("checkpoint-shard", f"{fqn}{inner}", exc.reason) from None


def _tensor_record(fqn: str, tensor: torch.Tensor) -> tuple[list[Any], torch.Tensor]:
    if tensor.layout != torch.strided:
        raise TypeError(f"{fqn}: {tensor.layout} tensors have no checkpoint encoding; densify them first")
    name = dtype_name(tensor.dtype, fqn)
    flat, data = tensor_bytes(tensor)
    parts = shard.encode_record_parts({"body": {"kind": "TENSOR", "dtype": name, "shape": list(tensor.shape), "data": data}})
    return parts, flat


def _lookup(planner: SavePlanner, item: WriteItem) -> Any:
    # The built-in planner keeps the original value; its resolve_data would torch.save it.
    lookup = getattr(planner, "lookup_object", None)
    if lookup is None:
        raise TypeError(f"{item.index.fqn}: the save planner has no lookup_object(); inert.torch needs the value itself")
    return lookup(item.index)


def _encode_item(item: WriteItem, planner: SavePlanner, values: dict[Any, list[Any]]) -> tuple[list[Any], Any]:
    """The record's buffers (CRC-32 included) and the tensor they view (kept alive until written)."""
    if item.type == WriteItemType.BYTE_IO:
        return values[item.index], None
    tensor = planner.resolve_data(item)
    assert isinstance(tensor, torch.Tensor)
    return _tensor_record(item.index.fqn, tensor)


def _write_file(path: Path, name: str, items: list[WriteItem], planner: SavePlanner, values: dict[Any, list[Any]],
                sync: bool) -> list[WriteResult]:
    results = []
    # The next record is encoded (its CRC-32 computed) while this one is written: zlib and
    # write() both release the GIL, so the checksum costs no time on two cores.
    with open(path, "wb", buffering=0) as out, ThreadPoolExecutor(1) as encoder:
        head = file_header(shard.MAGIC, shard.LATEST) + _COUNT.pack(len(items))
        out.write(head)
        pos = len(head)
        ahead = [encoder.submit(_encode_item, item, planner, values) for item in items[:1]]
        for index, item in enumerate(items):
            parts, _keep = ahead.pop(0).result()
            if index + 1 < len(items):
                ahead.append(encoder.submit(_encode_item, items[index + 1], planner, values))
            pad = -pos % ALIGN
            if pad:
                out.write(bytes(pad))
                pos += pad
            length = 0
            for part in parts:
                view = memoryview(part)
                while view:  # write() may write less than asked
                    view = view[out.write(view):]
                length += len(part)
            crc = _COUNT.unpack(parts[-1])[0]
            results.append(WriteResult(index=item.index, size_in_bytes=length,
                                       storage_data=InertStorageInfo(name, pos, length, crc32=crc)))
            pos += length
        if sync:
            os.fsync(out.fileno())
    return results


def _buckets(items: list[WriteItem], count: int) -> list[list[WriteItem]]:
    """``items`` in ``count`` files of similar size (largest first, each to the lightest file)."""
    bins: list[list[WriteItem]] = [[] for _ in range(max(1, count))]
    weights = [0] * len(bins)

    def weight(item: WriteItem) -> int:
        if item.tensor_data is None:
            return 1
        return int(item.tensor_data.chunk.sizes.numel()) * torch.empty((), dtype=item.tensor_data.properties.dtype).element_size()

    for item in sorted(items, key=weight, reverse=True):
        lightest = weights.index(min(weights))
        bins[lightest].append(item)
        weights[lightest] += weight(item)
    return [b for b in bins if b]


class FileSystemWriter(StorageWriter, _Stager):  # type: ignore[misc]
    """Drop-in for ``torch.distributed.checkpoint.FileSystemWriter`` writing Inert's formats.

    >>> import torch.distributed.checkpoint as dcp
    >>> dcp.save({"w": torch.ones(2)}, storage_writer=FileSystemWriter(path), no_dist=True)  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        single_file_per_rank: bool = True,
        sync_files: bool = True,
        thread_count: int = 1,
        per_thread_copy_ahead: int = 10_000_000,
        cache_staged_state_dict: bool = False,
        overwrite: bool = True,
    ) -> None:
        super().__init__()
        if _Stager is not object:
            _Stager.__init__(self, cache_staged_state_dict=cache_staged_state_dict)
        self.fs = FileSystem()
        self.path = Path(path)
        self.single_file_per_rank = single_file_per_rank
        self.sync_files = sync_files
        self.thread_count = max(1, thread_count)
        self.per_thread_copy_ahead = per_thread_copy_ahead
        self.overwrite = overwrite
        self.save_id = str(uuid.uuid4())
        self.rank: int | None = None
        self.use_collectives = True
        self.is_coordinator = False

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id:
            self.path = Path(checkpoint_id)
        self.save_id = str(uuid.uuid4())

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        # 2.9+ passes rank and use_collectives; older releases pass only is_coordinator.
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def _metadata_path(self, rank: int | None = None) -> Path:
        return self.path / (METADATA_NAME if rank is None else f"__{rank}{METADATA_NAME}")

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        self.path.mkdir(parents=True, exist_ok=True)
        existing = self._metadata_path(None if self.use_collectives else 0)
        if existing.exists() and not self.overwrite:
            raise RuntimeError(f"Checkpoint already exists at {self.path} and overwrite=False.")
        if self.rank is not None and not self.use_collectives:
            own = self._metadata_path(self.rank)
            if own.exists():
                own.unlink()
            plan = dataclasses.replace(plan, storage_data=_Prefix(f"__{self.rank}_"))
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # Runs on the coordinator before any rank writes data: an older checkpoint stops being loadable now.
        old = self._metadata_path()
        if old.exists():
            old.unlink()
        return [
            dataclasses.replace(plan, storage_data=_Prefix(f"__{i}_")) if plan.storage_data is None else plan
            for i, plan in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        prefix = plan.storage_data.prefix
        # Values are checked and encoded first, on this thread: a value outside the subset fails before any file is written.
        values = {item.index: value_record(item.index.fqn, _lookup(planner, item))
                  for item in plan.items if item.type == WriteItemType.BYTE_IO}
        if self.single_file_per_rank:
            groups = _buckets(plan.items, self.thread_count)
        else:
            groups = [[item] for item in plan.items]
        jobs = [(f"{prefix}{n}{SUFFIX}", group) for n, group in enumerate(groups)]
        results: list[WriteResult] = []
        if self.thread_count == 1 or len(jobs) == 1:
            for name, group in jobs:
                results += _write_file(self.path / name, name, group, planner, values, self.sync_files)
        else:
            with ThreadPoolExecutor(self.thread_count) as pool:
                futures = [pool.submit(_write_file, self.path / name, name, group, planner, values, self.sync_files)
                           for name, group in jobs]
                for future in futures:
                    results += future.result()
        done: Future[list[WriteResult]] = Future()
        done.set_result(results)
        return done

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        if hasattr(metadata, "version"):
            metadata.version = "1.0.0"
        metadata.storage_data = {wr.index: wr.storage_data for wrs in results for wr in wrs}
        if StorageMeta is not None:
            metadata.storage_meta = self.storage_meta()
        data = dumps_metadata(metadata)
        local = self.rank is not None and not self.use_collectives
        final = self._metadata_path(self.rank if local else None)
        tmp = final.with_name(final.name + ".tmp")
        with open(tmp, "wb") as out:
            out.write(data)
            if self.sync_files:
                os.fsync(out.fileno())
        os.replace(tmp, final)
        if self.sync_files:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def storage_meta(self) -> Any:
        return None if StorageMeta is None else StorageMeta(checkpoint_id=os.fspath(self.path), save_id=self.save_id)

    @property
    def checkpoint_id(self) -> str | os.PathLike[str]:
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return FileSystem.validate_checkpoint_id(checkpoint_id)

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        self.per_thread_copy_ahead = 0
        return super().stage(state_dict)  # type: ignore[no-any-return]

