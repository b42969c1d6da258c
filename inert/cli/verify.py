"""``inert verify PATH``: every byte of a checkpoint or dump directory is checked, with the readers' own checks.

Checkpoint: the ``.metadata`` is decoded by ``inert.torch.FileSystemReader``
(``read_metadata``); every record is read, decoded and checked by that
reader's own record path (structure, CRC-32 against the record and against
the metadata, kind, dtype and shape against the chunk), and the record
placement by its placement check.  On top of what a load checks, verify
makes sure nothing is left unchecked: every chunk of every tensor has its
record and the chunks cover the tensor, each data file is exactly its
header, its records and the zero padding between them (the record count in
the header included), and the directory holds no file the metadata does not
name.

Dump: the manifest is read and cross-checked by ``inert.dump``, the shards
opened by ``DumpReader`` (headers, row counts, sizes) and every row read by
it (each record, its CRC-32 and the padding after it); plus no stray and no
missing files.

Local directories and object stores (``s3://bucket/ckpt``, any fsspec URL) are checked by this one
engine, through ``inert._source`` (listing, sizes, ranged reads into buffers, with the object store's
deadlines and bounds): the same checks, the same verdicts.  The filesystem's settings come from its
usual environment (for S3: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL_S3``).
A failed request is an I/O error (exit 2), not a problem found.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from inert._errors import InertError, StorageError
from inert._source import Source, open_source
from inert.cli.inspect import _RANK_METADATA, MANIFEST_NAME, METADATA_NAME, source_kind
from inert.cli.support import INVALID, OK, USAGE, CommandError, Progress, fail

__all__ = ["add_parser", "run", "verify_path", "Report"]

#: Tensor records longer than this are checked a block at a time (``_CheckpointCheck._streamed``).
_STREAMED_MIN = 1 << 20

HELP = """\
Check a whole Inert checkpoint or dump directory (or one Inert file):
every file decodes, every checksum matches, every chunk of the metadata is
covered by exactly one record, no file is missing and none is stray.

Prints one verdict line: `inert: verify: OK: N files, M records, B bytes`
(stdout) or `inert: verify: FAILED: <first problem>` (stderr); with --all,
every problem found, one per line, before the verdict.  A progress bar is
drawn on stderr when it is a terminal, never when it is piped.

exit codes: 0 verified; 1 a problem was found; 2 usage or I/O error.
"""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "verify", help="check every byte of a checkpoint or dump directory",
        description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="PATH", help="a checkpoint or dump directory, or one Inert file")
    parser.add_argument("--all", action="store_true", help="report every problem, not only the first")
    parser.add_argument("--threads", type=int, default=2, help="records checked in parallel (default 2)")
    return parser


@dataclass
class Report:
    """What verification found: counts of what was checked, and the problems (empty when whole)."""

    kind: str
    files: int = 0
    records: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def verdict(self) -> str:
        if self.ok:
            return f"OK: {self.files} files, {self.records} records, {self.bytes} bytes"
        extra = len(self.problems) - 1
        more = f" (and {extra} more problem{'s' if extra > 1 else ''})" if extra else ""
        return f"FAILED: {self.problems[0]}{more}"


class _Stop(Exception):
    """The first problem, when only the first is wanted."""


class _Problems:
    def __init__(self, report: Report, keep_going: bool) -> None:
        self.report = report
        self.keep_going = keep_going

    def add(self, text: str) -> None:
        self.report.problems.append(" ".join(text.split()))
        if not self.keep_going:
            raise _Stop

    def guard(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()``, its InertError (or unreadable-file error) recorded as a problem prefixed with ``what``."""
        try:
            return call()
        except InertError as exc:
            self.add(f"{what}{exc}")
        except StorageError as exc:  # no bytes to judge: an I/O error
            raise CommandError(str(exc), USAGE) from None
        except (OSError, RuntimeError) as exc:  # RuntimeError: a dtype this torch lacks (inert.torch._compat)
            self.add(f"{what}{getattr(exc, 'strerror', None) or exc}")
        return None


def run(args: argparse.Namespace) -> int:
    if args.threads < 1:
        return fail("verify", CommandError("--threads must be at least 1"))
    try:
        report = verify_path(args.path, keep_going=args.all, threads=args.threads)
    except CommandError as exc:
        return fail("verify", exc)
    if report.ok:
        print(f"inert: verify: {report.verdict()}")
        return OK
    if args.all:
        for problem in report.problems:
            print(f"inert: verify: {problem}", file=sys.stderr)
    print(f"inert: verify: {report.verdict()}", file=sys.stderr)
    return INVALID


