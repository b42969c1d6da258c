"""What the framework workers record during a load: every ``pickle.find_class`` audit event and every
call of ``pickle.load``/``pickle.loads``/``Unpickler.load``, each with the Python file that made it;
and a bit-exact comparison of nested state.  The hooks are installed on import (before any load
starts its threads)."""

from __future__ import annotations

import pickle
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

find_class_events: list[str] = []
unpickle_calls: list[str] = []
_watching = False


def _caller() -> str:
    """The file of the innermost Python frame outside pickle.py and this file: who unpickled."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename in (__file__, pickle.__file__):
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else "?"


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _watching and event == "pickle.find_class":
        find_class_events.append(f"{args[0]}.{args[1]} from {_caller()}")


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    # C-level calls of the unpicklers (the C pickle module has no audit event for them), and torch.load,
    # whose weights_only unpickler is torch's own Python class.
    if not _watching:
        return
    if event == "call":
        if frame.f_code.co_name == "load" and frame.f_code.co_filename.endswith("torch/serialization.py"):
            caller = frame.f_back
            unpickle_calls.append(f"torch.load from {caller.f_code.co_filename if caller else '?'}")
        return
    if event != "c_call":
        return
    name = getattr(arg, "__qualname__", "")
    owner = getattr(arg, "__self__", None)
    if (name in ("load", "loads") and getattr(arg, "__module__", None) in ("_pickle", "pickle")) or (
        name.endswith("load") and isinstance(owner, pickle.Unpickler)
    ):
        unpickle_calls.append(frame.f_code.co_filename)


sys.addaudithook(_audit)
sys.setprofile(_profile)
threading.setprofile(_profile)


@contextmanager
def watching() -> Iterator[None]:
    global _watching
    _watching = True
    try:
        yield
    finally:
        _watching = False


def report() -> dict[str, list[str]]:
    return {"find_class": sorted(set(find_class_events)), "unpickle_calls": sorted(set(unpickle_calls))}


def same(a: Any, b: Any) -> bool:
    """Bit-exact equality of nested state (DTensors compared as whole tensors)."""
    import torch
    from torch.distributed.tensor import DTensor

    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    a, b = (v.full_tensor() if isinstance(v, DTensor) else v for v in (a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return bool(a == b)
