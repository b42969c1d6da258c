"""Vectors of ``shm-descriptor``: which shared-memory chunk holds a message, and where."""

from __future__ import annotations

import struct
from typing import Any

from ._vectorlib import I32_MAX, I32_MIN, U64_MAX, Corpus, Piece


def descriptor(worker_id: int = 0, shm_chunk_id: int = 0, shm_capacity: int = 4096, offset: int = 0, num_bytes: int = 0) -> Piece:
    fields = {
        "worker_id": worker_id,
        "shm_chunk_id": shm_chunk_id,
        "shm_capacity": shm_capacity,
        "offset": offset,
        "num_bytes": num_bytes,
    }
    return Piece(struct.pack("<iiQQQ", *fields.values()), fields)


def build() -> Corpus:
    c = Corpus("shm-descriptor", 1)
    rep = descriptor(1, 3, 8192, 4096, 100)
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
    c.reject("TrailingByte", "33 bytes: one after the descriptor", rep.data + b"\x00", "trailing-bytes")
    refusals: list[tuple[str, str, Any, str]] = [
        ("NotAnObject", "a list where a descriptor belongs", [1, 3, 8192, 4096, 100], "write-type"),
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