def verify_path(path: str, *, keep_going: bool = False, threads: int = 2, show_progress: bool = True) -> Report:
    """Verify a checkpoint or dump directory (local or at a URL), or one local Inert file; problems are collected
    in the report."""
    with open_source(path) as source:
        if not source.remote:
            if not os.path.exists(path):
                raise CommandError(f"{path}: no such file or directory", USAGE)
            if not os.path.isdir(path):
                if not os.path.isfile(path):  # a FIFO or a device could be endless
                    raise CommandError(f"{path}: not a regular file or a directory", USAGE)
                return _verify_file(path)
        try:
            return _verify_source(source, keep_going, threads, show_progress)
        except StorageError as exc:  # a failed request: an I/O error, as an unreadable local directory is
            raise CommandError(str(exc), USAGE) from None


def _verify_source(source: Source, keep_going: bool, threads: int, show_progress: bool) -> Report:
    kind = source_kind(source)
    path = source.location
    report = Report(kind)
    problems = _Problems(report, keep_going)
    try:
        if kind == "inert-checkpoint":
            _CheckpointCheck(source, problems, threads, show_progress).run()
        elif kind == "dump":
            _check_dump(source, problems, show_progress)
        elif kind == "legacy-dcp-checkpoint":
            problems.add(f"{path} is a legacy pickle checkpoint (torch.distributed.checkpoint's own format), "
                         "not Inert: `inert migrate` converts it" + (" (from a local copy)" if source.remote else ""))
        else:
            problems.add(f"{path} is not a checkpoint or dump directory (no .metadata, no MANIFEST)")
    except _Stop:
        pass
    return report


def _verify_file(path: str) -> Report:
    from inert.cli.inspect import _magic_codecs
    from inert.cli.support import file_bytes, read_head

    report = Report("file", files=1)
    try:
        head = read_head(path)
        module = next((m for magic, m in _magic_codecs().items() if head.startswith(magic)), None)
        if module is None:
            from inert._checks import describe_foreign

            report.bytes = os.path.getsize(path)
            report.problems.append(f"{path}: not an Inert file: {describe_foreign(head)}")
            return report
        view = file_bytes(path, format=module.FORMAT, limit=module.MAX_SIZE)
        report.bytes = len(view)
        doc = module.decode(view)
    except InertError as exc:
        report.problems.append(f"{path}: {exc}")
        return report
    except OSError as exc:
        raise CommandError(f"{path}: {exc.strerror}", USAGE) from None
    report.records = len(doc.get("records", doc.get("rows", [None])))
    return report


def _stray(source: Source, expected: set[str], problems: _Problems) -> None:
    for name in sorted(set(source.names()) - expected):
        problems.add(f"{source.where(name)}: stray file: the metadata names no such file")


def _present_bytes(source: Source, names: set[str]) -> int:
    """The bytes of those of ``names`` that are regular files (a link's target is not counted)."""
    sizes = source.names()
    return sum(sizes.get(name) or 0 for name in names)


# -- checkpoints ----------------------------------------------------------------------------------------------

