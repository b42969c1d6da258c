"""Opening the files a reader is given: regular files inside their directory, read with a bound.

A checkpoint or dump directory is input like the bytes in it (it may come from
a tar or an rsync of someone else's).  A file named by the directory's
contents (``.metadata``, a data file, ``MANIFEST``, a shard) is opened relative
to the directory's own descriptor, never through a symbolic link
(``O_NOFOLLOW``, and the name must be one path component), and only if it is
a regular file: a FIFO would block the reader forever, a device could be
endless, a link could read a file outside the directory and let its bytes
reach an error message.  The open itself never blocks (``O_NONBLOCK``: a FIFO
swapped in after the ``lstat`` opens at once and is refused by ``fstat``).
A refused file is a :class:`~inert.FileKindError` naming it and what it is;
none of its bytes is read.

A path the caller names itself (``inert inspect FILE``, ``load(PATH)``) is the
caller's choice: its links are followed, but it must be a regular file (or a
directory) too.  Standard input and device files that a command reads on
purpose (``inert decode``) are read up to a format's maximum size plus one
byte, never to their end.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

from inert._errors import FileKindError, LimitError

__all__ = ["open_in", "open_named", "open_path", "directory_fd", "is_regular_in", "read_fd", "read_private", "read_stream",
           "file_kind"]

_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
#: Reads of a stream or a device are this long at most: nothing is allocated ahead of the bytes.
_STEP = 1 << 20


def file_kind(mode: int) -> str:
    """What a file of ``mode`` is, in words."""
    for test, words in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISDIR, "a directory")):
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def _refuse(format: str, name: str, what: str) -> FileKindError:
    return FileKindError(format, 0, name, f"{what}, not a regular file: readers open only regular files "
                                          "inside the directory and follow no link")


def _check_name(format: str, name: str) -> None:
    # O_NOFOLLOW covers the last component only: "sub/link" or "../x" would leave the directory.
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise FileKindError(format, 0, repr(name), "a file name must be one path component inside the directory")


@contextlib.contextmanager
def directory_fd(path: str | os.PathLike[str]) -> Iterator[int]:
    """A descriptor of the directory ``path`` (named by the caller: a link to it is followed)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_at(dir_fd: int, name: str, format: str) -> int:
    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode  # FileNotFoundError: the caller's case
    if not stat.S_ISREG(mode):  # refused before opening: opening a device can have effects of its own
        raise _refuse(format, name, file_kind(mode))
    try:
        fd = os.open(name, _FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # replaced by a link since the lstat
            raise _refuse(format, name, "a symbolic link") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced since the lstat: this is what was opened
            raise _refuse(format, name, file_kind(mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_in(directory: str | os.PathLike[str] | int, name: str, format: str) -> int:
    """A read-only descriptor of the regular file ``name`` inside ``directory`` (a path or a descriptor).

    ``FileKindError`` (attributed to ``format``) for a link, a FIFO, a device, a socket, a
    directory or a name of more than one component; ``FileNotFoundError`` when it is absent.
    """
    _check_name(format, name)
    if isinstance(directory, int):
        return _open_at(directory, name, format)
    with directory_fd(directory) as dir_fd:
        return _open_at(dir_fd, name, format)


def is_regular_in(directory: str | os.PathLike[str], name: str) -> bool:
    """Whether ``name`` in ``directory`` is a regular file itself (a link to one is not)."""
    try:
        return stat.S_ISREG(os.lstat(os.path.join(directory, name)).st_mode)
    except OSError:
        return False


def open_named(path: str | os.PathLike[str], format: str) -> int:
    """A read-only descriptor of a file the caller named: a link is followed, the file must be regular."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise _refuse(format, os.fspath(path), file_kind(mode))
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(format, os.fspath(path), file_kind(mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_path(path: str | os.PathLike[str], format: str, *, inside: bool) -> int:
    """``open_in`` for a file named by a directory's contents (``inside``), else ``open_named``."""
    if inside:
        directory, name = os.path.split(os.fspath(path))
        return open_in(directory or ".", name, format)
    return open_named(path, format)


def read_fd(fd: int, limit: int, format: str, name: str) -> bytes:
    """The whole regular file behind ``fd``; ``LimitError`` before reading if it exceeds ``limit`` bytes.

    One byte more than ``fstat`` saw is asked for: a file that grew since is longer than
    its size says, and the decoder refuses the extra byte.
    """
    size = os.fstat(fd).st_size
    if size > limit:
        raise LimitError(format, 0, name, f"file of {size} bytes exceeds max_size({limit})")
    parts = []
    left = size + 1
    at = 0
    while left:
        part = os.pread(fd, min(left, 1 << 30), at)
        if not part:
            break
        parts.append(part)
        at += len(part)
        left -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_private(fd: int, limit: int, format: str, name: str) -> memoryview:
    """``read_fd`` into anonymous private memory, one copy and no ``bytes`` join: for files of any size.

    The file is read, never mapped: another process that truncates it makes a short read (which
    the decoder refuses), where a mapping of the file would be a SIGBUS at the first lost page.
    """
    size = os.fstat(fd).st_size
    if size > limit:
        raise LimitError(format, 0, name, f"file of {size} bytes exceeds max_size({limit})")
    view = memoryview(mmap.mmap(-1, size + 1))  # anonymous: pages cost memory only once read into
    done = 0
    while done <= size:  # one byte more than fstat saw: a file that grew is refused by the decoder
        got = os.preadv(fd, [view[done:]], done)
        if got <= 0:
            break
        done += got
    return view[:done]


def read_stream(stream: BinaryIO | int, limit: int, format: str, name: str) -> bytes:
    """Everything a stream or device gives up to its end, or ``LimitError`` once it gives more than ``limit``.

    Standard input, a pipe, ``/dev/zero``: nothing says how long they are, so at most
    ``limit + 1`` bytes are read, in steps, and memory follows the bytes that came.
    """
    parts: list[bytes] = []
    total = 0
    while total <= limit:
        want = min(_STEP, limit + 1 - total)
        part = os.read(stream, want) if isinstance(stream, int) else stream.read(want)
        if not part:
            return b"".join(parts)
        parts.append(part)
        total += len(part)
    raise LimitError(format, limit, name, f"input longer than max_size({limit})")
