"""Gates for tests that use a DCP feature some supported PyTorch release lacks (2.2 is the oldest).

Each gate is a capability check on the running torch, and its reason names that release and the
missing feature, so a skip in a compatibility run (tools/compat) reads as what torch lacks, never
as something Inert does not do.  docs/torch.md lists the same limits.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

from inert.torch._compat import TORCH_VERSION

RELEASE = f"PyTorch {torch.__version__.split('+')[0]}"


def _zstandard() -> Any:
    try:
        from torch.distributed.checkpoint._extension import ZStandard
    except ImportError:  # before 2.8 (DCP's stream extensions)
        return None
    return ZStandard


#: DCP's ZStandard stream extension (``FileSystemWriter(_extensions=[ZStandard()])``), or None.
ZStandard = _zstandard()
needs_zstandard = pytest.mark.skipif(
    ZStandard is None, reason=f"{RELEASE} has no torch.distributed.checkpoint._extension.ZStandard (DCP's compressed "
                              "records: PyTorch 2.8 and later)")

needs_checkpoint_id = pytest.mark.skipif(
    "checkpoint_id" not in inspect.signature(dcp.save).parameters,
    reason=f"{RELEASE}'s dcp.save and dcp.load take no checkpoint_id (PyTorch 2.3 and later)")

#: One process: 2.2's dcp.load gathers keys over a process group first, 2.3's drops nested non-tensor values
#: (inert.torch's dcp_load calls dcp.load_state_dict there, which takes no checkpoint_id).
needs_one_process_dcp_load = pytest.mark.skipif(
    TORCH_VERSION < (2, 4), reason=f"{RELEASE}'s dcp.load fails in one process or drops nested non-tensor values "
                                   "(PyTorch 2.4 and later)")

needs_one_process_async_save = pytest.mark.skipif(
    TORCH_VERSION < (2, 4), reason=f"{RELEASE}'s dcp.async_save needs a process group (or is absent: 2.2); one process "
                                   "from PyTorch 2.4")


def dtensor() -> Any:
    """The DTensor module: public as ``torch.distributed.tensor`` from 2.5, ``torch.distributed._tensor`` before."""
    try:
        import torch.distributed.tensor as module

        module.DTensor  # noqa: B018 - before 2.5 the package holds only ``parallel``
    except (ImportError, AttributeError):
        import torch.distributed._tensor as module
    return module


def dtensor_utils() -> Any:
    """DTensor's ``_utils`` (``compute_local_shape_and_global_offset``), under either name."""
    try:
        from torch.distributed.tensor import _utils
    except ImportError:
        from torch.distributed._tensor import _utils
    return _utils
