"""Staging and publishing a dump directory: all or nothing, never over an existing one.

A dump is written into a uniquely named hidden sibling of its destination,
every file and the directory are fsynced, and one rename publishes it.  A
process killed at any point leaves at most a hidden staging directory; the
destination either does not exist or holds a complete dump.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
import uuid

__all__ = ["staging_dir", "fsync_dir", "publish", "discard", "start_writeback"]

_RENAME_NOREPLACE = 1
_AT_FDCWD = -100


def staging_dir(dest: str) -> str:
    """Create and return a fresh staging directory beside ``dest`` (same filesystem, so rename is atomic)."""
    if os.path.lexists(dest):
        raise FileExistsError(f"{dest}: a dump (or another file) is already there; choose a new directory")
    parent, name = os.path.split(os.path.abspath(dest))
    path = os.path.join(parent, f".{name}.staging-{uuid.uuid4().hex}")
    os.mkdir(path)
    return path


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _libc(function: str) -> object | None:
    name = ctypes.util.find_library("c") if os.name == "posix" else None
    if name is None:
        return None
    return getattr(ctypes.CDLL(name, use_errno=True), function, None)


_RENAMEAT2 = _libc("renameat2")
_SYNC_FILE_RANGE = _libc("sync_file_range")
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing a range of ``fd`` to disk without waiting (Linux), so the final fsync has less left to wait for."""
    if _SYNC_FILE_RANGE is not None:
        # Advisory: a failure here only leaves the work to fsync, which reports any error.
        _SYNC_FILE_RANGE(fd, ctypes.c_int64(offset), ctypes.c_int64(length), ctypes.c_uint(_SYNC_FILE_RANGE_WRITE))  # type: ignore[operator]


def _rename_noreplace(src: str, dest: str) -> None:
    """Rename that refuses to replace ``dest``: plain rename() would silently replace an empty directory."""
    if _RENAMEAT2 is not None:
        result = _RENAMEAT2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dest), _RENAME_NOREPLACE)  # type: ignore[operator]
        if result == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(f"{dest}: a dump (or another file) appeared there while this one was written")
        if err not in (errno.ENOSYS, errno.EINVAL):  # old kernel or a filesystem without the flag
            raise OSError(err, os.strerror(err), dest)
    if os.path.lexists(dest):
        raise FileExistsError(f"{dest}: a dump (or another file) appeared there while this one was written")
    os.rename(src, dest)


def publish(staging: str, dest: str, sync: bool = True) -> None:
    """Make the complete ``staging`` directory visible as ``dest`` in one rename (synced unless ``sync`` is false)."""
    if sync:
        fsync_dir(staging)
    _rename_noreplace(staging, dest)
    if sync:
        fsync_dir(os.path.dirname(os.path.abspath(dest)))


def discard(staging: str) -> None:
    """Remove a staging directory after a failure (best effort: the failure is what the caller reports)."""
    shutil.rmtree(staging, ignore_errors=True)
