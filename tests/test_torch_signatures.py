"""Inert's drop-ins take the arguments torch's classes take on the running release, in the same positional order.

A call written for torch's class (``FsspecWriter(url, True, True, 1, 10_000_000, False)``) must mean the
same with Inert's, whether the caller names Inert's class or ``inert.torch.enable()`` substitutes it: the
positional order moved between releases (2.15 put ``cache_staged_state_dict`` before ``overwrite``).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import inert.torch as it  # noqa: E402

_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _torch_class(name: str) -> Any:
    if name.startswith("FileSystem"):
        return getattr(importlib.import_module("torch.distributed.checkpoint.filesystem"), name)
    for module in ("torch.distributed.checkpoint.fsspec_filesystem", "torch.distributed.checkpoint._fsspec_filesystem"):
        try:  # 2.15 made the module public; older releases have only the private one
            return getattr(importlib.import_module(module), name)
        except ImportError:
            continue
    raise AssertionError(f"this torch defines no {name}")


def _positional(cls: Any) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(cls).parameters.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]


@pytest.mark.parametrize("name", ["FileSystemWriter", "FileSystemReader", "FsspecWriter", "FsspecReader"])
def test_drop_in_takes_torch_positional_arguments_in_torch_order(name: str) -> None:
    theirs, ours = _positional(_torch_class(name)), _positional(getattr(it, name))
    assert [p.name for p in ours[:len(theirs)]] == [p.name for p in theirs]
    for mine, torchs in zip(ours, theirs, strict=False):  # ours may go on with keywords of its own
        assert mine.default == torchs.default, f"{name}({mine.name}=...): default {mine.default!r}, torch's {torchs.default!r}"


@pytest.mark.parametrize("name", ["FileSystemWriter", "FileSystemReader", "FsspecWriter", "FsspecReader"])
def test_drop_in_takes_every_keyword_torch_takes(name: str) -> None:
    theirs = inspect.signature(_torch_class(name)).parameters
    ours = inspect.signature(getattr(it, name)).parameters
    missing = [p for p in theirs if p not in ours and theirs[p].kind not in _VARIADIC]
    assert not missing
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in theirs.values()):
        assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours.values())


def test_fsspec_writer_positional_call_means_what_it_means_to_torch() -> None:
    """Every positional parameter torch's class has, given by position, lands on the attribute of that name."""
    names = [p.name for p in _positional(_torch_class("FsspecWriter"))][1:]
    values = {"single_file_per_rank": False, "sync_files": False, "thread_count": 3, "per_thread_copy_ahead": 7,
              "cache_staged_state_dict": False, "overwrite": False, "_extensions": None}
    given = [values[n] for n in names if n in values]
    writer = it.FsspecWriter("memory://inert-signature", *given)
    for name in names:
        if name in values and name not in ("_extensions", "cache_staged_state_dict"):
            assert getattr(writer, name) == values[name], name


def test_fsspec_writer_too_many_positional_arguments_is_a_type_error() -> None:
    count = len(_positional(it.FsspecWriter))
    with pytest.raises(TypeError):
        it.FsspecWriter("memory://inert-signature", *([True] * count))
