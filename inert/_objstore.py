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

A store is not trusted to answer what it was asked (see :class:`StorageLimits`): a response
longer than the range asked for is refused from its ``Content-Length`` or one byte past the
range, before more is kept (on S3 the body is streamed; local and ``memory://`` files are
read to the range by nature; other backends are checked once their answer is in); every
request has a deadline, and a listing a deadline, a number of pages and a number of
entries.  Crossing a bound is a ``StorageError`` naming the URL and the bound.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from inert._errors import InertError, StorageError

__all__ = ["is_url", "filesystem", "join", "request", "read_range", "read_bounded", "commit", "object_sizes",
           "exists", "open_for_writing", "abandon", "remove_quietly", "display", "StorageLimits"]

_T = TypeVar("_T")
#: Bytes asked of a streamed body at a time.
_CHUNK = 4 << 20
#: Keys asked per listing page (S3's own most).
_PAGE_KEYS = 1000


@dataclass(frozen=True)
class StorageLimits:
    """What a reader allows an object store; each field has an environment variable, read when no limits are given.

    ``request_timeout`` (``INERT_STORAGE_TIMEOUT``, seconds, default 120): one request, from sending
    it to its last byte, the backend's own retries included.  ``listing_timeout``
    (``INERT_STORAGE_LIST_TIMEOUT``, default 120): one listing, all of its pages.  ``listing_pages``
    (``INERT_STORAGE_LIST_PAGES``, default 1000) and ``listing_entries`` (``INERT_STORAGE_LIST_ENTRIES``,
    default 1,000,000): pages and entries of one listing.
    """

    request_timeout: float = 120.0
    listing_timeout: float = 120.0
    listing_pages: int = 1000
    listing_entries: int = 1_000_000

    @classmethod
    def from_env(cls) -> StorageLimits:
        """The defaults, each replaced by its environment variable where set (a bad value is a ``ValueError``)."""
        values: dict[str, Any] = {}
        for field, var, kind in _ENV:
            text = os.environ.get(var)
            if text is None or not text.strip():
                continue
            try:
                value = kind(text)
            except ValueError:
                raise ValueError(f"{var}={text!r}: not a number") from None
            if not value > 0:
                raise ValueError(f"{var}={text!r}: must be above 0")
            values[field] = value
        return cls(**values)


_ENV: tuple[tuple[str, str, type], ...] = (
    ("request_timeout", "INERT_STORAGE_TIMEOUT", float), ("listing_timeout", "INERT_STORAGE_LIST_TIMEOUT", float),
    ("listing_pages", "INERT_STORAGE_LIST_PAGES", int), ("listing_entries", "INERT_STORAGE_LIST_ENTRIES", int))


class _Refused(Exception):
    """A bound crossed inside a coroutine (kept apart from the backend's own errors, which it may retry)."""


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


def read_range(fs: Any, path: str, start: int, end: int, limits: StorageLimits | None = None) -> bytes:
    """Bytes ``start`` to ``end`` of an object, in one ranged request (fewer when the object is shorter).

    More bytes than ``end - start`` is a ``StorageError``: on S3 refused from the ``Content-Length``, or
    one byte past the range of a body without one, before the rest is received.
    """
    limits = limits or StorageLimits.from_env()
    what = f"reading bytes {start}-{end} of"
    if end <= start:
        return b""
    if _is_s3(fs):
        data = _timed(what, fs, path, limits.request_timeout, "INERT_STORAGE_TIMEOUT", _s3_get, fs, path, start, end)
    elif getattr(fs, "async_impl", False) and getattr(fs, "loop", None) is not None:
        data = _timed(what, fs, path, limits.request_timeout, "INERT_STORAGE_TIMEOUT", fs._cat_file, path,
                      start=start, end=end)
    else:  # local and memory://: a range read reads the range
        data = request(what, fs, path, fs.cat_file, path, start=start, end=end)
    if len(data) > end - start:
        raise StorageError(f"{what} {display(fs, path)}: the store answered more than the {end - start} bytes "
                           f"asked for ({len(data)})")
    return data


def read_bounded(fs: Any, path: str, limit: int, limits: StorageLimits | None = None) -> bytes:
    """An object's first ``limit + 1`` bytes at most, in one request: a reader refuses one byte over its limit."""
    return read_range(fs, path, 0, limit + 1, limits)


def exists(fs: Any, path: str, limits: StorageLimits | None = None) -> bool:
    """Whether an object (or a prefix) is at ``path``, within the request deadline."""
    limits = limits or StorageLimits.from_env()
    if getattr(fs, "async_impl", False) and getattr(fs, "loop", None) is not None:
        return bool(_timed("checking", fs, path, limits.request_timeout, "INERT_STORAGE_TIMEOUT", fs._exists, path))
    return bool(request("checking", fs, path, fs.exists, path))


