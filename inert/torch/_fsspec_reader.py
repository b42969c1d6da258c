"""``FsspecReader``: DCP's fsspec storage reader for Inert checkpoints on object stores (S3, ...) and any fsspec URL.

The checks are ``FileSystemReader``'s own (the metadata codec, records inside
their objects without overlap, each tensor header against the metadata and
the plan before a payload byte reaches its destination, every CRC-32); only
the way bytes arrive differs.  Nothing is downloaded whole: bytes come in
ranged requests sized to records, run by ``thread_count`` threads at once:

* neighbouring small records (up to ``part_size`` in all) in one request,
  each then checked like a record read whole from a file;
* a larger record in requests of ``part_size``: the first brings its header,
  which is decoded and checked before any payload byte is copied; then any
  free thread fetches the other parts, each copied straight into the
  destination with its CRC-32 taken on the way, and the parts' CRC-32s are
  combined and checked against the record's once the last one is in (on one
  thread, in order, where CRC-32s do not combine: the standard library's zlib).

A request that fails (the store down, a reset connection, a 500 reply once
the backend's retries are spent) is an :class:`inert.StorageError`; the read
stops at the first failure.  So is a store that answers more than was asked
(a ``Range`` ignored, a lying ``Content-Length``, an endless body), a request
past its deadline, and a listing past its deadline, pages or entries
(``storage_limits``: see ``inert._objstore.StorageLimits``).
"""

from __future__ import annotations

import functools
import os
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future as _PoolFuture
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

from inert._codec_runtime import read_file_header
from inert._errors import ChecksumError, InertError, TruncatedError
from inert._objstore import StorageLimits, display, exists, filesystem, is_url, join, object_sizes, read_bounded, read_range
from inert.codecs import checkpoint_metadata as metadata_codec
from inert.codecs import checkpoint_shard as shard

from ._metadata import InertStorageInfo
from ._payload import byte_view, crc32, crc32_combine
from ._reader import _CRC, _HEAD_MAX, _SCRATCH, FileSystemReader, Placed, Resolve, _Buffers, _check_crc
from ._threads import SharedTasks

__all__ = ["FsspecReader", "PART_SIZE"]

#: Bytes per request: a run of small records, or a part of a large one.
PART_SIZE = 32 << 20
#: Records further apart than this are fetched in separate requests.
_GAP = 4096

#: A record to read: its object, where it lies, and the read items that take parts of it.
_Entry = tuple[str, InertStorageInfo, list[ReadItem]]
_Loaded = tuple[ReadItem, Any, Any]


class _ObjectPath:
    """A location in an fsspec filesystem, with the little of ``pathlib.Path`` that ``FileSystemReader`` uses."""

    def __init__(self, fs: Any, path: str, limits: StorageLimits) -> None:
        self.fs, self.path, self.limits = fs, path, limits

    def __truediv__(self, name: str) -> _ObjectPath:
        return _ObjectPath(self.fs, join(self.path, name), self.limits)

    def exists(self) -> bool:
        return exists(self.fs, self.path, self.limits)

    def __str__(self) -> str:
        return display(self.fs, self.path)


