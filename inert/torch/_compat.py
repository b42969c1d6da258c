"""The torch side of Inert's checkpoint formats: the import gate, the version gate, dtypes.

``inert.torch`` is the only part of Inert that imports torch.  Supported:
PyTorch 2.2 to the newest release; the version is the numeric prefix of
``torch.__version__`` so ``2.13.0+cpu``, ``2.16.0.dev20260101`` and
``2.10.0rc1`` all parse.
"""

from __future__ import annotations

import re
import sys
from typing import Any

_EXTRA = "pip install 'inert[torch]'"

try:
    import msgpack  # noqa: F401
    import torch
    import torch.distributed.checkpoint  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised in an environment without the extra
    raise ImportError(f"inert.torch needs PyTorch (2.2 or later) and msgpack: {_EXTRA} ({exc})") from exc

if sys.byteorder != "little":  # pragma: no cover - the formats are little-endian, views are zero-copy
    raise ImportError("inert.torch needs a little-endian host")

__all__ = ["TORCH_VERSION", "parse_version", "DTYPE_NAMES", "TORCH_DTYPES", "dtype_name", "torch_dtype"]


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
        raise RuntimeError(f"{where}: the checkpoint holds {name.lower()}, which PyTorch {torch.__version__} does not define")
    return dtype
