"""``inert migrate`` from a ``torch.save`` file or from safetensors: the way in for weights held outside DCP.

* A ``torch.save`` file (zip or legacy pickle) is read with
  ``torch.load(weights_only=True)``: torch's restricted unpickler, narrower
  than pickle but still a pickle reader, so ``--trust-source`` is required as
  for legacy DCP checkpoints.  Its top level must be a dict (a state dict, or
  a dict of them with other values: ``{"model": ..., "optim": ..., "epoch": 3}``).
* A safetensors file, or a directory of ``*.safetensors`` files (a sharded
  model): safetensors executes nothing, so no trust is needed.  Every file's
  tensors go into one state dict under their names; a name in two files is
  refused.

The state dict is saved with ``inert.torch.FileSystemWriter`` through DCP
(nested dicts flattened to ``model.fc.weight`` as ``dcp.save`` does), then
DST is verified as ``inert verify`` does and every tensor is read back with
``inert.torch.load_tensors`` and compared byte for byte with the source.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from inert._errors import InertError, InvalidValueError, LimitError
from inert._files import open_path
from inert._foreign import check_safetensors, inspect_safetensors, looks_like_pickle
from inert.cli.support import INVALID, CommandError, Progress
from inert.codecs._tables import CHECKPOINT_METADATA_NAME as _METADATA_NAME

__all__ = ["source_kind", "convert", "TORCH_SAVE", "SAFETENSORS"]

TORCH_SAVE = "torch-save"
SAFETENSORS = "safetensors"
_SUFFIX = ".safetensors"
_UNREADABLE = "not a readable safetensors file"


def _safetensors_files(path: str) -> list[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(_SUFFIX))


def source_kind(path: str) -> str | None:
    """``torch-save`` or ``safetensors`` for what this module converts; None for anything else."""
    if os.path.isdir(path):
        return SAFETENSORS if _safetensors_files(path) and not os.path.exists(os.path.join(path, _METADATA_NAME)) else None
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as handle:
        head = handle.read(16)
    if head.startswith(b"PK\x03\x04") or looks_like_pickle(head):
        return TORCH_SAVE
    if path.endswith(_SUFFIX) or inspect_safetensors(path) is not None:  # a damaged one is refused by its fault
        return SAFETENSORS
    return None


def _load_torch_save(path: str) -> dict[str, Any]:
    import pickle

    import torch

    from inert.cli._migration import MAX_DEPTH, check_depth, why
    from inert.cli._pickle_depth import torch_save_depth

    if torch_save_depth(path, MAX_DEPTH) > MAX_DEPTH:  # before torch's unpickler hashes what it builds (C recursion)
        raise LimitError(TORCH_SAVE, -1, path, f"nests objects more than {MAX_DEPTH} deep")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError, AttributeError, KeyError,
            IndexError, RecursionError, OverflowError, MemoryError) as exc:  # IndexError: an APPEND on an empty stack
        raise InvalidValueError(TORCH_SAVE, -1, path, f"torch.load(weights_only=True) refuses it: {why(exc)}") from None
    check_depth(path, state, format=TORCH_SAVE)
    if not isinstance(state, dict):
        raise InvalidValueError(TORCH_SAVE, -1, path, f"holds a {type(state).__module__}.{type(state).__qualname__}, "
                                "not a dict: migrate converts state dicts (save model.state_dict(), not the model)")
    return state


def _load_safetensors(path: str) -> dict[str, Any]:
    """Every tensor of the safetensors file or directory ``path``; each header checked first
    (``check_safetensors``), so every fault is an ``InertError`` of format ``safetensors`` naming the file,
    the offset where it is at one and the field, never a traceback of the loader."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    inside = os.path.isdir(path)
    files = _safetensors_files(path) if inside else [path]
    state: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for name in files:
        # A directory's entries are read as every reader reads a directory: regular files inside it, never
        # a link (to a file outside it) or a FIFO; the descriptor checked is the one safetensors opens.
        with os.fdopen(open_path(name, SAFETENSORS, inside=inside), "rb") as handle:
            label = os.path.basename(name)
            try:
                header = check_safetensors(handle, label)
            except InertError as exc:  # one wording for every header fault and the loader's own refusals
                raise type(exc)(exc.format, exc.offset, exc.field, f"{_UNREADABLE}: {exc.reason}") from None
            try:
                tensors = load_file(f"/proc/self/fd/{handle.fileno()}", device="cpu")
            except (SafetensorError, OSError, ValueError, TypeError, OverflowError, RuntimeError) as exc:
                why = " ".join(str(exc).split("Exception raised from")[0].split())  # torch's C++ frames follow
                raise InvalidValueError(SAFETENSORS, -1, label, f"{_UNREADABLE}: {why[:300]}") from None
        for key in (k for k in header if k != "__metadata__"):
            if key in owner:
                raise InvalidValueError(SAFETENSORS, -1, f"{label}.{key}", f"tensor {key!r} is also in {owner[key]}")
            owner[key] = label
        state.update(tensors)
    return state


