"""Reading a dump: validate the manifest and the shard files, then each owner reads only its rows.

Loading opens files read-only and takes no lock, so a dump on a read-only
filesystem (or one shared by many readers) loads as it is.  The manifest and
the shards are opened as ``inert._files`` says (regular files inside the
directory, no link followed).  Records are read into private memory, checked
(CRC-32 and every field) before any row is handed back: another process that
truncates or rewrites a shard meanwhile makes the load fail with an
``InertError``, never crash, and reaches no tensor afterwards.  ``mapped=True``
maps the shard files copy-on-write instead (tensors are views of the page
cache, no copy): faster, but a truncation by another process while the load or
a tensor reads the mapping kills the process with SIGBUS.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from inert._codec_runtime import read_file_header
from inert._errors import ForeignFormatError, InertError, InvalidValueError, TrailingBytesError, TruncatedError
from inert._files import open_in
from inert._objstore import StorageLimits, display, filesystem, is_url, join, object_sizes, read_bounded, read_range
from inert.codecs import dump_manifest as manifest_codec
from inert.codecs import dump_shard as shard_codec
from inert.torch._compat import dtype_name
from inert.torch._payload import crc32

from ._blocks import pread_crc32
from ._frames import CRC_SIZE, GLOBAL_INDEX_SIZE, Frame, frame_for
from ._gc import paused_gc
from ._manifest import FIRST_RECORD, FORMAT, MANIFEST_NAME, read_manifest
from ._model import DENSE, NESTED, FieldSpec, Row
from ._schema import check_record_field, record_dtype, specs_from_manifest

__all__ = ["KeyInfo", "DumpReader", "open_dump", "load", "LoadedDump"]

SHARD = shard_codec.FORMAT
_COUNT = 4


@dataclass(frozen=True)
class KeyInfo:
    """A row as the manifest describes it, before any payload is read."""

    index: int
    key: str
    global_index: int
    fields: tuple[str, ...]
    tag: Any


@dataclass
class _Shard:
    """An open shard file: its descriptor and, when ``mapped`` was asked for and mapping works, its mapping."""

    name: str
    fd: int
    mapping: memoryview | None = None


@dataclass(frozen=True)
class _Location:
    key: int
    shard: _Shard
    position: int
    offset: int
    length: int
    #: Where the next record of the file starts: the zero padding up to it is checked with this record.
    pad_end: int

    @property
    def where(self) -> str:
        return f"{self.shard.name}:rows[{self.position}]"


@dataclass
class LoadedDump:
    """Every row of a dump, grouped by the owner it was routed to."""

    partition_id: str
    schema: list[FieldSpec]
    rows_by_owner: list[list[Row]]

    @property
    def rows(self) -> list[Row]:
        return [row for rows in self.rows_by_owner for row in rows]


def _map_private(fd: int, size: int) -> memoryview | None:
    """A copy-on-write mapping of the whole file (writable tensors, a read-only file), or None where mmap is refused."""
    try:
        return memoryview(mmap.mmap(fd, size, access=mmap.ACCESS_COPY))
    except (OSError, ValueError):  # a filesystem without mmap: the reader falls back to reads
        return None


def _private_memory(size: int) -> memoryview:
    """Fresh memory for a batch's records, which its rows' tensors share (alive while one of them is).

    Anonymous, its pages faulted in at once (``MAP_POPULATE``: one call instead of a fault per 4 KiB page while
    ``pread`` fills it), in small pages: asking for huge pages made the kernel zero fresh 2 MiB pages at a third
    of the speed on the virtual machines measured (3x the load's CPU time, benchmarks/README.md).
    """
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    return memoryview(mmap.mmap(-1, size, flags=flags))


class DumpReader:
    """An open, validated dump: its manifest is checked and every shard file is present and whole.

    Use it as a context manager; :meth:`read` loads the rows.  With ``mapped``,
    shard files are mapped instead of read into private memory (see :func:`load`).
    """

    def __init__(self, dump_dir: str | os.PathLike[str], *, mapped: bool = False) -> None:
        self.path = os.fspath(dump_dir)
        manifest = self._read_manifest()
        self.partition_id: str = manifest["partition_id"]
        self.schema = specs_from_manifest(manifest["fields"])
        self._manifest = manifest
        self._mapped = mapped
        self.keys = [
            KeyInfo(i, k["key"], k["global_index"], tuple(self.schema[f].name for f in k["fields"]), k["tag"])
            for i, k in enumerate(manifest["keys"])
        ]
        self._shards: list[_Shard] = []
        self._locations: list[_Location | None] = [None] * len(self.keys)
        self._frames: dict[tuple[int, ...], Frame | None] = {}
        try:
            for shard in manifest["shards"]:
                self._open_shard(shard)
        except BaseException:
            self.close()
            raise

    # Where the bytes come from: a local directory here, an fsspec filesystem in ``RemoteDumpReader``.
    def _read_manifest(self) -> dict[str, Any]:
        return read_manifest(self.path)

    def _read_at(self, shard: _Shard, memory: memoryview, start: int, spans: list[int]) -> tuple[int, list[int]]:
        """Fill ``memory`` from the shard at ``start``: the bytes read and the CRC-32 of each span (one pass)."""
        return pread_crc32(shard.fd, memory, start, spans)

    def _open_shard(self, shard: dict[str, Any]) -> None:
        name = shard["file"]
        try:
            fd = open_in(self.path, name, SHARD)
        except FileNotFoundError:
            raise TruncatedError(SHARD, 0, name, f"shard file missing from {self.path}") from None
        opened = _Shard(name, fd)
        self._shards.append(opened)
        self._place_shard(opened, shard, os.pread(fd, FIRST_RECORD, 0), os.fstat(fd).st_size)

    def _place_shard(self, opened: _Shard, shard: dict[str, Any], head: bytes, size: int) -> None:
        """Check a shard's header, row count and size against the manifest, then note where its records are."""
        name = opened.name
        try:
            read_file_header(SHARD, head, shard_codec.MAGIC, shard_codec.VERSIONS)
        except InertError as exc:
            raise exc.within(name) from None
        header = len(shard_codec.MAGIC) + 2
        count = int.from_bytes(head[header : header + _COUNT], "little") if len(head) >= header + _COUNT else -1
        if any(head[header + _COUNT :]):  # the padding before the first record
            raise InvalidValueError(SHARD, header + _COUNT, f"{name}:pad", "padding bytes before the first record are not zero")
        if count != len(shard["rows"]):
            raise InvalidValueError(
                SHARD, header, f"{name}:rows", f"the file holds {count} rows, the manifest {len(shard['rows'])}"
            )
        end = shard["offsets"][-1] + shard["lengths"][-1] if shard["rows"] else header + _COUNT
        if size < end:
            raise TruncatedError(SHARD, size, name, f"the manifest's records end at {end}, the file at {size}")
        if size > end:
            raise TrailingBytesError(SHARD, end, name, f"{size - end} bytes after the last record")
        if shard["rows"] and self._mapped:
            opened.mapping = _map_private(opened.fd, size)
        ends = shard["offsets"][1:] + [end]
        for pos, (row, offset, length, pad_end) in enumerate(
            zip(shard["rows"], shard["offsets"], shard["lengths"], ends, strict=True)
        ):
            self._locations[row] = _Location(row, opened, pos, offset, length, pad_end)

    def close(self) -> None:
        """Close the files; a mapping stays alive while a tensor of it does (unmapped with the last one)."""
        for shard in self._shards:
            if shard.fd >= 0:  # -1: an object, nothing open
                os.close(shard.fd)
            shard.mapping = None
        self._shards.clear()

    def __enter__(self) -> DumpReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- rows -----------------------------------------------------------------------
    def _batch(self, locs: list[_Location]) -> list[Row]:
        """Check and build a batch of records: every byte of them and the padding after each.

        A mapped shard's records are slices of its mapping (no copy: the CRC-32
        reads the page cache, with the GIL released, so owners check in
        parallel).  Otherwise each run of neighbouring records is read into one
        fresh buffer for the batch, which its rows share, block by block with
        each record's CRC-32 taken as its bytes come in (``_blocks``).
        """
        runs: list[list[_Location]] = []
        for loc in locs:
            last = runs[-1][-1] if runs else None
            if last is not None and last.shard is loc.shard and loc.offset == last.pad_end:
                runs[-1].append(loc)
            else:
                runs.append([loc])
        # Each record is read with the padding after it, so every byte of a shard is checked by some owner.
        spans = [(run[0].offset, run[-1].pad_end) for run in runs]
        unmapped = sum(end - start for run, (start, end) in zip(runs, spans, strict=True) if run[0].shard.mapping is None)
        buffer = _private_memory(unmapped) if unmapped else None
        pos = 0
        rows = []
        for run, (start, end) in zip(runs, spans, strict=True):
            shard = run[0].shard
            crcs: list[int | None]
            if shard.mapping is not None:
                memory = shard.mapping[start:end]
                crcs = [None] * len(run)
            else:
                assert buffer is not None
                memory = buffer[pos : pos + end - start]
                pos += end - start
                # Each record's CRC-32 covers all of it but its last CRC_SIZE bytes (the stored CRC-32).
                cuts: list[int] = []
                for loc in run:
                    cuts += (loc.offset - start, loc.offset - start + max(0, loc.length - CRC_SIZE))
                got, read_crcs = self._read_at(shard, memory, start, cuts)
                if got != end - start:
                    short = next(loc for loc in run if loc.pad_end > start + got)
                    raise TruncatedError(SHARD, start + got, short.where, f"{short.length} bytes needed, the file ends first")
                crcs = list(read_crcs)
            for loc, crc in zip(run, crcs, strict=True):
                pad = memory[loc.offset + loc.length - start : loc.pad_end - start].tobytes()
                if pad.count(0) != len(pad):
                    where = f"{shard.name}:rows[{loc.position + 1}].pad"
                    raise InvalidValueError(SHARD, loc.offset + loc.length, where, "padding bytes are not zero")
                rows.append(self._row(loc, memory[loc.offset - start : loc.offset - start + loc.length], crc))
        return rows

    def _frame(self, fields: list[int], length: int) -> Frame | None:
        """The frame of records holding ``fields`` when they are all dense (built once per field set), else ``None``."""
        key = tuple(fields)
        if key in self._frames:
            return self._frames[key]
        specs = [self.schema[index] for index in fields]
        frame = None
        if all(spec.layout == DENSE for spec in specs):
            layout = [(spec.name, dtype_name(spec.dtype, spec.name), spec.shape or ()) for spec in specs]
            # A frame is only worth building (and only bounded by the bytes present) when its payloads fit the record.
            frame = frame_for(layout, length)
        self._frames[key] = frame
        return frame

    def _row(self, loc: _Location, view: memoryview, crc: int | None) -> Row:
        """Decode and check one record against the manifest; its tensors are views of ``view``.

        ``crc``: the CRC-32 of the record's bytes before its stored one, taken as they were read (None: not yet).
        """
        entry = self._manifest["keys"][loc.key]
        frame = self._frame(entry["fields"], loc.length)
        payloads = frame.payloads(view, crc) if frame is not None else None
        if payloads is not None and int.from_bytes(view[:GLOBAL_INDEX_SIZE], "little") == entry["global_index"]:
            # Byte for byte the record of its dense fields, CRC-32 checked: what the codec would decode.
            fields = {}
            for pos, (index, data) in enumerate(zip(entry["fields"], payloads, strict=True)):
                spec = self.schema[index]
                fields[spec.name] = _tensor(loc, pos, spec.dtype, spec.shape or (), data)
            return Row(entry["key"], entry["global_index"], fields, entry["tag"])
        try:
            record = shard_codec.decode_record(view)
        except InertError as exc:
            raise type(exc)(exc.format, loc.offset + exc.offset, f"{loc.where}.{exc.field}", exc.reason) from None
        if record["global_index"] != entry["global_index"]:
            raise InvalidValueError(
                SHARD, loc.offset, f"{loc.where}.global_index",
                f"record of global index {record['global_index']}, "
                f"the manifest's key {entry['key']!r} has {entry['global_index']}",
            )
        names = [self.schema[i].name for i in entry["fields"]]
        got_names = [f["name"] for f in record["fields"]]
        if got_names != names:
            raise InvalidValueError(SHARD, loc.offset, f"{loc.where}.fields", f"fields {got_names}, the manifest lists {names}")
        fields = {}
        nested = iter(entry["nested_shapes"])
        for pos, (index, field) in enumerate(zip(entry["fields"], record["fields"], strict=True)):
            spec = self.schema[index]
            body = field["body"]
            fault = check_record_field(spec, body, next(nested) if spec.layout == NESTED else None)
            if fault is not None:
                raise InvalidValueError(SHARD, loc.offset, f"{loc.where}.fields[{pos}].body.{fault[0]}", fault[1])
            if "data" in body:
                fields[spec.name] = _tensor(loc, pos, record_dtype(body["dtype"], loc.shard.name), body["shape"], body["data"])
            else:
                fields[spec.name] = body["value"]
        return Row(entry["key"], entry["global_index"], fields, entry["tag"])

    def read(
        self,
        *,
        owners: int = 1,
        route: Callable[[KeyInfo], int] | None = None,
        batch_rows: int = 128,
        threads: int | None = None,
        consume: Callable[[int, list[Row]], None] | None = None,
    ) -> LoadedDump:
        """Read every row, routed to ``owners`` owners that read in parallel, ``batch_rows`` rows at a time.

        ``route(key_info)`` picks each row's owner (default: its position in the
        dump modulo ``owners``).  With ``consume``, each owner hands each
        checked batch to ``consume(owner, rows)`` as soon as it is read and
        nothing is kept; otherwise the rows are returned, all checked first.
        """
        if owners < 1 or batch_rows < 1:
            raise ValueError("owners and batch_rows must be at least 1")
        plan: list[list[_Location]] = [[] for _ in range(owners)]
        for info in self.keys:
            owner = route(info) if route is not None else info.index % owners
            if not isinstance(owner, int) or not 0 <= owner < owners:
                raise ValueError(f"route() gave owner {owner!r} for key {info.key!r}; owners are 0..{owners - 1}")
            loc = self._locations[info.index]
            assert loc is not None  # check_manifest placed every key
            plan[owner].append(loc)
        for locs in plan:
            locs.sort(key=lambda loc: (loc.shard.name, loc.offset))  # sequential reads per file
        failed = threading.Event()

        def run(owner: int) -> list[Row]:
            kept: list[Row] = []
            locs = plan[owner]
            for start in range(0, len(locs), batch_rows):
                if failed.is_set():
                    break
                try:
                    batch = self._batch(locs[start : start + batch_rows])
                except BaseException:
                    failed.set()
                    raise
                if consume is not None:
                    consume(owner, batch)
                else:
                    kept.extend(batch)
            return kept

        workers = max(1, min(owners, threads or owners))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(run, owner) for owner in range(owners)]
            results = [future.result() for future in futures]
        return LoadedDump(self.partition_id, self.schema, results)


