"""Loaded by every Python process of a run of tools/dcp_upstream_tests (it is on PYTHONPATH).

``INERT_DCP_MODE`` says how Inert's classes get in (unset or ``torch``: they do not):

- ``swap``: torch's ``FileSystemWriter``/``FileSystemReader`` (and the fsspec ones) are replaced
  by inert.torch's wherever DCP and its tests take them from, before any test module is
  imported, so spawned ranks get them too: every module of the running release that defines
  the names (the fsspec pair in 2.15's public ``fsspec_filesystem``, 2.3's ``fsspec`` and the
  old ``_fsspec_filesystem`` alike).
- ``switch``: no name is touched; ``INERT_TORCH_ENABLE=1`` is in the environment (run.py sets
  it), so the hook Inert installs (``inert-torch.pth``) calls ``inert.torch.enable()`` at the
  first import of ``torch.distributed.checkpoint``, as in a program that never imports Inert.
  A process where the switch is not on by then is logged (``SWITCH-OFF``), a failure.

In both, each ``.metadata`` Inert's writer commits is read back and its magic checked; any use
of torch's own writer or reader is logged, and the harness counts the test as failed for Inert.
``INERT_DCP_GPU_ON_CPU=1`` (all sides alike): ``skip_if_lt_x_gpu(n)`` behaves as 2.13's
``skip_if_lt_x_gpu(n, allow_cpu=True)``.  ``SHIMS`` (all sides alike): test helpers newer test
files import that the running release's ``torch.testing`` lacks, added to their module when it
is imported, only where missing; each one added is logged (``SHIM``).
Lines go to ``INERT_DCP_LOG`` tagged with pytest's current test (children inherit it).
"""

from __future__ import annotations

import importlib
import importlib.abc
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

_LOG = os.environ.get("INERT_DCP_LOG")


def _log(event: str) -> None:
    if not _LOG:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "-").rsplit(" ", 1)[0]
    with open(_LOG, "a") as out:
        out.write(f"{os.getpid()}\t{test}\t{event}\n")


def _gpu_gated_on_cpu() -> None:
    import functools

    import torch.testing._internal.common_distributed as common

    original = common.skip_if_lt_x_gpu

    @functools.wraps(original)
    def allow_cpu(x: int, **kwargs: Any) -> Any:
        kwargs.setdefault("allow_cpu", True)
        return original(x, **kwargs)

    common.skip_if_lt_x_gpu = allow_cpu


def _device_type_for(module: ModuleType) -> Callable[[int], str]:
    """2.15's ``common_dtensor._get_device_type(world_size)``: the accelerator when it has enough devices."""
    def _get_device_type(world_size: int) -> str:
        device_type: str = module.DEVICE_TYPE
        return "cpu" if device_type == "cpu" or getattr(module, "DEVICE_COUNT", 0) < world_size else device_type

    return _get_device_type