def _flat_tensors(state: dict[str, Any]) -> dict[str, Any]:
    """The tensors of ``state`` under the names ``dcp.save`` gives them."""
    import torch
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    flat, _ = flatten_state_dict(state)
    return {k: v for k, v in flat.items() if isinstance(v, torch.Tensor)}


def _check_copy(dst: str, state: dict[str, Any]) -> int:
    """Every tensor of ``state``, read back from ``dst`` with ``load_tensors``, equals the source bit for bit."""
    import torch

    from inert.torch import load_tensors

    expected = _flat_tensors(state)
    loaded = load_tensors(dst)
    if loaded.keys() != expected.keys():
        missing = sorted(expected.keys() - loaded.keys())[:3]
        raise CommandError(f"{dst}: read back, the tensors differ from the source's (missing: {missing})", INVALID)
    for key, source in expected.items():
        copy = loaded[key]
        same = copy.dtype == source.dtype and copy.shape == source.shape
        if same and source.numel():
            raw = source.detach().contiguous().reshape(-1).view(torch.uint8)
            same = torch.equal(raw, copy.contiguous().reshape(-1).view(torch.uint8))
        if not same:
            raise CommandError(f"{dst}: read back, tensor {key!r} differs from the source's", INVALID)
    return len(expected)


def convert(src: str, dst: str, kind: str, *, show_progress: bool = True) -> Any:
    """Convert a torch.save file or safetensors source into the Inert checkpoint ``dst``; verify it."""
    import io
    import shutil

    import torch

    from inert.cli._migration import Migration, save_state
    from inert.cli.verify import verify_path

    if os.path.exists(dst) and (not os.path.isdir(dst) or os.listdir(dst)):
        raise CommandError(f"{dst} exists and is not an empty directory")
    state = _load_torch_save(src) if kind == TORCH_SAVE else _load_safetensors(src)
    tensors = _flat_tensors(state)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    stream = sys.stderr if show_progress else io.StringIO()
    created = not os.path.exists(dst)
    os.makedirs(dst, exist_ok=True)
    progress = Progress("migrate: writing", total, stream=stream)
    try:
        save_state(state, True, dst, progress)
    except BaseException:
        if created:
            shutil.rmtree(dst, ignore_errors=True)
        else:  # an empty directory the caller gave: left empty
            for name in os.listdir(dst):
                os.unlink(os.path.join(dst, name))
        raise
    finally:
        progress.close()
    report = verify_path(dst, show_progress=show_progress)
    if not report.ok:
        raise CommandError(f"{dst}: the converted checkpoint fails verification: {report.verdict()}", INVALID)
    _check_copy(dst, state)
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    values = sum(not isinstance(v, torch.Tensor) for v in flatten_state_dict(state)[0].values())
    return Migration(tensors=len(tensors), tensor_bytes=total, values=values, chunks=len(tensors), files=report.files,
                     verdict=report.verdict() + f"; {len(tensors)} tensors read back equal to the source")
