"""``FsspecWriter``: DCP's fsspec storage writer, writing Inert's formats to object stores (S3, ...) and any fsspec URL.

The same records and metadata as ``FileSystemWriter`` (the layout of each
data object comes from the save plan, ``_layout``), streamed in order: one
object per data file, each tensor's bytes checksummed a block at a time on
their way from tensor memory to the upload.  Several objects are uploaded at
once (an object's parts go one after another through fsspec's stream), so a
rank's data is spread over ``max(thread_count, size / object_size)`` objects.

With ``_extensions=[ZStandard()]`` the objects hold the compressed records of
``FileSystemWriter``'s (``checkpoint-shard`` version 2), each deflated on the
uploading thread just before it is streamed.

The ``.metadata`` object is the commit point: an older one is removed before
any data is written, and the new one is written last, in one request, once
every data object is complete.  A save that fails or is killed part-way
leaves no loadable checkpoint; objects already uploaded are removed when the
failure is seen.
"""

from __future__ import annotations

import inspect
import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from torch.distributed.checkpoint.planner import SavePlanner, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult

from inert._objstore import abandon, commit, filesystem, is_url, join, open_for_writing, remove_quietly, request
from inert.codecs._tables import CHECKPOINT_METADATA_NAME

from ._compat import TORCH_VERSION
from ._metadata import InertStorageInfo
from ._options import DEFAULT_SERIALIZATION_FORMAT
from ._payload import BLOCK, crc32
from ._shard_file import COUNT, resolve_tensor, tensor_bytes
from ._writer import FileSystemWriter, _layout, _Slot

__all__ = ["FsspecWriter"]

#: A rank's data is spread over objects of about this size, uploaded in parallel.
OBJECT_SIZE = 32 << 20
#: Most data objects per rank.
_MAX_OBJECTS = 64
#: Uploads at once, whatever ``thread_count`` (the number of objects) is.
_MIN_STREAMS = 4
#: Bytes buffered by an object's stream before it uploads them as one part.
_UPLOAD_PART = 64 << 20


def _payload_bytes(item: WriteItem) -> int:
    if item.tensor_data is None:
        return 0
    return int(item.tensor_data.chunk.sizes.numel()) * item.tensor_data.properties.dtype.itemsize


