"""Binding the generated codecs to the CPython accelerator, ``inert._accel``, when it is built.

``inert._accel`` is an optional extension (setup.py builds it from the generated C readers in c/
where a compiler works).  A codec whose format is accelerated (inert/gen/c_python.py) binds
its C reader at import with :func:`accelerator`; without the extension, or with the environment
variable ``INERT_PURE_PYTHON`` set to anything but ``""`` or ``"0"``, the binding is ``None`` and
the codec reads in pure Python.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["PURE_PYTHON_ENV", "accelerator", "bind_decode", "pure_python"]

#: The environment variable that keeps the codecs in pure Python.
PURE_PYTHON_ENV = "INERT_PURE_PYTHON"


def pure_python() -> bool:
    """Whether the environment asks for the pure-Python codecs."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def accelerator(fmt: str, enums: dict[str, dict[int, Any]]) -> Callable[..., Any] | None:
    """The C reader of ``fmt`` building this codec's values (``decode(buf, version, ctx[, max_size])``
    returning the value, or None where the Python reader must read), or None for pure Python."""
    if pure_python():
        return None
    try:
        from inert import _accel  # type: ignore[attr-defined]
    except ImportError:
        return None
    decoder = _accel.Decoder(fmt, enums)
    decode: Callable[..., Any] = decoder.decode
    return decode


def bind_decode(decode: Callable[..., Any], namespace: dict[str, Any], params: tuple[str, ...]) -> Callable[..., Any]:
    """A message codec's ``decode`` (``decode(data, *, version=LATEST, <params>=None)``) whose call reads
    in C before any Python code runs, or ``decode`` itself where the codec is pure Python.

    The bound callable calls the accelerator with what ``decode`` would pass it, and calls ``decode``
    itself for everything else (a buffer that is not ``bytes``, another keyword, an input the C reader
    leaves to Python), and once the module's ``_ACCEL`` is no longer the reader it was bound with
    (``_ACCEL = None`` makes the module pure Python again).  Its ``__doc__``, ``__name__`` and
    ``__wrapped__`` are ``decode``'s.
    """
    accel = namespace.get("_ACCEL")
    if accel is None:
        return decode
    from inert import _accel  # type: ignore[attr-defined]

    no_ctx = dict.fromkeys(params) if params else namespace["_NO_CTX"]
    bound: Callable[..., Any] = _accel.Bound(decode, accel, namespace, namespace["LATEST"], params, no_ctx)
    return bound
