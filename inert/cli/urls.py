"""``inert inspect`` and ``inert verify`` of a checkpoint or dump at a URL (``s3://bucket/ckpt``, any fsspec filesystem).

The filesystem's settings come from its usual environment (for S3: ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL_S3`` for a store other than AWS's).  What is read
and checked is what ``FsspecReader`` and ``inert.dump.load`` read: the metadata or manifest in
one bounded request, records by ranged requests, every CRC-32.  Verification stops at the first
problem (``--all`` lists every problem of a local directory only) and does not list objects that
the metadata does not name.
"""

from __future__ import annotations

from typing import Any

from inert._errors import InertError, StorageError
from inert._objstore import filesystem, join, object_sizes, read_bounded
from inert.cli.inspect import MANIFEST_NAME, METADATA_NAME, checkpoint_summary, dump_summary, inert_view
from inert.cli.support import USAGE, CommandError
from inert.cli.verify import Report, _read_item

__all__ = ["inspect_url", "verify_url"]


def _kind(url: str) -> tuple[str, Any, str, dict[str, int]]:
    """What is at ``url`` (``dump``, ``inert-checkpoint``, ``legacy-dcp-checkpoint``, ``unknown``), its filesystem,
    path and object sizes."""
    from inert import _foreign

    fs, root = filesystem(url)
    try:
        sizes = object_sizes(fs, root)
    except FileNotFoundError:
        sizes = {}
    if MANIFEST_NAME in sizes:
        return "dump", fs, root, sizes
    if METADATA_NAME not in sizes:
        return "unknown", fs, root, sizes
    head = read_bounded(fs, join(root, METADATA_NAME), 15)
    kind = "legacy-dcp-checkpoint" if _foreign.looks_like_pickle(head) else "inert-checkpoint"
    return kind, fs, root, sizes


def _files(names: list[str], sizes: dict[str, int]) -> list[dict[str, Any]]:
    return [{"name": name, "bytes": sizes.get(name)} for name in names]


def inspect_url(url: str) -> dict[str, Any]:
    try:
        return _inspect(url)
    except StorageError as exc:  # an I/O error, as an unreadable local file is
        raise CommandError(str(exc), USAGE) from None


def _inspect(url: str) -> dict[str, Any]:
    from inert.codecs import checkpoint_metadata, dump_manifest

    kind, fs, root, sizes = _kind(url)
    if kind == "dump":
        data = read_bounded(fs, join(root, MANIFEST_NAME), dump_manifest.MAX_SIZE)
        meta = inert_view(memoryview(data), dump_manifest, join(url, MANIFEST_NAME))
        return dump_summary(url, meta, _files([s["file"] for s in meta["shards"]], sizes))
    if kind == "inert-checkpoint":
        data = read_bounded(fs, join(root, METADATA_NAME), checkpoint_metadata.MAX_SIZE)
        meta = inert_view(memoryview(data), checkpoint_metadata, join(url, METADATA_NAME))
        return checkpoint_summary(url, METADATA_NAME, meta, _files(meta["files"], sizes))
    if kind == "legacy-dcp-checkpoint":
        return {"format": "unknown", "path": url, "reason": "a legacy pickle checkpoint (torch.distributed.checkpoint's "
                "own format), not Inert: copy it to a local directory and convert it with `inert migrate`"}
    return {"format": "unknown", "path": url, "reason": "no .metadata or MANIFEST object: not a checkpoint or dump"}


def verify_url(url: str, *, threads: int = 4) -> Report:
    """Verify the checkpoint or dump at ``url``; a failed request is a ``CommandError`` (exit 2, an I/O error)."""
    try:
        kind, _fs, _root, sizes = _kind(url)
    except StorageError as exc:
        raise CommandError(str(exc), USAGE) from None
    report = Report(kind)
    try:
        if kind == "inert-checkpoint":
            _verify_checkpoint(url, report, sizes, threads)
        elif kind == "dump":
            _verify_dump(url, report, sizes, threads)
        elif kind == "legacy-dcp-checkpoint":
            report.problems.append(f"{url} is a legacy pickle checkpoint (torch.distributed.checkpoint's own format), "
                                   "not Inert: `inert migrate` converts it (from a local copy)")
        else:
            report.problems.append(f"{url} is not a checkpoint or dump (no .metadata, no MANIFEST object)")
    except InertError as exc:
        report.problems.append(f"{url}: {exc}")
    except (FileNotFoundError, RuntimeError) as exc:  # RuntimeError: a dtype this torch lacks
        report.problems.append(f"{url}: {exc}")
    except StorageError as exc:
        raise CommandError(str(exc), USAGE) from None
    return report


def _verify_checkpoint(url: str, report: Report, sizes: dict[str, int], threads: int) -> None:
    import torch
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

    from inert.torch import FsspecReader
    from inert.torch._reader import _Buffers

    reader = FsspecReader(url, thread_count=threads)
    metadata = reader.read_metadata()
    reader.set_up_storage_reader(metadata, True)
    items = []
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            items.append(_read_item(MetadataIndex(fqn), None))
            continue
        items.extend(_read_item(MetadataIndex(fqn, chunk.offsets, index), chunk.sizes) for index, chunk in enumerate(md.chunks))
    files = {reader.storage_data[item.storage_index].relative_path for item in items}
    report.files = len(files) + 1
    report.bytes = sizes[METADATA_NAME] + sum(sizes.get(name, 0) for name in files)
    report.records = len(items)
    buffers = _Buffers(keep=2 * threads)
    for _item, _loaded, buffer in reader._records(items, buffers, None):  # every record decoded, every CRC-32 checked
        if isinstance(buffer, torch.Tensor):  # (not None, nor the marker of a buffer shared by a record's items)
            buffers.give(buffer)


def _verify_dump(url: str, report: Report, sizes: dict[str, int], threads: int) -> None:
    from inert.dump import open_dump

    with open_dump(url) as reader:
        report.records = len(reader.keys)
        files = {shard.name for shard in reader._shards}
        report.files = len(files) + 1
        report.bytes = sizes[MANIFEST_NAME] + sum(sizes.get(name, 0) for name in files)
        reader.read(owners=threads, consume=lambda owner, batch: None)
