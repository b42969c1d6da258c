"""DCP ``Metadata`` <-> the ``checkpoint-metadata`` format.

``dumps_metadata`` and ``loads_metadata`` are exact inverses for every
``Metadata`` written by :class:`inert.torch.FileSystemWriter`.  Decoding
builds DCP's dataclasses directly (``object.__new__`` and the instance dict,
as unpickling does) so that 140,000 chunks cost no more than ``pickle.loads``.

Strides: a release whose ``TensorProperties`` has ``strides`` (2.15 on) writes
version 2, which keeps each tensor's strides (or that none were recorded); other
releases write version 1, which every release's reader reads.  Reading, a
release with the field gets the file's strides (None from a version 1 file or
where none were recorded); a release without it ignores them.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorStorageMetadata,
)

from inert import _accelerator
from inert.codecs import checkpoint_metadata as codec

from ._compat import dtype_name, torch_dtype

try:
    from torch.distributed.checkpoint.metadata import TensorProperties
except ImportError:  # 2.2 keeps it in the sharded-tensor package
    from torch.distributed._shard.sharded_tensor.metadata import TensorProperties  # type: ignore[no-redef,assignment]

try:
    from torch.distributed.checkpoint.metadata import StorageMeta
except ImportError:  # before 2.4
    StorageMeta = None  # type: ignore[assignment,misc]

__all__ = ["InertStorageInfo", "dumps_metadata", "loads_metadata"]


@dataclasses.dataclass
class InertStorageInfo(_StorageInfo):
    """Where a record lies (file, byte offset, length) and the CRC-32 it carries."""

    crc32: int = 0


_LAYOUTS = {torch.strided: "STRIDED", torch.sparse_coo: "SPARSE_COO", torch.sparse_csr: "SPARSE_CSR",
            torch.sparse_csc: "SPARSE_CSC", torch.sparse_bsr: "SPARSE_BSR", torch.sparse_bsc: "SPARSE_BSC"}
if hasattr(torch, "jagged"):
    _LAYOUTS[torch.jagged] = "JAGGED"
_FORMATS = {torch.contiguous_format: "CONTIGUOUS", torch.channels_last: "CHANNELS_LAST",
            torch.channels_last_3d: "CHANNELS_LAST_3D", torch.preserve_format: "PRESERVE"}
#: Every dataclass field of the release's TensorProperties that the format does not carry, with its default.
_PROPERTY_DEFAULTS = {
    f.name: f.default_factory if f.default_factory is not dataclasses.MISSING else (lambda d=f.default: d)
    for f in dataclasses.fields(TensorProperties)
    if f.name not in ("dtype", "layout", "requires_grad", "memory_format", "pin_memory", "strides")
}
#: Whether the release records strides (TensorProperties.strides, 2.15 on): then version 2 is written.
RECORDS_STRIDES = "strides" in {f.name for f in dataclasses.fields(TensorProperties)}
#: The checkpoint-metadata version this release's writers write.
METADATA_VERSION = 2 if RECORDS_STRIDES else 1
_LAYOUT_OF = {name: layout for layout, name in _LAYOUTS.items()}
_FORMAT_OF = {name: fmt for fmt, name in _FORMATS.items()}


def _location(storage: dict[Any, Any], key: MetadataIndex, files: dict[str, int]) -> InertStorageInfo:
    info = storage.get(key)
    if info is None:
        raise ValueError(f"{key.fqn}: no storage location for {key}")
    if not isinstance(info, InertStorageInfo):
        raise ValueError(f"{key.fqn}: storage location {info!r} was not written by inert.torch (no record checksum)")
    transforms = getattr(info, "transform_descriptors", None)  # a field from 2.7 on
    if transforms:
        raise ValueError(f"{key.fqn}: stream transforms {transforms} are not supported")
    files.setdefault(info.relative_path, len(files))
    return info


def _storage_meta(meta: Any) -> dict[str, Any] | None:
    if meta is None:
        return None
    cid = meta.checkpoint_id
    return {
        "checkpoint_id": None if cid is None else os.fspath(cid),
        "save_id": meta.save_id,
        "load_id": meta.load_id,
        "modules": list(getattr(meta, "modules", []) or []),
    }


def dumps_metadata(metadata: Metadata) -> bytes:
    """Encode a DCP ``Metadata`` as a ``checkpoint-metadata`` file.

    >>> loads_metadata(dumps_metadata(Metadata(state_dict_metadata={}))).state_dict_metadata
    {}
    """
    storage = metadata.storage_data or {}
    files: dict[str, int] = {}
    tensors, values = [], []
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            info = _location(storage, MetadataIndex(fqn), files)
            values.append({"fqn": fqn, "file": files[info.relative_path], "byte_offset": info.offset,
                           "byte_length": info.length, "crc": info.crc32})
            continue
        props = md.properties
        offsets: list[int] = []
        sizes: list[int] = []
        locations = []
        for index, chunk in enumerate(md.chunks):
            offsets.extend(chunk.offsets)
            sizes.extend(chunk.sizes)
            locations.append(_location(storage, MetadataIndex(fqn, chunk.offsets, index), files))
        entry = {
            "fqn": fqn,
            "dtype": dtype_name(props.dtype, fqn),
            "layout": _LAYOUTS[props.layout],
            "memory_format": _FORMATS[props.memory_format],
            "requires_grad": bool(props.requires_grad),
            "pin_memory": bool(props.pin_memory),
            "size": list(md.size),
            "chunk_offsets": offsets,
            "chunk_sizes": sizes,
            "chunk_files": [files[info.relative_path] for info in locations],
            "chunk_byte_offsets": [info.offset for info in locations],
            "chunk_byte_lengths": [info.length for info in locations],
            "chunk_crcs": [info.crc32 for info in locations],
        }
        if RECORDS_STRIDES:
            strides = getattr(props, "strides", None)
            entry["strides_recorded"] = strides is not None
            entry["strides"] = list(strides or ())
        tensors.append(entry)
    return codec.encode({
        "dcp_version": getattr(metadata, "version", None),
        "storage_meta": _storage_meta(getattr(metadata, "storage_meta", None)),
        "planner_data": metadata.planner_data,
        "files": list(files),
        "tensors": tensors,
        "values": values,
    }, version=METADATA_VERSION)


def loads_metadata(data: bytes | bytearray | memoryview, *, max_size: int = codec.MAX_SIZE) -> Metadata:
    """Decode a ``checkpoint-metadata`` file into DCP's ``Metadata`` (an ``InertError`` if malformed)."""
    # Hundreds of thousands of small objects, none in a cycle: a cyclic collection pass
    # every few hundred allocations would traverse the whole heap (torch's included) each time.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _build(codec.decode(data, max_size=max_size))
    finally:
        if enabled:
            gc.enable()


