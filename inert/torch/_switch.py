"""One switch for the storage classes DCP picks by itself: ``inert.torch.enable()``.

While enabled, constructing one of torch's four default storage classes with arguments
builds Inert's instead:

=============================================================  ===================================
torch's class (the one class object, whatever module names it)  built instead
=============================================================  ===================================
``torch.distributed.checkpoint.filesystem.FileSystemWriter``    :class:`inert.torch.FileSystemWriter`
``torch.distributed.checkpoint.filesystem.FileSystemReader``    :class:`inert.torch.FileSystemReader`
``torch.distributed.checkpoint._fsspec_filesystem.FsspecWriter``  :class:`inert.torch.FsspecWriter`
``torch.distributed.checkpoint._fsspec_filesystem.FsspecReader``  :class:`inert.torch.FsspecReader`
=============================================================  ===================================

That covers ``dcp.save``/``dcp.async_save``/``dcp.load`` with ``checkpoint_id`` and no storage
object (DCP's ``_storage_setup`` calls the class it picked) and a framework's own
``dcp.FileSystemWriter(path)``, whichever module it imported the name from and whether it did
so before or after ``enable()``: every such name is the same class object, and what is
replaced is that class's ``__new__`` (the names themselves are never rebound, so a class
defined later as a subclass of torch's still subclasses torch's).  Only the exact class is
redirected: a subclass (DCP's ``HuggingFaceStorageWriter``, a framework's own writer) and any
storage object passed explicitly are built and used as written, since their methods rely on
torch's layout.  A call without arguments (``copy``, unpickling: ``cls.__new__(cls)``) is not
a construction and gets torch's object.  The redirected object is Inert's, not an instance of
torch's class.

``enable()`` also sets ``INERT_TORCH_ENABLE=1`` in ``os.environ`` (unless it is set already;
``disable()`` removes it again) so that processes started afterwards (spawned ranks, DCP's
process-based ``async_save`` daemon) switch themselves on at their first import of
``torch.distributed.checkpoint``, through the hook below.

Unmodified programs: with ``INERT_TORCH_ENABLE=1`` in the environment, the ``inert-torch.pth``
file the package installs in site-packages adds an import hook (:mod:`inert._torch_hook`) that
calls :func:`enable` once ``torch.distributed.checkpoint`` is first imported; ``torchrun``'s
workers inherit the variable.  Without the variable the hook does nothing and imports nothing.
"""

from __future__ import annotations

import importlib
import inspect
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch.distributed.checkpoint.filesystem as _torch_fs

from ._fsspec_reader import FsspecReader
from ._fsspec_writer import FsspecWriter
from ._reader import FileSystemReader
from ._writer import FileSystemWriter

__all__ = ["ENV_VAR", "enable", "disable", "enabled", "is_enabled", "redirected_classes"]

#: The environment variable that switches Inert on in a program that never imports it.
ENV_VAR = "INERT_TORCH_ENABLE"

_lock = threading.Lock()
# torch's class -> Inert's, for every class redirected now; empty when disabled.
_active: dict[type, type] = {}
# torch's classes that carry the redirecting ``__new__`` (installed once, see ``_install``).
_installed: set[type] = set()
# Whether ``enable`` set ENV_VAR (so ``disable`` removes it).
_set_env = False


def redirected_classes() -> list[tuple[type, type]]:
    """(torch's class, Inert's class) for every class :func:`enable` redirects on this install.

    The fsspec pair only where torch's ``_fsspec_filesystem`` imports (it needs fsspec).
    """
    pairs: list[tuple[type, type]] = [
        (_torch_fs.FileSystemWriter, FileSystemWriter),
        (_torch_fs.FileSystemReader, FileSystemReader),
    ]
    torch_fsspec = _torch_fsspec_module()
    if torch_fsspec is None:  # no fsspec: DCP's _storage_setup skips these classes too
        return pairs
    return pairs + [(torch_fsspec.FsspecWriter, FsspecWriter), (torch_fsspec.FsspecReader, FsspecReader)]