#: (module, name, factory of the helper from the module): test helpers a release's torch.testing may lack.
SHIMS: list[tuple[str, str, Callable[[ModuleType], Any]]] = [
    # 2.15 (absent from 2.14.1): DTensor tests pick their device by it.
    ("torch.testing._internal.distributed._tensor.common_dtensor", "_get_device_type", _device_type_for),
]


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: runs ``actions[name](module)`` right after module ``name`` has run."""

    def __init__(self, actions: dict[str, Callable[[ModuleType], None]]) -> None:
        self.actions = actions

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname not in self.actions:
            return None
        action = self.actions[fullname]
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

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> ModuleType | None:
                return loader.create_module(spec)  # type: ignore[no-any-return,union-attr]

            def exec_module(self, module: ModuleType) -> None:
                module.__loader__ = module.__spec__.loader = loader  # type: ignore[union-attr]
                loader.exec_module(module)  # type: ignore[union-attr]
                action(module)

        spec.loader = Loader()
        return spec


def _install_shims() -> None:
    def add(name: str, factory: Callable[[ModuleType], Any]) -> Callable[[ModuleType], None]:
        def action(module: ModuleType) -> None:
            if not hasattr(module, name):
                setattr(module, name, factory(module))
                _log(f"SHIM {module.__name__}.{name}")
        return action

    actions = {module: add(name, factory) for module, name, factory in SHIMS}
    for module_name, action in list(actions.items()):
        if module_name in sys.modules:
            action(sys.modules[module_name])
            del actions[module_name]
    sys.meta_path.insert(0, _AfterImport(actions))


def _torch_fsspec_modules() -> list[Any]:
    """Every module of the running release that defines torch's fsspec classes (none without fsspec)."""
    found = []
    for name in ("fsspec_filesystem", "fsspec", "_fsspec_filesystem"):
        try:
            with warnings.catch_warnings():  # 2.15's old module warns on import; the test that imports it still sees
                warnings.simplefilter("ignore", DeprecationWarning)  # the names swapped
                module = importlib.import_module(f"torch.distributed.checkpoint.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"torch.distributed.checkpoint.{name}":
                return []  # the module is there but fsspec is not
            continue
        if hasattr(module, "FsspecWriter"):
            found.append(module)
    return found


def _instrument() -> Any:
    """Log any use of torch's own writer and reader, and check the magic of every ``.metadata`` Inert commits."""
    import torch.distributed.checkpoint.filesystem as torch_fs

    import inert.torch as it
    from inert.codecs.checkpoint_metadata import MAGIC

    def logged(cls: Any, name: str, event: str) -> None:
        original = getattr(cls, name)

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            _log(event)
            return original(self, *args, **kwargs)

        setattr(cls, name, wrapper)

    # torch's own classes: any use is a failure of the swap, reported per test
    logged(torch_fs._FileSystemWriter, "finish", "TORCH-WRITER")
    logged(torch_fs.FileSystemReader, "read_metadata", "TORCH-READER")

    inert_finish = it.FileSystemWriter.finish

    def checked_finish(self: Any, metadata: Any, results: Any) -> None:
        inert_finish(self, metadata, results)
        if isinstance(self, it.FsspecWriter):
            _log("INERT-METADATA fsspec")
            return
        with open(os.path.join(self.path, ".metadata"), "rb") as f:
            head = f.read(len(MAGIC))
        _log("INERT-METADATA ok" if head == MAGIC else f"INERT-METADATA NOT-INERT {head!r}")

    it.FileSystemWriter.finish = checked_finish  # type: ignore[method-assign]
    logged(it.FileSystemReader, "read_metadata", "INERT-READER")
    return it


def _swap() -> None:
    import torch.distributed.checkpoint as dcp
    import torch.distributed.checkpoint._storage_utils as storage_utils
    import torch.distributed.checkpoint.filesystem as torch_fs
    import torch.distributed.checkpoint.format_utils as format_utils

    it = _instrument()
    for module in (dcp, torch_fs, storage_utils, format_utils):
        module.FileSystemWriter = it.FileSystemWriter  # type: ignore[attr-defined]
        module.FileSystemReader = it.FileSystemReader  # type: ignore[attr-defined]
    for module in (dcp, storage_utils, *_torch_fsspec_modules()):
        if hasattr(module, "FsspecWriter"):
            module.FsspecWriter = it.FsspecWriter  # type: ignore[attr-defined]
            module.FsspecReader = it.FsspecReader  # type: ignore[attr-defined]


def _switch() -> None:
    import torch.distributed.checkpoint  # noqa: F401 - the hook of INERT_TORCH_ENABLE=1 enables Inert here

    it = _instrument()
    _log("SWITCH on" if it.is_enabled() else "SWITCH-OFF: INERT_TORCH_ENABLE=1 did not enable inert.torch")


_install_shims()
if os.environ.get("INERT_DCP_GPU_ON_CPU") == "1":
    _gpu_gated_on_cpu()
_MODE = os.environ.get("INERT_DCP_MODE", "torch")
if _MODE == "swap":
    _swap()
elif _MODE == "switch":
    _switch()
