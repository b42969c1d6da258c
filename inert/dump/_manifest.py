"""The manifest of a dump: reading it bounded and read-only.

The grammar checks every field and how the fields refer to each other
(the rules ``dump-manifest.*``, compiled into the codec), so a decoded manifest is whole.
"""

from __future__ import annotations

import os
from typing import Any

from inert._checks import DUMP_FIRST_RECORD as FIRST_RECORD
from inert._checks import DUMP_MANIFEST_NAME as MANIFEST_NAME
from inert._errors import ForeignFormatError
from inert._files import open_in
from inert.codecs import dump_manifest as manifest_codec

__all__ = ["MANIFEST_NAME", "FORMAT", "check_manifest", "read_manifest", "FIRST_RECORD"]


def check_manifest(value: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
    """The first fault of a manifest's cross references (``dump-manifest.*``): (field, reason), or None."""
    return manifest_codec._rules_DumpManifest(value, ctx)  # type: ignore[no-any-return]

FORMAT = manifest_codec.FORMAT


def read_manifest(dump_dir: str, *, max_size: int = manifest_codec.MAX_SIZE) -> dict[str, Any]:
    """The decoded, cross-checked manifest of ``dump_dir``; an ``InertError`` for anything wrong with it."""
    if not os.path.isdir(dump_dir):
        raise FileNotFoundError(f"{dump_dir}: no such dump directory")
    try:  # read-only, no lock: loading never needs write access; a regular file inside the directory only
        fd = open_in(dump_dir, MANIFEST_NAME, FORMAT)
    except FileNotFoundError:
        reason = f"{dump_dir} holds no {MANIFEST_NAME}: not a dump (or an unfinished one)"
        raise ForeignFormatError(FORMAT, 0, MANIFEST_NAME, reason) from None
    try:
        size = os.fstat(fd).st_size
        limit = min(size, max_size + 1)  # one byte over the limit is enough for decode to refuse it
        data = bytearray(limit)
        got = os.preadv(fd, [data], 0) if limit else 0
    finally:
        os.close(fd)
    # The codec checks how the fields refer to each other too (check_dump_manifest in the grammar).
    return manifest_codec.decode(memoryview(data)[:got], max_size=max_size)
