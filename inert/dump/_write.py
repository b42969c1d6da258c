"""Writing a dump: each owner writes its own shard in parallel; the caller only assembles metadata."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from inert._codec_runtime import file_header
from inert._errors import WriteTypeError, WriteValueError
from inert._objstore import abandon, commit, filesystem, is_url, join, open_for_writing, remove_quietly, request
from inert.codecs import dump_manifest as manifest_codec
from inert.codecs import dump_shard as shard_codec
from inert.codecs._tables import CHECKPOINT_ALIGN as _ALIGN
from inert.torch._compat import dtype_name
from inert.torch._shard_file import tensor_bytes

from ._frames import Frame, frame_for
from ._gc import paused_gc
from ._manifest import MANIFEST_NAME
from ._model import DENSE, NESTED, DumpReport, FieldSpec, Row
from ._publish import discard, publish, staging_dir, start_writeback
from ._schema import infer_schema, schema_entries

__all__ = ["dump", "shard_name", "prepare", "DumpPlan", "encode_shard", "encode_manifest", "report"]

_U64_MAX = (1 << 64) - 1
_COUNT_SIZE = 4
#: A shard's file header and row count.
_HEAD_SIZE = shard_codec.HEADER_SIZE + _COUNT_SIZE
#: Parts below this size are joined before writing.
_SMALL = 4096
#: Bytes of records gathered before each write-out.
_FLUSH_BYTES = 1 << 20
#: Bytes written before their writeback is started (with ``sync``).
_WRITEBACK_BYTES = 32 << 20


def shard_name(owner: int) -> str:
    return f"shard-{owner:05d}.bin"


def _write_all(fd: int, parts: list[Any]) -> None:
    """Write ``parts`` in order: small ones joined into one buffer, large ones straight from their memory.

    One write() per large payload: measured here, writev() over many buffers
    runs at a fifth of the speed of plain write() calls into the page cache.
    """
    small: list[Any] = []
    for part in parts:
        if len(part) < _SMALL:
            small.append(part)
            continue
        if small:
            _write_view(fd, memoryview(b"".join(small)))
            small.clear()
        _write_view(fd, memoryview(part))
    if small:
        _write_view(fd, memoryview(b"".join(small)))


def _write_view(fd: int, view: memoryview) -> None:
    while view:  # write() may write less than asked
        view = view[os.write(fd, view) :]


def _row_value(row: Row, order: Sequence[tuple[int, str]], keep: list[Any]) -> dict[str, Any]:
    """The ``RowRecord`` of ``row``; ``keep`` holds the contiguous copies the byte views point into."""
    fields = []
    for _, name in order:
        value = row.fields[name]
        if isinstance(value, torch.Tensor):
            if value.layout != torch.strided:
                raise TypeError(f"row {row.key!r}: field {name!r}: {value.layout} tensors cannot be dumped; densify them first")
            # A row sliced from a batch is a view: only its own bytes are written.
            flat, data = tensor_bytes(value)
            keep.append(flat)
            body = {"kind": "TENSOR", "dtype": dtype_name(value.dtype, name), "shape": list(value.shape), "data": data}
        else:
            body = {"kind": "VALUE", "value": value}
        fields.append({"name": name, "body": body})
    return {"global_index": row.global_index, "fields": fields}


def _field_error(exc: WriteTypeError | WriteValueError, row: Row, order: list[tuple[int, str]]) -> Exception:
    """The write error of a record, its path spelled with the row's key and the field's name."""
    match = re.match(r"fields\[(\d+)\]\.body\.(?:value|data|shape|dtype)?(.*)", exc.field)
    path = f"row {row.key!r}" + (f".{order[int(match[1])][1]}{match[2]}" if match else f".{exc.field}")
    return type(exc)(exc.format, path, exc.reason)


def _field_set(order: list[tuple[int, str]]) -> tuple[int, ...]:
    return tuple(index for index, _ in order)


def _frames(orders: list[list[tuple[int, str]]], specs: list[FieldSpec]) -> dict[tuple[int, ...], Frame]:
    """The frame of each set of fields rows hold when all of them are dense (and the codec can encode them)."""
    frames: dict[tuple[int, ...], Frame] = {}
    tried: set[tuple[int, ...]] = set()
    for order in orders:
        fields = _field_set(order)
        if fields in tried or not all(specs[index].layout == DENSE for index in fields):
            continue
        tried.add(fields)
        layout = [(name, dtype_name(specs[index].dtype, name), specs[index].shape or ()) for index, name in order]
        try:
            frame = frame_for(layout)
        except (WriteTypeError, WriteValueError):
            continue  # e.g. a name too long: the codec names the fault on the row
        if frame is not None:
            frames[fields] = frame
    return frames


def _planned_offsets(lengths: list[int]) -> list[int]:
    """Where records of ``lengths`` go in a shard: each at the next multiple of 64 after the previous one."""
    offsets, pos = [], _HEAD_SIZE
    for length in lengths:
        pos += -pos % _ALIGN
        offsets.append(pos)
        pos += length
    return offsets


def _record_parts(
    row: Row, order: list[tuple[int, str]], frames: dict[tuple[int, ...], Frame], keep: list[Any]
) -> list[Any]:
    """The encoded record of ``row`` as buffers; ``keep`` holds the contiguous copies its payloads point into.

    Rows whose fields are all dense share the frame of their field set (one
    codec call per set); any other row, or one the frame refuses, is encoded
    by the codec, which also names what is wrong with it.
    """
    frame = frames.get(_field_set(order))
    if frame is not None:
        values = [row.fields[name] for _, name in order]
        if all(value.layout == torch.strided for value in values):
            payloads = []
            for value in values:
                flat, data = tensor_bytes(value)
                keep.append(flat)
                payloads.append(data)
            parts = frame.parts(row.global_index, payloads)
            if parts is not None:
                return parts
    try:
        return shard_codec.encode_record_parts(_row_value(row, order, keep))
    except (WriteTypeError, WriteValueError) as exc:
        raise _field_error(exc, row, order) from None


def encode_shard(
    rows: list[Row], orders: list[list[tuple[int, str]]], frames: dict[tuple[int, ...], Frame],
    emit: Callable[[list[Any], int], None],
) -> tuple[list[int], list[int]]:
    """Encode one owner's shard, handing its bytes in order to ``emit(parts, end)`` about every ``_FLUSH_BYTES``
    (``end``: the shard's length so far); return each record's offset and length."""
    offsets, lengths = [], []
    head = file_header(shard_codec.MAGIC, shard_codec.LATEST) + len(rows).to_bytes(_COUNT_SIZE, "little")
    assert len(head) == _HEAD_SIZE
    pending: list[Any] = [head]
    pos = flushed = len(head)
    keep: list[Any] = []
    for row, order in zip(rows, orders, strict=True):
        pad = -pos % _ALIGN
        if pad:
            pending.append(bytes(pad))
            pos += pad
        parts = _record_parts(row, order, frames, keep)
        length = sum(len(p) for p in parts)
        offsets.append(pos)
        lengths.append(length)
        pending.extend(parts)
        pos += length
        # Written soon after the CRC-32 read them: the payloads are still in the CPU cache for the copy.
        if pos - flushed >= _FLUSH_BYTES:
            emit(pending, pos)
            pending.clear()
            keep.clear()
            flushed = pos
    emit(pending, pos)
    return offsets, lengths


def _write_shard(
    path: str, rows: list[Row], orders: list[list[tuple[int, str]]], frames: dict[tuple[int, ...], Frame], sync: bool
) -> tuple[list[int], list[int]]:
    """Write one owner's shard file; return each record's offset and length."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    synced = _HEAD_SIZE

    def emit(parts: list[Any], end: int) -> None:
        nonlocal synced
        _write_all(fd, parts)
        if sync and end - synced >= _WRITEBACK_BYTES:
            start_writeback(fd, synced, end - synced)  # the disk works while the next records are encoded
            synced = end

    try:
        layout = encode_shard(rows, orders, frames, emit)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return layout


def _key_entry(row: Row, order: list[tuple[int, str]], specs: list[FieldSpec]) -> dict[str, Any]:
    nested = [list(row.fields[name].shape) for index, name in order if specs[index].layout == NESTED]
    return {
        "key": row.key,
        "global_index": row.global_index,
        "fields": [index for index, _ in order],
        "nested_shapes": nested,
        "tag": row.tag,
    }


def _write_file(path: str, parts: list[Any], sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        _write_all(fd, parts)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def encode_manifest(
    manifest: dict[str, Any], owner_ids: list[int], by_owner: dict[int, list[int]], layouts: list[tuple[list[int], list[int]]],
    name: Callable[[int], str] = shard_name,
) -> list[Any]:
    """The encoded manifest, its shard entries made from each owner's record offsets and lengths."""
    manifest["shards"] = [
        {"file": name(owner), "owner": owner, "rows": by_owner[owner], "offsets": offsets, "lengths": lengths}
        for owner, (offsets, lengths) in zip(owner_ids, layouts, strict=True)
    ]
    try:
        return manifest_codec.encode_parts(manifest)
    except (WriteTypeError, WriteValueError) as exc:
        raise type(exc)(exc.format, exc.field, exc.reason) from None


@dataclass
class DumpPlan:
    """What a dump writes, worked out from the rows before any byte is written (every caller mistake refused)."""

    rows: list[Row]
    specs: list[FieldSpec]
    orders: list[list[tuple[int, str]]]
    frames: dict[tuple[int, ...], Frame]
    by_owner: dict[int, list[int]]
    owner_ids: list[int]
    manifest: dict[str, Any]

    def key_entries(self) -> list[dict[str, Any]]:
        return [_key_entry(row, order, self.specs) for row, order in zip(self.rows, self.orders, strict=True)]

    def shard_rows(self, owner: int) -> tuple[list[Row], list[list[tuple[int, str]]]]:
        return [self.rows[i] for i in self.by_owner[owner]], [self.orders[i] for i in self.by_owner[owner]]


def prepare(rows: Iterable[Row], partition_id: str, owners: int, owner_of: Callable[[Row], int] | None) -> DumpPlan:
    """Check the rows, infer the schema, route rows to owners and start the manifest."""
    rows = list(rows)
    if owners < 1:
        raise ValueError(f"owners must be at least 1, got {owners}")
    keys: set[str] = set()
    for row in rows:
        if not isinstance(row.key, str):
            raise TypeError(f"row keys must be str, got {type(row.key).__name__}")
        if row.key in keys:
            raise ValueError(f"key {row.key!r} appears twice; a dump holds each key once")
        if row.global_index.__class__ is not int or not 0 <= row.global_index <= _U64_MAX:
            reason = f"{row.global_index!r} is not an int in 0..2**64-1"
            raise WriteValueError(shard_codec.FORMAT, f"row {row.key!r}.global_index", reason)
        keys.add(row.key)
    specs = infer_schema(rows)
    position = {spec.name: index for index, spec in enumerate(specs)}
    orders = [sorted((position[name], name) for name in row.fields) for row in rows]
    by_owner: dict[int, list[int]] = {}
    for index, row in enumerate(rows):
        owner = owner_of(row) if owner_of is not None else row.global_index % owners
        if not isinstance(owner, int) or owner < 0:
            raise ValueError(f"row {row.key!r}: owner {owner!r} is not a non-negative int")
        by_owner.setdefault(owner, []).append(index)
    manifest: dict[str, Any] = {"partition_id": partition_id, "fields": schema_entries(specs), "keys": [], "shards": []}
    return DumpPlan(rows, specs, orders, _frames(orders, specs), by_owner, sorted(by_owner), manifest)


@paused_gc()
def dump(
    rows: Iterable[Row],
    dump_dir: str | os.PathLike[str],
    *,
    partition_id: str = "",
    owners: int = 1,
    owner_of: Callable[[Row], int] | None = None,
    threads: int | None = None,
    sync: bool = True,
    storage_options: dict[str, Any] | None = None,
) -> DumpReport:
    """Dump ``rows`` into the new directory ``dump_dir``: one shard per owner, written in parallel.

    Each row goes to owner ``owner_of(row)`` (default: ``global_index % owners``).
    The dump is staged beside ``dump_dir`` and published by one rename once
    every file and directory is synced; an existing ``dump_dir`` is refused.
    A URL (``s3://bucket/rollout``, any fsspec filesystem, ``storage_options`` for it) is
    published without rename: the shards first, the ``MANIFEST`` last (see ``dump_to_url``).

    >>> import torch, tempfile, os
    >>> from inert.dump import Row, dump, load
    >>> rows = [Row(f"k{i}", i, {"ids": torch.arange(4) + i}, {"step": i}) for i in range(3)]
    >>> report = dump(rows, os.path.join(tempfile.mkdtemp(), "d"), owners=2)
    >>> (report.keys, report.shards)
    (3, 2)
    """
    dest = os.fspath(dump_dir)
    if is_url(dest):
        return dump_to_url(rows, dest, partition_id=partition_id, owners=owners, owner_of=owner_of, threads=threads,
                           storage_options=storage_options)
    plan = prepare(rows, partition_id, owners, owner_of)
    orders, frames, by_owner, owner_ids, manifest = plan.orders, plan.frames, plan.by_owner, plan.owner_ids, plan.manifest
    # Where every record goes is known before writing when every row has a frame: the manifest is then
    # encoded while the owners write.
    planned = None
    if all(_field_set(order) in frames for order in orders):
        planned = []
        for owner in owner_ids:
            lengths = [frames[_field_set(orders[i])].length for i in by_owner[owner]]
            planned.append((_planned_offsets(lengths), lengths))
    staging = staging_dir(dest)
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(len(owner_ids), threads or len(owner_ids)))) as pool:
            futures = [
                pool.submit(_write_shard, os.path.join(staging, shard_name(owner)), *plan.shard_rows(owner), frames, sync)
                for owner in owner_ids
            ]
            # The manifest's key entries are built while the owners write, and with a planned layout the
            # manifest is written too.
            manifest["keys"] = plan.key_entries()
            data = None
            if planned is not None:
                data = encode_manifest(manifest, owner_ids, by_owner, planned)
                _write_file(os.path.join(staging, MANIFEST_NAME), data, sync)
            results = [future.result() for future in futures]
        if planned is not None and results != planned:
            raise RuntimeError("inert.dump: the shards were not written where they were planned")  # a bug, not bad input
        if data is None:
            data = encode_manifest(manifest, owner_ids, by_owner, results)
            _write_file(os.path.join(staging, MANIFEST_NAME), data, sync)
        publish(staging, dest, sync)
    except BaseException:
        discard(staging)
        raise
    return report(dest, plan, results, data)


