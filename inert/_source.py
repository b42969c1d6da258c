"""Where a checkpoint's or a dump's files are: a local directory or a location in an object store, one interface.

``open_source(path)`` is the one place that tells a URL (``s3://b/x``, any fsspec filesystem) from a
local directory; everything after it reads through a :class:`Source`:

* ``names()``: every entry directly inside, with its size (``None``: not a regular file, a link, a
  FIFO or a directory, which no reader opens): ``os.listdir`` and ``lstat`` locally, one bounded
  listing of an object store (its deadline, pages and entries: ``inert._objstore.StorageLimits``);
* ``size(name)`` (``FileNotFoundError`` when absent);
* ``read_into(name, offset, dest, crc)``: ``dest`` filled from ``offset``, a ``TruncatedError`` of the
  source's format when the file ends first, the CRC-32 continued over the bytes on the way; an
  object store is asked in ranged requests of at most ``PART`` bytes, each answer refused past its
  range before more of it is kept (``inert._objstore.read_range``);
* ``read_whole(name, limit)``: a whole file of at most ``limit`` bytes (the format's ``LimitError``
  one byte over), in private memory;
* ``checkpoint_reader()`` and ``dump_reader()``: DCP's storage reader and the dump reader of the
  same location (``FileSystemReader``/``FsspecReader``, ``DumpReader``/``RemoteDumpReader``).

Local files are opened as ``inert._files.open_in`` says (regular files inside the directory, no
link followed), each once, and closed by ``close()``.
"""

from __future__ import annotations

import os
import stat
import threading
from types import TracebackType
from typing import Any

from inert._errors import TruncatedError, byte_count
from inert._files import open_in, read_private
from inert._objstore import StorageLimits, display, filesystem, is_url, join, object_sizes, read_range

__all__ = ["Source", "DirectorySource", "ObjectSource", "open_source", "PART"]

#: Most bytes one ranged request of ``ObjectSource.read_into`` asks for.
PART = 32 << 20


