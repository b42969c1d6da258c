"""What converting a checkpoint into Inert's format shares, whatever the source (``inert migrate`` of a legacy
DCP checkpoint, and ``inert.cli.convert`` of a torch.save or safetensors file): the bound on nesting, the
report, the saving with Inert's writer, and a loader's refusal cut to its cause."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Any

from inert._errors import InvalidValueError, LimitError
from inert.cli.support import INVALID, CommandError, Progress

__all__ = ["LEGACY_FORMAT", "MAX_DEPTH", "Migration", "check_depth", "inner_failure", "save_state", "why"]

#: Deepest nesting of the metadata's planner data and of each non-tensor value (containers in containers).
MAX_DEPTH = 64
#: The format a refusal of the legacy checkpoint names (``InertError.format``).
LEGACY_FORMAT = "legacy-dcp-checkpoint"


@dataclass
class Migration:
    """What was converted."""

    tensors: int
    tensor_bytes: int
    values: int
    chunks: int
    files: int
    verdict: str


def check_depth(field: str, value: Any, limit: int = MAX_DEPTH, format: str = LEGACY_FORMAT) -> None:
    """Containers nest at most ``limit`` deep in ``value`` and none holds itself: a loop, never a recursion,
    so that what follows (DCP's flattening, the writer, comparisons) never meets a RecursionError or a cycle."""
    import torch

    stack: list[tuple[Any, int, bool]] = [(value, 1, False)]
    open_ids: set[int] = set()
    done: set[int] = set()
    while stack:
        item, depth, leaving = stack.pop()
        if leaving:
            open_ids.discard(id(item))
            done.add(id(item))
            continue
        if isinstance(item, dict):
            inner: list[Any] = [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)) and not isinstance(item, torch.Size):
            inner = list(item)
        else:
            continue
        if id(item) in open_ids:
            raise InvalidValueError(format, -1, field, "holds itself (a cycle)")
        if id(item) in done:
            continue
        if depth > limit:
            raise LimitError(format, -1, field, f"nests containers more than {limit} deep")
        open_ids.add(id(item))
        stack.append((item, depth, True))
        stack.extend((child, depth + 1, False) for child in inner)


def inner_failure(exc: BaseException) -> BaseException:
    """The failure a ``CheckpointException`` wraps (``failures``: rank -> (exception, traceback))."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        first = next(iter(failures.values()))
        if isinstance(first, tuple) and first and isinstance(first[0], BaseException):
            return first[0]
    return exc


def why(exc: BaseException) -> str:
    """The useful part of a loader's message: torch's weights_only refusal names the global it refused."""
    text = " ".join(str(exc).split("Exception raised from")[0].split())  # torch's C++ frames follow
    found = re.search(r"[Uu]nsupported (?:global: )?GLOBAL (\S+)", text)  # 2.13: "...load unsupported GLOBAL x.y whose"
    if found:
        return f"it names {found[1]}, which is not an allowed global"
    return text[:300]


def save_state(state: dict[str, Any], nested: bool, dst: str, progress: Progress) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    from inert.torch import FileSystemWriter
    from inert.torch._compat import no_dist_options

    class Planner(DefaultSavePlanner):
        def resolve_data(self, write_item: Any) -> Any:
            data = super().resolve_data(write_item)
            if isinstance(data, torch.Tensor):
                progress.advance(data.numel() * data.element_size())
            return data

    options = no_dist_options(dcp.save)  # 2.2 saves in one process only with no_dist=True, 2.3 and 2.4 infer it
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
            dcp.save(state, storage_writer=FileSystemWriter(dst), planner=Planner(flatten_state_dict=nested), **options)
    except Exception as exc:  # noqa: BLE001 - e.g. a value outside Inert's value subset, named by the writer
        raise CommandError(f"cannot be written in Inert's format: {why(inner_failure(exc))}", INVALID) from None
    except BaseException as exc:  # DCP's CheckpointException wraps the failure of each rank
        if not hasattr(exc, "failures"):
            raise
        raise CommandError(f"cannot be written in Inert's format: {why(inner_failure(exc))}", INVALID) from None
