"""What every part of the adapter shares: DALI's modules once loaded, and DALI's originals of what is patched."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

_lock = threading.Lock()
# The DALI modules and classes the patches use, filled in by ``enable``.
_dali = SimpleNamespace()
# (owner, attribute name, DALI's original) for every patched attribute.
_originals: list[tuple[Any, str, Any]] = []


def _original(owner: Any, name: str) -> Any:
    for patched_owner, patched_name, original in _originals:
        if patched_owner is owner and patched_name == name:
            return original
    raise RuntimeError(f"inert.dali: {name} is not patched")