class _CheckpointCheck:
    def __init__(self, source: Source, problems: _Problems, threads: int, show_progress: bool) -> None:
        self.source = source
        self.problems = problems
        self.report = problems.report
        self.threads = threads
        self.show_progress = show_progress

    def run(self) -> None:
        names = self.source.names()
        metadata_names = [METADATA_NAME] if METADATA_NAME in names else sorted(n for n in names if _RANK_METADATA.match(n))
        expected = set(metadata_names)
        plans = []
        for name in metadata_names:
            planned = self.problems.guard(f"{self.source.where(name)}: ", partial(self._plan, name))
            if planned is not None:
                plans.append(planned)
                expected.update(planned[1])
        if len(plans) == len(metadata_names):  # without the metadata, which files belong is unknown
            _stray(self.source, expected, self.problems)
        self.report.files = len(expected)
        self.report.bytes = _present_bytes(self.source, expected)
        for reader, per_file in plans:
            self._check_files(reader, per_file)

    def _plan(self, name: str) -> tuple[Any, dict[str, list[tuple[Any, Any]]]]:
        """The metadata, decoded by inert.torch's reader, and one read item per record, by file."""
        from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

        reader = self.source.checkpoint_reader(thread_count=1)
        rank = None if name == METADATA_NAME else int(name[2:].split(".")[0])
        metadata = reader.read_metadata() if rank is None else reader.read_metadata(rank=rank)
        reader.set_up_storage_reader(metadata, True)
        storage = metadata.storage_data
        per_file: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
        for fqn, md in metadata.state_dict_metadata.items():
            if isinstance(md, BytesStorageMetadata):
                key = MetadataIndex(fqn)
                per_file[storage[key].relative_path].append((_read_item(key, None), storage[key]))
                continue
            self._check_coverage(fqn, md)
            for index, chunk in enumerate(md.chunks):
                key = MetadataIndex(fqn, chunk.offsets, index)
                info = storage.get(key)
                if info is None:
                    self.problems.add(f"{name}: {fqn}: chunk {index} at {tuple(chunk.offsets)} has no record")
                    continue
                per_file[info.relative_path].append((_read_item(key, chunk.sizes), info))
        return reader, dict(per_file)

    def _check_coverage(self, fqn: str, md: Any) -> None:
        """The chunks of a tensor tile it: the one bounded tiling check every reader makes
        (``inert.torch._tensors.check_tiling``: linear in the grid the chunks draw, capped at
        ``MAX_TILING_CELLS``), its refusal recorded as a problem."""
        from inert.torch._tensors import check_tiling

        self.problems.guard("", partial(check_tiling, fqn, md.size, md.chunks))

    def _check_files(self, reader: Any, per_file: dict[str, list[tuple[Any, Any]]]) -> None:
        from inert.torch._reader import _Buffers

        work: list[tuple[str, Any, Any]] = []
        for name, pairs in per_file.items():
            if name not in self.source.names():
                self.problems.add(f"{self.source.where(name)}: missing: the metadata has {len(pairs)} records in it")
                continue
            before = len(self.report.problems)
            infos = [info for _, info in pairs]
            self.problems.guard("", partial(reader._check_placement, {name: infos}))
            self.problems.guard("", partial(_check_shard_layout, self.source, name, infos))
            if len(self.report.problems) > before:
                continue  # a file laid out wrong: its records are not read at the offsets named
            work.extend((name, item, info) for item, info in sorted(pairs, key=lambda p: p[1].offset))
        self.report.records += len(work)
        total = sum(info.length for _, _, info in work)
        progress = Progress("verify", total) if self.show_progress else None
        buffers = _Buffers(keep=self.threads + 1)  # one per record in flight: memory is a few records
        records = self._records(reader, work, buffers)
        try:
            for done, info in records:
                if progress is not None:
                    progress.advance(info.length)
                if isinstance(done, StorageError):
                    raise CommandError(str(done), USAGE)
                if isinstance(done, InertError):
                    self.problems.add(f"{done}")
                elif isinstance(done, BaseException):
                    self.problems.add(f"{info.relative_path}: record at {info.offset}: {done}")
        finally:
            records.close()  # its threads finish before the source's descriptors are closed
            if progress is not None:
                progress.close()

    def _records(self, reader: Any, work: list[Any], buffers: Any) -> Generator[tuple[Any, Any], None, None]:
        from torch.distributed.checkpoint.planner import LoadItemType

        def one(name: str, item: Any, info: Any) -> Any:
            try:
                reader.file_version(name)  # records are decoded by their file's version
                # A compressed record is short for the bytes it inflates to: the chunk's size decides too.
                if item.type == LoadItemType.TENSOR and max(info.length, reader.chunk_bytes(item, info)) > _STREAMED_MIN:
                    reader._check_length(item, info)
                    if self._streamed(reader, name, item, info):  # memory: a block, not the record
                        return None
                buffer = self._whole(reader, name, item, info, buffers)
            except (InertError, RuntimeError, OSError) as exc:  # RuntimeError: a dtype this torch lacks
                return exc
            if buffer is not None:
                buffers.give(buffer)
            return None

        window = self.threads + 1
        with ThreadPoolExecutor(self.threads) as pool:
            pending: list[tuple[Future[Any], Any]] = []
            try:
                for name, item, info in work:
                    pending.append((pool.submit(one, name, item, info), info))
                    if len(pending) >= window:
                        future, done_info = pending.pop(0)
                        yield future.result(), done_info
                for future, done_info in pending:
                    yield future.result(), done_info
            finally:
                for future, _ in pending:
                    future.cancel()

    # What a record costs to check is the reader's bound, wherever its bytes come from: its length checked
    # against what its kind can hold before a buffer is taken, a tensor's header before its payload, and a
    # compressed record inflated a block at a time against the length its chunk allows.
    def _whole(self, reader: Any, name: str, item: Any, info: Any, buffers: Any) -> Any:
        """The record read whole into a buffer and checked by the reader's own record path; the buffer."""
        from torch.distributed.checkpoint.planner import LoadItemType

        from inert.torch._reader import _LENGTH_CHECKED

        reader._check_length(item, info)
        if item.type == LoadItemType.TENSOR and info.length > _LENGTH_CHECKED:
            self._check_head(reader, name, item, info)  # before a buffer of the declared length is taken
        buffer = buffers.take(info.length)
        view = memoryview(buffer.numpy())[: info.length]
        self.source.read_into(name, info.offset, view)
        [(_item, _loaded, kept)] = reader._checked_whole(view, buffer, name, info, [item], buffers, None)
        return kept

    def _check_head(self, reader: Any, name: str, item: Any, info: Any) -> None:
        def read_head(head: memoryview) -> None:
            self.source.read_into(name, info.offset, head)

        reader._check_head(name, item, info, read_head, partial(self._record_crcs, name, info))

    def _record_crcs(self, name: str, info: Any) -> tuple[int, int]:
        """The CRC-32 of a record's bytes before its stored one (read a block at a time), and the stored one."""
        return self._crc(name, info.offset, info.length - 4), self._stored_crc(name, info)

    def _crc(self, name: str, offset: int, length: int, crc: int = 0) -> int:
        from inert.torch._reader import _block

        block = _block()
        for at in range(0, length, len(block)):
            crc = self.source.read_into(name, offset + at, block[: min(len(block), length - at)], crc) or 0
        return crc

    def _stored_crc(self, name: str, info: Any) -> int:
        tail = memoryview(bytearray(4))
        self.source.read_into(name, info.offset + info.length - 4, tail)
        return int.from_bytes(tail, "little")

    def _streamed(self, reader: Any, name: str, item: Any, info: Any) -> bool:
        """A whole tensor record checked without holding it: its header first (decoded from a mapping of the
        record's length holding only its first bytes), then its payload a block at a time into one reused
        buffer, checksummed.  A compressed record is inflated a block at a time (``_inflated``).  False: the
        record takes the whole path (a bool record, whose bytes the codec checks one by one)."""
        import torch

        from inert.codecs import checkpoint_shard as shard
        from inert.torch._reader import _HEAD_MAX, _SCRATCH, _check_crc

        expected = reader._expected(item, info)
        scratch = None if expected[0] == torch.bool else _SCRATCH.view(info.length)
        if scratch is None:
            return False
        self.source.read_into(name, info.offset, scratch[: min(info.length, _HEAD_MAX)])
        if scratch[0] == shard.RecordKindV2.ZSTD and reader.file_version(name) >= 2:
            return self._inflated(reader, name, item, info, expected)
        if scratch[0] != shard.RecordKind.TENSOR:
            return False
        stored = self._stored_crc(name, info)
        placed = reader._checked_head(scratch, stored, name, item, info, expected, None,
                                      lambda: self._crc(name, info.offset, info.length - 4))
        if placed is None:
            return False
        start, nbytes, crc = placed
        if crc is None:  # unverified: the header was all there was to check
            return True
        _check_crc(self._crc(name, info.offset + start, nbytes, crc), stored, name, item, info)
        return True

    def _inflated(self, reader: Any, name: str, item: Any, info: Any, expected: Any) -> bool:
        """A compressed tensor record checked without holding what it inflates to: the stored record read (its
        length bounded by ``_check_length``) and checksummed, then its frame inflated a block at a time into one
        reused buffer, within the inflated length the chunk allows (``FileSystemReader._inflation``), once the
        inflated header is the very bytes a writer makes for the metadata's dtype and shape (else the header
        alone says what is wrong; False: the whole path does)."""
        import math

        from inert._errors import ChecksumError
        from inert.torch._compat import dtype_name
        from inert.torch._reader import _SCRATCH, _block
        from inert.torch._writer import tensor_header

        dtype, shape = expected
        if tuple(item.lengths) != shape:
            return False
        view = memoryview(bytearray(info.length))
        self.source.read_into(name, info.offset, view)
        record = reader._decode(view, name, item, info, reader.verify_checksums)
        if record["crc32"] != info.crc32:
            raise ChecksumError("checkpoint-shard", info.offset + info.length - 4, item.storage_index.fqn,
                                f"record CRC-32 {record['crc32']:#010x}, the metadata expects {info.crc32:#010x}")
        inflation = reader._inflation(record["body"], name, item, info)
        header = tensor_header(dtype_name(dtype, item.storage_index.fqn), list(shape), math.prod(shape) * dtype.itemsize)
        head = bytearray(len(header))
        inflation.into(memoryview(head))
        if head != header:  # named from the inflated header alone, in a mapping of the inflated length
            scratch = _SCRATCH.view(inflation.length)
            if scratch is not None:
                scratch[: len(head)] = head
                reader._check_tensor(reader._decode_inflated(scratch, name, item, info), item, info)
            return False
        block = _block()
        for at in range(len(header), inflation.length, len(block)):
            inflation.into(block[: min(len(block), inflation.length - at)])
        inflation.end()
        return True