def _tensor(loc: _Location, pos: int, dtype: torch.dtype, shape: Sequence[int], data: memoryview) -> torch.Tensor:
    """The tensor of a checked payload: a zero-copy view of ``data`` (64-byte aligned), a bool one copied."""
    if not len(data):
        return torch.empty(shape, dtype=dtype)
    if dtype != torch.bool:
        tensor = torch.frombuffer(data, dtype=dtype)
    else:
        # Checked on a private copy, which no later change to the file reaches: any byte but 0 and 1 would be a
        # second spelling of true (and breaks torch's bool kernels).
        raw = torch.frombuffer(data, dtype=torch.uint8).clone()
        if bool((raw > 1).any()):
            where = f"{loc.where}.fields[{pos}].body.data"
            raise InvalidValueError(SHARD, loc.offset, where, "a bool tensor holds a byte other than 0 and 1")
        tensor = raw.view(torch.bool)
    return tensor if len(shape) == 1 else tensor.reshape(shape)


class RemoteDumpReader(DumpReader):
    """A dump at a URL, open and validated: records come by ranged requests into private memory.

    ``storage_limits``: the deadlines and listing bounds (default: ``StorageLimits.from_env()``).
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None,
                 storage_limits: StorageLimits | None = None) -> None:
        self.limits = storage_limits or StorageLimits.from_env()
        self.fs, self.root = filesystem(url, storage_options)
        self._sizes: dict[str, int] | None = None
        super().__init__(url, mapped=False)

    def _read_manifest(self) -> dict[str, Any]:
        path = join(self.root, MANIFEST_NAME)
        try:
            data = read_bounded(self.fs, path, manifest_codec.MAX_SIZE, self.limits)
        except FileNotFoundError:
            reason = f"{self.path} holds no {MANIFEST_NAME}: not a dump (or an unfinished one)"
            raise ForeignFormatError(FORMAT, 0, MANIFEST_NAME, reason) from None
        return manifest_codec.decode(memoryview(data), max_size=manifest_codec.MAX_SIZE)

    def _open_shard(self, shard: dict[str, Any]) -> None:
        name = shard["file"]
        if self._sizes is None:
            self._sizes = object_sizes(self.fs, self.root, self.limits)
        if name not in self._sizes:
            raise TruncatedError(SHARD, 0, name, f"shard object missing from {self.path}")
        opened = _Shard(name, -1)
        self._shards.append(opened)
        head = read_range(self.fs, join(self.root, name), 0, FIRST_RECORD, self.limits)
        self._place_shard(opened, shard, head, self._sizes[name])

    def _read_at(self, shard: _Shard, memory: memoryview, start: int, spans: list[int]) -> tuple[int, list[int]]:
        data = read_range(self.fs, join(self.root, shard.name), start, start + len(memory), self.limits)
        got = min(len(data), len(memory))
        memory[:got] = data[:got]
        # A network read is no cache-sized block: the CRC-32s are a second pass, beside the request's time.
        return got, [crc32(memory[a : min(b, got)]) if a < got else 0 for a, b in zip(spans[::2], spans[1::2], strict=True)]

    def __repr__(self) -> str:
        return f"RemoteDumpReader({display(self.fs, self.root)!r})"


def open_dump(dump_dir: str | os.PathLike[str], *, mapped: bool = False,
              storage_options: dict[str, Any] | None = None) -> DumpReader:
    """Open and validate a dump without reading any row (the manifest, the shard headers and sizes).

    A URL (``s3://bucket/rollout``, any fsspec filesystem, ``storage_options`` for it) is read with
    ranged requests into private memory (``mapped`` has no effect there).
    """
    if is_url(dump_dir):
        return RemoteDumpReader(os.fspath(dump_dir), storage_options)
    return DumpReader(dump_dir, mapped=mapped)


@paused_gc()
def load(
    dump_dir: str | os.PathLike[str],
    *,
    owners: int = 1,
    route: Callable[[KeyInfo], int] | None = None,
    batch_rows: int = 128,
    threads: int | None = None,
    consume: Callable[[int, list[Row]], None] | None = None,
    mapped: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> LoadedDump:
    """Load a dump onto ``owners`` owners (any number, whatever the dump was written with).

    Every problem with the dump is an :class:`~inert.InertError` naming the
    file, the byte offset and the field; with the default (no ``consume``)
    nothing is returned until every row has been read and checked.

    Records are read into private memory: a process that truncates or rewrites
    a shard file meanwhile makes the load raise an ``InertError`` (short file,
    CRC-32), and nothing done to the files afterwards reaches a tensor.
    ``mapped=True`` (an opt-in) makes tensors copy-on-write views of the shard
    files' pages instead (no copy; the mapping lives as long as a tensor of
    it): faster, but a process that truncates a shard file while the load or
    a tensor reads the mapping kills this process with SIGBUS, and one that
    rewrites it changes the tensors.  Use it for dumps no other process writes.

    >>> import torch, tempfile, os
    >>> from inert.dump import Row, dump, load
    >>> path = os.path.join(tempfile.mkdtemp(), "d")
    >>> _ = dump([Row("a", 7, {"x": torch.ones(2)}, {"t": 1})], path, owners=3)
    >>> loaded = load(path, owners=2)
    >>> [(r.key, r.fields["x"].tolist(), r.tag) for r in loaded.rows]
    [('a', [1.0, 1.0], {'t': 1})]
    """
    with open_dump(dump_dir, mapped=mapped, storage_options=storage_options) as reader:
        return reader.read(owners=owners, route=route, batch_rows=batch_rows, threads=threads, consume=consume)

