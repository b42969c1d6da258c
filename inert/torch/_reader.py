"""``FileSystemReader``: DCP's storage reader for ``checkpoint-shard`` and ``checkpoint-metadata`` files.

Nothing read is unpickled.  The metadata is decoded by the generated codec;
then every record's byte range is checked against its file's size and the
other records of that file (inside the file, no overlap), and records are
read by ``thread_count`` threads (the calling one included, see ``_threads``;
under 1 MiB in all, by the calling thread alone):

* a tensor record larger than 64 KiB whose destination is a whole, contiguous
  CPU tensor: its header is read and decoded by the codec first, and its dtype
  and shape must equal what the metadata and the read plan expect, and its
  stored CRC-32 the one the metadata holds, before any payload byte is read;
  the payload is then read straight into the destination with ``preadv``, in
  1 MiB blocks each checksummed while still in cache (in one call when
  unverified), a large payload in parts that any free thread takes, and the
  CRC-32 must match before the load returns (a damaged record may have filled
  its destination with bytes the load then refuses);
* any other record is read whole into a reused buffer, checksummed, decoded,
  checked the same way, and only then viewed as a tensor and copied.

A resharded load may make several read items on one record (a chunk saved
whole, loaded into two local shards): placement is checked per record, and
the record is read, checksummed and decoded once before each item copies its
slice.  Two chunks of the metadata that claim overlapping bytes are refused.

Values go to the built-in planner directly; a custom planner's ``load_bytes``
gets bytes that Inert produced locally (``torch.save`` of the checked value),
never the file's bytes.
"""

from __future__ import annotations

import copy
import functools
import io
import math
import os
import struct
import threading
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future as _PoolFuture
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from inert import _records
from inert._codec_runtime import read_file_header
from inert._errors import ChecksumError, ForeignFormatError, InertError, InvalidValueError
from inert._files import open_in, read_fd
from inert._records import (
    HEAD_MAX,
    LENGTH_CHECKED,
    NAMED_DAMAGE_MAX,
    SCRATCH,
    HeaderBuffers,
    ShapeMismatchError,
    check_placement,
    tensor_header,
)
from inert._zstd import Inflation
from inert.codecs import checkpoint_metadata as metadata_codec
from inert.codecs import checkpoint_shard as shard
from inert.codecs._tables import CHECKPOINT_MAX_VALUE_LEN as MAX_VALUE_LEN  # noqa: F401 - named by tests
from inert.codecs._tables import CHECKPOINT_METADATA_NAME as METADATA_NAME

from ._compat import dtype_name, torch_dtype, validate_checkpoint_id
from ._metadata import InertStorageInfo, loads_metadata
from ._options import checked_extension_registry
from ._payload import BLOCK, byte_view, crc32, crc32_combine, read_into
from ._threads import SharedTasks, Task
from ._values import from_document

try:
    from torch.distributed.checkpoint.metadata import StorageMeta
except ImportError:  # before 2.4
    StorageMeta = None  # type: ignore[assignment,misc]

__all__ = ["FileSystemReader", "MissingMetadataError", "ShapeMismatchError"]

_MIGRATE = (
    "If you trust its source, convert it with `inert migrate {dir} DST --trust-source` (docs/cli.md says what "
    "that trusts), or load it once with PyTorch's FileSystemReader and save it again with inert.torch.FileSystemWriter"
)
#: Data files whose first bytes a refusal looks at to tell a legacy checkpoint from a mixed directory.
_PEEK_FILES = 64
_SHARD_MAGIC = shard.MAGIC


class MissingMetadataError(InertError, FileNotFoundError):
    """A checkpoint without its ``.metadata`` (the commit point, written last): a save that did not finish,
    a removed file, or no checkpoint at all.  Also a ``FileNotFoundError``."""

    kind = "missing"


#: Records up to this size are read whole; a larger tensor record goes straight into its destination.
_DIRECT_MIN = 1 << 16
# Shared with inert verify (inert._records): the names this module and its tests have used.
_HEAD_MAX, _LENGTH_CHECKED, _NAMED_DAMAGE_MAX, _SCRATCH, _HeaderBuffers = (
    HEAD_MAX, LENGTH_CHECKED, NAMED_DAMAGE_MAX, SCRATCH, HeaderBuffers)
_CRC = struct.Struct("<I")
#: Fewer bytes than this are read on the calling thread alone: their records cost Python work, which
#: holds the GIL, more than copying, and a second thread would only take turns with the first.
_THREADED_MIN = 1 << 20
#: Records handed to a reading thread at once: small records travel together.
_BATCH_BYTES = 4 << 20
_BATCH_RECORDS = 64
#: A tensor payload at least twice this long is read in parts that any reading thread takes.
_PART = 8 << 20
#: The same for the last records to read, so that no thread idles while another reads a whole record.
_TAIL_PART = 1 << 20
#: What ``_load_direct`` returns for a payload handed out in parts: the last part reports the record.
_SPREAD = object()
#: In place of a buffer: copy from this tensor, but its buffer comes back with a later read item of the record.
_SHARED_BUFFER = object()
#: Where a read item's tensor goes: ``LoadPlanner.resolve_tensor`` or ``load_tensors``' own lookup.
Resolve = Callable[[ReadItem], torch.Tensor]
#: What loading a record gives, per read item: the item, the value or tensor, and a buffer to give back (or None).
Loaded = tuple[ReadItem, Any, Any]
#: A record and the read items that take parts of it (several when a load splits a saved chunk).
Placed = tuple[InertStorageInfo, list[ReadItem]]