class FsspecWriter(FileSystemWriter):
    """Drop-in for ``torch.distributed.checkpoint.FsspecWriter`` writing Inert's formats to any fsspec URL.

    ``path`` is a URL (``s3://bucket/ckpt``); ``storage_options`` (or, as with DCP's class, extra
    keyword arguments) go to the filesystem, e.g. ``{"endpoint_url": ...}`` for s3fs.

    >>> dcp.save(state, storage_writer=FsspecWriter("s3://bucket/ckpt"))  # doctest: +SKIP
    """

    def __init__(self, path: str | os.PathLike[str], *args: Any, **kwargs: Any) -> None:
        # Positional arguments in the running release's order (see _POSITIONAL); the keywords are _setup's.
        bound = _SIGNATURE.bind(self, path, *args, **kwargs)
        self._setup(path, **{name: value for name, value in bound.arguments.items() if name not in ("self", "path")})

    def _setup(
        self,
        path: str | os.PathLike[str],
        *,
        single_file_per_rank: bool = True,
        sync_files: bool = True,
        thread_count: int = 1,
        per_thread_copy_ahead: int = 10_000_000,
        cache_staged_state_dict: bool = False,
        overwrite: bool = True,
        _extensions: Any = None,
        serialization_format: Any = DEFAULT_SERIALIZATION_FORMAT,
        storage_options: dict[str, Any] | None = None,
        object_size: int = OBJECT_SIZE,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(os.fspath(path), single_file_per_rank, sync_files, thread_count, per_thread_copy_ahead,
                         cache_staged_state_dict, overwrite, _extensions, serialization_format)
        self.storage_options = {**(storage_options or {}), **(kwargs or {})}
        self.object_size = max(1, object_size)
        self._open(os.fspath(path))

    def _open(self, url: str) -> None:
        self.url = url
        self.path = url  # type: ignore[assignment]  # messages name the URL
        self.store, self.root = filesystem(url, self.storage_options)

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        super().reset(None)
        if checkpoint_id:
            self._open(os.fspath(checkpoint_id))

    def _metadata_path(self, rank: int | None = None) -> Any:
        return join(self.root, CHECKPOINT_METADATA_NAME if rank is None else f"__{rank}{CHECKPOINT_METADATA_NAME}")

    def _make_root(self) -> None:
        request("creating", self.store, self.root, self.store.makedirs, self.root, exist_ok=True)

    def _exists(self, path: Any) -> bool:
        return bool(request("checking", self.store, path, self.store.exists, path))

    def _remove(self, path: Any) -> None:
        request("removing", self.store, path, self.store.rm_file, path)

    def _file_count(self, items: list[WriteItem]) -> int:
        total = sum(_payload_bytes(item) for item in items)
        return min(max(self.thread_count, math.ceil(total / self.object_size)), _MAX_OBJECTS)

    def _write_jobs(self, jobs: list[tuple[str, list[WriteItem]]], planner: SavePlanner,
                    values: dict[Any, list[Any]]) -> list[WriteResult]:
        paths = [join(self.root, name) for name, _ in jobs]
        try:
            with ThreadPoolExecutor(max(self.thread_count, _MIN_STREAMS)) as pool:
                futures = [pool.submit(self._upload, path, name, items, planner, values)
                           for path, (name, items) in zip(paths, jobs, strict=True)]
                try:
                    return [result for future in futures for result in future.result()]
                except BaseException:
                    pool.shutdown(cancel_futures=True)  # a failed save uploads no further objects
                    raise
        except BaseException:
            remove_quietly(self.store, paths)
            raise

    def _upload(self, path: str, name: str, items: list[WriteItem], planner: SavePlanner,
                values: dict[Any, list[Any]]) -> list[WriteResult]:
        """One data object, its records streamed in file order; each record's result."""
        stream = open_for_writing(self.store, path, _UPLOAD_PART)

        def write(data: Any) -> None:
            request("writing", self.store, path, stream.write, data)

        if self.compression is not None:  # record lengths are known once compressed: laid out as they come
            from ._compressed import sequential, write_records
            try:
                results = write_records(sequential(write), name, items, planner, values, None, 1)
                request("completing", self.store, path, stream.close)
            except BaseException:
                abandon(stream)
                raise
            return results
        head, slots = _layout(items, values)
        try:
            write(head)
            pos = len(head)
            results = []
            for slot in slots:
                if slot.offset > pos:
                    write(bytes(slot.offset - pos))
                crc = self._stream_record(write, slot, planner)
                pos = slot.offset + slot.length
                results.append(WriteResult(index=slot.item.index, size_in_bytes=slot.length,
                                           storage_data=InertStorageInfo(name, slot.offset, slot.length, crc32=crc)))
            request("completing", self.store, path, stream.close)
        except BaseException:
            abandon(stream)
            raise
        return results

    @staticmethod
    def _stream_record(write: Any, slot: _Slot, planner: SavePlanner) -> int:
        """Write one record; return its CRC-32 (a tensor's taken a block at a time, just before the block goes)."""
        if slot.item.type == WriteItemType.BYTE_IO:
            write(slot.head)
            return int(COUNT.unpack(slot.head[-4:])[0])
        data = tensor_bytes(resolve_tensor(slot.item, planner))[1]  # the view keeps a contiguous copy alive
        write(slot.head)
        crc = crc32(slot.head)
        for at in range(0, len(data), BLOCK):
            block = data[at : at + BLOCK]
            crc = crc32(block, crc)
            write(block)
        write(COUNT.pack(crc))
        return crc

    def _commit(self, final: Any, data: bytes) -> None:
        commit(self.store, final, data, exclusive=False, sync=self.sync_files)

    def storage_meta(self) -> Any:
        meta = super().storage_meta()
        if meta is not None:
            meta.checkpoint_id = self.url
        return meta

    @property
    def checkpoint_id(self) -> str | os.PathLike[str]:
        return self.url

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return is_url(checkpoint_id)


#: The parameters torch's own ``FsspecWriter`` takes by position after ``path``, on the running release: 2.2 has
#: no ``sync_files``; 2.4 adds ``overwrite``, 2.7 ``_extensions``, 2.8 ``serialization_format``; 2.15 inserts
#: ``cache_staged_state_dict`` before ``overwrite``.  Inert's class takes positional arguments in the same order,
#: so that a call written for torch's class means the same here (and through ``inert.torch.enable()``).
_POSITIONAL: tuple[str, ...] = (
    ("single_file_per_rank", "thread_count", "per_thread_copy_ahead") if TORCH_VERSION < (2, 3) else
    ("single_file_per_rank", "sync_files", "thread_count", "per_thread_copy_ahead")
    + (("cache_staged_state_dict",) if TORCH_VERSION >= (2, 15) else ())
    + (("overwrite",) if TORCH_VERSION >= (2, 4) else ())
    + (("_extensions",) if TORCH_VERSION >= (2, 7) else ())
    + (("serialization_format",) if TORCH_VERSION >= (2, 8) else ())
)


def _public_signature() -> inspect.Signature:
    """``__init__``'s signature: ``_setup``'s parameters, those of ``_POSITIONAL`` first and by position."""
    setup = inspect.signature(FsspecWriter._setup)
    params = {name: param for name, param in setup.parameters.items() if name != "kwargs"}
    positional = [params[name].replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
                  for name in ("self", "path", *_POSITIONAL)]
    keywords = [param for name, param in params.items() if name not in ("self", "path", *_POSITIONAL)]
    return inspect.Signature([*positional, *keywords, inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])


_SIGNATURE = _public_signature()
FsspecWriter.__init__.__signature__ = _SIGNATURE  # type: ignore[attr-defined]