def object_sizes(fs: Any, root: str, limits: StorageLimits | None = None) -> dict[str, int]:
    """The size of every object directly under ``root``, by name, from one listing (never a cached one).

    The listing has a deadline and a bounded number of pages and entries (:class:`StorageLimits`).
    """
    limits = limits or StorageLimits.from_env()
    fs.invalidate_cache(root)  # what else asks about these objects sees the listing's answer
    if _is_s3(fs):
        return _timed("listing", fs, root, limits.listing_timeout, "INERT_STORAGE_LIST_TIMEOUT", _s3_list, fs, root,
                      limits)
    if getattr(fs, "async_impl", False) and getattr(fs, "loop", None) is not None:
        entries = _timed("listing", fs, root, limits.listing_timeout, "INERT_STORAGE_LIST_TIMEOUT", fs._ls, root,
                         detail=True)
    else:
        entries = request("listing", fs, root, fs.ls, root, detail=True)
    if len(entries) > limits.listing_entries:
        raise StorageError(f"listing {display(fs, root)}: more than {limits.listing_entries} entries "
                           "(INERT_STORAGE_LIST_ENTRIES)")
    return {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry["size"]) for entry in entries
            if entry.get("type") == "file"}


def _is_s3(fs: Any) -> bool:
    try:
        from s3fs import S3FileSystem
    except ImportError:
        return False
    return isinstance(fs, S3FileSystem)


def _timed(what: str, fs: Any, path: str, timeout: float, variable: str,
           call: Callable[..., Awaitable[_T]], *args: Any, **kwargs: Any) -> _T:
    """``await call(...)`` on ``fs``'s event loop, cancelled there after ``timeout`` seconds (a ``StorageError``)."""
    import asyncio  # here: local commands never pay for it

    from fsspec.asyn import sync

    async def bounded() -> _T:
        task = asyncio.ensure_future(call(*args, **kwargs))
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if done:
            return task.result()
        task.cancel()  # on the loop: the connection is closed, nothing more is received
        await asyncio.wait({task})
        raise _Refused(f"no complete answer within {timeout:g} s ({variable})")

    try:
        return request(what, fs, path, sync, fs.loop, bounded)
    except StorageError as exc:
        if isinstance(exc.__cause__, _Refused):
            raise StorageError(f"{what} {display(fs, path)}: {exc.__cause__}") from None
        raise


async def _s3_get(fs: Any, path: str, start: int, end: int) -> bytes:
    """One ranged GetObject, its body streamed and refused past ``end - start`` bytes (s3fs's retries kept)."""
    from s3fs.core import _error_wrapper, version_id_kw

    bucket, key, version = fs.split_path(path)
    want = end - start

    async def call_and_read() -> bytes:
        reply = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}",
                                  **version_id_kw(version))
        body = reply["Body"]
        try:
            declared = reply.get("ContentLength")
            status = reply.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if declared is not None and declared > want:
                raise _Refused(f"the store answered {status} with Content-Length {declared} "
                               f"for a request of {want} bytes")
            chunks: list[bytes] = []
            got = 0
            while True:
                chunk = await body.read(min(want + 1 - got, _CHUNK))
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                got += len(chunk)
                if got > want:
                    raise _Refused(f"the store answered {status} with more than the {want} bytes asked for")
        finally:
            body.close()  # a refused body's connection is dropped, not reused

    return await _error_wrapper(call_and_read, retries=fs.retries)  # type: ignore[no-any-return]


async def _s3_list(fs: Any, root: str, limits: StorageLimits) -> dict[str, int]:
    """ListObjectsV2 of the objects directly under ``root``, at most ``listing_pages`` pages of entries."""
    bucket, key, _ = fs.split_path(root)
    prefix = f"{key.rstrip('/')}/" if key else ""
    sizes: dict[str, int] = {}
    entries, token = 0, None
    for _page in range(limits.listing_pages):
        page = await fs._call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, Delimiter="/", MaxKeys=_PAGE_KEYS,
                                 **({"ContinuationToken": token} if token else {}))
        contents, prefixes = page.get("Contents", []), page.get("CommonPrefixes", [])
        entries += len(contents) + len(prefixes)
        if entries > limits.listing_entries:
            raise _Refused(f"more than {limits.listing_entries} entries (INERT_STORAGE_LIST_ENTRIES)")
        for entry in contents:
            name = entry["Key"][len(prefix):]
            if name and "/" not in name:
                sizes[name] = int(entry["Size"])
        if not page.get("IsTruncated"):
            break
        token = page.get("NextContinuationToken")
        if not token:
            raise _Refused("a page says more follow but names no continuation token")
    else:
        raise _Refused(f"still more after {limits.listing_pages} pages (INERT_STORAGE_LIST_PAGES)")
    if not entries:
        raise FileNotFoundError(f"{display(fs, root)}: nothing there")
    return sizes


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
