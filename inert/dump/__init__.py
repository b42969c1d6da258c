"""Dump selected rows to a directory and load them back onto any number of owners, with nothing executable on disk.

A dump directory holds a ``MANIFEST`` (format ``dump-manifest``: the keys,
their tags, the field schema and where every row lies) and one shard file per
owner (format ``dump-shard``: one checksummed record per row, tensors as raw
little-endian bytes, other values as MessagePack documents)::

    from inert.dump import Row, dump, load

    dump([Row("k0", 0, {"ids": ids0}, {"step": 3}), ...], "ckpt/rollout", owners=8)
    loaded = load("ckpt/rollout", owners=4)     # any number of owners
    for row in loaded.rows: ...

Writing stages the dump beside its destination, fsyncs it and publishes it
with one rename; loading needs neither a lock nor write access, and reads every
record into private memory, every byte checked first (``load(..., mapped=True)``
maps the shard files instead: faster, for dumps no other process truncates).  Every problem with the
bytes on disk is an :class:`inert.InertError` naming the file, the byte
offset and the field.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401 - checked first, so that a missing extra says so
except ImportError as _exc:
    from inert._extras import extra_error

    raise extra_error("inert.dump", _exc) from None

from ._manifest import MANIFEST_NAME, check_manifest, read_manifest
from ._model import DENSE, NESTED, VALUE, DumpReport, FieldSpec, Row
from ._read import DumpReader, KeyInfo, LoadedDump, load, open_dump
from ._write import dump

__all__ = [
    "Row",
    "FieldSpec",
    "DumpReport",
    "LoadedDump",
    "KeyInfo",
    "DumpReader",
    "DENSE",
    "NESTED",
    "VALUE",
    "MANIFEST_NAME",
    "dump",
    "load",
    "open_dump",
    "read_manifest",
    "check_manifest",
]
