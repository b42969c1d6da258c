"""Vectors of ``shm-descriptor``: which shared-memory chunk holds a message, and where."""

from __future__ import annotations

import struct
from typing import Any

from ._vectorlib import I32_MAX, I32_MIN, U64_MAX, Corpus, Piece

#: Each version's layout; v2 adds the CRC-32s of the message and of the samples meta.
_LAYOUTS = {1: "<iiQQQ", 2: "<iiQQQII"}
#: The checksums the v2 vectors carry, unless a vector says otherwise (any value decodes: the bytes
#: they vouch for are in the chunk, which only the channel reads).
_CRCS = {"message_crc32": 0x1C291CA3, "meta_crc32": 0}


def _descriptor(
    version: int, worker_id: int = 0, shm_chunk_id: int = 0, shm_capacity: int = 4096, offset: int = 0, num_bytes: int = 0,
    **crcs: int,
) -> Piece:
    fields = {
        "worker_id": worker_id,
        "shm_chunk_id": shm_chunk_id,
        "shm_capacity": shm_capacity,
        "offset": offset,
        "num_bytes": num_bytes,
    }
    if version >= 2:
        fields.update({**_CRCS, **crcs})
    return Piece(struct.pack(_LAYOUTS[version], *fields.values()), fields)


def build() -> Corpus:
    """Version 1: DALI's 32 bytes."""
    return _build(1)


def build_v2() -> Corpus:
    """Version 2: the same, then the CRC-32s of the message and of the samples meta."""
    c = _build(2)
    c.accept("ChecksumsZero", "both CRC-32s 0 (a failed task's meta: no bytes)", _descriptor(2, message_crc32=0))
    c.accept(
        "ChecksumsMax",
        "both CRC-32s 2**32-1",
        _descriptor(2, message_crc32=0xFFFFFFFF, meta_crc32=0xFFFFFFFF),
    )
    c.reject(
        "VersionOneBytes",
        "the 32 bytes of a version 1 descriptor: the checksums are missing",
        _descriptor(1, 1, 3, 8192, 4096, 100).data,
        "truncated",
    )
    # The rules run after the descriptor's last field: its checksums are read (or found missing) first.
    for name, what, piece in (
        ("IdsAfterChecksums", "worker_id -1, the last 2 bytes of meta_crc32 missing", _descriptor(2, worker_id=-1)),
        ("InsideAfterChecksums", "a message past the capacity, the last 2 bytes of meta_crc32 missing",
         _descriptor(2, shm_capacity=4096, offset=97, num_bytes=4000)),
    ):
        c.reject(name, f"{what}: truncated, the rules run after the last field", piece.data[:-2], "truncated",
                 rule="grammar.truncated")
    rep = c.docs["Representative"]["expect"]["accept"]
    without = {k: v for k, v in rep.items() if k != "meta_crc32"}
    c.refuse_write("ChecksumMissing", "a descriptor without meta_crc32", without, "write-type")
    c.refuse_write("ChecksumNegative", "message_crc32 -1", {**rep, "message_crc32": -1}, "write-value")
    c.refuse_write("ChecksumAboveU32", "meta_crc32 2**32", {**rep, "meta_crc32": 1 << 32}, "write-value")
    return c


