"""Checkpoints and dumps on fsspec filesystems (S3 and other object stores, ``memory://``, ``file://``).

Object stores have no rename.  What makes a checkpoint or a dump visible is
one object written last and whole (the commit point): a single PUT, or a
completed multipart upload, appears entirely or not at all, and the data
objects it names are all written before it.  On a local filesystem the commit
point is written to a temporary name and linked into place.

Every request goes through :func:`request`, which turns a backend's failure
(a refused connection, a reset, a 500 reply once the backend's own retries
are spent) into a :class:`inert.StorageError` naming the operation and the
URL.  A missing object stays a ``FileNotFoundError``; bad bytes are judged by
the readers (``InertError``), never here.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from inert._errors import InertError, StorageError

__all__ = ["is_url", "filesystem", "join", "request", "read_range", "read_bounded", "commit", "object_sizes",
           "open_for_writing", "abandon", "remove_quietly", "display"]

_T = TypeVar("_T")


def is_url(path: object) -> bool:
    """Whether ``path`` names a location through fsspec (``s3://b/x``, ``memory://x``, ``file:///x``)."""
    return isinstance(path, str) and "://" in path


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and the path inside it (``storage_options`` go to the filesystem)."""
    from fsspec.core import url_to_fs  # fsspec is needed only for URLs

    fs, path = url_to_fs(url, **(storage_options or {}))
    return fs, path.rstrip("/")


def join(root: str, name: str) -> str:
    return f"{root}/{name}"


def display(fs: Any, path: str) -> str:
    """``path`` as a URL, for messages."""
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    return f"{protocol}://{path.lstrip('/') if protocol != 'file' else path}"


def request(what: str, fs: Any, path: str, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``call(*args, **kwargs)``; a backend failure becomes a ``StorageError`` saying what failed where."""
    try:
        return call(*args, **kwargs)
    except (FileNotFoundError, FileExistsError, InertError, StorageError):
        raise
    except Exception as exc:  # backends raise OSError, botocore, aiohttp and asyncio errors alike
        raise StorageError(f"{what} {display(fs, path)} failed: {type(exc).__name__}: {exc}") from exc


def read_range(fs: Any, path: str, start: int, end: int) -> bytes:
    """Bytes ``start`` to ``end`` of an object, in one ranged request (fewer when the object is shorter)."""
    return request(f"reading bytes {start}-{end} of", fs, path, fs.cat_file, path, start=start, end=end)


def read_bounded(fs: Any, path: str, limit: int) -> bytes:
    """An object's first ``limit + 1`` bytes at most, in one request: a reader refuses one byte over its limit."""
    return read_range(fs, path, 0, limit + 1)


def object_sizes(fs: Any, root: str) -> dict[str, int]:
    """The size of every object directly under ``root``, by name, from one listing (never a cached one)."""
    fs.invalidate_cache(root)
    entries = request("listing", fs, root, fs.ls, root, detail=True)
    return {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry["size"]) for entry in entries
            if entry.get("type") == "file"}


def _is_local(fs: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


def commit(fs: Any, path: str, data: bytes, *, exclusive: bool, sync: bool = True) -> None:
    """Write ``path`` whole or not at all; with ``exclusive``, never over an existing object (``FileExistsError``).

    Object stores: one PUT (S3's ``If-None-Match: *`` when exclusive).  A local filesystem: a temporary
    file, fsynced, then linked (exclusive) or renamed into place.
    """
    if _is_local(fs):
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        with open(tmp, "wb") as out:
            out.write(data)
            if sync:
                os.fsync(out.fileno())
        try:
            if exclusive:
                os.link(tmp, path)  # fails if path exists, atomically
            else:
                os.replace(tmp, path)
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)
        if sync:
            fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return
    if exclusive and request("checking", fs, path, fs.exists, path):
        raise FileExistsError(f"{display(fs, path)} already exists")
    try:
        request("writing", fs, path, fs.pipe_file, path, data, mode="create" if exclusive else "overwrite")
    except FileExistsError as exc:  # s3fs's answer to S3's 412 when another writer got there first
        raise FileExistsError(f"{display(fs, path)} appeared while this one was written") from exc


def open_for_writing(fs: Any, path: str, block_size: int) -> Any:
    """A writable stream to a new object (visible only once closed, on object stores)."""
    return request("creating", fs, path, fs.open, path, "wb", block_size=block_size)


def remove_quietly(fs: Any, paths: Iterable[str]) -> None:
    """Remove objects after a failure, best effort: the failure is what the caller reports."""
    for path in paths:
        try:
            fs.rm_file(path)
        except Exception:  # noqa: BLE001, S110 - the store may be the thing that failed
            pass


def abandon(stream: Any) -> None:
    """Drop a stream opened by :func:`open_for_writing` without publishing what it holds (best effort).

    An S3 multipart upload is aborted; a buffered fsspec file is marked closed, so that neither a later
    ``close()`` nor its finalizer uploads the part written so far.
    """
    import io

    from fsspec.spec import AbstractBufferedFile

    try:
        stream.discard()
    except Exception:  # noqa: BLE001, S110 - not every backend discards (a local file written in place)
        pass
    if isinstance(stream, AbstractBufferedFile):
        stream.closed = True
    elif isinstance(stream, io.BytesIO):  # memory://: its own close() would store the bytes
        io.BytesIO.close(stream)
    else:
        try:
            stream.close()
        except Exception:  # noqa: BLE001, S110
            pass
