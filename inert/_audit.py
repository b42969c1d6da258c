"""The no-execution guard: proof that reading bytes loads and runs no code.

CPython raises an audit event before it resolves a global for a pickle
(``pickle.find_class``), compiles source (``compile``), runs a code object
(``exec``, also raised by every import) or unmarshals one (``marshal.loads``).
A reader of untrusted bytes must raise none of them.  Two ways to check:

* ``with no_execution(): decode(data)`` raises :class:`ExecutionDuringRead`
  at exit if a forbidden event was raised in the block, on this thread;
* ``watch_readers(decode, ...)`` watches those functions wherever they are
  called: a forbidden event raised while one of them is on the stack is logged,
  and ``take_reader_events()`` returns the log (the test suite checks it after
  every test).

Only the calling thread's own events count: readers run on the thread that
calls them.  Audit hooks cannot be removed, so the hook returns at once for
every other event.

>>> import pickle
>>> with no_execution():
...     pickle.loads(pickle.dumps(3))  # no global referenced: no event
3
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType
from typing import Any

__all__ = [
    "FORBIDDEN_EVENTS",
    "ExecutionDuringRead",
    "install",
    "no_execution",
    "watch_readers",
    "take_reader_events",
]

#: Audit events that mean code is being found, built or run.
FORBIDDEN_EVENTS = frozenset({"pickle.find_class", "exec", "compile", "marshal.loads"})


class ExecutionDuringRead(RuntimeError):
    """A reader raised a forbidden audit event: it loaded or ran code while reading bytes."""

    def __init__(self, events: list[str]) -> None:
        self.events = list(events)
        super().__init__("code was loaded or run while reading: " + "; ".join(self.events))


_local = threading.local()
_installed = False
_install_lock = threading.Lock()
_reader_codes: frozenset[CodeType] = frozenset()
_reader_events: list[str] = []


def _describe(event: str, args: tuple[Any, ...]) -> str:
    """A short, safe description of an event (never the full source or payload)."""
    if event == "pickle.find_class" and len(args) == 2:
        return f"pickle.find_class({str(args[0])[:80]}.{str(args[1])[:80]})"
    if event == "exec" and args and isinstance(args[0], CodeType):
        return f"exec({args[0].co_name} from {args[0].co_filename})"
    if event == "compile" and len(args) == 2:
        return f"compile({str(args[1])[:120]})"
    return event


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in FORBIDDEN_EVENTS:
        return
    scopes: list[list[str]] | None = getattr(_local, "scopes", None)
    if scopes:
        note = _describe(event, args)
        for recorded in scopes:
            recorded.append(note)
    if _reader_codes:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code in _reader_codes:
                _reader_events.append(f"{_describe(event, args)} inside {frame.f_code.co_name} ({frame.f_code.co_filename})")
                break
            frame = frame.f_back  # type: ignore[assignment]


def install() -> None:
    """Add the audit hook (once per process; later calls do nothing)."""
    global _installed
    with _install_lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True


@contextmanager
def no_execution() -> Iterator[list[str]]:
    """Run the block; at exit raise :class:`ExecutionDuringRead` if it raised a forbidden event.

    Yields the list the events are recorded in.  Blocks nest: an event counts
    for every enclosing block.
    """
    install()
    scopes: list[list[str]] | None = getattr(_local, "scopes", None)
    if scopes is None:
        scopes = _local.scopes = []
    recorded: list[str] = []
    scopes.append(recorded)
    try:
        yield recorded
    finally:
        scopes.remove(recorded)
        if recorded:
            raise ExecutionDuringRead(recorded)


def watch_readers(*readers: Callable[..., Any]) -> None:
    """Log forbidden events raised while any of ``readers`` runs, on any thread (see :func:`take_reader_events`)."""
    global _reader_codes
    install()
    codes = set(_reader_codes)
    for reader in readers:
        while hasattr(reader, "__wrapped__"):
            reader = reader.__wrapped__
        code = getattr(reader, "__code__", None)
        if not isinstance(code, CodeType):
            raise TypeError(f"watch_readers() takes Python functions, not {type(reader).__name__}")
        codes.add(code)
    _reader_codes = frozenset(codes)


def take_reader_events() -> list[str]:
    """The events logged inside watched readers since the last call, and clear the log."""
    events = _reader_events[:]
    del _reader_events[: len(events)]
    return events
