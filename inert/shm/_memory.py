"""Shared-memory chunks: created and written by a worker, mapped read-only by the parent.

A worker creates each chunk as an anonymous ``memfd`` and seals its size
(``F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL``) before passing the descriptor
to the parent.  The seal is what makes the parent's zero-copy views safe: a
worker that could shrink the file after the parent mapped it would turn every
later read of the lost pages into SIGBUS in the parent.  The parent therefore
refuses a memfd chunk whose size is not sealed.

Where the kernel has no ``memfd_create`` (ENOSYS, or EPERM/EACCES/EINVAL from a
seccomp filter) the worker falls back to a temporary file, unlinked right
after it is opened so it never stays visible by name.  Such a file cannot be
sealed: the fallback keeps the channel working but trusts workers not to
truncate their chunks.  Growing a chunk means creating a new, larger one.
"""

from __future__ import annotations

import enum
import errno
import fcntl
import mmap
import os
import stat
import tempfile

from inert._errors import InvalidValueError, LimitError

from ._fdpass import CHANNEL_FORMAT

__all__ = ["MemoryBackend", "WritableChunk", "MappedChunk", "create_chunk", "map_chunk", "default_backend"]

_SIZE_SEALS = getattr(fcntl, "F_SEAL_SHRINK", 2) | getattr(fcntl, "F_SEAL_GROW", 4)
_ALL_SEALS = _SIZE_SEALS | getattr(fcntl, "F_SEAL_SEAL", 1)
# errno values with which a kernel or a seccomp filter refuses memfd_create.
_NO_MEMFD = {errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EINVAL}


class MemoryBackend(str, enum.Enum):
    MEMFD = "memfd"  # anonymous, size sealed
    FILE = "file"  # unlinked temporary file, fallback


def _memfd_works() -> bool:
    if not hasattr(os, "memfd_create") or not hasattr(fcntl, "F_ADD_SEALS"):
        return False
    try:
        fd = os.memfd_create("inert-probe", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as exc:
        if exc.errno in _NO_MEMFD:
            return False
        raise
    os.close(fd)
    return True


def default_backend() -> MemoryBackend:
    """memfd where the kernel has it, else the temporary-file fallback."""
    return MemoryBackend.MEMFD if _memfd_works() else MemoryBackend.FILE


def _open_file_chunk() -> int:
    folder = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    fd, path = tempfile.mkstemp(prefix="inert-shm-", dir=folder)
    os.unlink(path)
    return fd


class WritableChunk:
    """A worker's chunk: its descriptor and a writable shared mapping."""

    def __init__(self, fd: int, capacity: int) -> None:
        self.fd = fd
        self.capacity = capacity
        self.buffer = mmap.mmap(fd, capacity)

    def close(self) -> None:
        self.buffer.close()
        os.close(self.fd)


def create_chunk(capacity: int, backend: MemoryBackend) -> WritableChunk:
    """A new zero-filled chunk of ``capacity`` bytes."""
    if capacity <= 0:
        raise ValueError(f"chunk capacity must be positive, not {capacity}")
    if backend is MemoryBackend.MEMFD:
        fd = os.memfd_create("inert-shm", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    else:
        fd = _open_file_chunk()
    try:
        os.ftruncate(fd, capacity)
        if backend is MemoryBackend.MEMFD:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _ALL_SEALS)
        return WritableChunk(fd, capacity)
    except BaseException:
        os.close(fd)
        raise


class MappedChunk:
    """The parent's read-only view of one worker chunk.

    Arrays handed to the caller keep ``buffer`` alive; the mapping is never
    closed under them.
    """

    def __init__(self, chunk_id: int, capacity: int, buffer: mmap.mmap) -> None:
        self.chunk_id = chunk_id
        self.capacity = capacity
        self.buffer = buffer
        self.view = memoryview(buffer)


def map_chunk(fd: int, chunk_id: int, capacity: int, *, require_seals: bool, max_capacity: int) -> MappedChunk:
    """Check a chunk received from a worker and map it read-only; the fd is closed either way.

    Refuses (``InertError`` of format ``shm-channel``) a capacity above
    ``max_capacity``, a descriptor that is not a regular file or memfd of
    exactly ``capacity`` bytes, when ``require_seals`` one whose size is not
    sealed, and one that cannot be mapped (a hugetlb memfd of another size).
    """
    try:
        if not 0 < capacity <= max_capacity:
            raise LimitError(CHANNEL_FORMAT, -1, "chunk.capacity", f"{capacity} outside 1..max_chunk_size({max_capacity})")
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidValueError(CHANNEL_FORMAT, -1, "chunk.fd", "not a shared-memory file")
        if require_seals:
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            except OSError:
                seals = 0
            if seals & _SIZE_SEALS != _SIZE_SEALS:
                raise InvalidValueError(CHANNEL_FORMAT, -1, "chunk.fd", "chunk size is not sealed against shrinking")
        if info.st_size != capacity:
            raise InvalidValueError(
                CHANNEL_FORMAT, -1, "chunk.capacity", f"{capacity} declared, the chunk file holds {info.st_size}"
            )
        try:
            buffer = mmap.mmap(fd, capacity, prot=mmap.PROT_READ)
        except OSError as exc:  # a hugetlb memfd whose size is no multiple of its page size, say
            raise InvalidValueError(CHANNEL_FORMAT, -1, "chunk.fd", f"the chunk cannot be mapped: {exc.strerror}") from None
    finally:
        os.close(fd)
    return MappedChunk(chunk_id, capacity, buffer)