def _grid(offsets: Any, sizes: Any, ndim: int, count: int) -> list[tuple[torch.Size, torch.Size]]:
    """Each chunk's (offsets, sizes) as ``torch.Size`` pairs (a 0-dim tensor's chunks: empty sizes)."""
    if not ndim:
        empty = torch.Size()
        return [(empty, empty)] * count
    size_of = torch.Size
    return [(size_of(offsets[at : at + ndim]), size_of(sizes[at : at + ndim])) for at in range(0, len(offsets), ndim)]


_Classes = tuple[type[ChunkStorageMetadata], type[MetadataIndex], type["InertStorageInfo"]]


def _python_chunks(classes: _Classes, fqn: str, grid: list[tuple[torch.Size, torch.Size]],
                   chunk_files: list[int], byte_offsets: list[int], lengths: list[int], crcs: list[int],
                   files: list[str], storage: dict[Any, Any]) -> list[ChunkStorageMetadata]:
    """One tensor entry's chunks, each one's ``MetadataIndex`` -> ``InertStorageInfo`` put in ``storage``
    (the accelerator's ``dcp_chunks`` makes the same objects, attribute for attribute)."""
    chunk_type, key_type, info_type = classes
    new = object.__new__
    set_frozen = object.__setattr__  # MetadataIndex is a frozen dataclass
    chunks: list[ChunkStorageMetadata] = []
    append = chunks.append
    for index, ((offset, chunk_size), file_id, byte_offset, length, crc) in enumerate(
        zip(grid, chunk_files, byte_offsets, lengths, crcs, strict=False)
    ):
        chunk = new(chunk_type)
        chunk.offsets = offset
        chunk.sizes = chunk_size
        append(chunk)
        key = new(key_type)
        set_frozen(key, "fqn", fqn)
        set_frozen(key, "offset", offset)
        set_frozen(key, "index", index)
        info = new(info_type)
        info.relative_path = files[file_id]
        info.offset = byte_offset
        info.length = length
        info.transform_descriptors = None
        info.crc32 = crc
        storage[key] = info
    return chunks


