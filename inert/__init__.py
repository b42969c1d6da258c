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

import os as _os

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

# In a source checkout, spec/, codecs/ and conformance/ sit beside this folder;
# pyproject maps them into this package for wheels and editable installs.  Map
# them the same way here so that an uninstalled checkout imports identically.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), "codecs")) and _os.path.isfile(
    _os.path.join(_root, "spec", "__init__.py")
):
    __path__.append(_root)  # noqa: F821 - a package's __path__

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
