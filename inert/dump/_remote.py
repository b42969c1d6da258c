"""Dumps at fsspec URLs (S3 and other object stores, ``memory://``, ``file://``): published without rename.

Object stores cannot rename a directory, so a dump at a URL is published by
the order of its writes instead of a staging directory:

* every attempt names its shards with a fresh token
  (``shard-00000.<token>.bin``), so no attempt overwrites another's objects;
* every shard is uploaded, whole, before the ``MANIFEST``;
* the ``MANIFEST`` (which names the shards) is written last, in one request,
  and only where none exists (``If-None-Match: *`` on S3; a link on a local
  filesystem): an existing dump is refused, before and at the commit.

A failed or killed dump thus leaves no ``MANIFEST``: loading says "not a
dump (or an unfinished one)"; shards already uploaded are removed when the
failure is seen.  Loading reads the ``MANIFEST`` in one bounded request and
each batch's records with ranged requests into private memory, with every
check of :class:`DumpReader`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from inert._errors import ForeignFormatError, TruncatedError
from inert._objstore import (
    StorageLimits,
    abandon,
    commit,
    display,
    filesystem,
    join,
    object_sizes,
    open_for_writing,
    read_bounded,
    read_range,
    remove_quietly,
    request,
)
from inert.codecs import dump_manifest as manifest_codec

from ._gc import paused_gc
from ._manifest import FIRST_RECORD, FORMAT, MANIFEST_NAME
from ._model import DumpReport, Row
from ._read import SHARD, DumpReader, _Shard
from ._write import DumpPlan, encode_manifest, encode_shard, prepare, report

__all__ = ["dump_to_url", "RemoteDumpReader"]

#: Bytes an upload stream buffers before it sends them as one part.
_UPLOAD_PART = 16 << 20


def _upload_shard(fs: Any, path: str, plan: DumpPlan, owner: int) -> tuple[list[int], list[int]]:
    """One owner's shard streamed to ``path``; each record's offset and length."""
    stream = open_for_writing(fs, path, _UPLOAD_PART)

    def emit(parts: list[Any], end: int) -> None:
        for part in parts:
            request("writing", fs, path, stream.write, part)

    try:
        layout = encode_shard(*plan.shard_rows(owner), plan.frames, emit)
        request("completing", fs, path, stream.close)
    except BaseException:
        abandon(stream)
        raise
    return layout


@paused_gc()
def dump_to_url(rows: Iterable[Row], url: str, *, partition_id: str = "", owners: int = 1,
                owner_of: Callable[[Row], int] | None = None, threads: int | None = None,
                storage_options: dict[str, Any] | None = None) -> DumpReport:
    """``inert.dump.dump`` at a URL: the shards under fresh names, then the ``MANIFEST`` (see the module)."""
    plan = prepare(rows, partition_id, owners, owner_of)
    fs, root = filesystem(url, storage_options)
    manifest_path = join(root, MANIFEST_NAME)
    if request("checking", fs, manifest_path, fs.exists, manifest_path):
        raise FileExistsError(f"{url}: a dump is already there (it has a {MANIFEST_NAME}); choose a new location")
    request("creating", fs, root, fs.makedirs, root, exist_ok=True)
    token = uuid.uuid4().hex[:16]

    def name(owner: int) -> str:
        return f"shard-{owner:05d}.{token}.bin"

    paths = [join(root, name(owner)) for owner in plan.owner_ids]
    try:
        workers = max(1, min(len(plan.owner_ids), threads or len(plan.owner_ids)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_upload_shard, fs, path, plan, owner)
                       for path, owner in zip(paths, plan.owner_ids, strict=True)]
            plan.manifest["keys"] = plan.key_entries()
            try:
                layouts = [future.result() for future in futures]
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
        data = encode_manifest(plan.manifest, plan.owner_ids, plan.by_owner, layouts, name)
        commit(fs, manifest_path, b"".join(data), exclusive=True)
    except BaseException:
        remove_quietly(fs, paths)
        raise
    return report(url, plan, layouts, data)


class RemoteDumpReader(DumpReader):
    """A dump at a URL, open and validated: records come by ranged requests into private memory.

    ``storage_limits``: the deadlines and listing bounds (default: ``StorageLimits.from_env()``).
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None,
                 storage_limits: StorageLimits | None = None) -> None:
        self.limits = storage_limits or StorageLimits.from_env()
        self.fs, self.root = filesystem(url, storage_options)
        self._sizes: dict[str, int] | None = None
        super().__init__(url, mapped=False)

    def _read_manifest(self) -> dict[str, Any]:
        path = join(self.root, MANIFEST_NAME)
        try:
            data = read_bounded(self.fs, path, manifest_codec.MAX_SIZE, self.limits)
        except FileNotFoundError:
            reason = f"{self.path} holds no {MANIFEST_NAME}: not a dump (or an unfinished one)"
            raise ForeignFormatError(FORMAT, 0, MANIFEST_NAME, reason) from None
        return manifest_codec.decode(memoryview(data), max_size=manifest_codec.MAX_SIZE)

    def _open_shard(self, shard: dict[str, Any]) -> None:
        name = shard["file"]
        if self._sizes is None:
            self._sizes = object_sizes(self.fs, self.root, self.limits)
        if name not in self._sizes:
            raise TruncatedError(SHARD, 0, name, f"shard object missing from {self.path}")
        opened = _Shard(name, -1)
        self._shards.append(opened)
        head = read_range(self.fs, join(self.root, name), 0, FIRST_RECORD, self.limits)
        self._place_shard(opened, shard, head, self._sizes[name])

    def _read_at(self, shard: _Shard, memory: memoryview, start: int) -> int:
        data = read_range(self.fs, join(self.root, shard.name), start, start + len(memory), self.limits)
        got = min(len(data), len(memory))
        memory[:got] = data[:got]
        return got

    def __repr__(self) -> str:
        return f"RemoteDumpReader({display(self.fs, self.root)!r})"
