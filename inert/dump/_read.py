"""Reading a dump: validate the manifest and the shard files, then each owner reads only its rows.

Loading opens files read-only and takes no lock, so a dump on a read-only
filesystem (or one shared by many readers) loads as it is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from inert._codec_runtime import read_file_header
from inert._errors import InertError, InvalidValueError, TrailingBytesError, TruncatedError
from inert.codecs import dump_shard as shard_codec

from ._manifest import FIRST_RECORD, open_read_only, read_manifest
from ._model import NESTED, FieldSpec, Row
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


@dataclass(frozen=True)
class _Location:
    key: int
    fd: int
    file: str
    position: int
    offset: int
    length: int
    #: Where the next record of the file starts: the zero padding up to it is checked with this record.
    pad_end: int

    @property
    def where(self) -> str:
        return f"{self.file}:rows[{self.position}]"


@dataclass
class LoadedDump:
    """Every row of a dump, grouped by the owner it was routed to."""

    partition_id: str
    schema: list[FieldSpec]
    rows_by_owner: list[list[Row]]

    @property
    def rows(self) -> list[Row]:
        return [row for rows in self.rows_by_owner for row in rows]


class DumpReader:
    """An open, validated dump: its manifest is checked and every shard file is present and whole.

    Use it as a context manager; :meth:`read` loads the rows.
    """

    def __init__(self, dump_dir: str | os.PathLike[str]) -> None:
        self.path = os.fspath(dump_dir)
        manifest = read_manifest(self.path)
        self.partition_id: str = manifest["partition_id"]
        self.schema = specs_from_manifest(manifest["fields"])
        self._manifest = manifest
        self.keys = [
            KeyInfo(i, k["key"], k["global_index"], tuple(self.schema[f].name for f in k["fields"]), k["tag"])
            for i, k in enumerate(manifest["keys"])
        ]
        self._fds: list[int] = []
        self._locations: list[_Location | None] = [None] * len(self.keys)
        try:
            for shard in manifest["shards"]:
                self._open_shard(shard)
        except BaseException:
            self.close()
            raise

    def _open_shard(self, shard: dict[str, Any]) -> None:
        name = shard["file"]
        try:
            fd = open_read_only(os.path.join(self.path, name))
        except FileNotFoundError:
            raise TruncatedError(SHARD, 0, name, f"shard file missing from {self.path}") from None
        self._fds.append(fd)
        size = os.fstat(fd).st_size
        head = os.pread(fd, FIRST_RECORD, 0)
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
        ends = shard["offsets"][1:] + [end]
        for pos, (row, offset, length, pad_end) in enumerate(
            zip(shard["rows"], shard["offsets"], shard["lengths"], ends, strict=True)
        ):
            self._locations[row] = _Location(row, fd, name, pos, offset, length, pad_end)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> DumpReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- rows -----------------------------------------------------------------------
    def _batch(self, locs: list[_Location]) -> list[Row]:
        """Read a batch of records into one fresh buffer, each run of neighbouring records with one read.

        One buffer instead of one per row: fewer allocations and reads.  (Huge
        pages for it were measured slower in a fresh process on this VM: its
        free 2 MiB blocks are the ones handed back to the host.)  The rows of a
        batch share it; ``.clone()`` a tensor to keep it on its own.
        """
        runs: list[list[_Location]] = []
        for loc in locs:
            last = runs[-1][-1] if runs else None
            if last is not None and last.fd == loc.fd and loc.offset == last.pad_end:
                runs[-1].append(loc)
            else:
                runs.append([loc])
        # Each record is read with the padding after it, so every byte of a shard is checked by some owner.
        spans = [(run[0].offset, run[-1].pad_end) for run in runs]
        buffer = torch.empty(sum(end - start for start, end in spans), dtype=torch.uint8)
        memory = memoryview(buffer.numpy())  # type: ignore[arg-type]
        views: list[memoryview] = []
        pos = 0
        for run, (start, end) in zip(runs, spans, strict=True):
            got = os.preadv(run[0].fd, [memory[pos : pos + end - start]], start)
            if got != end - start:
                short = next(loc for loc in run if loc.pad_end > start + got)
                where = f"{short.file}:rows[{short.position}]"
                raise TruncatedError(SHARD, start + got, where, f"{short.length} bytes needed, the file ends first")
            for loc in run:
                if any(memory[pos + loc.offset + loc.length - start : pos + loc.pad_end - start]):
                    where = f"{loc.file}:rows[{loc.position + 1}].pad"
                    raise InvalidValueError(SHARD, loc.offset + loc.length, where, "padding bytes are not zero")
            views.extend(memory[pos + loc.offset - start : pos + loc.offset - start + loc.length] for loc in run)
            pos += end - start
        return [self._row(loc, view) for loc, view in zip((loc for run in runs for loc in run), views, strict=True)]

    def _row(self, loc: _Location, view: memoryview) -> Row:
        """Decode and check one record against the manifest; its tensors are views of ``view``."""
        try:
            record = shard_codec.decode_record(view)
        except InertError as exc:
            raise type(exc)(exc.format, loc.offset + exc.offset, f"{loc.where}.{exc.field}", exc.reason) from None
        entry = self._manifest["keys"][loc.key]
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
        fields: dict[str, Any] = {}
        nested = iter(entry["nested_shapes"])
        for pos, (index, field) in enumerate(zip(entry["fields"], record["fields"], strict=True)):
            spec = self.schema[index]
            body = field["body"]
            fault = check_record_field(spec, body, next(nested) if spec.layout == NESTED else None)
            if fault is not None:
                raise InvalidValueError(SHARD, loc.offset, f"{loc.where}.fields[{pos}].body.{fault[0]}", fault[1])
            fields[spec.name] = self._tensor(loc, pos, body) if "data" in body else body["value"]
        return Row(entry["key"], entry["global_index"], fields, entry["tag"])

    @staticmethod
    def _tensor(loc: _Location, pos: int, body: dict[str, Any]) -> torch.Tensor:
        dtype = record_dtype(body["dtype"], loc.file)
        data = body["data"]  # a zero-copy view of the record's buffer, 64-byte aligned
        if not len(data):
            return torch.empty(body["shape"], dtype=dtype)
        if dtype == torch.bool and bool((torch.frombuffer(data, dtype=torch.uint8) > 1).any()):
            # Any byte but 0 and 1 would be a second spelling of true (and breaks torch's bool kernels).
            where = f"{loc.where}.fields[{pos}].body.data"
            raise InvalidValueError(SHARD, loc.offset, where, "a bool tensor holds a byte other than 0 and 1")
        tensor = torch.frombuffer(data, dtype=dtype)
        return tensor if len(body["shape"]) == 1 else tensor.reshape(body["shape"])

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
            locs.sort(key=lambda loc: (loc.fd, loc.offset))  # sequential reads per file
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


def open_dump(dump_dir: str | os.PathLike[str]) -> DumpReader:
    """Open and validate a dump without reading any row (the manifest, the shard headers and sizes)."""
    return DumpReader(dump_dir)


def load(
    dump_dir: str | os.PathLike[str],
    *,
    owners: int = 1,
    route: Callable[[KeyInfo], int] | None = None,
    batch_rows: int = 128,
    threads: int | None = None,
    consume: Callable[[int, list[Row]], None] | None = None,
) -> LoadedDump:
    """Load a dump onto ``owners`` owners (any number, whatever the dump was written with).

    Every problem with the dump is an :class:`~inert.InertError` naming the
    file, the byte offset and the field; with the default (no ``consume``)
    nothing is returned until every row has been read and checked.

    >>> import torch, tempfile, os
    >>> from inert.dump import Row, dump, load
    >>> path = os.path.join(tempfile.mkdtemp(), "d")
    >>> _ = dump([Row("a", 7, {"x": torch.ones(2)}, {"t": 1})], path, owners=3)
    >>> loaded = load(path, owners=2)
    >>> [(r.key, r.fields["x"].tolist(), r.tag) for r in loaded.rows]
    [('a', [1.0, 1.0], {'t': 1})]
    """
    with open_dump(dump_dir) as reader:
        return reader.read(owners=owners, route=route, batch_rows=batch_rows, threads=threads, consume=consume)

