"""``inert verify PATH``: every byte of a checkpoint or dump directory is checked, with the readers' own checks.

Checkpoint (``inert.cli._verify_checkpoint``, no torch imported): the ``.metadata`` is decoded by its
codec; every record is read, decoded and checked with the checks ``inert.torch``'s readers make
(``inert._records``: structure, CRC-32 against the record and against the metadata, kind, dtype and
shape against the chunk, placement).  On top of what a load checks, verify makes sure nothing is left
unchecked: every chunk of every tensor has its record and the chunks cover the tensor, each data file
is exactly its header, its records and the zero padding between them (the record count in the header
included), and the directory holds no file the metadata does not name.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from inert._errors import InertError, StorageError
from inert._source import Source, open_source
from inert.cli.inspect import MANIFEST_NAME, source_kind
from inert.cli.support import INVALID, OK, USAGE, CommandError, Progress, fail

__all__ = ["add_parser", "run", "verify_path", "Report"]

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

    def guard(self, what: str, call: Callable[[], Any], file: str | None = None) -> Any:
        """``call()``, its InertError (or unreadable-file error) recorded as a problem prefixed with ``what``;
        with ``file``, the error is located in that file of the directory (``InertError.in_file``: files are
        named relative to the directory, ``FILE:field``, in every problem)."""
        try:
            return call()
        except InertError as exc:
            self.add(f"{what}{exc.in_file(file) if file and not exc.field.startswith(file) else exc}")
        except StorageError as exc:  # no bytes to judge: an I/O error
            raise CommandError(str(exc), USAGE) from None
        except (OSError, RuntimeError) as exc:  # RuntimeError: a dtype this torch lacks (inert.torch._compat)
            self.add(f"{what}{file + ': ' if file else ''}{getattr(exc, 'strerror', None) or exc}")
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
            # Imported here, not with the parser: the codecs bind the accelerator when imported, which
            # `inert gen` (regenerating them) and every other command must not depend on.
            from inert.cli._verify_checkpoint import check_checkpoint

            check_checkpoint(source, problems, threads, show_progress)
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
        problems.add(f"{name}: stray file: the metadata names no such file")


def _present_bytes(source: Source, names: set[str]) -> int:
    """The bytes of those of ``names`` that are regular files (a link's target is not counted)."""
    sizes = source.names()
    return sum(sizes.get(name) or 0 for name in names)


# -- dumps ----------------------------------------------------------------------------------------------------

def _read_manifest(source: Source) -> Any:
    """The decoded, cross-checked manifest (the codec checks how its fields refer to each other)."""
    from inert.codecs import dump_manifest as codec

    return codec.decode(source.read_whole(MANIFEST_NAME, codec.MAX_SIZE), max_size=codec.MAX_SIZE)


def _check_dump(source: Source, problems: _Problems, show_progress: bool) -> None:
    report = problems.report
    manifest = problems.guard("", partial(_read_manifest, source), file=MANIFEST_NAME)
    if manifest is None:  # without the manifest, which files belong is unknown
        return
    files = [s["file"] for s in manifest["shards"]]
    expected = {MANIFEST_NAME, *files}
    missing = [f for f in files if f not in source.names()]
    for name in missing:
        problems.add(f"{name}: missing: the manifest places rows in it")
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
