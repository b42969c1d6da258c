"""Inert: non-executable formats for ML artifacts, their codecs, and proof that hostile bytes stay out.

The public surface is small::

    from inert import InertError
    from inert.codecs import shm_message
    data = shm_message.encode(value)
    value = shm_message.decode(data)

Integrations live in submodules named after their host (``inert.torch``,
``inert.dali``, ``inert.transferqueue``); ``import inert`` imports none of them.
"""

from __future__ import annotations

from ._errors import (
    ChecksumError,
    FileKindError,
    ForeignFormatError,
    HarnessError,
    InertError,
    InvalidValueError,
    LimitError,
    StorageError,
    TrailingBytesError,
    TruncatedError,
    UnknownTagError,
    VersionError,
    WriteTypeError,
    WriteValueError,
)

__version__ = "0.1.0"

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
    "__version__",
]
