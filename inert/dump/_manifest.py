"""The manifest of a dump: reading it (bounded, read-only) and checking what the grammar cannot.

The grammar checks each field on its own; :func:`check_manifest` checks how
they refer to each other, with the signature of a grammar ``Validate`` rule
(``(value, ctx) -> (field, reason) | None``) so it can move into the spec.
"""

from __future__ import annotations

import os
import re
from typing import Any

from inert._errors import ForeignFormatError, InvalidValueError
from inert.codecs import dump_manifest as manifest_codec

__all__ = ["MANIFEST_NAME", "FORMAT", "check_manifest", "read_manifest", "open_read_only", "FIRST_RECORD"]

MANIFEST_NAME = "MANIFEST"
FORMAT = manifest_codec.FORMAT
#: Offset of the first record in a shard: the file header and the row count, padded to the record alignment.
FIRST_RECORD = 64
#: The smallest row record: the global index, a field count of 0 and the CRC-32.
MIN_RECORD = 16

# A plain file name inside the dump directory: no separator, no '..', not hidden.
_FILE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}\Z")


def open_read_only(path: str) -> int:
    """A read-only descriptor: loading never needs write access or a lock."""
    return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def _check_fields(fields: list[dict[str, Any]]) -> tuple[str, str] | None:
    names: set[str] = set()
    for index, entry in enumerate(fields):
        if entry["name"] in names:
            return f"fields[{index}].name", f"{entry['name']!r} appears twice"
        names.add(entry["name"])
    return None


def _check_keys(keys: list[dict[str, Any]], fields: list[dict[str, Any]]) -> tuple[str, str] | None:
    nested = [entry["layout"]["kind"] == manifest_codec.Layout.NESTED for entry in fields]
    ndims = [entry["layout"].get("ndim") for entry in fields]
    seen: set[str] = set()
    for index, entry in enumerate(keys):
        key = entry["key"]
        if key in seen:
            return f"keys[{index}].key", f"{key!r} appears twice"
        seen.add(key)
        previous = -1
        shapes = 0
        for pos, field_index in enumerate(entry["fields"]):
            if field_index <= previous or field_index >= len(fields):
                return f"keys[{index}].fields[{pos}]", f"field index {field_index} is not ascending below {len(fields)}"
            previous = field_index
            if nested[field_index]:
                if shapes >= len(entry["nested_shapes"]):
                    return f"keys[{index}].nested_shapes", "fewer shapes than nested fields"
                if len(entry["nested_shapes"][shapes]) != ndims[field_index]:
                    dims = len(entry["nested_shapes"][shapes])
                    return f"keys[{index}].nested_shapes[{shapes}]", f"{dims} dims, the field has {ndims[field_index]}"
                shapes += 1
        if shapes != len(entry["nested_shapes"]):
            return f"keys[{index}].nested_shapes", f"{len(entry['nested_shapes'])} shapes for {shapes} nested fields"
    return None


def _check_shards(shards: list[dict[str, Any]], key_count: int) -> tuple[str, str] | None:
    placed = bytearray(key_count)
    files: set[str] = set()
    for index, shard in enumerate(shards):
        name = shard["file"]
        if not _FILE_NAME_RE.match(name) or name == MANIFEST_NAME:
            return f"shards[{index}].file", f"{name!r} is not a plain shard file name"
        if name in files:
            return f"shards[{index}].file", f"{name!r} appears twice"
        files.add(name)
        rows, offsets, lengths = shard["rows"], shard["offsets"], shard["lengths"]
        if not len(rows) == len(offsets) == len(lengths):
            return f"shards[{index}]", f"{len(rows)} rows, {len(offsets)} offsets and {len(lengths)} lengths"
        end = FIRST_RECORD
        for pos, (row, offset, length) in enumerate(zip(rows, offsets, lengths, strict=True)):
            if row >= key_count:
                return f"shards[{index}].rows[{pos}]", f"row {row} is not below the {key_count} keys"
            if placed[row]:
                return f"shards[{index}].rows[{pos}]", f"row {row} is stored twice"
            placed[row] = 1
            # Records follow each other in file order, each at the next multiple of 64.
            if offset != end + (-end % 64):
                return f"shards[{index}].offsets[{pos}]", f"record at {offset}, the previous one ends at {end}"
            if length < MIN_RECORD:
                return f"shards[{index}].lengths[{pos}]", f"record of {length} bytes is shorter than any record"
            end = offset + length
    if key_count and not all(placed):
        return "shards", f"row {placed.index(0)} is in no shard"
    return None


def check_manifest(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """Unique field names, keys and files; field indexes and nested shapes agree with the schema;
    every key in exactly one shard; records in file order without overlap."""
    return (
        _check_fields(value["fields"])
        or _check_keys(value["keys"], value["fields"])
        or _check_shards(value["shards"], len(value["keys"]))
    )


def read_manifest(dump_dir: str, *, max_size: int = manifest_codec.MAX_SIZE) -> dict[str, Any]:
    """The decoded, cross-checked manifest of ``dump_dir``; an ``InertError`` for anything wrong with it."""
    path = os.path.join(dump_dir, MANIFEST_NAME)
    if not os.path.isdir(dump_dir):
        raise FileNotFoundError(f"{dump_dir}: no such dump directory")
    try:
        fd = open_read_only(path)
    except FileNotFoundError:
        reason = f"{dump_dir} holds no {MANIFEST_NAME}: not a dump (or an unfinished one)"
        raise ForeignFormatError(FORMAT, 0, MANIFEST_NAME, reason) from None
    try:
        size = os.fstat(fd).st_size
        limit = min(size, max_size + 1)  # one byte over the limit is enough for decode to refuse it
        data = bytearray(limit)
        got = os.preadv(fd, [data], 0) if limit else 0
    finally:
        os.close(fd)
    value = manifest_codec.decode(memoryview(data)[:got], max_size=max_size)
    fault = check_manifest(value, {})
    if fault is not None:
        raise InvalidValueError(FORMAT, -1, fault[0], fault[1])
    return value
