"""Loaded by every Python process of a run of tools/dcp_upstream_tests (it is on PYTHONPATH).

``INERT_DCP_SWAP=1``: torch's ``FileSystemWriter``/``FileSystemReader`` (and the fsspec ones)
are replaced by inert.torch's wherever DCP and its tests take them from, before any test
module is imported, so spawned ranks get them too.  Each ``.metadata`` Inert's writer commits
is read back and its magic checked; any use of torch's own writer or reader is logged, and the
harness counts the test as failed for Inert.  ``INERT_DCP_GPU_ON_CPU=1`` (both sides alike):
``skip_if_lt_x_gpu(n)`` behaves as 2.13's ``skip_if_lt_x_gpu(n, allow_cpu=True)``.
Lines go to ``INERT_DCP_LOG`` tagged with pytest's current test (children inherit it).
"""

from __future__ import annotations

import os
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


def _swap() -> None:
    import torch.distributed.checkpoint as dcp
    import torch.distributed.checkpoint._fsspec_filesystem as torch_fsspec
    import torch.distributed.checkpoint._storage_utils as storage_utils
    import torch.distributed.checkpoint.filesystem as torch_fs
    import torch.distributed.checkpoint.format_utils as format_utils
    from inert.codecs.checkpoint_metadata import MAGIC

    import inert.torch as it

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

    for module in (dcp, torch_fs, storage_utils, format_utils):
        module.FileSystemWriter = it.FileSystemWriter  # type: ignore[attr-defined]
        module.FileSystemReader = it.FileSystemReader  # type: ignore[attr-defined]
    for module in (dcp, torch_fsspec, storage_utils):
        if hasattr(module, "FsspecWriter"):
            module.FsspecWriter = it.FsspecWriter  # type: ignore[attr-defined]
            module.FsspecReader = it.FsspecReader  # type: ignore[attr-defined]


if os.environ.get("INERT_DCP_GPU_ON_CPU") == "1":
    _gpu_gated_on_cpu()
if os.environ.get("INERT_DCP_SWAP") == "1":
    _swap()
