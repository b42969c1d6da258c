"""``FileSystemWriter``: DCP's storage writer, writing ``checkpoint-shard`` and ``checkpoint-metadata`` files.

Tensors are written as their raw bytes (made contiguous first: a transposed or
channels_last tensor is saved in C order, which is what DCP's metadata
describes); non-tensor values as MessagePack documents of Inert's value
subset.  The ``.metadata`` file is written last, through a temporary file,
``fsync`` and a rename, and an older one is removed before any data is
written: a checkpoint directory is loadable only once a save has completed.

Each data file is laid out from the save plan (every record's offset and
length follow from dtypes and shapes) and its records are written in place
with ``pwrite`` by at least two threads, a tensor's bytes straight from its
memory in 1 MiB blocks, each checksummed just before it is written.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from inert._codec_runtime import file_header
from inert._errors import WriteTypeError, WriteValueError
from inert._records import tensor_header as tensor_header
from inert.codecs import checkpoint_shard as shard
from inert.codecs._tables import CHECKPOINT_ALIGN as ALIGN
from inert.codecs._tables import CHECKPOINT_METADATA_NAME as METADATA_NAME

from ._compat import dtype_name, validate_checkpoint_id
from ._compressed import write_compressed_files
from ._metadata import InertStorageInfo, dumps_metadata
from ._options import DEFAULT_SERIALIZATION_FORMAT, check_serialization_format, compression_of
from ._payload import BLOCK, crc32, pwrite_all, write_from
from ._shard_file import COUNT, new_file, resolve_tensor, tensor_bytes
from ._values import to_document

try:
    from torch.distributed.checkpoint.staging import BlockingAsyncStager as _Stager
except ImportError:  # before 2.3: no async staging
    _Stager = object  # type: ignore[assignment,misc]

try:
    from torch.distributed.checkpoint.metadata import StorageMeta
except ImportError:  # before 2.4
    StorageMeta = None  # type: ignore[assignment,misc]

__all__ = ["FileSystemWriter"]

SUFFIX = ".distcp"
#: Threads writing records, whatever ``thread_count`` (the number of files) is: one record's
#: checksum and contiguous copy proceed while another is written.
_MIN_WORKERS = 2


@dataclasses.dataclass
class _Prefix:
    prefix: str


def value_record(fqn: str, value: Any) -> list[Any]:
    """The encoded record of a non-tensor value; a ``TypeError`` names its type and path in the state dict."""
    try:
        return shard.encode_record_parts({"body": {"kind": "VALUE", "value": to_document(value, "body.value")}})
    except (WriteTypeError, WriteValueError) as exc:
        inner = exc.field.removeprefix("body.value")
        raise type(exc)("checkpoint-shard", f"{fqn}{inner}", exc.reason) from None


def _lookup(planner: SavePlanner, item: WriteItem) -> Any:
    # The built-in planner keeps the original value; its resolve_data would torch.save it.
    lookup = getattr(planner, "lookup_object", None)
    if lookup is None:
        raise TypeError(f"{item.index.fqn}: the save planner has no lookup_object(); inert.torch needs the value itself")
    return lookup(item.index)


#: The ``checkpoint-shard`` version of an uncompressed save.
UNCOMPRESSED_VERSION = 1


@dataclasses.dataclass
class _Slot:
    """Where one record goes in its file, and what is known of it before its tensor is resolved."""

    item: WriteItem
    offset: int
    length: int
    head: bytes  # a tensor record's header; a value's whole record, CRC-32 included


def _layout(items: list[WriteItem], values: dict[Any, list[Any]]) -> tuple[bytes, list[_Slot]]:
    """The file's header and every record's place, from the plan alone: dtype and shape are the write items'."""
    # version 1 holds every uncompressed record: a writer writes the oldest version that holds its data,
    # so that a reader knowing only v1 reads it (v2 only adds ZSTD records, written by _compressed)
    head = file_header(shard.MAGIC, UNCOMPRESSED_VERSION) + COUNT.pack(len(items))
    pos = len(head)
    slots = []
    for item in items:
        pos += -pos % ALIGN
        if item.type == WriteItemType.BYTE_IO:
            record = b"".join(values[item.index])
            slots.append(_Slot(item, pos, len(record), record))
        else:
            assert item.tensor_data is not None
            dtype = item.tensor_data.properties.dtype
            shape = list(item.tensor_data.chunk.sizes)
            nbytes = int(item.tensor_data.chunk.sizes.numel()) * dtype.itemsize
            header = tensor_header(dtype_name(dtype, item.index.fqn), shape, nbytes)
            slots.append(_Slot(item, pos, len(header) + nbytes + 4, header))
        pos += slots[-1].length
    return head, slots


