"""Compressed data files: ``FileSystemWriter(_extensions=[ZStandard()])``.

Each tensor record's version 1 body (its header and bytes) is deflated into
one zstd frame and stored as a ``checkpoint-shard`` version 2 ``ZSTD`` body,
whose CRC-32 covers the stored frame; a body the frame does not shrink is
stored as it is, and so is every value (readers refuse a value's frame that
inflates beyond its stored bytes: ``inert._zstd.VALUE_MAX_RATIO``).  Record
lengths are known only once compressed, so each file is written front to
back: worker threads compress the next few records while the calling thread writes the finished ones in order (at most
``2 * workers`` records in memory at once).  ``FsspecWriter`` streams the same
records to an object, one after another (``write_records`` with its own sink).
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.planner import SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult

from inert._codec_runtime import file_header
from inert._records import tensor_header
from inert._zstd import deflate
from inert.codecs import checkpoint_shard as shard
from inert.codecs._tables import CHECKPOINT_ALIGN as ALIGN

from ._compat import dtype_name
from ._metadata import InertStorageInfo
from ._payload import crc32, pwrite_all
from ._shard_file import COUNT, new_file, resolve_tensor, tensor_bytes

__all__ = ["write_compressed_files", "write_records"]

#: Bytes a ZSTD body adds around its frame (kind, codec, inflated length, frame length, padding to 64).
_ZSTD_OVERHEAD = 64


def stored_record(item: WriteItem, planner: SavePlanner, values: dict[Any, list[Any]]) -> bytes:
    """The record as stored: a tensor's body deflated (a ZSTD body) when that is shorter, with its CRC-32;
    a value's record as it is (a value's frame may not inflate beyond its stored bytes)."""
    if item.type == WriteItemType.BYTE_IO:
        return b"".join(values[item.index])
    tensor = resolve_tensor(item, planner)
    _flat, data = tensor_bytes(tensor)
    parts: list[Any] = [tensor_header(dtype_name(tensor.dtype, item.index.fqn), list(tensor.size()), len(data)), data]
    length = sum(len(part) for part in parts)
    frame = deflate(parts)
    if len(frame) + _ZSTD_OVERHEAD < length:
        zstd = {"kind": "ZSTD", "codec": "ZSTD", "inflated_length": length, "data": frame}
        return shard.encode_record({"body": zstd})
    body = b"".join(parts)
    return body + COUNT.pack(crc32(body))


def write_records(put: Callable[[bytes, int], None], name: str, items: list[WriteItem], planner: SavePlanner,
                  values: dict[Any, list[Any]], pool: ThreadPoolExecutor | None, window: int) -> list[WriteResult]:
    """One data file's header and compressed records, in file order, through ``put(data, offset)``.

    With a ``pool``, the next ``window`` records are compressed on it while finished ones are
    put; without, each is compressed on the calling thread (an object upload already runs on one).
    """
    put(file_header(shard.MAGIC, shard.LATEST) + COUNT.pack(len(items)), 0)
    pos = shard.HEADER_SIZE + COUNT.size
    results = []
    pending: deque[tuple[WriteItem, Future[bytes]]] = deque()

    def write_next() -> None:
        nonlocal pos
        item, future = pending.popleft()
        record = future.result()
        pos += -pos % ALIGN  # the gap reads as zeros: the file is new (a stream writes them)
        put(record, pos)
        crc = int(COUNT.unpack(record[-4:])[0])
        results.append(WriteResult(index=item.index, size_in_bytes=len(record),
                                   storage_data=InertStorageInfo(name, pos, len(record), crc32=crc)))
        pos += len(record)

    for item in items:
        if pool is None:
            done: Future[bytes] = Future()
            done.set_result(stored_record(item, planner, values))
            pending.append((item, done))
        else:
            pending.append((item, pool.submit(stored_record, item, planner, values)))
        if len(pending) >= window:
            write_next()
    while pending:
        write_next()
    return results


def sequential(write: Callable[[bytes], None]) -> Callable[[bytes, int], None]:
    """A ``put`` for a stream written front to back: the gap before a record goes as zero bytes."""
    end = 0

    def put(data: bytes, offset: int) -> None:
        nonlocal end
        if offset > end:
            write(bytes(offset - end))
        write(data)
        end = offset + len(data)

    return put


def write_compressed_files(root: Path, jobs: list[tuple[str, list[WriteItem]]], planner: SavePlanner,
                           values: dict[Any, list[Any]], workers: int, sync: bool) -> list[WriteResult]:
    """Every file of ``jobs`` written with compressed records; their write results."""
    older: list[int] = []
    fds: list[int] = []
    results: list[WriteResult] = []
    try:
        with ThreadPoolExecutor(workers) as pool:
            for name, items in jobs:
                fd = new_file(root / name, older)
                fds.append(fd)
                try:
                    results.extend(write_records(functools.partial(pwrite_all, fd), name, items, planner, values,
                                                 pool, 2 * workers))
                except BaseException:
                    pool.shutdown(cancel_futures=True)  # a failed save compresses no further records
                    raise
        if sync:
            for fd in fds:
                os.fsync(fd)
    finally:
        for fd in older + fds:
            os.close(fd)
    return results