def _read_item(key: Any, sizes: Any) -> Any:
    from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

    if sizes is None:
        return ReadItem(type=LoadItemType.BYTE_IO, dest_index=key, dest_offsets=_size([]), storage_index=key,
                        storage_offsets=_size([]), lengths=_size([]))
    zeros = _size([0] * len(sizes))
    return ReadItem(type=LoadItemType.TENSOR, dest_index=key, dest_offsets=zeros, storage_index=key,
                    storage_offsets=zeros, lengths=_size(list(sizes)))


def _size(values: list[int]) -> Any:
    import torch

    return torch.Size(values)


def _check_shard_layout(source: Source, name: str, infos: list[Any]) -> None:
    """The file is its header, a count equal to the records the metadata names, and those records in order,
    each at the next multiple of 64, with zero padding between them and nothing after the last."""
    from inert._codec_runtime import read_file_header
    from inert._errors import InvalidValueError, TrailingBytesError
    from inert.codecs import checkpoint_shard as shard
    from inert.torch._writer import ALIGN

    fmt = shard.FORMAT
    size = source.size(name)
    head = source.read(name, 0, shard.HEADER_SIZE + 4)
    try:
        read_file_header(fmt, head, shard.MAGIC, shard.VERSIONS)
    except InertError as exc:
        raise exc.within(name) from None
    count = int.from_bytes(head[shard.HEADER_SIZE :], "little") if len(head) == shard.HEADER_SIZE + 4 else -1
    if count != len(infos):
        raise InvalidValueError(fmt, shard.HEADER_SIZE, f"{name}:records",
                                f"the file holds {count} records, the metadata names {len(infos)}")
    end = shard.HEADER_SIZE + 4
    for info in sorted(infos, key=lambda i: i.offset):
        start = end + (-end % ALIGN)
        if info.offset != start:
            raise InvalidValueError(fmt, info.offset, name, f"record at {info.offset}, the previous one ends at {end}")
        if start > end and any(source.read(name, end, start)):
            raise InvalidValueError(fmt, end, f"{name}:pad", "padding bytes between records are not zero")
        end = info.offset + info.length
    if size > end:
        raise TrailingBytesError(fmt, end, name, f"{size - end} bytes after the last record")


