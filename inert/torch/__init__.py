"""Inert's storage layer for PyTorch Distributed Checkpoint: nothing on disk is executable.

Drop-ins for ``torch.distributed.checkpoint.FileSystemWriter`` and
``FileSystemReader``: the ``.metadata`` file is a ``checkpoint-metadata``
document and the data files hold ``checkpoint-shard`` records (raw tensor
bytes, MessagePack values), each with a CRC-32::

    import torch.distributed.checkpoint as dcp
    from inert.torch import FileSystemReader, FileSystemWriter

    dcp.save(state, storage_writer=FileSystemWriter(path))
    dcp.load(state, storage_reader=FileSystemReader(path))

Code that never names these classes (``dcp.save(state, checkpoint_id=path)``, a framework's
own ``torch.distributed.checkpoint.FileSystemWriter(path)``) gets them too while
``inert.torch.enable()`` is on (``disable()``, ``with inert.torch.enabled():``); a program that
never imports Inert, and every worker ``torchrun`` starts, with ``INERT_TORCH_ENABLE=1`` in
the environment (docs/torch.md, "The switch").

``FsspecWriter``/``FsspecReader`` are the same for any fsspec URL (``s3://bucket/ckpt``,
an object store's commit point being the ``.metadata`` object written last).

Non-tensor values may be numpy arrays and scalars, ``io.BytesIO``,
``torch.Size``/``dtype``/``device`` and, once ``register_type``d in the saving
and the loading program, the caller's dataclasses, NamedTuples and enums
(docs/torch.md lists every type).
``dumps_metadata``/``loads_metadata`` convert DCP's ``Metadata`` on their own;
``load_tensors(path, into)`` reads a checkpoint's tensors without ``dcp.load``
(same checks, no planning: for one process reading tensors by name).

PyTorch releases (docs/torch.md has the table): ``inert.torch.save`` and
``inert.torch.load`` pick the DCP entry point and the ``no_dist`` argument that work
on the running release in one process or in a process group.  ``dcp.save`` itself
needs ``no_dist=True`` in one process on 2.2 and 2.5+ (2.3 and 2.4 infer it).
2.4 and later load through ``dcp.load``; 2.2 and 2.3 through the deprecated
``dcp.load_state_dict`` (2.2's ``load`` gathers keys before honouring
``no_dist``; 2.3's ``load`` drops nested non-tensor values), and Stateful
objects need 2.4.
This is the only module of Inert that imports torch; it needs the extra:
``pip install '<checkout>[torch]'`` (README.md, "Install").
"""

from __future__ import annotations

import os
from typing import Any

from ._compat import TORCH_VERSION, dcp_load, dcp_save, parse_version
from ._fsspec_reader import FsspecReader
from ._fsspec_writer import FsspecWriter
from ._layout import CrossReleaseLoadPlanner
from ._load_errors import cause, quiet_fallback
from ._metadata import InertStorageInfo, dumps_metadata, loads_metadata
from ._reader import FileSystemReader, ShapeMismatchError
from ._switch import disable, enable, enabled, is_enabled
from ._tensors import load_tensors, reader_for
from ._values import register_type, unregister_type
from ._writer import FileSystemWriter


def load(state_dict: dict[str, Any], path: str | os.PathLike[str], *, planner: Any = None, process_group: Any = None,
         **reader_options: Any) -> None:
    """Load an Inert checkpoint into ``state_dict`` in place, through the DCP entry point that works on this PyTorch.

    2.4 and later: ``dcp.load`` (with ``no_dist`` in one process on 2.5+).  2.2 and 2.3: the
    deprecated ``dcp.load_state_dict`` with ``no_dist`` in one process (2.2's ``load`` gathers
    keys before honouring ``no_dist``; 2.3's drops nested non-tensor values), with
    :class:`CrossReleaseLoadPlanner` when no planner is given, so that checkpoints saved by 2.4+
    load there too; Stateful objects need 2.4.  ``reader_options`` go to :class:`FileSystemReader`, or for a
    URL (``s3://bucket/ckpt``) to :class:`FsspecReader`.
    Bad bytes raise the reader's :class:`~inert.InertError` itself, and a state dict that DCP's
    default planner refuses (a tensor of another shape, a key the checkpoint lacks) a
    :class:`ShapeMismatchError` naming the key and both shapes, each with DCP's
    ``CheckpointException`` (a ``BaseException``) as its ``__cause__``; DCP's fallback after a
    failed metadata read logs nothing (the error raised says it all).
    """
    reader = reader_for(path, **reader_options)
    try:
        with quiet_fallback():
            dcp_load(state_dict, reader, planner=planner, process_group=process_group)
    except BaseException as exc:  # DCP's CheckpointException is a BaseException that `except Exception` misses
        found = cause(exc, reader, state_dict, planner)
        if found is None or found is exc:
            raise
        raise found from exc


def save(state_dict: dict[str, Any], path: str | os.PathLike[str], *, planner: Any = None, process_group: Any = None,
         **writer_options: Any) -> Any:
    """Save ``state_dict`` as an Inert checkpoint with ``dcp.save``, in one process or in a process group.

    ``no_dist`` is passed in one process where this release's ``dcp.save`` takes it (2.2, 2.5+;
    2.3 and 2.4 infer it).  Returns DCP's ``Metadata``.  ``writer_options`` go to :class:`FileSystemWriter`.
    """
    return dcp_save(state_dict, FileSystemWriter(path, **writer_options), planner=planner, process_group=process_group)


__all__ = [
    "FileSystemWriter",
    "FileSystemReader",
    "FsspecWriter",
    "FsspecReader",
    "enable",
    "disable",
    "enabled",
    "is_enabled",
    "load",
    "save",
    "load_tensors",
    "CrossReleaseLoadPlanner",
    "ShapeMismatchError",
    "register_type",
    "unregister_type",
    "InertStorageInfo",
    "dumps_metadata",
    "loads_metadata",
    "parse_version",
    "TORCH_VERSION",
]