class Source:
    """A directory of files, local or in an object store (see the module)."""

    location: str
    remote: bool
    format: str

    def names(self) -> dict[str, int | None]:
        raise NotImplementedError

    def size(self, name: str) -> int:
        found = self.names().get(name, -1)
        if found is None or found < 0:
            raise FileNotFoundError(f"{self.where(name)}: no such file")
        return found

    def read_into(self, name: str, offset: int, dest: memoryview, crc: int | None = None) -> int | None:
        raise NotImplementedError

    def read(self, name: str, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` of ``name`` (fewer when it ends first)."""
        raise NotImplementedError

    def read_whole(self, name: str, limit: int, format: str | None = None) -> memoryview:
        """The whole file ``name``, at most ``limit`` bytes (errors name ``format``, by default the source's)."""
        raise NotImplementedError

    def file_size(self, name: str) -> int:
        """The size of the data file ``name``, which must be a regular file (or object) of the directory."""
        return self.size(name)

    def where(self, name: str) -> str:
        """``name`` inside the source, for messages."""
        raise NotImplementedError

    def checkpoint_reader(self, **options: Any) -> Any:
        raise NotImplementedError

    def dump_reader(self, *, mapped: bool = False) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        """Nothing held open (local descriptors are)."""

    def __enter__(self) -> Source:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _truncated(format: str, name: str, at: int, missing: int) -> TruncatedError:
    return TruncatedError(format, at, name, f"{byte_count(missing)} needed, the file ends first")


class DirectorySource(Source):
    remote = False

    def __init__(self, path: str | os.PathLike[str], format: str = "checkpoint-shard") -> None:
        self.location = os.fspath(path)
        self.format = format
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._names: dict[str, int | None] | None = None

    def names(self) -> dict[str, int | None]:
        if self._names is None:
            found: dict[str, int | None] = {}
            for name in os.listdir(self.location):
                try:
                    st = os.lstat(os.path.join(self.location, name))
                except OSError:
                    continue
                found[name] = st.st_size if stat.S_ISREG(st.st_mode) else None
            self._names = found
        return self._names

    def fd(self, name: str) -> int:
        """A descriptor of ``name`` (``inert._files.open_in``), open until ``close()``."""
        with self._lock:
            fd = self._fds.get(name)
            if fd is None:
                fd = self._fds[name] = open_in(self.location, name, self.format)
            return fd

    def read_into(self, name: str, offset: int, dest: memoryview, crc: int | None = None) -> int | None:
        from inert._payload import read_into

        if self.format == "checkpoint-shard":  # (read_into names checkpoint-shard)
            return read_into(self.fd(name), offset, dest, crc, name)
        got = os.preadv(self.fd(name), [dest], offset)
        if got < len(dest):
            raise _truncated(self.format, name, offset + got, len(dest) - got)
        return None if crc is None else _crc(dest, crc)

    def read(self, name: str, start: int, end: int) -> bytes:
        return os.pread(self.fd(name), max(0, end - start), start)

    def read_whole(self, name: str, limit: int, format: str | None = None) -> memoryview:
        fd = open_in(self.location, name, format or self.format)
        try:
            return read_private(fd, limit, format or self.format, name)
        finally:
            os.close(fd)

    def file_size(self, name: str) -> int:
        return os.fstat(self.fd(name)).st_size  # opened: a link or a FIFO is refused by name

    def where(self, name: str) -> str:
        return os.path.join(self.location, name)

    def checkpoint_reader(self, **options: Any) -> Any:
        from inert.torch._reader import FileSystemReader

        return FileSystemReader(self.location, **options)

    def dump_reader(self, *, mapped: bool = False) -> Any:
        from inert.dump._read import DumpReader

        return DumpReader(self.location, mapped=mapped)

    def close(self) -> None:
        with self._lock:
            fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


class ObjectSource(Source):
    remote = True

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None,
                 limits: StorageLimits | None = None, format: str = "checkpoint-shard") -> None:
        self.location = url
        self.format = format
        self.storage_options = storage_options
        self.limits = limits or StorageLimits.from_env()
        self.fs, self.root = filesystem(url, storage_options)
        self._names: dict[str, int | None] | None = None

    def names(self) -> dict[str, int | None]:
        if self._names is None:
            try:
                self._names = dict(object_sizes(self.fs, self.root, self.limits))
            except FileNotFoundError:
                self._names = {}
        return self._names

    def read(self, name: str, start: int, end: int) -> bytes:
        return read_range(self.fs, join(self.root, name), start, end, self.limits)

    def read_into(self, name: str, offset: int, dest: memoryview, crc: int | None = None) -> int | None:
        for lo in range(0, len(dest), PART):
            hi = min(lo + PART, len(dest))
            data = self.read(name, offset + lo, offset + hi)
            if len(data) != hi - lo:
                raise _truncated(self.format, name, offset + lo + len(data), hi - lo - len(data))
            dest[lo:hi] = data
            if crc is not None:
                crc = _crc(dest[lo:hi], crc)
        return crc

    def read_whole(self, name: str, limit: int, format: str | None = None) -> memoryview:
        from inert._errors import LimitError

        data = self.read(name, 0, limit + 1)  # one request; a byte over the limit is refused
        if len(data) > limit:
            raise LimitError(format or self.format, 0, name, f"object of more than {limit} bytes exceeds max_size({limit})")
        return memoryview(data)

    def where(self, name: str) -> str:
        return display(self.fs, join(self.root, name))

    def checkpoint_reader(self, **options: Any) -> Any:
        from inert.torch._fsspec_reader import FsspecReader

        storage_options = options.pop("storage_options", None) or self.storage_options
        return FsspecReader(self.location, storage_options=storage_options, storage_limits=self.limits, **options)

    def dump_reader(self, *, mapped: bool = False) -> Any:
        from inert.dump._read import RemoteDumpReader

        return RemoteDumpReader(self.location, self.storage_options, self.limits)


def _crc(view: memoryview, crc: int) -> int:
    from inert._payload import crc32

    return crc32(view, crc)


def open_source(path: str | os.PathLike[str], storage_options: dict[str, Any] | None = None, *,
                limits: StorageLimits | None = None, format: str = "checkpoint-shard") -> Source:
    """The source at ``path``: an :class:`ObjectSource` for a URL, a :class:`DirectorySource` otherwise."""
    if is_url(path):
        return ObjectSource(os.fspath(path), storage_options, limits, format)
    return DirectorySource(path, format)