# -- dumps ----------------------------------------------------------------------------------------------------

def _read_manifest(source: Source) -> Any:
    """The decoded, cross-checked manifest (the codec checks how its fields refer to each other)."""
    from inert.codecs import dump_manifest as codec

    return codec.decode(source.read_whole(MANIFEST_NAME, codec.MAX_SIZE), max_size=codec.MAX_SIZE)


def _check_dump(source: Source, problems: _Problems, show_progress: bool) -> None:
    report = problems.report
    manifest = problems.guard(f"{source.where(MANIFEST_NAME)}: ", partial(_read_manifest, source))
    if manifest is None:  # without the manifest, which files belong is unknown
        return
    files = [s["file"] for s in manifest["shards"]]
    expected = {MANIFEST_NAME, *files}
    missing = [f for f in files if f not in source.names()]
    for name in missing:
        problems.add(f"{source.where(name)}: missing: the manifest places rows in it")
    _stray(source, expected, problems)
    report.files = len(expected) - len(missing)
    report.bytes = _present_bytes(source, expected)
    if missing:
        return
    opened = problems.guard("", source.dump_reader)
    if opened is None:
        return
    rows = len(opened.keys)
    report.records = rows
    progress = Progress("verify", rows, unit="rows") if show_progress else None
    with opened as reader:
        try:
            if problems.keep_going:  # row by row, so that every damaged row is named
                for loc in reader._locations:
                    problems.guard("", partial(reader._batch, [loc]))
                    if progress is not None:
                        progress.advance(1)
            else:
                def consume(owner: int, batch: list[Any]) -> None:
                    if progress is not None:
                        progress.advance(len(batch))

                problems.guard("", lambda: reader.read(owners=2, consume=consume))
        finally:
            if progress is not None:
                progress.close()
