"""The torch side of Inert's checkpoint formats: the import gate, the version gate, dtypes.

``inert.torch`` is the only part of Inert that imports torch.  Supported:
PyTorch 2.2 to the newest release; the version is the numeric prefix of
``torch.__version__`` so ``2.13.0+cpu``, ``2.16.0.dev20260101`` and
``2.10.0rc1`` all parse.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from typing import Any

from inert._extras import install_hint

_EXTRA = install_hint("torch")

try:
    import msgpack  # noqa: F401
    import torch
    import torch.distributed.checkpoint  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in an environment without the extra
    raise ImportError(f"inert.torch needs PyTorch (2.2 or later) and msgpack: {_EXTRA} ({exc})") from exc

if sys.byteorder != "little":  # pragma: no cover - the formats are little-endian, views are zero-copy
    raise ImportError("inert.torch needs a little-endian host")

__all__ = [
    "TORCH_VERSION", "parse_version", "DTYPE_NAMES", "TORCH_DTYPES", "dtype_name", "torch_dtype", "validate_checkpoint_id",
    "single_process", "no_dist_options", "dcp_save", "dcp_load",
]


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) from the numeric prefix of a torch version string."""
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ImportError(f"inert.torch cannot read the PyTorch version {text!r}")
    return int(match.group(1)), int(match.group(2))


TORCH_VERSION = parse_version(torch.__version__)
if TORCH_VERSION < (2, 2):
    raise ImportError(f"inert.torch needs PyTorch 2.2 or later, found {torch.__version__}: {_EXTRA}")

#: The checkpoint ``DType`` names, each with the torch attribute it stands for.
DTYPE_NAMES = (
    "BOOL", "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "BFLOAT16",
    "FLOAT32", "FLOAT64", "COMPLEX64", "COMPLEX128",
    "FLOAT8_E4M3FN", "FLOAT8_E5M2", "FLOAT8_E4M3FNUZ", "FLOAT8_E5M2FNUZ", "FLOAT8_E8M0FNU",
)
#: The dtypes the installed torch defines (older releases lack some FP8 and unsigned types).
TORCH_DTYPES: dict[str, Any] = {
    name: getattr(torch, name.lower()) for name in DTYPE_NAMES if isinstance(getattr(torch, name.lower(), None), torch.dtype)
}
_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}
#: The first supported release defining a dtype that 2.2 lacks.
_SINCE = {"UINT16": "PyTorch 2.3", "UINT32": "PyTorch 2.3", "UINT64": "PyTorch 2.3"}


def dtype_name(dtype: Any, where: str) -> str:
    """The checkpoint name of a torch dtype; a ``TypeError`` for one the format does not carry."""
    name = _NAMES.get(dtype)
    if name is None:
        raise TypeError(f"{where}: dtype {dtype} has no checkpoint encoding (supported: {', '.join(sorted(_NAMES.values()))})")
    return name


def torch_dtype(name: str, where: str) -> Any:
    """The torch dtype of a checkpoint dtype name; a clear error when this torch lacks it."""
    dtype = TORCH_DTYPES.get(name)
    if dtype is None:
        since = _SINCE.get(name, "a newer release")
        raise RuntimeError(f"{where}: the checkpoint holds {name.lower()}, which PyTorch {torch.__version__} does not define "
                           f"(it has: {since})")
    return dtype


try:  # 2.3+: DCP's local file system (2.2 has neither it nor checkpoint ids)
    from torch.distributed.checkpoint.filesystem import FileSystem as _FileSystem
except ImportError:  # pragma: no cover - exercised by the compatibility runs on 2.2
    _FileSystem = None  # type: ignore[assignment,misc]


def validate_checkpoint_id(checkpoint_id: str | os.PathLike[str]) -> bool:
    """Whether ``dcp.save``/``dcp.load(checkpoint_id=...)`` may give this id to a local-path storage layer.

    DCP's own rule where the release has it (2.3+); 2.2 never asks (its entry points take no checkpoint id).
    """
    if _FileSystem is not None:
        return bool(_FileSystem.validate_checkpoint_id(checkpoint_id))
    return "://" not in os.fspath(checkpoint_id)  # pragma: no cover - 2.2


def single_process() -> bool:
    """Whether no default process group is running: DCP's ``no_dist`` case."""
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized())


def no_dist_options(entry: Any) -> dict[str, bool]:
    """``{"no_dist": ...}`` for a DCP entry point that takes it (``save`` on 2.2 and 2.5+), else nothing (it infers)."""
    return {"no_dist": single_process()} if "no_dist" in inspect.signature(entry).parameters else {}


def dcp_save(state_dict: dict[str, Any], storage_writer: Any, *, planner: Any = None, process_group: Any = None) -> Any:
    """``dcp.save`` with ``no_dist`` where this release takes it: one process or a process group, any storage writer."""
    import torch.distributed.checkpoint as dcp

    return dcp.save(state_dict, storage_writer=storage_writer, planner=planner, process_group=process_group,
                    **no_dist_options(dcp.save))


def dcp_load(state_dict: dict[str, Any], storage_reader: Any, *, planner: Any = None, process_group: Any = None) -> None:
    """Load in place through the DCP entry point that works on this release, in one process or a process group.

    2.5+: ``dcp.load`` with ``no_dist``.  2.4: ``dcp.load``, which infers it.  2.2 and 2.3: the
    deprecated ``dcp.load_state_dict`` (2.2's ``load`` gathers keys before honouring ``no_dist``;
    2.3's drops nested non-tensor values); Stateful objects need 2.4.  Without a planner,
    ``CrossReleaseLoadPlanner``: it reads both releases' key layouts.
    """
    import torch.distributed.checkpoint as dcp

    from ._layout import CrossReleaseLoadPlanner

    planner = planner or CrossReleaseLoadPlanner()
    if TORCH_VERSION >= (2, 4):
        dcp.load(state_dict, storage_reader=storage_reader, planner=planner, process_group=process_group,
                 **no_dist_options(dcp.load))
    else:  # pragma: no cover - exercised by the compatibility runs on old releases
        dcp.load_state_dict(state_dict, storage_reader=storage_reader, planner=planner, process_group=process_group,
                            no_dist=single_process())