def _write_record(fd: int, slot: _Slot, planner: SavePlanner) -> int:
    """Write one record at its place; return its CRC-32."""
    if slot.item.type == WriteItemType.BYTE_IO:
        pwrite_all(fd, slot.head, slot.offset)
        return int(COUNT.unpack(slot.head[-4:])[0])
    _flat, data = tensor_bytes(resolve_tensor(slot.item, planner))
    if len(data) < BLOCK:  # small: one write
        record = slot.head + data.tobytes()
        crc = crc32(record)
        pwrite_all(fd, record + COUNT.pack(crc), slot.offset)
        return crc
    pwrite_all(fd, slot.head, slot.offset)
    crc = write_from(fd, slot.offset + len(slot.head), data, crc32(slot.head))
    pwrite_all(fd, COUNT.pack(crc), slot.offset + slot.length - 4)
    return crc


def _write_files(root: Path, jobs: list[tuple[str, list[WriteItem]]], planner: SavePlanner,
                 values: dict[Any, list[Any]], workers: int, sync: bool) -> list[WriteResult]:
    """Every record of every file, written in place by ``workers`` threads, each file laid out first."""
    files = []
    older: list[int] = []
    try:
        for name, items in jobs:
            head, slots = _layout(items, values)
            files.append((name, new_file(root / name, older), head, slots))
        with ThreadPoolExecutor(workers) as pool:
            for fd in older:
                pool.submit(os.close, fd)
            older = []
            futures = [(name, slot, pool.submit(_write_record, fd, slot, planner))
                       for name, fd, _, slots in files for slot in slots]
            try:
                for _, fd, head, _ in files:
                    pwrite_all(fd, head, 0)
                results = [WriteResult(index=slot.item.index, size_in_bytes=slot.length,
                                       storage_data=InertStorageInfo(name, slot.offset, slot.length, crc32=future.result()))
                           for name, slot, future in futures]
            except BaseException:
                pool.shutdown(cancel_futures=True)  # a failed save writes no further records
                raise
        if sync:
            for _, fd, _, _ in files:
                os.fsync(fd)
    finally:
        for fd in older + [fd for _, fd, _, _ in files]:
            os.close(fd)
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

    The arguments are torch's (2.13).  ``_extensions=[ZStandard()]`` compresses every record
    (``checkpoint-shard`` version 2 ``ZSTD`` bodies); other stream transforms are refused.
    ``serialization_format`` must be the default: Inert's records replace DCP's layout.

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
        _extensions: Sequence[Any] | None = None,
        serialization_format: Any = DEFAULT_SERIALIZATION_FORMAT,
    ) -> None:
        super().__init__()
        self.compression = compression_of(_extensions)  # caller mistakes fail here, before any save
        check_serialization_format(serialization_format)
        self.serialization_format = serialization_format
        if _Stager is not object:
            _Stager.__init__(self, cache_staged_state_dict=cache_staged_state_dict)
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

    def _metadata_path(self, rank: int | None = None) -> Any:
        return self.path / (METADATA_NAME if rank is None else f"__{rank}{METADATA_NAME}")

    # Storage operations: a local directory here, an fsspec filesystem in ``FsspecWriter``.
    def _make_root(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def _exists(self, path: Any) -> bool:
        return bool(path.exists())

    def _remove(self, path: Any) -> None:
        path.unlink()

    def _write_jobs(self, jobs: list[tuple[str, list[WriteItem]]], planner: SavePlanner,
                    values: dict[Any, list[Any]]) -> list[WriteResult]:
        write = _write_files if self.compression is None else write_compressed_files
        return write(self.path, jobs, planner, values, max(self.thread_count, _MIN_WORKERS), self.sync_files)

    def _file_count(self, items: list[WriteItem]) -> int:
        return self.thread_count

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        self._make_root()
        existing = self._metadata_path(None if self.use_collectives else 0)
        if self._exists(existing) and not self.overwrite:
            raise RuntimeError(f"Checkpoint already exists at {self.path} and overwrite=False.")
        if self.rank is not None and not self.use_collectives:
            own = self._metadata_path(self.rank)
            if self._exists(own):
                self._remove(own)
            plan = dataclasses.replace(plan, storage_data=_Prefix(f"__{self.rank}_"))
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # Runs on the coordinator before any rank writes data: an older checkpoint stops being loadable now.
        old = self._metadata_path()
        if self._exists(old):
            self._remove(old)
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
            groups = _buckets(plan.items, self._file_count(plan.items))
        else:
            groups = [[item] for item in plan.items]
        jobs = [(f"{prefix}{n}{SUFFIX}", group) for n, group in enumerate(groups)]
        results = self._write_jobs(jobs, planner, values)
        done: Future[list[WriteResult]] = Future()
        done.set_result(results)
        return done

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        if hasattr(metadata, "version"):
            metadata.version = "1.0.0"
        metadata.storage_data = {wr.index: wr.storage_data for wrs in results for wr in wrs}
        if StorageMeta is not None:
            metadata.storage_meta = self.storage_meta()
        local = self.rank is not None and not self.use_collectives
        self._commit(self._metadata_path(self.rank if local else None), dumps_metadata(metadata))

    def _commit(self, final: Any, data: bytes) -> None:
        """Write the metadata, the checkpoint's commit point: whole or not at all."""
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
        return validate_checkpoint_id(checkpoint_id)

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        self.per_thread_copy_ahead = 0
        return super().stage(state_dict)  # type: ignore[no-any-return]