class _Record:
    """A large record fetched in parts: the bytes from its payload's start to its end (payload, then CRC-32).

    Each part's payload bytes go straight into the destination, their CRC-32 taken on the way;
    whoever brings the last part combines the CRC-32s and checks the record.
    """

    def __init__(self, reader: FsspecReader, name: str, item: ReadItem, info: InertStorageInfo, target: torch.Tensor,
                 start: int, head_crc: int | None, part: int, first: memoryview) -> None:
        self.reader, self.name, self.item, self.info, self.target = reader, name, item, info, target
        self.view = byte_view(target)
        self.nbytes = len(self.view)
        self.at = info.offset + start  # where the payload starts in the object
        self.head_crc = head_crc
        size = info.length - start  # payload and CRC-32
        self.spans = [(0, len(first))] + [(lo, min(lo + part, size)) for lo in range(len(first), size, part)]
        self.crcs = [0] * len(self.spans)
        self.tail = bytearray(4)
        self.left = len(self.spans)
        self.lock = threading.Lock()
        self.first = first

    def _take(self, index: int, data: memoryview) -> int:
        """Copy a part's payload bytes into place and keep its CRC-32 bytes; the CRC-32 of its payload bytes."""
        lo, hi = self.spans[index]
        if len(data) != hi - lo:
            raise TruncatedError("checkpoint-shard", self.at + lo + len(data), self.name,
                                 f"{hi - lo - len(data)} bytes needed, the object ends first")
        end = min(hi, self.nbytes)
        payload = data[: max(0, end - lo)]
        self.view[lo : lo + len(payload)] = payload
        if hi > self.nbytes:
            self.tail[max(lo, self.nbytes) - self.nbytes : hi - self.nbytes] = data[max(lo, self.nbytes) - lo :]
        return crc32(payload) if self.head_crc is not None and len(payload) else 0

    def read(self, index: int) -> list[_Loaded] | None:
        lo, hi = self.spans[index]
        data = self.first if index == 0 else memoryview(self.reader._fetch(self.name, self.at + lo, self.at + hi))
        crc = self._take(index, data)
        with self.lock:
            self.crcs[index] = crc
            self.left -= 1
            if self.left:
                return None
        return self._finish()

    def read_all(self) -> list[_Loaded]:
        """Every part on this thread, in order (CRC-32s that do not combine are continued instead)."""
        crc = self.head_crc
        for index, (lo, hi) in enumerate(self.spans):
            data = self.first if index == 0 else memoryview(self.reader._fetch(self.name, self.at + lo, self.at + hi))
            payload_end = min(hi, self.nbytes)
            self._take(index, data)
            if crc is not None and payload_end > lo:
                crc = crc32(data[: payload_end - lo], crc)
        self.head_crc, self.crcs = crc, [0] * len(self.spans)
        self.spans = [(0, 0)] * len(self.spans)  # nothing left to combine
        return self._finish()

    def _finish(self) -> list[_Loaded]:
        stored = _CRC.unpack(self.tail)[0]
        info, item = self.info, self.item
        if stored != info.crc32:
            raise ChecksumError("checkpoint-shard", info.offset + info.length - 4, item.storage_index.fqn,
                                f"record CRC-32 {stored:#010x}, the metadata expects {info.crc32:#010x}")
        if self.head_crc is not None:
            total = self.head_crc
            for (lo, hi), crc in zip(self.spans, self.crcs, strict=True):
                length = max(0, min(hi, self.nbytes) - lo)
                if length:
                    assert crc32_combine is not None  # parts are read in parallel only where CRC-32s combine
                    total = crc32_combine(total, crc, length)
            _check_crc(total, stored, self.name, item, info)
        return [(item, self.target, None)]