_CLASSES: _Classes = (ChunkStorageMetadata, MetadataIndex, InertStorageInfo)
#: The accelerator's builder of the chunk objects where it is bound, else the Python one.
_chunks = _accelerator.builder("dcp_chunks") or _python_chunks


def _build(doc: dict[str, Any]) -> Metadata:
    files = doc["files"]
    new = object.__new__
    state: dict[str, Any] = {}
    storage: dict[Any, Any] = {}
    # Sharded models repeat a few chunkings over thousands of entries: each distinct one's
    # torch.Size objects are made once and shared (immutable, so equal to fresh ones in every use).
    grids: dict[tuple[Any, ...], list[tuple[torch.Size, torch.Size]]] = {}
    properties: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    strides_of: dict[tuple[int, ...], tuple[int, ...]] = {}  # one tuple per distinct strides, shared
    for entry in doc["tensors"]:
        fqn = entry["fqn"]
        size = entry["size"]
        ndim = len(size)
        pkey = (entry["dtype"], entry["layout"], entry["requires_grad"], entry["memory_format"], entry["pin_memory"])
        props_fields = properties.get(pkey)
        if props_fields is None:
            props_fields = properties[pkey] = (torch_dtype(entry["dtype"].name, fqn), _LAYOUT_OF[entry["layout"].name],
                                         entry["requires_grad"], _FORMAT_OF[entry["memory_format"].name],
                                         entry["pin_memory"])
        props = new(TensorProperties)
        props.dtype, props.layout, props.requires_grad, props.memory_format, props.pin_memory = props_fields
        if RECORDS_STRIDES:
            strides = tuple(entry["strides"]) if entry.get("strides_recorded") else None
            props.strides = None if strides is None else strides_of.setdefault(strides, strides)  # type: ignore[attr-defined]
        for name, default in _PROPERTY_DEFAULTS.items():
            setattr(props, name, default())
        offsets, sizes, chunk_files = entry["chunk_offsets"], entry["chunk_sizes"], entry["chunk_files"]
        gkey = (ndim, len(chunk_files), tuple(offsets), tuple(sizes))
        grid = grids.get(gkey)
        if grid is None:
            grid = grids[gkey] = _grid(offsets, sizes, ndim, len(chunk_files))
        chunks = _chunks(_CLASSES, fqn, grid, chunk_files, entry["chunk_byte_offsets"], entry["chunk_byte_lengths"],
                         entry["chunk_crcs"], files, storage)
        md = new(TensorStorageMetadata)
        md.properties = props
        md.size = torch.Size(size)
        md.chunks = chunks
        state[fqn] = md
    for entry in doc["values"]:
        fqn = entry["fqn"]
        state[fqn] = BytesStorageMetadata()
        storage[MetadataIndex(fqn)] = InertStorageInfo(files[entry["file"]], entry["byte_offset"], entry["byte_length"],
                                                       crc32=entry["crc"])
    metadata = Metadata(state_dict_metadata=state, planner_data=doc["planner_data"], storage_data=storage)
    meta = doc["storage_meta"]
    if meta is not None and StorageMeta is not None:
        fields = {f.name for f in dataclasses.fields(StorageMeta)}
        metadata.storage_meta = StorageMeta(**{k: v for k, v in meta.items() if k in fields})
    if doc["dcp_version"] is not None and hasattr(metadata, "version"):
        metadata.version = doc["dcp_version"]
    return metadata
