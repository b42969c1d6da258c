"""What ``inert inspect``, ``verify`` and ``migrate`` share: exit codes, the one-line error, sizes,
the terminal-only progress bar, whole files read.

Each command lives in its own module (``inert.cli.inspect``, ``inert.cli.verify``,
``inert.cli.migrate``) with ``add_parser`` (its arguments and ``--help``) and
``run`` (returns the exit code); ``inert.cli.main`` only dispatches.  Exit codes:
0 success; 1 the input is invalid (a file that does not decode, a failed
verification, a legacy checkpoint the allowlist refuses); 2 a usage or I/O
error.  Errors are one line: ``inert: <command>: <reason>``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from inert._files import open_path, read_private

__all__ = ["OK", "INVALID", "USAGE", "CommandError", "fail", "human_bytes", "Progress", "file_bytes", "read_head"]

OK = 0
INVALID = 1
USAGE = 2


class CommandError(Exception):
    """Ends a command with ``inert: <command>: <reason>`` on stderr and ``code`` as the exit code."""

    def __init__(self, reason: str, code: int = USAGE) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


def fail(command: str, error: CommandError) -> int:
    print(f"inert: {command}: {' '.join(error.reason.split())}", file=sys.stderr)
    return error.code


def human_bytes(count: int) -> str:
    """``1536`` -> ``1.5 KiB``; exact below 1 KiB."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


class Progress:
    """A one-line progress bar on stderr when it is a terminal; nothing at all when it is not.

    Redrawn at most ten times a second and only after ``delay`` seconds, so short
    runs print nothing; ``close`` erases it so the verdict stands alone.
    """

    def __init__(self, label: str, total: int, *, unit: str = "bytes", stream: TextIO | None = None,
                 delay: float = 0.5) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self.label = label
        self.total = max(total, 0)
        self.unit = unit
        self.done = 0
        self._start = time.monotonic()
        self._next = self._start + delay
        self._drawn = False

    def advance(self, amount: int) -> None:
        self.done += amount
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 0.1
        self._draw(now)

    def _draw(self, now: float) -> None:
        fraction = min(self.done / self.total, 1.0) if self.total else 1.0
        width = 30
        filled = int(fraction * width)
        if self.unit == "bytes":
            rate = self.done / max(now - self._start, 1e-9)
            amount = f"{human_bytes(self.done)} / {human_bytes(self.total)}  {human_bytes(int(rate))}/s"
        else:
            amount = f"{self.done} / {self.total} {self.unit}"
        bar = "#" * filled + "-" * (width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {fraction:4.0%}  {amount}\x1b[K")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False


def file_bytes(path: str, *, inside: bool = False, format: str = "file", limit: int = 1 << 63) -> memoryview:
    """The whole file, read into private memory, at most ``limit`` bytes (``format``'s ``LimitError`` beyond).

    ``inside``: a file a directory's contents name (a ``.metadata``, a ``MANIFEST``), opened as
    ``inert._files.open_in`` does; otherwise a file the user named (a link followed, a regular file
    only).  Read, never mapped: a mapping of a file another process truncates is a SIGBUS.
    """
    fd = open_path(path, format, inside=inside)
    try:
        return read_private(fd, limit, format, os.path.basename(path) if inside else path)
    finally:
        os.close(fd)


def read_head(path: str, count: int = 16, *, inside: bool = False) -> bytes:
    """The first ``count`` bytes of a regular file (``inside``: as for ``file_bytes``)."""
    fd = open_path(path, "file", inside=inside)
    try:
        return os.pread(fd, count, 0)
    finally:
        os.close(fd)
