"""``INERT_TORCH_ENABLE=1``: switch ``inert.torch`` on in a program that never imports Inert.

The ``inert-torch.pth`` file the package installs in site-packages runs, at every interpreter
start, one line: when the variable is ``1`` it imports this module and calls :func:`install`;
otherwise nothing (this module is not even imported, torch never is).  :func:`install` puts a
finder first on ``sys.meta_path`` that waits for the first import of
``torch.distributed.checkpoint``; once that module has run, it calls ``inert.torch.enable()``
and removes itself.  A failure to enable (no msgpack, an unsupported torch) is raised from that
import: a program that asked not to pickle does not go on pickling.

Workers that ``torchrun``, ``torch.multiprocessing`` or ``subprocess`` start inherit the
environment, so they switch themselves on the same way.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

ENV_VAR = "INERT_TORCH_ENABLE"  # the same name as inert.torch._switch.ENV_VAR (that module imports torch)
_TARGET = "torch.distributed.checkpoint"


class _EnableAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``torch.distributed.checkpoint`` to enable Inert after it runs."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        spec.loader = _Loader(loader, self)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, finder: _EnableAfterImport) -> None:
        self.inner = inner
        self.finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.inner.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__.loader = self.inner  # type: ignore[union-attr]  # reloads and introspection see torch's own loader
        module.__loader__ = self.inner
        self.inner.exec_module(module)
        _uninstall(self.finder)
        import inert.torch

        inert.torch.enable()


def _uninstall(finder: _EnableAfterImport) -> None:
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass


def install() -> None:
    """Enable ``inert.torch`` at the first import of ``torch.distributed.checkpoint`` (now, if it was imported already)."""
    if _TARGET in sys.modules:
        import inert.torch

        inert.torch.enable()
        return
    if not any(isinstance(f, _EnableAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _EnableAfterImport())