def report(dest: str, plan: DumpPlan, layouts: list[tuple[list[int], list[int]]], manifest: list[Any]) -> DumpReport:
    """What a dump wrote: its shards' record ``layouts`` and its encoded ``manifest``."""
    return DumpReport(
        path=dest,
        keys=len(plan.rows),
        rows_with_data=sum(1 for row in plan.rows if row.fields),
        shards=len(plan.owner_ids),
        bytes=sum((offsets[-1] + lengths[-1]) if offsets else _HEAD_SIZE for offsets, lengths in layouts)
        + sum(map(len, manifest)),
    )


# -- dumps at URLs: published without rename ---------------------------------------------------------------
#
# Dumps at fsspec URLs (S3 and other object stores, ``memory://``, ``file://``): published without rename.
#
# Object stores cannot rename a directory, so a dump at a URL is published by
# the order of its writes instead of a staging directory:
#
# * every attempt names its shards with a fresh token
#   (``shard-00000.<token>.bin``), so no attempt overwrites another's objects;
# * every shard is uploaded, whole, before the ``MANIFEST``;
# * the ``MANIFEST`` (which names the shards) is written last, in one request,
#   and only where none exists (``If-None-Match: *`` on S3; a link on a local
#   filesystem): an existing dump is refused, before and at the commit.
#
# A failed or killed dump thus leaves no ``MANIFEST``: loading says "not a
# dump (or an unfinished one)"; shards already uploaded are removed when the
# failure is seen.  Loading reads the ``MANIFEST`` in one bounded request and
# each batch's records with ranged requests into private memory, with every
# check of :class:`DumpReader`.

