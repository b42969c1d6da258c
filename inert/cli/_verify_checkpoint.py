"""``inert verify`` of an Inert checkpoint: every record checked with the codecs, no torch imported.

The ``.metadata`` is decoded by the ``checkpoint-metadata`` codec and each record by the
``checkpoint-shard`` codec, with the checks ``inert.torch``'s readers make (``inert._records``: placement,
tiling, length bounds, CRC-32s, kind, dtype and shape, inflation of compressed bodies); on top of what a
load checks, every chunk of every tensor has its record, each data file is exactly its header, its records
and the zero padding between them (the record count in the header included), and the directory holds no
file the metadata does not name.  A small checkpoint is verified in the time Python starts: torch, whose
import costs seconds, holds nothing a check needs.
"""

from __future__ import annotations

import math
import re
import struct
from collections import defaultdict
from collections.abc import Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from inert import _records
from inert._checks import CHECKPOINT_ITEMSIZES
from inert._codec_runtime import read_file_header
from inert._errors import ChecksumError, InertError, InvalidValueError, StorageError, TrailingBytesError
from inert._payload import crc32
from inert._records import ALIGN, HEAD_MAX, LENGTH_CHECKED, NAMED_DAMAGE_MAX, SCRATCH, Chunk, ShapeMismatchError
from inert._source import Source
from inert.cli.support import USAGE, CommandError, Progress
from inert.codecs import checkpoint_metadata as metadata_codec
from inert.codecs import checkpoint_shard as shard
from inert.codecs._tables import CHECKPOINT_METADATA_NAME as METADATA_NAME

__all__ = ["check_checkpoint"]

_RANK_METADATA = re.compile(r"__\d+\.metadata\Z")
#: Tensor records longer than this are checked a block at a time (``_streamed``).
_STREAMED_MIN = 1 << 20
_CRC = struct.Struct("<I")


class _Problems(Protocol):
    """Where problems go (``inert.cli.verify``): ``add`` one, or ``guard`` a call whose InertError is one."""

    report: Any  # its counts: files, records, bytes; and problems

    def add(self, text: str) -> None: ...

    def guard(self, what: str, call: Any, file: str | None = None) -> Any: ...


@dataclass(frozen=True)
class _Record:
    """One record the metadata names: its file and byte range, its CRC-32, and what it holds."""

    name: str
    fqn: str
    offset: int
    length: int
    crc32: int
    dtype: str | None  # the format's dtype name; None: a value record
    shape: tuple[int, ...] = ()

    @property
    def nbytes(self) -> int:
        """The bytes of the tensor chunk (0 for a value)."""
        return 0 if self.dtype is None else math.prod(self.shape) * CHECKPOINT_ITEMSIZES[self.dtype]

    def tensor(self) -> tuple[str, tuple[int, ...], int] | None:
        return None if self.dtype is None else (self.dtype, self.shape, self.nbytes)


def check_checkpoint(source: Source, problems: _Problems, threads: int, show_progress: bool) -> None:
    """Every file of the checkpoint at ``source`` checked, each problem given to ``problems``."""
    _CheckpointCheck(source, problems, threads, show_progress).run()


