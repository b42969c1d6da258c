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

__all__ = ["PURE_PYTHON_ENV", "accelerator", "pure_python"]

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
