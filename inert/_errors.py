"""The one exception family of Inert.

Every failure to read bytes raises a subclass of :class:`InertError`, itself a
``ValueError``, so ``except ValueError`` keeps working.  Each message starts
with where the fault is: ``<format>: offset <N>: <field>: <reason>``.

Caller mistakes (a value the writer cannot encode, a wrong argument) raise the
builtin ``TypeError``/``ValueError`` instead, naming the offending path; a broken
conformance harness raises :class:`HarnessError`.  The three never mix.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = [
    "InertError",
    "TruncatedError",
    "TrailingBytesError",
    "LimitError",
    "UnknownTagError",
    "InvalidValueError",
    "ChecksumError",
    "VersionError",
    "ForeignFormatError",
    "FileKindError",
    "HarnessError",
    "WriteTypeError",
    "WriteValueError",
    "StorageError",
    "ERROR_CLASSES",
    "byte_count",
]


def byte_count(n: int) -> str:
    """``n`` with its unit, as every message (Python and C) says a number of bytes: ``1 byte``, ``0 bytes``."""
    return "1 byte" if n == 1 else f"{n} bytes"


#: What a message says where ``field`` is ``''``: the fault is in the value as a whole, not in one field.
WHOLE = "the whole value"


def _below(prefix: str, field: str) -> str:
    """The path of ``field`` inside ``prefix``: ``a`` + ``b`` -> ``a.b``, ``a`` + ``[2].b`` -> ``a[2].b``."""
    if not field:
        return prefix
    return prefix + field if field.startswith("[") else f"{prefix}.{field}"


class InertError(ValueError):
    """Bytes that do not follow an Inert format.

    ``format``, ``offset`` (absolute byte offset, or -1 when the fault is not
    at one place) and ``field`` (a path such as ``samples[2].shape``) locate
    the fault; ``reason`` says what is wrong.  A fault in the value as a whole (bytes after its end, an
    input over its size limit) has ``field`` ``''``, which the message spells "the whole value".
    """

    #: Short stable name used by the conformance corpus (``"truncated"``, ...).
    kind = "invalid"

    def __init__(self, format: str, offset: int, field: str, reason: str) -> None:
        self.format = format
        self.offset = offset
        self.field = field
        self.reason = reason
        super().__init__(f"{format}: offset {offset}: {field or WHOLE}: {reason}")

    def __reduce__(self) -> tuple[type[InertError], tuple[str, int, str, str]]:
        # Errors cross processes (DCP ranks, worker channels): keep them intact.
        return (type(self), (self.format, self.offset, self.field, self.reason))

    def within(self, prefix: str) -> InertError:
        """The same error, its field path placed below ``prefix``."""
        return self._replace(field=_below(prefix, self.field))

    def in_file(self, name: str) -> InertError:
        """The same error, located in the file ``name`` of a checkpoint or dump directory: its field spelled
        ``name:field`` (``name`` alone for the file as a whole), as every reader and tool names files."""
        return self._replace(field=f"{name}:{self.field}" if self.field else name)

    def in_format(self, format: str) -> InertError:
        """The same error, attributed to ``format``."""
        return self._replace(format=format)

    def _replace(self, **changes: object) -> InertError:
        args = {"format": self.format, "offset": self.offset, "field": self.field, "reason": self.reason}
        args.update(changes)
        new = type(self).__new__(type(self))
        InertError.__init__(new, **args)  # type: ignore[arg-type]
        return new


class TruncatedError(InertError, EOFError):
    """The input ends before a field it declares."""

    kind = "truncated"


class TrailingBytesError(InertError):
    """Bytes remain after a complete value."""

    kind = "trailing-bytes"


class LimitError(InertError):
    """A count, length, size or nesting depth exceeds its declared limit."""

    kind = "limit"


class UnknownTagError(InertError):
    """A tag, enum or extension code the format does not define."""

    kind = "unknown-tag"


class InvalidValueError(InertError):
    """A field whose value breaks a rule of the format."""

    kind = "invalid-value"


class ChecksumError(InertError):
    """Stored and computed checksums differ: the bytes were damaged."""

    kind = "checksum"


class VersionError(InertError):
    """A ``format_version`` this reader does not support."""

    kind = "version"


class ForeignFormatError(InertError):
    """The input is not an Inert file at all (a pickle, a zip, ...)."""

    kind = "foreign-format"


class FileKindError(InertError):
    """A file a reader was given is not a regular file inside its directory (a link, a FIFO, a device, ...).

    Nothing of it was read: the message names the file and what it is, never its bytes.
    """

    kind = "file-kind"


_W = TypeVar("_W", bound="_WriteErrorMixin")


class _WriteErrorMixin:
    """A value the caller asked to encode that the format cannot hold.

    These are caller mistakes, not bad bytes: they are a builtin ``TypeError``
    or ``ValueError`` and never an :class:`InertError`.
    """

    def __init__(self, format: str, field: str, reason: str) -> None:
        self.format = format
        self.field = field
        self.reason = reason
        super().__init__(f"{format}: {field or WHOLE}: {reason}")  # type: ignore[call-arg]

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.format, self.field, self.reason))

    def within(self: _W, prefix: str) -> _W:
        """The same error, its field path placed below ``prefix``."""
        return type(self)(self.format, _below(prefix, self.field), self.reason)

    def in_format(self: _W, format: str) -> _W:
        """The same error, attributed to ``format``."""
        return type(self)(format, self.field, self.reason)


class WriteTypeError(_WriteErrorMixin, TypeError):
    """A value of a type the format cannot encode at that place."""


class WriteValueError(_WriteErrorMixin, ValueError):
    """A value of the right type that breaks a limit or rule of the format."""


class StorageError(OSError):
    """A request to a storage backend (an object store through fsspec) failed: no bytes to judge, not bad bytes.

    The message names the operation and the URL; the backend's own exception is the ``__cause__``.
    """


class HarnessError(RuntimeError):
    """The conformance harness itself is broken (a testee that does not answer, a bad corpus)."""


#: Conformance name of each error class, and back.
ERROR_CLASSES: dict[str, type[InertError]] = {
    cls.kind: cls
    for cls in (
        InertError,
        TruncatedError,
        TrailingBytesError,
        LimitError,
        UnknownTagError,
        InvalidValueError,
        ChecksumError,
        VersionError,
        ForeignFormatError,
        FileKindError,
    )
}