def _build(version: int) -> Corpus:
    c = Corpus("shm-descriptor", version)

    def descriptor(*args: int, **kwargs: int) -> Piece:
        return _descriptor(version, *args, **kwargs)

    rep = descriptor(1, 3, 8192, 4096, 100)
    size = len(rep.data)
    c.accept("Representative", "100 bytes at offset 4096 of chunk 3 of worker 1", rep)
    c.accept("Empty", "an empty message in an empty chunk", descriptor(shm_capacity=0))
    c.accept(
        "FillsChunk",
        "a message that ends exactly at the chunk's capacity",
        descriptor(shm_capacity=4096, offset=96, num_bytes=4000),
    )
    c.reject(
        "BeyondChunk",
        "a message that ends one byte past the chunk's capacity",
        descriptor(shm_capacity=4096, offset=97, num_bytes=4000).data,
        "invalid-value",
    )
    c.reject(
        "SumWraps",
        "offset + num_bytes is 2**64: must not wrap around",
        descriptor(shm_capacity=U64_MAX, offset=1, num_bytes=U64_MAX).data,
        "invalid-value",
    )
    c.reject(
        "SumWrapsFar",
        "offset and num_bytes both 2**64-1",
        descriptor(shm_capacity=U64_MAX, offset=U64_MAX, num_bytes=U64_MAX).data,
        "invalid-value",
    )
    c.accept("LargestCapacity", "capacity, offset at 2**64-1, an empty message", descriptor(shm_capacity=U64_MAX, offset=U64_MAX))
    c.accept("LargestMessage", "a 2**64-1 byte message at offset 0", descriptor(shm_capacity=U64_MAX, num_bytes=U64_MAX))
    for field in ("worker_id", "shm_chunk_id"):
        label = "".join(p.title() for p in field.split("_"))
        c.accept(f"{label}Zero", f"{field} 0", descriptor(**{field: 0}))
        c.accept(f"{label}Max", f"{field} at the largest int32", descriptor(**{field: I32_MAX}))
        c.reject(f"{label}Negative", f"{field} -1", descriptor(**{field: -1}).data, "invalid-value")
        c.reject(f"{label}Min", f"{field} at the smallest int32", descriptor(**{field: I32_MIN}).data, "invalid-value")
    c.accept("ChunkSizeMatches", "the declared capacity equals the chunk the reader maps", rep, {"chunk_size": 8192})
    c.reject(
        "ChunkSizeSmaller",
        "the declared capacity exceeds the chunk the reader maps",
        rep.data,
        "invalid-value",
        {"chunk_size": 4096},
    )
    c.reject(
        "ChunkSizeLarger",
        "the declared capacity is smaller than the chunk the reader maps",
        rep.data,
        "invalid-value",
        {"chunk_size": 16384},
    )
    # Two rules broken at once: the one declared first decides.
    for name, what, piece, params, rule in (
        ("IdsBeforeInside", "shm_chunk_id -1 and a message past the capacity",
         descriptor(shm_chunk_id=-1, shm_capacity=4096, offset=97, num_bytes=4000), {}, "shm-descriptor.ids"),
        ("InsideBeforeCapacity", "a message past the capacity, and a capacity other than chunk_size",
         descriptor(shm_capacity=4096, offset=97, num_bytes=4000), {"chunk_size": 8192}, "shm-descriptor.inside"),
        ("IdsBeforeCapacity", "worker_id -1 and a capacity other than chunk_size", descriptor(worker_id=-1),
         {"chunk_size": 8192}, "shm-descriptor.ids"),
    ):
        c.reject(name, f"{what}: the rule declared first decides", piece.data, "invalid-value", params, rule=rule)
    c.reject("TrailingByte", f"{size + 1} bytes: one after the descriptor", rep.data + b"\x00", "trailing-bytes")
    refusals: list[tuple[str, str, Any, str]] = [
        ("NotAnObject", "a list where a descriptor belongs", list(rep.value.values()), "write-type"),
        ("WorkerIdBool", "true as the worker id", {**rep.value, "worker_id": True}, "write-type"),
        ("WorkerIdString", "a string as the worker id", {**rep.value, "worker_id": "1"}, "write-type"),
        ("WorkerIdNegative", "worker id -1", {**rep.value, "worker_id": -1}, "write-value"),
        ("WorkerIdAboveInt32", "worker id 2**31", {**rep.value, "worker_id": I32_MAX + 1}, "write-value"),
        ("CapacityNegative", "capacity -1", {**rep.value, "shm_capacity": -1}, "write-value"),
        ("CapacityAboveU64", "capacity 2**64", {**rep.value, "shm_capacity": U64_MAX + 1}, "write-value"),
        ("BeyondChunk", "a message that ends past the capacity", {**rep.value, "num_bytes": 4097}, "write-value"),
    ]
    for name, what, value, kind in refusals:
        c.refuse_write(name, what, value, kind)
    c.malformed_values("Representative", "the representative descriptor", rep.value)
    c.truncations("Representative", "the representative descriptor", rep)
    return c


#: Every format version's corpus, as the generator writes it.
