"""Binding the generated codecs to the CPython accelerator, ``inert._accel``, when it is built from their grammar.

``inert._accel`` is an optional extension (setup.py builds it from the generated C readers in c/
where a compiler works).  A codec whose format is accelerated (inert/gen/c_python.py) binds
its C reader at import with :func:`accelerator`; without the extension, or with the environment
variable ``INERT_PURE_PYTHON`` set to anything but ``""`` or ``"0"``, the binding is ``None`` and
the codec reads in pure Python.

A build is bound only when it was made from the C the codecs were generated with: both carry the
grammar hash (inert/gen/grammar_hash.py; ``inert.codecs.GRAMMAR_HASH``, ``inert._accel.GRAMMAR_HASH``).
After ``inert gen`` in an editable install the extension keeps the previous grammar's readers until
it is rebuilt, and they may accept what the new rules refuse: such a build is refused, the codecs read
in pure Python, and one :class:`AcceleratorWarning` per process names both hashes and the rebuild.
``INERT_ACCEL=require`` (for CI) makes every fallback an :class:`AcceleratorError` at the codec's
import instead: no build, or a build of another grammar (``INERT_PURE_PYTHON`` asks for pure Python,
which is no fallback: it wins).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = [
    "ACCEL_ENV",
    "PURE_PYTHON_ENV",
    "REBUILD",
    "AcceleratorError",
    "AcceleratorWarning",
    "accelerator",
    "bind_decode",
    "builder",
    "encoder",
    "extension",
    "pure_python",
]

#: The environment variable that keeps the codecs in pure Python.
PURE_PYTHON_ENV = "INERT_PURE_PYTHON"
#: The environment variable that, set to ``require``, makes a missing or stale accelerator an error.
ACCEL_ENV = "INERT_ACCEL"
#: How a source checkout rebuilds the accelerator from its c/.
REBUILD = "pip install -e ."

_said: set[str] = set()  # the fallbacks already explained in this process


class AcceleratorError(ImportError):
    """``INERT_ACCEL=require`` and the accelerator cannot be bound: not built, or built from another grammar."""


class AcceleratorWarning(RuntimeWarning):
    """The accelerator found was built from another grammar: the codecs read in pure Python."""


def pure_python() -> bool:
    """Whether the environment asks for the pure-Python codecs."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def _required() -> bool:
    mode = os.environ.get(ACCEL_ENV, "")
    if mode not in ("", "auto", "require"):
        raise AcceleratorError(f"{ACCEL_ENV}={mode!r}: expected 'require', 'auto' or nothing")
    return mode == "require"


def extension() -> ModuleType | None:
    """``inert._accel`` when it is built from the codecs' grammar, else None (or AcceleratorError when required).

    A build of another grammar is explained once per process (an :class:`AcceleratorWarning`); a
    missing build is silent (a machine without a compiler), unless ``INERT_ACCEL=require``.
    """
    from inert import codecs

    expected = getattr(codecs, "GRAMMAR_HASH", None)  # None: codecs generated before the hash was
    required = _required()
    try:
        from inert import _accel  # type: ignore[attr-defined]
    except ImportError as exc:
        if required:
            raise AcceleratorError(
                f"{ACCEL_ENV}=require, and the accelerator inert._accel is not built ({exc}): "
                f"build it with `{REBUILD}` (a C compiler is needed)"
            ) from None
        return None
    built = getattr(_accel, "GRAMMAR_HASH", None)
    if built is not None and built == expected:
        return _accel
    reason = (
        f"the accelerator {getattr(_accel, '__file__', 'inert._accel')} was built from another grammar "
        f"(its hash {built or 'none'}, the codecs' {expected or 'none'}): rebuild it with `{REBUILD}`"
    )
    if required:
        raise AcceleratorError(f"{ACCEL_ENV}=require, and {reason}")
    if reason not in _said:
        _said.add(reason)
        warnings.warn(f"inert: {reason}; until then the codecs read in pure Python", AcceleratorWarning, stacklevel=3)
    return None


def accelerator(fmt: str, enums: dict[str, dict[int, Any]]) -> Callable[..., Any] | None:
    """The C reader of ``fmt`` building this codec's values (``decode(buf, version, ctx[, max_size])``
    returning the value, or None where the Python reader must read), or None for pure Python."""
    if pure_python():
        return None
    accel = extension()
    if accel is None:
        return None
    decode: Callable[..., Any] = accel.Decoder(fmt, enums).decode
    return decode


def builder(name: str) -> Callable[..., Any] | None:
    """The accelerator's function ``name`` (a builder of a host library's objects, such as ``dcp_chunks``),
    or None for pure Python: no build, ``INERT_PURE_PYTHON``, or a build older than the function (which
    ``INERT_ACCEL=require`` makes an :class:`AcceleratorError`, as it does any fallback)."""
    if pure_python():
        return None
    accel = extension()
    if accel is None:
        return None
    found: Callable[..., Any] | None = getattr(accel, name, None)
    if found is None and _required():
        raise AcceleratorError(
            f"{ACCEL_ENV}=require, and the accelerator {getattr(accel, '__file__', 'inert._accel')} has no {name} "
            f"(built from older sources): rebuild it with `{REBUILD}`"
        )
    return found


def encoder() -> Callable[[str, Any, int], bytes | None] | None:
    """The generated C writers (``encode_or_none(format, value, version)``: the bytes, or None wherever the
    codec's Python encoder must write or refuse the value), or None for pure Python, as :func:`builder`."""
    return builder("encode_or_none")


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