class FsspecReader(FileSystemReader):
    """Drop-in for ``torch.distributed.checkpoint.FsspecReader`` reading Inert checkpoints at any fsspec URL.

    ``storage_options`` (or extra keyword arguments, as with DCP's class) go to the filesystem;
    ``verify_checksums``, ``thread_count`` (requests in flight) and ``max_metadata_size`` are
    ``FileSystemReader``'s; ``part_size`` is the most bytes one request asks for; ``storage_limits``
    the deadlines and listing bounds (default: ``StorageLimits.from_env()``, its ``INERT_STORAGE_*`` variables).

    >>> dcp.load(state, storage_reader=FsspecReader("s3://bucket/ckpt"))  # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        storage_options: dict[str, Any] | None = None,
        verify_checksums: bool = True,
        thread_count: int = 4,
        max_metadata_size: int = metadata_codec.MAX_SIZE,
        part_size: int = PART_SIZE,
        storage_limits: StorageLimits | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(os.fspath(path), verify_checksums=verify_checksums, thread_count=thread_count,
                         max_metadata_size=max_metadata_size)
        self.storage_options = {**(storage_options or {}), **kwargs}
        self.part_size = max(_HEAD_MAX + 4, part_size)
        self.limits = storage_limits or StorageLimits.from_env()
        self._sizes: dict[str, int] | None = None
        self._open(os.fspath(path))

    def _open(self, url: str) -> None:
        self.url = url
        self.store, root = filesystem(url, self.storage_options)
        self.path = _ObjectPath(self.store, root, self.limits)  # type: ignore[assignment]

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        super().reset(None)
        self._sizes = None
        if checkpoint_id:
            self._open(os.fspath(checkpoint_id))

    @property
    def _root(self) -> str:
        return self.path.path  # type: ignore[attr-defined,no-any-return]

    def _has_file(self, name: str) -> bool:
        return (self.path / name).exists()

    def _read_file(self, name: str, limit: int) -> bytes:
        return read_bounded(self.store, join(self._root, name), limit, self.limits)  # the codec refuses a byte over the limit

    def _file_size(self, name: str) -> int:
        if self._sizes is None:
            self._sizes = object_sizes(self.store, self._root, self.limits)
        if name not in self._sizes:
            raise FileNotFoundError(f"{display(self.store, join(self._root, name))}: data object missing from the checkpoint")
        return self._sizes[name]

    def file_version(self, name: str) -> int:
        if name not in self._file_versions:
            head = read_range(self.store, join(self._root, name), 0, shard.HEADER_SIZE, self.limits)
            try:
                self._file_versions[name] = read_file_header(shard.FORMAT, head, shard.MAGIC, shard.VERSIONS)
            except InertError as exc:
                raise exc.in_file(name) from None
        return self._file_versions[name]

    def _fetch(self, name: str, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` of an object (never more: ``read_range`` refuses a longer answer)."""
        return read_range(self.store, join(self._root, name), start, end, self.limits)

    def check_headers(self, per_file: dict[str, list[Placed]]) -> None:
        """Each record's header is what the metadata says, its first bytes fetched alone (see ``_check_head``)."""
        for name, placed in per_file.items():
            self.file_version(name)
            for info, items in placed:
                self._check_head(name, items[0], info, functools.partial(self._fetch_into, name, info),
                                 functools.partial(self._record_crcs, name, info))

    def _fetch_into(self, name: str, info: InertStorageInfo, head: memoryview) -> None:
        data = self._fetch(name, info.offset, info.offset + len(head))
        if len(data) != len(head):
            raise TruncatedError("checkpoint-shard", info.offset + len(data), name,
                                 f"{len(head) - len(data)} bytes needed, the object ends first")
        head[:] = data

    def _record_crcs(self, name: str, info: InertStorageInfo) -> tuple[int, int]:
        """The CRC-32 of a (short) record's bytes and the one it stores."""
        data = memoryview(self._fetch(name, info.offset, info.offset + info.length))
        if len(data) != info.length:
            raise TruncatedError("checkpoint-shard", info.offset + len(data), name,
                                 f"{info.length - len(data)} bytes needed, the object ends first")
        return crc32(data[:-4]), _CRC.unpack_from(data, info.length - 4)[0]

    # -- records ------------------------------------------------------------------------
    def _runs(self, work: list[_Entry]) -> Iterator[list[_Entry]]:
        """``work`` (in object order) as requests: neighbouring small records together, a large one alone."""
        run: list[_Entry] = []
        for entry in work:
            name, info, _ = entry
            if run:
                first, last = run[0][1], run[-1][1]
                if (name != run[-1][0] or info.offset - (last.offset + last.length) > _GAP
                        or info.offset + info.length - first.offset > self.part_size):
                    yield run
                    run = []
            run.append(entry)
        if run:
            yield run

    def _fetch_whole(self, name: str, info: InertStorageInfo, buffers: _Buffers) -> tuple[memoryview, torch.Tensor]:
        """A record read whole into a buffer, ``part_size`` bytes per request."""
        buffer = buffers.take(info.length)
        view = memoryview(buffer.numpy())[: info.length]  # type: ignore[arg-type]
        for lo in range(0, info.length, self.part_size):
            hi = min(lo + self.part_size, info.length)
            data = self._fetch(name, info.offset + lo, info.offset + hi)
            if len(data) != hi - lo:
                raise TruncatedError("checkpoint-shard", info.offset + lo + len(data), name,
                                     f"{hi - lo - len(data)} bytes needed, the object ends first")
            view[lo:hi] = data
        return view, buffer

    def _load_run(self, run: list[_Entry], buffers: _Buffers, resolve: Resolve | None,
                  shared: SharedTasks | None) -> list[_Loaded] | None:
        """Fetch and check the records of one request (a large record may be handed out in parts)."""
        name, info, items = run[0]
        if len(run) == 1 and info.length > self.part_size:
            return self._load_large(name, info, items, buffers, resolve, shared)
        start, end = info.offset, run[-1][1].offset + run[-1][1].length
        data = memoryview(self._fetch(name, start, end))
        loaded: list[_Loaded] = []
        for name, info, items in run:
            lo = info.offset - start
            if lo + info.length > len(data):
                raise TruncatedError("checkpoint-shard", start + len(data), name,
                                     f"{lo + info.length - len(data)} bytes needed, the object ends first")
            buffer = buffers.take(info.length)
            view = memoryview(buffer.numpy())[: info.length]  # type: ignore[arg-type]
            view[:] = data[lo : lo + info.length]
            loaded.extend(self._checked_whole(view, buffer, name, info, items, buffers, resolve))
        return loaded

    def _load_large(self, name: str, info: InertStorageInfo, items: list[ReadItem], buffers: _Buffers,
                    resolve: Resolve | None, shared: SharedTasks | None) -> list[_Loaded] | None:
        direct = None
        item = items[0]
        if len(items) == 1 and item.type == LoadItemType.TENSOR and resolve is not None:
            direct = self._direct_target(item, info, resolve)
        if direct is not None:
            first = memoryview(self._fetch(name, info.offset, info.offset + self.part_size))
            scratch = _SCRATCH.view(info.length)
            if scratch is not None and len(first) >= min(info.length, _HEAD_MAX) and first[0] == shard.RecordKind.TENSOR:
                head = min(info.length, _HEAD_MAX)
                scratch[:head] = first[:head]
                target, expected = direct

                def record_crc() -> int:
                    view, buffer = self._fetch_whole(name, info, buffers)
                    buffers.give(buffer)
                    return crc32(view[:-4])

                # The stored CRC-32 is compared with the metadata's once the last part is in.
                placed = self._checked_head(scratch, info.crc32, name, item, info, expected, target, record_crc)
                if placed is not None:
                    start, _nbytes, head_crc = placed
                    record = _Record(self, name, item, info, target, start, head_crc, self.part_size, first[start:])
                    if shared is None or (head_crc is not None and crc32_combine is None):
                        return record.read_all()
                    shared.spill([functools.partial(record.read, index) for index in range(len(record.spans))])
                    return None
        view, buffer = self._fetch_whole(name, info, buffers)
        return self._checked_whole(view, buffer, name, info, items, buffers, resolve)

    def _records(self, items: list[ReadItem], buffers: _Buffers, resolve: Resolve | None) -> Iterator[_Loaded]:
        """Every record of ``items``, checked (see ``FileSystemReader._records`` for what comes back)."""
        self._sizes = None
        per_file = self._placed(items)
        for name in per_file:  # records are decoded by their object's format_version
            self.file_version(name)
        work = [(name, info, record_items) for name, records in per_file.items() for info, record_items in records]
        runs = list(self._runs(work))
        if resolve is not None:
            shared = SharedTasks()
            shared.spill([functools.partial(self._load_run, run, buffers, resolve, shared) for run in runs])
            for loaded in shared.run(self.thread_count):
                yield from loaded
            return
        # A custom planner: results in plan order, a bounded number of requests ahead.
        with ThreadPoolExecutor(self.thread_count) as pool:
            pending: deque[_PoolFuture[list[_Loaded] | None]] = deque()
            for run in runs:
                pending.append(pool.submit(self._load_run, run, buffers, None, None))
                if len(pending) >= 2 * self.thread_count:
                    yield from pending.popleft().result() or ()
            for future in pending:
                yield from future.result() or ()

    @property
    def checkpoint_id(self) -> str | os.PathLike[str]:
        return self.url

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return is_url(checkpoint_id)