#: Bytes an upload stream buffers before it sends them as one part.
_UPLOAD_PART = 16 << 20


def _upload_shard(fs: Any, path: str, plan: DumpPlan, owner: int) -> tuple[list[int], list[int]]:
    """One owner's shard streamed to ``path``; each record's offset and length."""
    stream = open_for_writing(fs, path, _UPLOAD_PART)

    def emit(parts: list[Any], end: int) -> None:
        for part in parts:
            request("writing", fs, path, stream.write, part)

    try:
        layout = encode_shard(*plan.shard_rows(owner), plan.frames, emit)
        request("completing", fs, path, stream.close)
    except BaseException:
        abandon(stream)
        raise
    return layout


@paused_gc()
def dump_to_url(rows: Iterable[Row], url: str, *, partition_id: str = "", owners: int = 1,
                owner_of: Callable[[Row], int] | None = None, threads: int | None = None,
                storage_options: dict[str, Any] | None = None) -> DumpReport:
    """``inert.dump.dump`` at a URL: the shards under fresh names, then the ``MANIFEST`` (see the module)."""
    plan = prepare(rows, partition_id, owners, owner_of)
    fs, root = filesystem(url, storage_options)
    manifest_path = join(root, MANIFEST_NAME)
    if request("checking", fs, manifest_path, fs.exists, manifest_path):
        raise FileExistsError(f"{url}: a dump is already there (it has a {MANIFEST_NAME}); choose a new location")
    request("creating", fs, root, fs.makedirs, root, exist_ok=True)
    token = uuid.uuid4().hex[:16]

    def name(owner: int) -> str:
        return f"shard-{owner:05d}.{token}.bin"

    paths = [join(root, name(owner)) for owner in plan.owner_ids]
    try:
        workers = max(1, min(len(plan.owner_ids), threads or len(plan.owner_ids)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_upload_shard, fs, path, plan, owner)
                       for path, owner in zip(paths, plan.owner_ids, strict=True)]
            plan.manifest["keys"] = plan.key_entries()
            try:
                layouts = [future.result() for future in futures]
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        data = encode_manifest(plan.manifest, plan.owner_ids, plan.by_owner, layouts, name)
        commit(fs, manifest_path, b"".join(data), exclusive=True)
    except BaseException:
        remove_quietly(fs, paths)
        raise
    return report(url, plan, layouts, data)