class _CheckpointCheck:
    def __init__(self, source: Source, problems: _Problems, threads: int, show_progress: bool) -> None:
        self.source = source
        self.problems = problems
        self.report = problems.report
        self.threads = threads
        self.show_progress = show_progress
        self.versions: dict[str, int] = {}

    def run(self) -> None:
        names = self.source.names()
        metadata_names = [METADATA_NAME] if METADATA_NAME in names else sorted(n for n in names if _RANK_METADATA.match(n))
        expected = set(metadata_names)
        plans = []
        for name in metadata_names:
            planned = self.problems.guard("", partial(self._plan, name), file=name)
            if planned is not None:
                plans.append(planned)
                expected.update(planned)
        if len(plans) == len(metadata_names):  # without the metadata, which files belong is unknown
            for name in sorted(set(names) - expected):
                self.problems.add(f"{name}: stray file: the metadata names no such file")
        self.report.files = len(expected)
        self.report.bytes = sum(names.get(name) or 0 for name in expected)  # a link's target is not counted
        for per_file in plans:
            self._check_files(per_file)

    def _plan(self, name: str) -> dict[str, list[_Record]]:
        """The metadata, decoded by its codec, as the records it names, by file (the tiling of each tensor checked)."""
        data = self.source.read_whole(name, metadata_codec.MAX_SIZE, metadata_codec.FORMAT)
        doc = metadata_codec.decode(data, max_size=metadata_codec.MAX_SIZE)
        files = doc["files"]
        per_file: dict[str, list[_Record]] = defaultdict(list)
        for entry in doc["tensors"]:
            fqn, size, dtype = entry["fqn"], entry["size"], entry["dtype"].name
            ndim, count = len(size), len(entry["chunk_files"])
            offsets, sizes = entry["chunk_offsets"], entry["chunk_sizes"]
            chunks = [Chunk(offsets[i * ndim : (i + 1) * ndim], sizes[i * ndim : (i + 1) * ndim]) for i in range(count)]
            self.problems.guard("", partial(_records.check_tiling, fqn, size, chunks))
            for chunk, file_id, offset, length, crc in zip(chunks, entry["chunk_files"], entry["chunk_byte_offsets"],
                                                           entry["chunk_byte_lengths"], entry["chunk_crcs"], strict=True):
                per_file[files[file_id]].append(_Record(files[file_id], fqn, offset, length, crc, dtype, tuple(chunk.sizes)))
        for entry in doc["values"]:
            file = files[entry["file"]]
            per_file[file].append(_Record(file, entry["fqn"], entry["byte_offset"], entry["byte_length"], entry["crc"], None))
        return dict(per_file)

    def _check_files(self, per_file: dict[str, list[_Record]]) -> None:
        work: list[_Record] = []
        for name, records in per_file.items():
            if name not in self.source.names():
                self.problems.add(f"{name}: missing: the metadata has {len(records)} records in it")
                continue
            before = len(self.report.problems)
            self.problems.guard("", partial(_records.check_placement, {name: records}, self.source.file_size))
            self.problems.guard("", partial(self._check_layout, name, records))
            if len(self.report.problems) > before:
                continue  # a file laid out wrong: its records are not read at the offsets named
            work.extend(sorted(records, key=lambda r: r.offset))
        self.report.records += len(work)
        progress = Progress("verify", sum(r.length for r in work)) if self.show_progress else None
        results = self._results(work)
        try:
            for done, record in results:
                if progress is not None:
                    progress.advance(record.length)
                if isinstance(done, StorageError):
                    raise CommandError(str(done), USAGE)
                if isinstance(done, InertError):
                    self.problems.add(f"{done}")
                elif isinstance(done, BaseException):
                    self.problems.add(f"{record.name}: record at {record.offset}: {getattr(done, 'strerror', None) or done}")
        finally:
            results.close()  # its threads finish before the source's descriptors are closed
            if progress is not None:
                progress.close()

    def _results(self, work: list[_Record]) -> Generator[tuple[BaseException | None, _Record], None, None]:
        """Each record checked (None, or the error that refused it), in file order, ``threads`` at a time."""
        def one(record: _Record) -> BaseException | None:
            try:
                self._check_record(record)
            except (InertError, OSError) as exc:
                return exc
            return None

        window = self.threads + 1
        with ThreadPoolExecutor(self.threads) as pool:
            pending: list[tuple[Future[BaseException | None], _Record]] = []
            try:
                for record in work:
                    pending.append((pool.submit(one, record), record))
                    if len(pending) >= window:
                        future, done = pending.pop(0)
                        yield future.result(), done
                for future, done in pending:
                    yield future.result(), done
            finally:
                for future, _ in pending:
                    future.cancel()

    # -- one data file's layout -------------------------------------------------------------------------------

    def _check_layout(self, name: str, records: list[_Record]) -> None:
        """The file is its header, a count equal to the records the metadata names, and those records in order,
        each at the next multiple of 64, with zero padding between them and nothing after the last."""
        source, fmt = self.source, shard.FORMAT
        size = source.file_size(name)
        head = source.read(name, 0, shard.HEADER_SIZE + 4)
        try:
            self.versions[name] = read_file_header(fmt, head, shard.MAGIC, shard.VERSIONS)
        except InertError as exc:
            raise exc.in_file(name) from None
        count = int.from_bytes(head[shard.HEADER_SIZE :], "little") if len(head) == shard.HEADER_SIZE + 4 else -1
        if count != len(records):
            raise InvalidValueError(fmt, shard.HEADER_SIZE, f"{name}:records",
                                    f"the file holds {count} records, the metadata names {len(records)}")
        end = shard.HEADER_SIZE + 4
        for record in sorted(records, key=lambda r: r.offset):
            start = end + (-end % ALIGN)
            if record.offset != start:
                raise InvalidValueError(fmt, record.offset, name, f"record at {record.offset}, the previous one ends at {end}")
            if start > end and any(source.read(name, end, start)):
                raise InvalidValueError(fmt, end, f"{name}:pad", "padding bytes between records are not zero")
            end = record.offset + record.length
        if size > end:
            raise TrailingBytesError(fmt, end, name, f"{size - end} bytes after the last record")

    # -- one record -------------------------------------------------------------------------------------------
    # What a record costs to check is the reader's bound, wherever its bytes come from: its length checked
    # against what its kind can hold before a buffer is taken, a tensor's header before its payload, and a
    # compressed record inflated a block at a time against the length its chunk allows.

    def _check_record(self, record: _Record) -> None:
        _records.check_length(record.fqn, record.length, record.tensor())
        if record.dtype is not None and max(record.length, record.nbytes) > _STREAMED_MIN and self._streamed(record):
            return  # memory: a block, not the record
        self._whole(record)

    def _whole(self, record: _Record) -> None:
        """The record read whole, its CRC-32 checked, decoded, and what it holds checked against the metadata."""
        if record.dtype is not None and record.length > LENGTH_CHECKED:
            self._check_head(record)  # before a buffer of the declared length is taken
        view = memoryview(bytearray(record.length))
        self.source.read_into(record.name, record.offset, view)
        if len(view) >= 4:
            self._check_crc(crc32(view[:-4]), _CRC.unpack_from(view, len(view) - 4)[0], record)
        decoded = self._decode(view, record)
        self._check_stored_crc(decoded["crc32"], record)
        body = decoded["body"]
        if body["kind"] == shard.RecordKindV2.ZSTD:  # checked against the stored bytes above; now inflated
            inflation = self._inflation(body, record)
            inflated = memoryview(bytearray(inflation.length))
            inflation.into(inflated)
            inflation.end()
            body = _records.decode_inflated(inflated, record.name, record.fqn, record.offset)
        if record.dtype is None:
            _records.check_kind(body, shard.RecordKind.VALUE, record.fqn, record.offset)
        else:
            self._check_tensor(body, record)

    def _check_head(self, record: _Record) -> None:
        """A tensor record's header (its first bytes, at most ``HEAD_MAX``) decodes as a tensor of the dtype and
        shape the metadata gives its chunk, read before anything of the record's declared length is allocated.
        A damaged header is named as a damaged record when the record is at most ``NAMED_DAMAGE_MAX`` long.
        A bool record's header is checked when it is read (the codec checks its bytes one by one)."""
        head = None if record.dtype == "BOOL" else SCRATCH.view(record.length)
        if head is None:  # (or no address space for the view: the record is read whole, and checked then)
            return
        self.source.read_into(record.name, record.offset, head[: min(record.length, HEAD_MAX)])
        if head[0] == shard.RecordKind.VALUE:
            _records.check_kind({"kind": shard.RecordKind.VALUE}, shard.RecordKind.TENSOR, record.fqn, record.offset)
        if head[0] == shard.RecordKindV2.ZSTD:  # a compressed record: its inflated length is checked before inflating
            return
        try:  # the payload past the header is unread: only its length is decoded
            self._check_tensor(self._decode(head, record)["body"], record)
        except InertError:
            if 4 <= record.length <= NAMED_DAMAGE_MAX:
                self._check_crc(self._crc(record, 0, record.length - 4), self._stored_crc(record), record)
            raise

    def _streamed(self, record: _Record) -> bool:
        """A whole tensor record checked without holding it: its header first (decoded from a mapping of the
        record's length holding only its first bytes), then its payload a block at a time, checksummed.  A
        compressed record is inflated a block at a time (``_inflated``).  False: the record takes the whole
        path (a bool record, whose bytes the codec checks one by one)."""
        scratch = None if record.dtype == "BOOL" or record.length < 4 else SCRATCH.view(record.length)
        if scratch is None:  # (a record too short for its CRC-32: the whole path names what is wrong)
            return False
        self.source.read_into(record.name, record.offset, scratch[: min(record.length, HEAD_MAX)])
        if scratch[0] == shard.RecordKindV2.ZSTD and self.versions[record.name] >= 2:
            return self._inflated(record)
        if scratch[0] != shard.RecordKind.TENSOR:
            return False
        stored = self._stored_crc(record)
        try:
            body = self._decode(scratch, record)["body"]
            self._check_stored_crc(stored, record)
            self._check_tensor(body, record)
        except InertError:  # a damaged record is named as such, not by the field the damage hit
            self._check_crc(self._crc(record, 0, record.length - 4), stored, record)
            raise
        start = record.length - 4 - len(body["data"])
        crc = self._crc(record, start, len(body["data"]), crc32(scratch[:start]))
        self._check_crc(crc, stored, record)
        return True

    def _inflated(self, record: _Record) -> bool:
        """A compressed tensor record checked without holding what it inflates to: the stored record read (its
        length bounded by ``check_length``) and checksummed, then its frame inflated a block at a time into one
        reused buffer, within the inflated length the chunk allows, once the inflated header is the very bytes a
        writer makes for the metadata's dtype and shape (else the header alone says what is wrong; False: the
        whole path does)."""
        assert record.dtype is not None
        view = memoryview(bytearray(record.length))
        self.source.read_into(record.name, record.offset, view)
        self._check_crc(crc32(view[:-4]), _CRC.unpack_from(view, len(view) - 4)[0], record)
        decoded = self._decode(view, record)
        self._check_stored_crc(decoded["crc32"], record)
        inflation = self._inflation(decoded["body"], record)
        header = _records.tensor_header(record.dtype, record.shape, record.nbytes)
        head = bytearray(len(header))
        inflation.into(memoryview(head))
        if head != header:  # named from the inflated header alone, in a mapping of the inflated length
            scratch = SCRATCH.view(inflation.length)
            if scratch is not None:
                scratch[: len(head)] = head
                self._check_tensor(_records.decode_inflated(scratch, record.name, record.fqn, record.offset), record)
            return False
        block = _records.block()
        for at in range(len(header), inflation.length, len(block)):
            inflation.into(block[: min(len(block), inflation.length - at)])
        inflation.end()
        return True

    # -- the checks, named for the record -----------------------------------------------------------------------

    def _decode(self, view: memoryview, record: _Record) -> Any:
        return _records.decode_record(view, self.versions[record.name], record.name, record.fqn, record.offset)

    def _inflation(self, body: Any, record: _Record) -> Any:
        tensor = None if record.dtype is None else (record.shape, record.nbytes)
        return _records.inflation(body, record.name, record.fqn, record.offset, tensor)

    def _check_crc(self, crc: int, stored: int, record: _Record) -> None:
        _records.check_crc(crc, stored, record.name, record.fqn, record.offset, record.length)

    @staticmethod
    def _check_stored_crc(stored: int, record: _Record) -> None:
        if stored != record.crc32:
            raise ChecksumError("checkpoint-shard", record.offset + record.length - 4, record.fqn,
                                f"record CRC-32 {stored:#010x}, the metadata expects {record.crc32:#010x}")

    @staticmethod
    def _check_tensor(body: Any, record: _Record) -> None:
        """The record holds a tensor of the dtype and chunk shape the metadata gives."""
        _records.check_kind(body, shard.RecordKind.TENSOR, record.fqn, record.offset)
        dtype, shape = body["dtype"].name, tuple(body["shape"])
        if dtype != record.dtype or shape != record.shape:
            assert record.dtype is not None
            raise ShapeMismatchError(
                "checkpoint-shard", record.offset, record.fqn,
                f"record holds {shape} {_records.dtype_text(dtype)}, the read plan expects {record.shape} "
                f"{_records.dtype_text(record.dtype)}")

    def _crc(self, record: _Record, start: int, length: int, crc: int = 0) -> int:
        """The CRC-32 of ``length`` bytes of the record from ``start``, read a block at a time."""
        block = _records.block()
        for at in range(0, length, len(block)):
            part = block[: min(len(block), length - at)]
            crc = self.source.read_into(record.name, record.offset + start + at, part, crc) or 0
        return crc

    def _stored_crc(self, record: _Record) -> int:
        tail = memoryview(bytearray(4))
        self.source.read_into(record.name, record.offset + record.length - 4, tail)
        return int(_CRC.unpack(tail)[0])
