"""The generated C readers (c/build/libinert_c.so, ``make -C c shared``) called through ctypes.

Only the verdict crosses: ``verdict(name, data, kwargs)`` is None when the C reader accepts, or
``(kind, offset, field)``.  Used by ``targets/c_differential.py``.
"""

from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

C_DIR = Path(__file__).resolve().parent.parent / "c"
LIBRARY = C_DIR / "build" / "libinert_c.so"
_FIELD_MAX, _REASON_MAX = 2048, 200
_KINDS = {1: "truncated", 2: "trailing-bytes", 3: "limit", 4: "unknown-tag", 5: "invalid-value", 6: "checksum",
          7: "version", 8: "foreign-format", 9: "no-memory", 10: "unsupported"}


class _Params(ctypes.Structure):
    _fields_ = [("has_chunk_size", ctypes.c_int), ("chunk_size", ctypes.c_uint64), ("skip_checksums", ctypes.c_int),
                ("has_max_size", ctypes.c_int), ("max_size", ctypes.c_uint64)]


class _Error(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("format", ctypes.c_char_p), ("offset", ctypes.c_uint64),
                ("field", ctypes.c_char * _FIELD_MAX), ("reason", ctypes.c_char * _REASON_MAX)]


_DECODE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.POINTER(_Params),
                           ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_Error))


class _Entry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("versions", ctypes.c_uint * 8), ("whole_file", ctypes.c_int),
                ("params", ctypes.c_char_p), ("decode", _DECODE)]


class CReaders:
    """The C readers of one build of the library."""

    def __init__(self, build: bool = True) -> None:
        if build:
            subprocess.run(["make", "-s", "-C", str(C_DIR), "shared"], check=True)
        self.lib = ctypes.CDLL(str(LIBRARY))
        self.lib.inert_format.restype = ctypes.POINTER(_Entry)
        self.lib.inert_format.argtypes = [ctypes.c_char_p]

    def verdict(self, name: str, data: bytes, kwargs: Mapping[str, Any]) -> tuple[str, int, str] | None:
        entry = self.lib.inert_format(name.encode())
        if not entry:
            raise LookupError(f"no C reader of {name}")
        params = _Params()
        if kwargs.get("chunk_size") is not None:
            params.has_chunk_size, params.chunk_size = 1, kwargs["chunk_size"]
        if kwargs.get("verify_checksums") is False:
            params.skip_checksums = 1
        if kwargs.get("max_size") is not None:
            params.has_max_size, params.max_size = 1, kwargs["max_size"]
        latest = max(v for v in entry.contents.versions if v)  # what decode() reads when not told
        version = kwargs.get("version") or (0 if entry.contents.whole_file else latest)
        error = _Error()
        if entry.contents.decode(data, len(data), version, ctypes.byref(params), None, None, ctypes.byref(error)) == 0:
            return None
        return _KINDS[error.kind], int(error.offset), error.field.decode()