def _read_tail(fd: int, info: InertStorageInfo, name: str) -> bytes:
    """A record's last four bytes: the CRC-32 it carries."""
    tail = bytearray(4)
    read_into(fd, info.offset + info.length - 4, memoryview(tail), None, name)
    return bytes(tail)


def _file_crc(fd: int, info: InertStorageInfo, name: str) -> int:
    """The CRC-32 of a record's bytes before its stored CRC-32, read from the file a block at a time."""
    block = memoryview(bytearray(min(BLOCK, info.length)))
    crc = 0
    for at in range(0, info.length - 4, BLOCK):
        part = block[: min(BLOCK, info.length - 4 - at)]
        read_into(fd, info.offset + at, part, None, name)
        crc = crc32(part, crc)
    return crc


def _check_crc(crc: int, stored: int, name: str, item: ReadItem, info: InertStorageInfo) -> None:
    _records.check_crc(crc, stored, name, item.storage_index.fqn, info.offset, info.length)


def _narrow(tensor: torch.Tensor, offsets: Any, lengths: Any) -> torch.Tensor:
    for dim, (start, length) in enumerate(zip(offsets, lengths, strict=False)):
        if start != 0 or length != tensor.shape[dim]:
            tensor = tensor.narrow(dim, start, length)
    return tensor


def _copy_into(resolve: Resolve, item: ReadItem, tensor: torch.Tensor) -> torch.Tensor:
    """Copy the planned part of a checked record into its destination; never broadcast."""
    source = _narrow(tensor, item.storage_offsets, item.lengths)
    target = resolve(item).detach()
    if target.size() != source.size():
        reason = f"destination has shape {tuple(target.size())}, the record gives {tuple(source.size())}"
        raise ShapeMismatchError("checkpoint-shard", -1, item.dest_index.fqn, reason)
    target.copy_(source)
    return target


def _default_load_bytes(planner: LoadPlanner) -> bool:
    return type(planner).load_bytes is DefaultLoadPlanner.load_bytes


def _set_value(planner: Any, item: ReadItem, value: Any) -> None:
    """What ``DefaultLoadPlanner.load_bytes`` does, with the checked value instead of ``torch.load``."""
    if getattr(planner, "flatten_state_dict", False):
        set_element(planner.original_state_dict, planner.mappings[item.dest_index.fqn], value)
    else:
        planner.state_dict[item.dest_index.fqn] = value


class _Buffers:
    """Read buffers, reused: a fresh page costs a fault, about as much as copying it twice."""

    def __init__(self, keep: int) -> None:
        self._free: list[torch.Tensor] = []
        self._keep = keep
        self._lock = threading.Lock()

    def take(self, size: int) -> torch.Tensor:
        with self._lock:  # (tensors compare elementwise: pick and drop them by position)
            fits = [i for i, b in enumerate(self._free) if b.numel() >= size]
            if fits:
                return self._free.pop(min(fits, key=lambda i: self._free[i].numel()))
        return torch.empty(max(size, 1), dtype=torch.uint8)

    def give(self, buffer: torch.Tensor) -> None:
        with self._lock:
            self._free.append(buffer)
            if len(self._free) > self._keep:
                self._free.pop(min(range(len(self._free)), key=lambda i: self._free[i].numel()))


class _Parts:
    """A tensor payload read in parts by whichever threads are free.

    Each part's CRC-32 is taken on its own; whoever reads the last part combines them
    after the header's and checks the record's, then reports the record.
    """

    def __init__(self, fd: int, name: str, item: ReadItem, info: InertStorageInfo, target: torch.Tensor,
                 at: int, head_crc: int | None, stored: int, part: int) -> None:
        self.fd, self.name, self.item, self.info, self.target = fd, name, item, info, target
        self.view = byte_view(target)
        self.at, self.head_crc, self.stored = at, head_crc, stored
        self.spans = [(lo, min(lo + part, len(self.view))) for lo in range(0, len(self.view), part)]
        self.crcs = [0] * len(self.spans)
        self.left = len(self.spans)
        self.lock = threading.Lock()

    def tasks(self) -> list[Task]:
        return [functools.partial(self.read, index) for index in range(len(self.spans))]

    def read(self, index: int) -> list[Loaded] | None:
        lo, hi = self.spans[index]
        crc = read_into(self.fd, self.at + lo, self.view[lo:hi], None if self.head_crc is None else 0, self.name)
        with self.lock:
            self.crcs[index] = crc or 0
            self.left -= 1
            if self.left:
                return None
        if self.head_crc is not None:
            assert crc32_combine is not None  # parts are checked only where CRC-32s combine
            total = self.head_crc
            for (lo, hi), part in zip(self.spans, self.crcs, strict=True):
                total = crc32_combine(total, part, hi - lo)
            _check_crc(total, self.stored, self.name, self.item, self.info)
        return [(self.item, self.target, None)]


