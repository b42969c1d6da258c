"""The physical limit each benchmark is measured against: the same bytes moved at the machine's speed, no format.

Every benchmark prints, beside its ratio to the path Inert replaces, the time
the same bytes take to move with nothing but the system's copy, on the same
number of threads, and Inert's fraction of it (limit time / Inert's time: 1.0
is at the limit, 0.5 takes twice its time):

* :func:`pread_limit` - the byte ranges of files read with ``os.preadv`` into
  one preallocated (already faulted) buffer: a reader's limit;
* :func:`memcpy_limit` - the same number of bytes copied between two
  preallocated buffers: a decoder's or an in-memory path's limit;
* :func:`write_limit` - the bytes written to fresh files and fsynced (or not,
  as the benchmark does): a writer's limit.

Each is the median of ``repeat`` runs.  :func:`load_line` is the load average
line every script prints before and after its runs.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

__all__ = ["file_ranges", "fraction", "load_line", "memcpy_limit", "pread_limit", "report", "write_limit"]

#: Bytes per copy: the limits copy in the blocks Inert's readers and writers use.
BLOCK = 1 << 20


def load_line() -> str:
    """The load average, as every benchmark prints it (the machine is shared: read figures beside it)."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _split(items: Sequence[tuple[str, int, int]], threads: int) -> list[list[tuple[str, int, int]]]:
    parts: list[list[tuple[str, int, int]]] = [[] for _ in range(max(1, threads))]
    for k, item in enumerate(items):
        parts[k % len(parts)].append(item)
    return [part for part in parts if part]


def _median(run: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def pread_limit(ranges: Sequence[tuple[str, int, int]], threads: int = 1, repeat: int = 3) -> float:
    """Seconds to read ``ranges`` (``(path, offset, length)`` each) with ``os.preadv`` into a preallocated buffer.

    The ranges are dealt to ``threads`` threads in turn; each thread reads its ranges in blocks of
    :data:`BLOCK` into its own buffer, faulted in beforehand (no fresh memory: the copy alone).
    """
    parts = _split(ranges, threads)
    buffers = [bytearray(max(length for _, _, length in part)) for part in parts]
    for buffer in buffers:
        buffer[:] = b"\1" * len(buffer)  # faulted in

    def read(part: list[tuple[str, int, int]], buffer: bytearray) -> None:
        view = memoryview(buffer)
        fds: dict[str, int] = {}
        try:
            for path, offset, length in part:
                fd = fds.get(path)
                if fd is None:
                    fd = fds[path] = os.open(path, os.O_RDONLY)
                for done in range(0, length, BLOCK):
                    os.preadv(fd, [view[done : min(length, done + BLOCK)]], offset + done)
        finally:
            for fd in fds.values():
                os.close(fd)

    def run() -> None:
        with ThreadPoolExecutor(max_workers=len(parts)) as pool:
            list(pool.map(read, parts, buffers))

    return _median(run, repeat)


def file_ranges(paths: Sequence[str | os.PathLike[str]]) -> list[tuple[str, int, int]]:
    """Each file whole, as :func:`pread_limit` takes it."""
    return [(os.fspath(path), 0, os.path.getsize(path)) for path in paths]


def memcpy_limit(nbytes: int, threads: int = 1, repeat: int = 3) -> float:
    """Seconds to copy ``nbytes`` between preallocated buffers, split over ``threads`` threads (memoryview slice
    assignment: a memcpy with the GIL held, so threads add nothing beyond one; for the sizes of decoders' inputs).
    Below :data:`BLOCK` bytes, the time per input of one copy of many side by side: the bytes' cost, no call's."""
    per = max(1, nbytes // max(1, threads))
    sources = [bytearray(b"\1" * per) for _ in range(max(1, threads))]
    dests = [bytearray(per) for _ in sources]
    for dest in dests:
        dest[:] = sources[0]

    def copy(source: bytearray, dest: bytearray) -> None:
        src, dst = memoryview(source), memoryview(dest)
        for done in range(0, per, BLOCK):
            dst[done : done + BLOCK] = src[done : done + BLOCK]

    def run() -> None:
        if len(sources) == 1:
            copy(sources[0], dests[0])
            return
        with ThreadPoolExecutor(max_workers=len(sources)) as pool:
            list(pool.map(copy, sources, dests))

    if nbytes < BLOCK:
        # Too short to time once, and a Python call per copy would time Python: one copy of as many such inputs
        # side by side as fill a block (cache-resident, as a small message is), divided among them.
        count = max(1, BLOCK // max(1, nbytes))
        source, dest = memoryview(bytearray(b"\1" * (count * nbytes))), memoryview(bytearray(count * nbytes))
        dest[:] = source

        def run() -> None:
            for _ in range(64):
                dest[:] = source

        return _median(run, repeat) / (64 * count)
    return _median(run, repeat)


def write_limit(sizes: Sequence[int], root: str | os.PathLike[str], threads: int = 1, sync: bool = True,
                repeat: int = 3) -> float:
    """Seconds to write one fresh file of each size in ``sizes`` under ``root`` (in blocks of :data:`BLOCK`, dealt
    to ``threads`` threads), each fsynced when ``sync`` and the directory too, as a checkpoint's writer does."""
    block = b"\1" * BLOCK

    def run() -> None:
        where = tempfile.mkdtemp(prefix="limit-", dir=root)
        items = [(os.path.join(where, f"f{k}"), 0, size) for k, size in enumerate(sizes)]

        def write(part: list[tuple[str, int, int]]) -> None:
            for path, _, size in part:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    view = memoryview(block)
                    for done in range(0, size, BLOCK):
                        os.write(fd, view[: min(BLOCK, size - done)])
                    if sync:
                        os.fsync(fd)
                finally:
                    os.close(fd)

        try:
            with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
                list(pool.map(write, _split(items, threads)))
            if sync:
                fd = os.open(where, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        finally:
            for path, _, _ in items:
                if os.path.exists(path):
                    os.unlink(path)
            os.rmdir(where)

    return _median(run, repeat)


def fraction(limit: float, ours: float) -> float:
    """Inert's fraction of the limit: the limit's time over Inert's (1.0: at the limit)."""
    return limit / ours if ours > 0 else float("nan")


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def report(what: str, limit: float, ours: float, how: str) -> str:
    """One line: the limit's time, how it was measured, Inert's time and its fraction of the limit
    (in microseconds below a millisecond, and the fraction to three significant digits: a decoder's is small)."""
    return (f"  limit of {what}: {how} {_duration(limit)}; Inert {_duration(ours)} = "
            f"{fraction(limit, ours):.3g} of the limit")
