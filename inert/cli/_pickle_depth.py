"""How deep a pickle's objects nest, read from its opcodes before any unpickler builds them.

torch's ``weights_only`` unpickler builds what it is given: a dict key of a
million nested tuples is then hashed, and hashing a tuple recurses in C
without a depth check, which overflows the C stack (a segfault, not an
exception).  ``migrate`` reads ``torch.save`` files and DCP's value records
with that unpickler, so it first walks their opcodes (``pickletools.genops``,
a loop) keeping, for each object on the simulated stack, how deep it nests
when it was built; more than ``limit`` refuses the pickle.

A list or dict filled after it was built may end up deeper than counted
here; those are not hashable, so hashing stops at them, and the objects
loaded are checked again (``inert.cli._migration.check_depth``) before anything
recursive sees them.
"""

from __future__ import annotations

import io
import os
import pickletools
import zipfile
from typing import IO

__all__ = ["pickle_depth", "torch_save_depth", "record_depth"]

_BUILT_FROM_MARK = {"TUPLE", "FROZENSET", "LIST", "DICT", "OBJ", "INST"}
_BUILT_FROM = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3, "REDUCE": 2, "NEWOBJ": 2, "NEWOBJ_EX": 3}
_POP_TO_MARK = {"APPENDS", "SETITEMS", "ADDITEMS", "POP_MARK"}
_POP = {"APPEND": 1, "SETITEM": 2, "BUILD": 1, "POP": 1, "BINPERSID": 1, "STACK_GLOBAL": 2}


def pickle_depth(data: bytes | IO[bytes], limit: int) -> int:
    """The deepest nesting built by the pickle ``data`` (its bytes or a stream at its start), counted up to
    ``limit + 1``; -1 if its opcodes do not parse (the unpickler then says why)."""
    stack: list[int | None] = []  # None: a mark
    memo: dict[int, int] = {}
    deepest = 0
    try:
        for op, arg, _pos in pickletools.genops(io.BytesIO(data) if isinstance(data, bytes) else data):
            name = op.name
            if name == "MARK":
                stack.append(None)
            elif name in _BUILT_FROM_MARK:
                items = _to_mark(stack)
                stack.append(1 + max(items, default=0) if name != "INST" else 1)
            elif name in _BUILT_FROM:
                items = [stack.pop() or 0 for _ in range(_BUILT_FROM[name])]
                stack.append(1 + max(items))
            elif name in ("EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET"):
                stack.append(1)
            elif name in _POP_TO_MARK:
                _to_mark(stack)
            elif name in _POP:
                for _ in range(_POP[name]):
                    stack.pop()
                if name in ("BINPERSID", "STACK_GLOBAL"):
                    stack.append(0)
            elif name == "DUP":
                stack.append(stack[-1])
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg or 0)] = stack[-1] or 0
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1] or 0
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo.get(int(arg or 0), 0))
            elif name == "STOP":
                break
            else:  # an atom: an int, a string, a global, None, a bool, a persistent id by text
                stack.append(0)
            top = stack[-1] if stack else 0
            if top is not None and top > deepest:
                deepest = top
                if deepest > limit:
                    return deepest
    except (ValueError, IndexError, KeyError, TypeError):  # not a parsable pickle
        return -1
    return deepest


def _to_mark(stack: list[int | None]) -> list[int]:
    items: list[int] = []
    while True:
        item = stack.pop()
        if item is None:
            return items
        items.append(item)


def torch_save_depth(source: bytes | str | IO[bytes], limit: int) -> int:
    """:func:`pickle_depth` of a ``torch.save`` file (its bytes, its path or a seekable stream at its start): its
    ``data.pkl`` when it is a zip (read alone: the tensors' entries are not), else the pickle at its start."""
    if isinstance(source, str):
        with open(source, "rb") as handle:
            return torch_save_depth(handle, limit)
    if isinstance(source, bytes):
        if source[:4] != b"PK\x03\x04":
            return _legacy_depth(io.BytesIO(source), limit)
    else:
        head = source.read(4)
        source.seek(0)
        if head != b"PK\x03\x04":
            return _legacy_depth(source, limit)
    try:
        with zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source) as archive:
            names = [n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
            if len(names) != 1:
                return -1
            with archive.open(names[0]) as entry:
                data = entry.read(_MAX_PICKLE + 1)
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, EOFError):
        return -1
    return pickle_depth(data, limit) if len(data) <= _MAX_PICKLE else -1


def _legacy_depth(stream: IO[bytes], limit: int) -> int:
    """The deepest of the pickles torch's legacy (not zip) format starts with, one after the other: its magic
    number, protocol, system info, the object and its storage keys (the storages' raw bytes follow)."""
    deepest = pickle_depth(stream, limit)
    for _ in range(4):
        if deepest < 0 or deepest > limit or not stream.read(1):
            break
        stream.seek(-1, io.SEEK_CUR)
        deepest = max(deepest, pickle_depth(stream, limit))
    return deepest


def record_depth(fd: int, offset: int, length: int, limit: int) -> int:
    """:func:`torch_save_depth` of the ``torch.save`` record at ``offset`` (``length`` bytes) of the file ``fd``
    (DCP's tensor records): read through a view of those bytes only, never the tensor's data whole."""
    return torch_save_depth(io.BufferedReader(_Slice(fd, offset, length)), limit)


class _Slice(io.RawIOBase):
    """Bytes ``offset .. offset + length`` of the file ``fd``, seekable, read with ``pread`` (``fd`` is not moved)."""

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self._fd, self._start, self._length, self._at = fd, offset, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def seek(self, at: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._length}[whence]
        self._at = max(0, base + at)
        return self._at

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        want = max(0, min(len(buffer), self._length - self._at))
        data = os.pread(self._fd, want, self._start + self._at) if want else b""
        memoryview(buffer)[:len(data)] = data
        self._at += len(data)
        return len(data)


#: Largest ``data.pkl`` walked (the objects of a state dict, not its tensors' bytes).
_MAX_PICKLE = 1 << 30