def _batches(work: list[tuple[str, Placed]]) -> Iterator[list[tuple[str, Placed]]]:
    """``work`` in runs of about ``_BATCH_BYTES`` (a large record alone): one hand-off to a thread per run."""
    batch: list[tuple[str, Placed]] = []
    size = 0
    for entry in work:
        batch.append(entry)
        size += entry[1][0].length
        if size >= _BATCH_BYTES or len(batch) >= _BATCH_RECORDS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


class FileSystemReader(StorageReader):
    """Drop-in for ``torch.distributed.checkpoint.FileSystemReader`` reading Inert's formats.

    The arguments are torch's (``_extension_registry`` is accepted and unused: compressed
    records are part of the format, and no extension's code runs on load), then Inert's:
    ``verify_checksums`` (default on) checks every record's CRC-32; ``thread_count``
    records are read and checked in parallel; ``max_metadata_size`` lowers the
    64 MiB limit on the ``.metadata`` file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        _extension_registry: Any = None,
        *,
        verify_checksums: bool = True,
        thread_count: int = 2,
        max_metadata_size: int = metadata_codec.MAX_SIZE,
    ) -> None:
        super().__init__()
        self.path = Path(path)
        # Accepted as torch's reader accepts it; compression is declared by the format and no
        # extension's code runs on load, so the registry is checked but never consulted.
        self.extension_registry = checked_extension_registry(_extension_registry)
        self.verify_checksums = verify_checksums
        self.thread_count = max(1, thread_count)
        self.max_metadata_size = max_metadata_size
        self.storage_data: dict[Any, InertStorageInfo] = {}
        self.metadata: Metadata | None = None
        self.load_id = str(uuid.uuid4())
        self.rank: int | None = None
        self.use_collectives = True
        #: The InertError the last ``read_metadata`` raised reading its file, if any.
        self.metadata_error: InertError | None = None
        #: Each data file's format_version, read from its header when a read opens it.
        self._file_versions: dict[str, int] = {}

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        self.storage_data = {}
        self.metadata = None
        if checkpoint_id:
            self.path = Path(checkpoint_id)
        self.load_id = str(uuid.uuid4())

    def _read_file(self, name: str, limit: int) -> bytes:
        """The file ``name`` of the checkpoint (a regular file in it, see ``inert._files``), at most ``limit`` bytes."""
        fd = open_in(self.path, name, "checkpoint-metadata")
        try:  # the size is checked before reading: a huge file allocates nothing
            return read_fd(fd, limit, "checkpoint-metadata", name)
        finally:
            os.close(fd)

    def _has_file(self, name: str) -> bool:
        """Whether the checkpoint holds an entry ``name`` (of any kind: reading it refuses a link or a FIFO by name)."""
        return os.path.lexists(self.path / name)

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        try:
            metadata = self._read_metadata(kwargs.get("rank"))
        except InertError as exc:  # DCP keeps only the text of a metadata failure: inert.torch.load raises this
            self.metadata_error = exc
            from ._load_errors import install_log_filter

            install_log_filter()  # DCP logs this failure with its traceback next, then tries again: one line instead
            raise
        self.metadata_error = None
        return metadata

    def _read_metadata(self, rank: int | None) -> Metadata:
        name = METADATA_NAME if rank is None else f"__{rank}{METADATA_NAME}"
        if rank is not None and not self._has_file(name):  # the per-rank fallback: saved with collectives
            name = METADATA_NAME
        try:
            data = self._read_file(name, self.max_metadata_size)
        except FileNotFoundError:
            raise self._missing(name) from None
        try:
            metadata = loads_metadata(data, max_size=self.max_metadata_size)
        except ForeignFormatError as exc:
            if data[:1] == b"\x80":  # a pickle's PROTO opcode: refused without unpickling a byte of it
                raise ForeignFormatError(exc.format, exc.offset, exc.field, self._pickled(name)) from None
            raise
        if StorageMeta is not None:
            meta = getattr(metadata, "storage_meta", None) or StorageMeta()
            meta.load_id = self.load_id
            metadata.storage_meta = meta
        return metadata

    def _data_heads(self) -> tuple[int, int]:
        """(Inert data files, other data files) among the first ``_PEEK_FILES`` ``*.distcp`` regular files
        of a local checkpoint directory, by their first 8 bytes; (0, 0) for no directory or another storage
        (a subclass with its own ``_read_file``: an object store)."""
        if not self._local():
            return 0, 0
        inert = other = 0
        try:
            with os.scandir(self.path) as entries:
                for entry in entries:
                    if inert + other >= _PEEK_FILES:
                        break
                    if not entry.name.endswith(".distcp") or not entry.is_file(follow_symlinks=False):
                        continue
                    try:
                        fd = open_in(self.path, entry.name, "checkpoint-shard")
                    except (OSError, InertError):
                        continue
                    try:
                        head = os.pread(fd, len(_SHARD_MAGIC), 0)
                    finally:
                        os.close(fd)
                    inert, other = (inert + 1, other) if head == _SHARD_MAGIC else (inert, other + 1)
        except OSError:
            return 0, 0
        return inert, other

    def _local(self) -> bool:
        return type(self)._read_file is FileSystemReader._read_file

    def _pickled(self, name: str) -> str:
        """Why a pickled ``.metadata`` is refused: a legacy checkpoint, or one pickle over Inert's data files."""
        inert, _ = self._data_heads()
        if inert:
            return (f"{self.path}: a mixed directory: its {name} is a pickle (torch's own FileSystemWriter) but {inert} "
                    "data file(s) are Inert's checkpoint-shard files; refused unread. Save it again with Inert's writer; "
                    f"`inert migrate {self.path} DST --trust-source` converts the pickled save if you trust its source")
        return (f"{self.path} is a legacy pickle checkpoint (its {name} is torch.distributed.checkpoint's own pickled "
                f"format); Inert never unpickles. {_MIGRATE.format(dir=self.path)}")

    def _missing(self, name: str) -> MissingMetadataError:
        """The error for a checkpoint without its ``.metadata``, saying what the directory holds instead."""
        if self._local() and not os.path.isdir(self.path):
            reason = f"{self.path}: no such checkpoint directory"
        else:
            inert, other = self._data_heads()
            if inert:
                reason = (f"{self.path} has no {name} but {inert} Inert data file(s): a save that did not finish "
                          f"(the {name} is written last, after every data file) or a removed {name}")
            elif other:
                reason = (f"{self.path} has no {name}, and its data files are not Inert's: a legacy DCP save that did "
                          "not finish, or another tool's files")
            else:
                reason = f"{self.path} has no {name}: not a checkpoint directory"
        return MissingMetadataError("checkpoint-metadata", -1, name, reason)

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.metadata = metadata
        self.storage_data = metadata.storage_data
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)
        if self.storage_data is None:
            raise InvalidValueError("checkpoint-metadata", -1, "storage_data", "missing")

    def _file_size(self, name: str) -> int:
        fd = open_in(self.path, name, "checkpoint-shard")  # a regular file inside the directory, not a link
        try:
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    def _check_placement(self, per_file: dict[str, list[InertStorageInfo]]) -> None:
        """Records lie inside their files and do not overlap (each record listed once)."""
        check_placement(per_file, self._file_size)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def _load(
        self, fd: int, name: str, info: InertStorageInfo, items: list[ReadItem], buffers: _Buffers,
        resolve: Resolve | None, shared: SharedTasks | None = None,
    ) -> list[Loaded] | None:
        """Read, decode and check one record, then give each of ``items`` its part: the value, or the
        tensor (a view of the buffer, which comes back with the last item), or with ``resolve`` the
        destination the tensor was copied into (the buffer is then None).

        With ``shared``, a large payload may be handed out in parts (None: the last part reports the record).
        """
        if len(items) == 1 and items[0].type == LoadItemType.TENSOR and info.length > _DIRECT_MIN and resolve is not None:
            target = self._load_direct(fd, name, items[0], info, resolve, shared)
            if target is _SPREAD:
                return None
            if target is not None:
                return [(items[0], target, None)]
        return self._load_whole(fd, name, info, items, buffers, resolve)

    def _load_whole(
        self, fd: int, name: str, info: InertStorageInfo, items: list[ReadItem], buffers: _Buffers,
        resolve: Resolve | None,
    ) -> list[Loaded]:
        """The general path: the whole record read into a buffer, checksummed and decoded once, every
        read item's part checked against it, then each part copied."""
        first = items[0]
        self._check_length(first, info)
        if first.type == LoadItemType.TENSOR and info.length > _LENGTH_CHECKED:
            self.check_header(fd, name, first, info)  # before a buffer of the declared length is allocated
        buffer = buffers.take(info.length)
        view = memoryview(buffer.numpy())[: info.length]  # type: ignore[arg-type]
        read_into(fd, info.offset, view, None, name)
        return self._checked_whole(view, buffer, name, info, items, buffers, resolve)

    def _checked_whole(
        self, view: memoryview, buffer: torch.Tensor, name: str, info: InertStorageInfo, items: list[ReadItem],
        buffers: _Buffers, resolve: Resolve | None,
    ) -> list[Loaded]:
        """A whole record read into ``view`` (the start of ``buffer``), decoded and checked, then each part copied."""
        first = items[0]
        record = self._decode(view, name, first, info, self.verify_checksums)
        if record["crc32"] != info.crc32:
            raise ChecksumError("checkpoint-shard", info.offset + info.length - 4, first.storage_index.fqn,
                                f"record CRC-32 {record['crc32']:#010x}, the metadata expects {info.crc32:#010x}")
        body = record["body"]
        end = info.length - 4  # where the payload ends: the CRC-32 follows it
        if body["kind"] == shard.RecordKindV2.ZSTD:  # checked against the stored bytes above; now inflated
            streamed = self._inflate_direct(body, name, items, info, resolve)
            if streamed is not None:
                buffers.give(buffer)
                return streamed
            inflation = self._inflation(body, name, first, info)
            inflated = buffers.take(inflation.length)  # the stored frame and this: never a third copy
            view = memoryview(inflated.numpy())[: inflation.length]  # type: ignore[arg-type]
            inflation.into(view)
            inflation.end()
            del record, body, inflation
            buffers.give(buffer)
            buffer = inflated
            body = self._decode_inflated(view, name, first, info)
            end = len(view)
        if first.type == LoadItemType.BYTE_IO:
            self._check_kind(body, shard.RecordKind.VALUE, first, info)
            buffers.give(buffer)
            value = body["value"]  # the subset's containers only: a deep copy runs no code of the file's
            return [(item, value if n == 0 else copy.deepcopy(value), None) for n, item in enumerate(items)]
        for item in items:
            dtype, shape = self._check_tensor(body, item, info)
        nbytes = len(body["data"])
        start = end - nbytes
        tensor = buffer[start : start + nbytes].view(dtype).reshape(shape)
        if resolve is None:
            return [(item, tensor, buffer if n == len(items) - 1 else _SHARED_BUFFER) for n, item in enumerate(items)]
        results = [(item, _copy_into(resolve, item, tensor), None) for item in items]
        buffers.give(buffer)
        return results

    def _check_length(self, item: ReadItem, info: InertStorageInfo) -> None:
        """A record the metadata declares longer than its kind can be is refused before a buffer is allocated:
        a value record holds at most the spec's 64 MiB document, a tensor record its chunk's bytes and a header.
        (A sparse file makes any length cheap to place; only records above ``_LENGTH_CHECKED`` are bounded, so
        that a small one says what is wrong with its bytes.)"""
        if info.length <= _LENGTH_CHECKED:
            return
        tensor = None
        if item.type != LoadItemType.BYTE_IO:
            dtype, shape = self._expected(item, info)
            tensor = (dtype_name(dtype, item.storage_index.fqn), shape, math.prod(shape) * dtype.itemsize)
        _records.check_length(item.storage_index.fqn, info.length, tensor)

    def check_headers(self, per_file: dict[str, list[Placed]]) -> None:
        """Each record's header is what the metadata says (``check_header``), before anything is allocated for it."""
        for name, placed in per_file.items():
            fd = open_in(self.path, name, "checkpoint-shard")
            try:
                self._file_versions[name] = self._file_version(fd, name)
                for info, record_items in placed:
                    self.check_header(fd, name, record_items[0], info)
            finally:
                os.close(fd)

    def check_header(self, fd: int, name: str, item: ReadItem, info: InertStorageInfo) -> None:
        """A tensor record's header, read from the open file ``fd`` (see ``_check_head``)."""

        def read_head(head: memoryview) -> None:
            read_into(fd, info.offset, head, None, name)

        def record_crcs() -> tuple[int, int]:
            return _file_crc(fd, info, name), _CRC.unpack_from(_read_tail(fd, info, name))[0]

        self._check_head(name, item, info, read_head, record_crcs)

    def _check_head(
        self, name: str, item: ReadItem, info: InertStorageInfo, read_head: Callable[[memoryview], None],
        record_crcs: Callable[[], tuple[int, int]],
    ) -> None:
        """A tensor record's header (its first bytes, at most ``_HEAD_MAX``, which ``read_head`` fills) decodes
        as a tensor of the dtype and shape the metadata gives its chunk, read before anything of the record's
        declared length is allocated (a sparse file places any length at no cost on disk; its header is its
        first bytes).

        A damaged header is named as a damaged record (``record_crcs()``: the CRC-32 its bytes give, the one it
        stores) when the record is at most ``_NAMED_DAMAGE_MAX`` long; a longer one is named by the field,
        without reading it all.  A bool record's header is checked when it is read (the codec checks its bytes
        one by one).
        """
        head = None if self._expected(item, info)[0] == torch.bool else _SCRATCH.view(info.length)
        if head is None:  # (or no address space for the view: the record is read whole, and checked then)
            return
        read_head(head[: min(info.length, _HEAD_MAX)])
        if head[0] == shard.RecordKind.VALUE:
            self._check_kind({"kind": shard.RecordKind.VALUE}, shard.RecordKind.TENSOR, item, info)
        if head[0] == shard.RecordKindV2.ZSTD:  # a compressed record: its inflated length is checked before inflating
            return
        try:  # the payload past the header is unread: only its length is decoded
            record = self._decode(head, name, item, info, False)
            self._check_tensor(record["body"], item, info)
        except InertError:
            if self.verify_checksums and 4 <= info.length <= _NAMED_DAMAGE_MAX:
                _check_crc(*record_crcs(), name, item, info)
            raise

    def _load_direct(
        self, fd: int, name: str, item: ReadItem, info: InertStorageInfo, resolve: Resolve,
        shared: SharedTasks | None,
    ) -> Any:
        """A whole record read straight into a contiguous CPU destination, checksummed block by block.

        The header is decoded first, by the codec, from a buffer of the record's length that holds
        only the header's bytes (see ``_HeaderBuffers``), and the dtype and shape are checked
        before any payload byte is read.  With ``shared``, a payload of two ``_PART``s or more, or of
        two ``_TAIL_PART``s among the last records, is handed out in parts (``_SPREAD``: the last
        part reports the record).  ``None``: this record takes
        the general path (its destination is a part, on another device, or a bool tensor, whose
        bytes the codec checks one by one).
        """
        direct = self._direct_target(item, info, resolve)
        if direct is None:
            return None
        target, expected = direct
        scratch = _SCRATCH.view(info.length)
        if scratch is None:
            return None
        read_into(fd, info.offset, scratch[: min(info.length, _HEAD_MAX)], None, name)
        if scratch[0] != shard.RecordKind.TENSOR:  # not a tensor header: the whole record says what it is
            return None
        stored = _CRC.unpack_from(_read_tail(fd, info, name))[0]
        placed = self._checked_head(scratch, stored, name, item, info, expected, target, lambda: _file_crc(fd, info, name))
        if placed is None:
            return None
        start, nbytes, crc = placed
        if shared is not None and (crc is None or crc32_combine is not None):
            part = _PART if shared.waiting() >= self.thread_count else _TAIL_PART  # the last: all threads end together
            if nbytes >= 2 * part:
                shared.spill(_Parts(fd, name, item, info, target, info.offset + start, crc, stored, part).tasks())
                return _SPREAD
        if nbytes:
            crc = read_into(fd, info.offset + start, byte_view(target), crc, name)
        if crc is not None:
            _check_crc(crc, stored, name, item, info)
        return target

    def chunk_bytes(self, item: ReadItem, info: InertStorageInfo) -> int:
        """The bytes of the tensor chunk the metadata declares for a read item's record."""
        dtype, shape = self._expected(item, info)
        return math.prod(shape) * dtype.itemsize

    def _direct_target(self, item: ReadItem, info: InertStorageInfo, resolve: Resolve) -> tuple[torch.Tensor, Any] | None:
        """The destination and the metadata's expectation when a record's payload may go straight into it, else None."""
        expected = self._expected(item, info)
        if expected[0] == torch.bool:
            return None
        target = resolve(item).detach()
        if (target.device.type != "cpu" or not target.is_contiguous() or target.is_conj() or target.is_neg()
                or target.dtype != expected[0] or any(item.storage_offsets)):
            return None
        return target, expected

    def _checked_head(
        self, scratch: memoryview, stored: int, name: str, item: ReadItem, info: InertStorageInfo, expected: Any,
        target: torch.Tensor | None, record_crc: Callable[[], int],
    ) -> tuple[int, int, int | None] | None:
        """A tensor record's header, decoded from ``scratch`` (the record's length, its first bytes read) and checked
        against the metadata and the plan (and ``target``'s size, unless None); ``stored`` is the CRC-32 the record
        ends with and ``record_crc()`` computes the one its bytes give (to name damage as such).  Returns where the
        payload starts, its length and the CRC-32 of the bytes before it (None unverified), or None when the record
        takes the general path."""
        try:
            record = self._decode(scratch, name, item, info, False)
            body = record["body"]
            if stored != info.crc32:
                raise ChecksumError("checkpoint-shard", info.offset + info.length - 4, item.storage_index.fqn,
                                    f"record CRC-32 {stored:#010x}, the metadata expects {info.crc32:#010x}")
            dtype, shape = self._check_tensor(body, item, info, expected)
        except InertError:
            if self.verify_checksums:  # a damaged record is named as such, not by the field the damage hit
                _check_crc(record_crc(), stored, name, item, info)
            raise
        if (target is not None and tuple(target.size()) != tuple(item.lengths)) or tuple(item.lengths) != shape:
            return None
        nbytes = len(body["data"])
        start = info.length - 4 - nbytes
        return start, nbytes, crc32(scratch[:start]) if self.verify_checksums else None

    def _decode(self, view: memoryview, name: str, item: ReadItem, info: InertStorageInfo, verify: bool) -> Any:
        """The record decoded by the codec of its file's version; with ``verify``, its CRC-32 checked first
        (damage is named as such, not by the field it hit), by the fastest implementation at hand."""
        if verify and len(view) >= 4:
            _check_crc(crc32(view[:-4]), _CRC.unpack_from(view, len(view) - 4)[0], name, item, info)
        return _records.decode_record(view, self._file_versions[name], name, item.storage_index.fqn, info.offset)

    def _inflation(self, body: dict[str, Any], name: str, item: ReadItem, info: InertStorageInfo) -> Inflation:
        """A ZSTD body's frame ready to inflate, once its declared length is what the read plan's record can hold."""
        tensor = None
        if item.type != LoadItemType.BYTE_IO:
            dtype, shape = self._expected(item, info)
            tensor = (shape, math.prod(shape) * dtype.itemsize)
        return _records.inflation(body, name, item.storage_index.fqn, info.offset, tensor)

    def _inflate_direct(self, body: dict[str, Any], name: str, items: list[ReadItem], info: InertStorageInfo,
                        resolve: Resolve | None) -> list[Loaded] | None:
        """A compressed tensor record inflated straight into its one destination (a whole contiguous CPU
        tensor of its dtype), in steps: memory beyond the destination is the stored frame and the decoder's
        window, whatever the tensor's size.  The inflated header must be the very bytes a writer makes for
        the metadata's dtype and shape; None (nothing written to the destination) when it is not, or when
        the record takes the general path, which names what is wrong."""
        item = items[0]
        if len(items) != 1 or item.type != LoadItemType.TENSOR or resolve is None:
            return None
        direct = self._direct_target(item, info, resolve)
        if direct is None:
            return None
        target, (dtype, shape) = direct
        if tuple(target.size()) != shape or tuple(item.lengths) != shape:
            return None
        inflation = self._inflation(body, name, item, info)
        header = tensor_header(dtype_name(dtype, item.storage_index.fqn), list(shape), math.prod(shape) * dtype.itemsize)
        head = bytearray(len(header))
        inflation.into(memoryview(head))
        if head != header:
            return None
        inflation.into(byte_view(target))
        inflation.end()
        return [(item, target, None)]

    def _decode_inflated(self, view: memoryview, name: str, item: ReadItem, info: InertStorageInfo) -> Any:
        """What a ZSTD body inflated to, decoded as the version 1 body it must be (offsets: into those bytes)."""
        return _records.decode_inflated(view, name, item.storage_index.fqn, info.offset)

    @staticmethod
    def _check_kind(body: dict[str, Any], kind: Any, item: ReadItem, info: InertStorageInfo) -> None:
        _records.check_kind(body, kind, item.storage_index.fqn, info.offset)

    def _check_tensor(self, body: dict[str, Any], item: ReadItem, info: InertStorageInfo,
                      expected_from: tuple[Any, tuple[int, ...]] | None = None) -> tuple[Any, tuple[int, ...]]:
        """The record's dtype and shape, which must be what the metadata (``expected_from``: already
        looked up) and the read plan expect."""
        self._check_kind(body, shard.RecordKind.TENSOR, item, info)
        fqn = item.storage_index.fqn
        dtype = torch_dtype(body["dtype"].name, fqn)
        shape = tuple(body["shape"])
        expected_dtype, expected = expected_from or self._expected(item, info)
        if dtype != expected_dtype or shape != expected:
            raise ShapeMismatchError(
                "checkpoint-shard", info.offset, fqn,
                f"record holds {shape} {dtype}, the read plan expects {expected} {expected_dtype}",
            )
        ends = [o + n for o, n in zip(item.storage_offsets, item.lengths, strict=False)]
        if len(ends) != len(shape) or any(e > s for e, s in zip(ends, shape, strict=False)):
            raise ShapeMismatchError("checkpoint-shard", info.offset, fqn,
                                     f"the read plan takes {tuple(item.lengths)} at {tuple(item.storage_offsets)} of {shape}")
        return dtype, shape

    def _expected(self, item: ReadItem, info: InertStorageInfo) -> tuple[Any, tuple[int, ...]]:
        """The dtype and chunk shape the metadata gives for ``item``'s record."""
        assert self.metadata is not None
        fqn = item.storage_index.fqn
        md = self.metadata.state_dict_metadata.get(fqn)
        if not isinstance(md, TensorStorageMetadata):
            raise ShapeMismatchError("checkpoint-shard", info.offset, fqn, "no tensor entry in the metadata")
        chunks = md.chunks
        index = item.storage_index.index
        if index is None or not 0 <= index < len(chunks) or chunks[index].offsets != item.storage_index.offset:
            index = next((i for i, c in enumerate(chunks) if c.offsets == item.storage_index.offset), None)
        if index is None:
            where = tuple(item.storage_index.offset or ())
            raise ShapeMismatchError("checkpoint-shard", info.offset, fqn, f"no chunk at {where}")
        return md.properties.dtype, tuple(chunks[index].sizes)

    def _placed(self, items: list[ReadItem]) -> dict[str, list[Placed]]:
        """``items`` by record and file, in file order, once every record is checked to lie inside its
        file without overlapping another.

        A load that splits a saved chunk (another world size, a ShardedTensor with several local
        shards) makes several read items on one record: the record is placed, read and checked once.
        """
        records: dict[int, Placed] = {}
        for item in items:
            info = self.storage_data[item.storage_index]  # one object per saved chunk
            records.setdefault(id(info), (info, []))[1].append(item)
        per_file: dict[str, list[Placed]] = defaultdict(list)
        for info, record_items in records.values():
            per_file[info.relative_path].append((info, record_items))
        for placed in per_file.values():
            placed.sort(key=lambda p: p[0].offset)
        self._check_placement({name: [info for info, _ in placed] for name, placed in per_file.items()})
        return per_file

    def file_version(self, name: str) -> int:
        """The format_version of the data file ``name`` (read from its header once)."""
        if name not in self._file_versions:
            fd = open_in(self.path, name, "checkpoint-shard")
            try:
                self._file_versions[name] = self._file_version(fd, name)
            finally:
                os.close(fd)
        return self._file_versions[name]

    @staticmethod
    def _file_version(fd: int, name: str) -> int:
        """The data file's format_version, once its magic says it is a checkpoint-shard file."""
        head = os.pread(fd, shard.HEADER_SIZE, 0)
        try:
            return read_file_header(shard.FORMAT, head, shard.MAGIC, shard.VERSIONS)
        except InertError as exc:
            raise exc.in_file(name) from None

    def _records(self, items: list[ReadItem], buffers: _Buffers, resolve: Resolve | None) -> Iterator[Loaded]:
        """Every record of ``items``, checked.

        With ``resolve`` the threads put tensors in place themselves and what they return holds
        no buffer: they share the records out (see ``SharedTasks``; a large payload in parts) and this
        yields once all are in.
        Without, results come in file order with a bounded number of buffers in flight.
        """
        per_file = self._placed(items)
        fds: dict[str, int] = {}
        try:
            for name in per_file:
                fds[name] = open_in(self.path, name, "checkpoint-shard")
                self._file_versions[name] = self._file_version(fds[name], name)
            work = [(name, placed) for name, records in per_file.items() for placed in records]

            def load(entry: tuple[str, Placed]) -> list[Loaded]:
                name, (info, record_items) = entry
                loaded = self._load(fds[name], name, info, record_items, buffers, resolve)
                assert loaded is not None  # nothing spilled
                return loaded

            if self.thread_count == 1 or sum(info.length for _, (info, _) in work) < _THREADED_MIN:
                for entry in work:
                    yield from load(entry)
            elif resolve is not None:
                shared = SharedTasks()
                shared.spill([functools.partial(self._load, fds[name], name, info, record_items, buffers, resolve, shared)
                              for name, (info, record_items) in work])
                for loaded in shared.run(self.thread_count):
                    yield from loaded
            else:
                with ThreadPoolExecutor(self.thread_count) as pool:
                    window = 2 * self.thread_count
                    pending: deque[_PoolFuture[list[Loaded]]] = deque()
                    for batch in _batches(work):
                        pending.append(pool.submit(lambda b: [r for entry in b for r in load(entry)], batch))
                        if len(pending) >= window:
                            yield from pending.popleft().result()
                    for future in pending:
                        yield from future.result()
        finally:
            for fd in fds.values():
                os.close(fd)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        direct = _default_load_bytes(planner)
        # With the built-in planner's lookups, workers copy into the destinations too;
        # another planner's resolve_tensor and commit_tensor run on this thread, in order.
        parallel = type(planner).resolve_tensor is DefaultLoadPlanner.resolve_tensor
        buffers = _Buffers(keep=5 * self.thread_count)
        resolve = planner.resolve_tensor if parallel else None
        for item, loaded, buffer in self._records(plan.items, buffers, resolve):
            if item.type == LoadItemType.BYTE_IO:
                # typed values become numpy, torch and registered objects only here, for the state dict
                # (inert verify reads the same records without rebuilding anything)
                loaded = from_document(loaded, item.dest_index.fqn)
                if direct:
                    _set_value(planner, item, loaded)
                else:  # a custom planner: bytes Inert serialized from the checked value, never the file's
                    stream = io.BytesIO()
                    torch.save(loaded, stream)
                    stream.seek(0)
                    planner.load_bytes(item, stream)
                continue
            if buffer is not None:
                target = _copy_into(planner.resolve_tensor, item, loaded)
                if buffer is not _SHARED_BUFFER:
                    buffers.give(buffer)
            else:
                target = loaded
            planner.commit_tensor(item, target)
        done: Future[None] = Future()
        done.set_result(None)
        return done

    @property
    def checkpoint_id(self) -> str | os.PathLike[str]:
        return self.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return validate_checkpoint_id(checkpoint_id)
