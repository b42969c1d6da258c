"""The ``inert`` command line (also ``python -m inert``).

Exit codes: 0 success; 1 the input is malformed; 2 a usage or I/O error,
a missing extra included; 141 standard output closed before everything was
printed (``inert inspect ckpt | head``: the rest is dropped without a word, as
a process that SIGPIPE ends).  Standard output carries data (listings, JSON,
bytes, an OK verdict); every error is one line on stderr, starting
``inert: <command>: `` (``inert: decode: shm-message: offset 41: <field>: <reason>``),
after which ``inspect``, ``verify`` and ``migrate`` may add one line
``inert: <command>: hint: ...`` for a common mistake (``inert.cli.hints``);
nothing else goes to stderr but a terminal's progress bar.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import select
import stat
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any, BinaryIO

from inert._canonical import from_json, to_json
from inert._errors import InertError, WriteTypeError, WriteValueError
from inert._files import open_named, read_fd, read_stream

__all__ = ["main"]


class _Usage(Exception):
    """A mistake in the command line or a file that cannot be read: exit 2."""


def codec(name: str) -> ModuleType:
    """The generated codec module of format ``name`` (``<format>`` or ``<format>.<part>``)."""
    from inert.codecs import MODULES

    base = name.partition(".")[0]
    if base not in MODULES:
        raise _Usage(f"unknown format {name!r}; `inert formats` lists them")
    return importlib.import_module(f"inert.codecs.{MODULES[base]}")


def _functions(name: str) -> tuple[ModuleType, Callable[..., Any], Callable[..., Any]]:
    """The module, reader and writer of ``<format>`` or of one of its parts, ``<format>.<part>``."""
    module = codec(name)
    part = name.partition(".")[2]
    if not part:
        return module, module.decode, module.encode
    if not hasattr(module, f"decode_{part}"):
        raise _Usage(f"{module.FORMAT} has no part {part!r}")
    return module, getattr(module, f"decode_{part}"), getattr(module, f"encode_{part}")


#: Most bytes read from standard input, a pipe or a device (which say nothing of their length); a regular
#: file is read up to its format's own limit, checked against its size first.
STREAM_MAX = 256 << 20


def _read_input(path: str, format: str = "input", limit: int = STREAM_MAX) -> bytes:
    """The bytes to decode: at most ``limit`` (then ``LimitError``), ``STREAM_MAX`` from a stream.

    ``-`` is standard input; a path the user names may be a link (followed), a regular file, or a
    FIFO or device read like standard input (``/dev/zero`` ends at the limit, not at MemoryError).
    """
    if path == "-":
        return read_stream(sys.stdin.buffer, min(limit, STREAM_MAX), format, "<stdin>")
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise _Usage(f"{path}: is a directory")
        if stat.S_ISREG(mode):
            fd = open_named(path, format)
            try:
                return read_fd(fd, limit, format, path)
            finally:
                os.close(fd)
        with open(path, "rb", buffering=0) as stream:  # a FIFO or a device, named on purpose
            return read_stream(stream.fileno(), min(limit, STREAM_MAX), format, path)
    except OSError as exc:
        raise _Usage(f"{path}: {exc.strerror}") from None


def _params(args: argparse.Namespace, module: ModuleType, reader: Callable[..., Any]) -> dict[str, Any]:
    """The reader parameters given on the command line; one the reader does not take is a usage error."""
    given = {"chunk_size": args.chunk_size, "max_size": args.max_size}
    if args.no_verify_checksums:
        given["verify_checksums"] = False
    params = {}
    for name, value in given.items():
        if value is None:
            continue
        if name not in reader.__code__.co_varnames:
            raise _Usage(f"--{name.replace('_', '-')} does not apply to {module.FORMAT}")
        params[name] = value
    return params


def _cmd_formats(args: argparse.Namespace) -> int:
    from inert.codecs import MODULES

    for name in MODULES:
        module = codec(name)
        versions = ", ".join(str(v) for v in module.VERSIONS)
        print(f"{name}\tversions {versions}\tlatest {module.LATEST}")
    return 0


def _cmd_decode(args: argparse.Namespace) -> int:
    module, reader, _ = _functions(args.format)
    limit = args.max_size if args.max_size is not None else getattr(module, "MAX_SIZE", STREAM_MAX)
    data = _read_input(args.path, module.FORMAT, max(limit, 0))
    # File formats read their version from the header: pass one only when asked to insist on it.
    version = {} if args.version is None else {"version": args.version}
    value = reader(data, **version, **_params(args, module, reader))
    print(to_json(value))
    return 0


def _cmd_encode(args: argparse.Namespace) -> int:
    module, _, writer = _functions(args.format)
    try:
        value = from_json(_read_input(args.path).decode("utf-8", errors="strict"))
    except ValueError as exc:
        raise _Usage(f"input is not canonical JSON: {exc}") from None
    out: BinaryIO = sys.stdout.buffer
    out.write(writer(value, version=args.version or module.LATEST))
    out.flush()
    return 0


def _cmd_gen(args: argparse.Namespace) -> int:
    try:
        import inert.spec  # noqa: F401  (first: without the extra, its error names it)
        from inert.gen import driver
    except ImportError as exc:
        raise _Usage(str(exc)) from None
    except Exception as exc:  # a fault in a declaration: where it is, in one line, not a traceback
        import traceback

        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}: " if frames else ""
        raise _Usage(f"{where}{type(exc).__name__}: {exc}; nothing written") from None
    return driver.run(check=args.check, freeze=args.freeze)


def _cmd_conformance(args: argparse.Namespace) -> int:
    from inert._errors import HarnessError
    from inert.conformance._runner import run_command

    try:
        return run_command(args)
    except HarnessError as exc:
        raise _Usage(str(exc)) from None


def _cmd_conformance_list(args: argparse.Namespace) -> int:
    from inert.conformance._runner import list_command

    return list_command(args)


def _cmd_conformance_path(args: argparse.Namespace) -> int:
    from inert.conformance._runner import path_command

    return path_command(args)


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line, ``inert: <command>: <message>``, exit 2 (not usage text and a second line)."""

    def error(self, message: str) -> Any:
        command = self.prog.partition(" ")[2] or "usage"
        print(f"inert: {command}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


@functools.cache  # built once per process: building it was most of a small command's time (tests call main() often)
def _parser() -> argparse.ArgumentParser:
    from inert import __version__

    parser = _Parser(prog="inert", description="Inert: non-executable formats for ML artifacts.")
    parser.add_argument("--version", action="version", version=f"inert {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("formats", help="list the formats and their versions").set_defaults(run=_cmd_formats)
    commands = (("decode", _cmd_decode, "bytes to canonical JSON"), ("encode", _cmd_encode, "canonical JSON to bytes"))
    for name, run, what in commands:
        cmd = sub.add_parser(name, help=what)
        cmd.add_argument("--format", required=True, help="format name, e.g. shm-message, or <format>.<part>")
        cmd.add_argument("--version", type=int, default=None, help="format version (default: the latest)")
        cmd.add_argument("--chunk-size", type=int, default=None, help="size of the shared-memory chunk, where it applies")
        cmd.add_argument("--max-size", type=int, default=None, help="lower the format's size limit, where it has one")
        cmd.add_argument("--no-verify-checksums", action="store_true", help="skip the CRC-32 checks (formats that carry them)")
        cmd.add_argument("path", nargs="?", default="-", help="input file, or - for standard input")
        cmd.set_defaults(run=run)
    from inert.cli import inspect as _inspect
    from inert.cli import migrate as _migrate
    from inert.cli import verify as _verify

    for tool in (_inspect, _verify, _migrate):  # each parses its own arguments and prints its own one-line errors
        tool.add_parser(sub).set_defaults(run=tool.run)
    gen = sub.add_parser("gen", help="regenerate inert.codecs from inert.spec")
    gen.add_argument("--check", action="store_true", help="exit 1 if the generated files are stale")
    gen.add_argument(
        "--freeze", action="store_true", help="record the hash of every version not frozen yet (inert/spec/frozen.json)"
    )
    gen.set_defaults(run=_cmd_gen)
    from inert.conformance._runner import add_arguments

    conformance = sub.add_parser("conformance", help="check an implementation against the conformance corpus")
    conformance_sub = conformance.add_subparsers(dest="conformance_command", required=True)
    conformance_run = conformance_sub.add_parser("run", help="run the corpus against a testee; report per format and version")
    add_arguments(conformance_run)
    conformance_run.set_defaults(run=_cmd_conformance)
    conformance_sub.add_parser("list", help="each format and version in the corpus with its vector count").set_defaults(
        run=_cmd_conformance_list
    )
    conformance_sub.add_parser("path", help="print the corpus directory").set_defaults(run=_cmd_conformance_path)
    return parser


def _error(command: str, text: object, code: int) -> int:
    print(f"inert: {command}: {' '.join(str(text).split())}", file=sys.stderr)
    return code


#: The exit code when standard output closes early: 128 + SIGPIPE, what a shell reports for a process SIGPIPE ends.
PIPE_CLOSED = 141


def main(argv: list[str] | None = None) -> int:
    from inert._accelerator import AcceleratorError

    try:
        code = _run(argv)
        sys.stdout.flush()  # here, not at exit: a reader gone by now is met below, not as "Exception ignored"
    except AcceleratorError as exc:  # INERT_ACCEL=require and a stale or missing build: one line, as other faults
        return _error("accelerator", exc, 2)
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # another pipe (a testee's): not the reader of our output going away
        # Python flushes stdout again at exit: point it at /dev/null so that flush has nowhere to fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return PIPE_CLOSED
    return code


def _stdout_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (poll says POLLERR for its write end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll(), or no descriptor behind stdout
        return False


def _run(argv: list[str] | None) -> int:
    from inert._extras import missing_extra

    args, unknown = _parser().parse_known_args(argv)
    command = args.command
    if unknown:  # argparse would name no command here
        return _error(command, f"unrecognized arguments: {' '.join(unknown)} (see `inert {command} --help`)", 2)
    try:
        code = int(args.run(args))
    except (InertError, WriteTypeError, WriteValueError) as exc:
        return _error(command, exc, 1)
    except (_Usage, UnicodeDecodeError, ValueError) as exc:
        return _error(command, exc, 2)
    except ImportError as exc:  # an optional package: one line naming the extra that installs it
        line = missing_extra(exc, "this command")
        if line is None:
            raise
        return _error(command, line, 2)
    if code != 0:
        _hint(command, getattr(args, "path", None) or getattr(args, "src", None))
    return code


def _hint(command: str, path: object) -> None:
    """After a failed ``inspect``, ``verify`` or ``migrate``: one hint line on stderr, if ``PATH`` suggests one."""
    if command not in ("inspect", "verify", "migrate") or not isinstance(path, str):
        return
    from inert.cli.hints import hint

    line = hint(command, path)
    if line:
        sys.stdout.flush()  # the command's own output first, where both go to one terminal
        print(f"inert: {command}: hint: {line}", file=sys.stderr)