def _torch_fsspec_module() -> Any:
    """The module defining torch's fsspec classes, by its public name where the release has one: 2.15's
    ``fsspec_filesystem`` and 2.3's ``fsspec`` (importing ``_fsspec_filesystem`` there warns); else
    ``_fsspec_filesystem``.  Every name is the same class object, so one redirect covers them all."""
    for name in ("fsspec_filesystem", "fsspec", "_fsspec_filesystem"):
        try:
            return importlib.import_module(f"torch.distributed.checkpoint.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"torch.distributed.checkpoint.{name}":
                return None  # the module is there but fsspec is not
    return None


def _redirecting_new(cls: type, *args: Any, **kwargs: Any) -> Any:
    """``__new__`` of torch's redirected classes (and, inherited, of their subclasses)."""
    inert_cls = _active.get(cls) if args or kwargs else None  # the exact class only; no arguments: copy, unpickling
    if inert_cls is not None:
        return inert_cls(*args, **kwargs)  # not an instance of cls: Python skips torch's __init__
    after = super(_last_owner(cls), cls).__new__  # type: ignore[arg-type]  # the next __new__ in the MRO
    return after(cls) if after is object.__new__ else after(cls, *args, **kwargs)


def _last_owner(cls: type) -> type:
    """The last class in ``cls``'s MRO carrying the redirecting ``__new__`` (torch's FsspecWriter
    carries it and so does its base FileSystemWriter: passing through goes past both)."""
    return [c for c in cls.__mro__ if _is_redirecting(c.__dict__.get("__new__"))][-1]


def _is_redirecting(method: Any) -> bool:
    return getattr(getattr(method, "__func__", None), "_inert_redirect", False)


def _new_for(torch_cls: type) -> Any:
    """The redirecting ``__new__`` for ``torch_cls``, showing its ``__init__``'s signature: ``inspect.signature``
    of a class reads a Python ``__new__`` before ``__init__``, and callers (frameworks filtering keyword
    arguments) must keep seeing torch's parameters."""
    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        return _redirecting_new(cls, *args, **kwargs)

    __new__.__signature__ = inspect.signature(torch_cls.__init__)  # type: ignore[attr-defined,misc]
    __new__._inert_redirect = True  # type: ignore[attr-defined]
    return staticmethod(__new__)


def _install(torch_cls: type) -> None:
    """Give ``torch_cls`` the redirecting ``__new__``, once: it stays after ``disable`` and then only
    passes through.  (CPython cannot give a class back its C-level ``object.__new__`` once a Python
    ``__new__`` was set on it: after ``del cls.__new__``, ``object.__new__`` refuses the arguments.)
    """
    if torch_cls in _installed:
        return
    if "__new__" in torch_cls.__dict__:
        raise RuntimeError(f"inert.torch.enable: {torch_cls.__module__}.{torch_cls.__qualname__} defines its own __new__, "
                           "which this PyTorch release did not; refusing to replace it")
    torch_cls.__new__ = _new_for(torch_cls)  # type: ignore[assignment]
    _installed.add(torch_cls)


def is_enabled() -> bool:
    """Whether torch's default DCP storage classes currently build Inert's."""
    return bool(_active)


def enable() -> None:
    """Make DCP's default storage classes build Inert's, in this process and in those it starts later.

    Idempotent, thread-safe, undone by :func:`disable`.

    >>> import inert.torch
    >>> inert.torch.enable()
    >>> inert.torch.is_enabled()
    True
    >>> inert.torch.disable()
    """
    global _set_env
    with _lock:
        if _active:
            return
        pairs = redirected_classes()
        for torch_cls, _ in pairs:
            _install(torch_cls)
        _active.update(pairs)
        if os.environ.get(ENV_VAR) is None:
            os.environ[ENV_VAR] = "1"
            _set_env = True


def disable() -> None:
    """Give torch's default storage classes back their own construction.  Idempotent, thread-safe.

    Objects built while enabled stay Inert's.
    """
    global _set_env
    with _lock:
        _active.clear()
        if _set_env:
            os.environ.pop(ENV_VAR, None)
            _set_env = False


@contextmanager
def enabled() -> Iterator[None]:
    """:func:`enable` for the ``with`` block; on exit, :func:`disable` unless it was enabled before."""
    with _lock:
        already = bool(_active)
    enable()
    try:
        yield
    finally:
        if not already:
            disable()
