"""``inert inspect PATH``: what a file or a directory holds, read without executing anything.

Inert files are told apart by their magic and ``format_version`` and decoded
with the generated codecs (checksums included); the shared-memory messages,
which have no magic, are tried last.  Foreign files are named from their
first bytes and structure (see ``inert._foreign``).  Directories: an Inert
checkpoint (``.metadata`` in ``checkpoint-metadata``), a dump (``MANIFEST``),
or a legacy DCP checkpoint (a pickled ``.metadata`` and ``.distcp`` files).
Nothing here imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
from types import ModuleType
from typing import Any

from inert import _foreign
from inert._allowlist import is_allowed
from inert._checks import checkpoint_itemsize, describe_foreign
from inert._codec_runtime import read_file_header
from inert._errors import InertError, StorageError
from inert._files import is_regular_in, open_named, read_fd
from inert._objstore import is_url
from inert._source import DirectorySource, ObjectSource, Source
from inert.cli.support import INVALID, OK, USAGE, CommandError, fail, file_bytes, human_bytes, read_head
from inert.codecs._tables import CHECKPOINT_METADATA_NAME as METADATA_NAME
from inert.codecs._tables import DUMP_MANIFEST_NAME as MANIFEST_NAME

__all__ = ["add_parser", "run", "inspect_path", "METADATA_NAME", "MANIFEST_NAME", "directory_kind"]

#: A rank-local metadata file (``__{rank}.metadata``).
_RANK_METADATA = re.compile(rf"__\d+{re.escape(METADATA_NAME)}\Z")
#: Rows of a text listing; ``--json`` lists everything.
TEXT_ROWS = 50

HELP = """\
Print what PATH holds, reading it without executing anything.

PATH may be an Inert file (any format and version, told by its magic), an
Inert checkpoint directory, a dump directory, or a foreign file or
directory: a pickle (its protocol and the module.name globals it would
import, found by walking its opcodes, never by unpickling), a torch.save zip
(its data.pkl walked the same way), a safetensors file (its JSON header), a
legacy torch.distributed.checkpoint directory (a pickled .metadata: whether
every global it names is on the allowlist of `inert migrate`).

exit codes: 0 summary printed; 1 PATH is damaged or of no kind known here;
2 usage or I/O error.
"""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "inspect", help="summarise an Inert file, checkpoint or dump, or name a foreign file",
        description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", metavar="PATH", help="a file or a checkpoint or dump directory")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        summary = inspect_path(args.path)
    except CommandError as exc:
        return fail("inspect", exc)
    except InertError as exc:
        return fail("inspect", CommandError(f"{args.path}: {exc}", INVALID))
    except OSError as exc:
        return fail("inspect", CommandError(f"{exc.filename or args.path}: {exc.strerror}", USAGE))
    if args.json:  # the document, whatever PATH is: its "format" says "unknown", as the exit code does
        print(json.dumps(summary, indent=1, sort_keys=False, default=str))
    elif summary.get("format") == "unknown":  # a refusal, like the others: one line on stderr
        return fail("inspect", CommandError(f"{summary['path']}: {_title(summary)}", INVALID))
    else:
        sys.stdout.write(render(summary))
    return INVALID if summary.get("format") == "unknown" else OK


# -- what a path is -------------------------------------------------------------------------------------------

def _magic_codecs() -> dict[bytes, ModuleType]:
    from inert.codecs import MODULES

    found = {}
    for module_name in MODULES.values():
        module = importlib.import_module(f"inert.codecs.{module_name}")
        magic = getattr(module, "MAGIC", None)
        if magic:
            found[magic] = module
    return found


def _shm_codecs() -> list[ModuleType]:
    from inert.codecs import MODULES

    return [importlib.import_module(f"inert.codecs.{m}") for name, m in MODULES.items() if name.startswith("shm-")]


def directory_kind(path: str) -> str:
    """``inert-checkpoint``, ``legacy-dcp-checkpoint``, ``dump`` or ``unknown``."""
    with DirectorySource(path, format="file") as source:
        return source_kind(source)


def source_kind(source: Source) -> str:
    """What a local directory or an object-store location holds: ``inert-checkpoint``, ``legacy-dcp-checkpoint``,
    ``dump`` or ``unknown``."""
    names = source.names()
    # Listed, whatever it is: a MANIFEST that is a link or a FIFO still says "dump"; reading it refuses it by name.
    if MANIFEST_NAME in names:
        return "dump"
    metadata = METADATA_NAME
    if metadata not in names:
        ranks = sorted(n for n in names if _RANK_METADATA.match(n))
        if not ranks:
            return "unknown"
        metadata = ranks[0]
    if _foreign.looks_like_pickle(source.read(metadata, 0, 16)):
        return "legacy-dcp-checkpoint"
    return "inert-checkpoint"  # or a damaged one: decoding its .metadata says what is wrong


def inspect_path(path: str) -> dict[str, Any]:
    if is_url(path):
        try:
            with ObjectSource(path) as source:
                return _inspect_source(source)
        except StorageError as exc:  # an I/O error, as an unreadable local file is
            raise CommandError(str(exc), USAGE) from None
    if os.path.isdir(path):
        kind = directory_kind(path)
        if kind == "inert-checkpoint":
            return _checkpoint_dir(path)
        if kind == "dump":
            return _dump_dir(path)
        if kind == "legacy-dcp-checkpoint":
            return _legacy_dir(path)
        return {"format": "unknown", "path": path,
                "reason": "a directory without .metadata or MANIFEST: not a checkpoint or dump directory"}
    if not os.path.exists(path):
        raise CommandError(f"{path}: no such file or directory")
    if not os.path.isfile(path):  # a FIFO or a device could be endless
        raise CommandError(f"{path}: not a regular file or a directory")
    return _file(path)


def _file(path: str) -> dict[str, Any]:
    head = read_head(path)
    for magic, module in _magic_codecs().items():
        if head.startswith(magic):
            return _inert_file(path, module)
    if _foreign.looks_like_pickle(head):
        return _foreign.inspect_pickle(path)
    if head.startswith(b"PK\x03\x04"):
        found = _foreign.inspect_torch_zip(path)
        return found or {"format": "zip", "path": path, "bytes": os.path.getsize(path), "note": "a zip without data.pkl"}
    found = _foreign.inspect_safetensors(path)
    if found is not None:
        return found
    shm = _shm_file(path)
    if shm is not None:
        return shm
    if head.endswith(b".") or head[:1] in (b"(", b"}", b"]", b"c"):  # protocol 0/1 pickles have no PROTO opcode
        scan = _foreign.inspect_pickle(path)
        if scan.get("error") is None and scan.get("trailing_bytes") == 0:
            return scan
    return {"format": "unknown", "path": path, "bytes": os.path.getsize(path), "reason": describe_foreign(head)}


def _shm_file(path: str) -> dict[str, Any] | None:
    """The shared-memory formats have no magic: a small file that decodes as one is named as it."""
    from inert._canonical import to_json

    fd = open_named(path, "file")
    try:
        if os.fstat(fd).st_size > 1 << 20:
            return None
        data = read_fd(fd, 1 << 20, "file", path)
    finally:
        os.close(fd)
    for module in _shm_codecs():
        try:
            value = module.decode(data)
        except InertError:
            continue
        text = to_json(value)
        return {"format": module.FORMAT, "path": path, "bytes": len(data), "version": module.LATEST,
                "note": "no magic: decodes as this format", "value": json.loads(text)}
    return None


def _inert_file(path: str, module: ModuleType, *, inside: bool = False) -> dict[str, Any]:
    return inert_view(file_bytes(path, inside=inside, format=module.FORMAT, limit=module.MAX_SIZE), module, path)


def inert_view(view: Any, module: ModuleType, path: str) -> dict[str, Any]:
    """The summary of the Inert file ``path`` whose bytes are ``view``."""
    fmt = module.FORMAT
    version = read_file_header(fmt, view, module.MAGIC, module.VERSIONS)
    doc = module.decode(view)
    base = {"format": fmt, "version": version, "path": path, "bytes": len(view)}
    if fmt == "checkpoint-metadata":
        return {**base, **_metadata_summary(doc)}
    if fmt == "dump-manifest":
        return {**base, **_manifest_summary(doc)}
    if fmt == "checkpoint-shard":
        return {**base, **_named_records(path, _shard_summary(doc))}
    if fmt == "dump-shard":
        return {**base, **_dump_shard_summary(doc)}
    return base  # pragma: no cover - every format with a magic is listed above


# -- summaries ------------------------------------------------------------------------------------------------

def _numel(shape: list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def _metadata_summary(doc: dict[str, Any]) -> dict[str, Any]:
    tensors = []
    for entry in doc["tensors"]:
        size = list(entry["size"])
        tensors.append({"fqn": entry["fqn"], "dtype": entry["dtype"].name.lower(), "shape": size,
                        "bytes": _numel(size) * checkpoint_itemsize(entry["dtype"]), "chunks": len(entry["chunk_files"])})
    values = [{"fqn": e["fqn"], "record_bytes": e["byte_length"]} for e in doc["values"]]
    return {
        "dcp_version": doc["dcp_version"], "files": list(doc["files"]), "tensors": tensors, "values": values,
        "totals": {"tensors": len(tensors), "tensor_bytes": sum(t["bytes"] for t in tensors),
                   "chunks": sum(t["chunks"] for t in tensors), "values": len(values), "files": len(doc["files"])},
    }


def _shard_summary(doc: dict[str, Any]) -> dict[str, Any]:
    records = []
    for item in doc["records"]:
        body = item["record"]["body"]
        if "data" in body:
            records.append({"kind": "tensor", "dtype": body["dtype"].name.lower(), "shape": list(body["shape"]),
                            "bytes": len(body["data"])})
        else:
            records.append({"kind": "value", "type": type(body["value"]).__name__})
    tensors = [r for r in records if r["kind"] == "tensor"]
    return {"records": records, "totals": {"records": len(records), "tensors": len(tensors),
                                           "tensor_bytes": sum(r["bytes"] for r in tensors),
                                           "values": len(records) - len(tensors)}}


def _record_names(path: str) -> tuple[list[tuple[int, str, str]] | None, str]:
    """Each record of the data file ``path`` as (offset, name, kind), from the metadata beside it; or None and why not."""
    from inert.codecs import checkpoint_metadata as codec

    folder, name = os.path.split(os.path.abspath(path))
    candidates = [METADATA_NAME] + sorted(n for n in os.listdir(folder) if _RANK_METADATA.match(n))
    for candidate in candidates:
        full = os.path.join(folder, candidate)
        if not os.path.isfile(full):
            continue
        try:
            doc = codec.decode(file_bytes(full, inside=True, format=codec.FORMAT, limit=codec.MAX_SIZE))
        except InertError as exc:
            return None, f"{candidate} beside it does not decode ({exc})"
        if name not in doc["files"]:
            continue
        index = doc["files"].index(name)
        names = [(v["byte_offset"], v["fqn"], "value") for v in doc["values"] if v["file"] == index]
        for t in doc["tensors"]:
            ndim, count = len(t["size"]), len(t["chunk_files"])
            for i in range(count):
                if t["chunk_files"][i] == index:
                    at = t["chunk_offsets"][i * ndim:(i + 1) * ndim]
                    where = f" chunk at {_shape(at)}" if count > 1 else ""
                    names.append((t["chunk_byte_offsets"][i], t["fqn"] + where, "tensor"))
        return sorted(names), f"names from {candidate}"
    return None, "no checkpoint metadata beside it lists this file: record names unknown"


def _named_records(path: str, summary: dict[str, Any]) -> dict[str, Any]:
    """A shard file's summary with each record's fqn, when the metadata beside it lists exactly its records."""
    names, note = _record_names(path)
    records = summary["records"]
    if names is not None and [kind for _, _, kind in names] != [r["kind"] for r in records]:
        listed = len(names)
        names, note = None, f"{note.removeprefix('names from ')} lists {listed} records of this file, which " \
                            f"do not match its {len(records)}: record names unknown"
    if names is not None:  # records lie in the file in offset order, as the metadata's sorted entries
        for record, (offset, fqn, _) in zip(records, names, strict=True):
            record.update(fqn=fqn, offset=offset)
    return {**summary, "note": note}


def _field_summary(entry: dict[str, Any]) -> dict[str, Any]:
    layout = entry["layout"]
    out: dict[str, Any] = {"name": entry["name"], "layout": layout["kind"].name.lower()}
    if "dtype" in layout:
        out["dtype"] = layout["dtype"].name.lower()
    if "shape" in layout:
        out["shape"] = list(layout["shape"])
    if "ndim" in layout:
        out["ndim"] = layout["ndim"]
    return out


def _manifest_summary(doc: dict[str, Any]) -> dict[str, Any]:
    shards = [{"file": s["file"], "owner": s["owner"], "rows": len(s["rows"]), "record_bytes": sum(s["lengths"])}
              for s in doc["shards"]]
    return {
        "partition_id": doc["partition_id"], "fields": [_field_summary(f) for f in doc["fields"]],
        "keys": [k["key"] for k in doc["keys"][:TEXT_ROWS]], "shards": shards,
        "totals": {"keys": len(doc["keys"]), "fields": len(doc["fields"]), "shards": len(shards),
                   "record_bytes": sum(s["record_bytes"] for s in shards)},
    }


def _dump_shard_summary(doc: dict[str, Any]) -> dict[str, Any]:
    names: dict[str, int] = {}
    tensor_bytes = 0
    for item in doc["rows"]:
        for row_field in item["row"]["fields"]:
            names[row_field["name"]] = names.get(row_field["name"], 0) + 1
            tensor_bytes += len(row_field["body"].get("data", b""))
    return {"fields": [{"name": n, "rows": c} for n, c in names.items()],
            "totals": {"rows": len(doc["rows"]), "tensor_bytes": tensor_bytes}}


def _listing(path: str, names: list[str]) -> list[dict[str, Any]]:
    out = []
    for name in names:
        full = os.path.join(path, name)
        # lstat: a link is not followed, so its target's size is not shown (a link is as good as missing)
        out.append({"name": name, "bytes": os.lstat(full).st_size if is_regular_in(path, name) else None})
    return out


def _checkpoint_dir(path: str) -> dict[str, Any]:
    from inert.codecs import checkpoint_metadata as codec

    name = METADATA_NAME if os.path.lexists(os.path.join(path, METADATA_NAME)) else sorted(
        n for n in os.listdir(path) if _RANK_METADATA.match(n))[0]
    meta = _inert_file(os.path.join(path, name), codec, inside=True)
    return checkpoint_summary(path, name, meta, _listing(path, meta["files"]))


def checkpoint_summary(path: str, name: str, meta: dict[str, Any], files: list[dict[str, Any]]) -> dict[str, Any]:
    """A checkpoint's summary from its metadata's and the sizes of its ``files`` (None: missing)."""
    missing = [f["name"] for f in files if f["bytes"] is None]
    summary = {"format": "inert-checkpoint", "path": path, "metadata": {"file": name, "format": meta["format"],
               "version": meta["version"], "bytes": meta["bytes"]}, "dcp_version": meta["dcp_version"],
               "tensors": meta["tensors"], "values": meta["values"], "files": files, "totals": meta["totals"]}
    summary["totals"]["file_bytes"] = sum(f["bytes"] or 0 for f in files) + meta["bytes"]
    if missing:
        summary["missing_files"] = missing
    return summary


def _dump_dir(path: str) -> dict[str, Any]:
    from inert.codecs import dump_manifest as codec

    meta = _inert_file(os.path.join(path, MANIFEST_NAME), codec, inside=True)
    return dump_summary(path, meta, _listing(path, [s["file"] for s in meta["shards"]]))


def dump_summary(path: str, meta: dict[str, Any], files: list[dict[str, Any]]) -> dict[str, Any]:
    """A dump's summary from its manifest's and the sizes of its shard ``files`` (None: missing)."""
    for entry, shard in zip(files, meta["shards"], strict=True):
        entry.update(owner=shard["owner"], rows=shard["rows"])
    summary = {"format": "dump", "path": path, "manifest": {"format": meta["format"], "version": meta["version"],
               "bytes": meta["bytes"]}, "partition_id": meta["partition_id"], "fields": meta["fields"],
               "keys": meta["keys"], "files": files, "totals": meta["totals"]}
    summary["totals"]["file_bytes"] = sum(f["bytes"] or 0 for f in files) + meta["bytes"]
    return summary


def _legacy_dir(path: str) -> dict[str, Any]:
    names = sorted(os.listdir(path))
    metadata = METADATA_NAME if METADATA_NAME in names else next(n for n in names if _RANK_METADATA.match(n))
    scan = _foreign.inspect_pickle(os.path.join(path, metadata), is_allowed, inside=True)
    refused = scan.pop("refused")
    data = [n for n in names if n.endswith(".distcp")]
    files = _listing(path, data)
    return {
        "format": "legacy-dcp-checkpoint", "path": path,
        "metadata": {"file": metadata, "bytes": scan["bytes"], "pickle": {k: v for k, v in scan.items()
                                                                          if k not in ("format", "path", "bytes")}},
        "outside_migrate_allowlist": refused, "files": files,
        "totals": {"files": len(files), "file_bytes": sum(f["bytes"] or 0 for f in files) + scan["bytes"]},
        "note": "a pickle checkpoint: loading it with torch.distributed.checkpoint unpickles .metadata "
                "(and non-tensor values with weights_only=False); `inert migrate` converts it",
    }


# -- text -----------------------------------------------------------------------------------------------------

def _shape(shape: Any) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _rows(lines: list[str], items: list[Any], fmt: Any, total: int | None = None) -> None:
    for item in items[:TEXT_ROWS]:
        lines.append("  " + fmt(item))
    more = (total if total is not None else len(items)) - min(len(items), TEXT_ROWS)
    if more > 0:
        lines.append(f"  ... {more} more (--json lists all)")


def _size(count: Any) -> str:
    return "missing" if count is None else human_bytes(int(count))


def render(s: dict[str, Any]) -> str:
    fmt = s["format"]
    lines = [f"{s['path']}: {_title(s)}"]
    if "tensors" in s and isinstance(s["tensors"], list) and fmt in ("inert-checkpoint", "checkpoint-metadata"):
        lines.append(f"tensors: {len(s['tensors'])}")
        _rows(lines, s["tensors"], lambda t: f"{t['fqn']}  {t['dtype']}  {_shape(t['shape'])}  {_size(t['bytes'])}"
              + (f"  {t['chunks']} chunks" if t["chunks"] != 1 else ""))
        lines.append(f"non-tensor values: {len(s['values'])}")
        _rows(lines, s["values"], lambda v: v["fqn"])
    if fmt == "checkpoint-shard":
        _rows(lines, s["records"], lambda r: (f"{r['fqn']}  " if "fqn" in r else "")
              + (f"tensor  {r['dtype']}  {_shape(r['shape'])}  {_size(r['bytes'])}" if r["kind"] == "tensor"
                 else f"value  {r['type']}"))
    if fmt in ("dump", "dump-manifest"):
        lines.append(f"partition: {s['partition_id']}")
        lines.append(f"fields: {len(s['fields'])}")
        _rows(lines, s["fields"], lambda f: f"{f['name']}  {f['layout']}" + (f"  {f['dtype']}" if "dtype" in f else "")
              + (f"  {_shape(f['shape'])}" if "shape" in f else "") + (f"  ndim {f['ndim']}" if "ndim" in f else ""))
        lines.append(f"keys: {s['totals']['keys']}")
        _rows(lines, s["keys"], str, s["totals"]["keys"])
    if fmt == "dump-shard":
        _rows(lines, s["fields"], lambda f: f"{f['name']}  in {f['rows']} rows")
    if fmt == "legacy-dcp-checkpoint":
        pickle = s["metadata"]["pickle"]
        lines.append(f"metadata: {s['metadata']['file']}, pickle protocol {pickle['protocol']}, "
                     f"{pickle['globals_total']} global references, {pickle['calls']} calls")
        _rows(lines, pickle["globals"], lambda g: g + ("" if is_allowed(g) else "  (NOT on the migrate allowlist)"))
        lines.append(f"note: {s['note']}")
    if fmt in ("pickle",):
        lines.append(f"protocol {s['protocol']}, {s['opcodes']} opcodes, {s['calls']} calls, "
                     f"{s['globals_total']} global references" + (f", error: {s['error']}" if s["error"] else ""))
        _rows(lines, s["globals"], str)
        if s["globals_total"] or s["extensions"]:
            lines.append("warning: unpickling this file imports and calls the globals above")
    if fmt == "torch-save-zip":
        pkl = s["data_pkl"]
        lines.append(f"{s['storages']} storages, {_size(s['storage_bytes'])}")
        if "protocol" in pkl:
            lines.append(f"data.pkl: protocol {pkl['protocol']}, {pkl['globals_total']} global references, "
                         f"{pkl['calls']} calls")
            _rows(lines, pkl["globals"], str)
        else:
            lines.append(f"data.pkl: {pkl['error']}")
    if fmt == "safetensors":
        _rows(lines, s["tensors"], lambda t: f"{t['name']}  {t['dtype']}  {_shape(t['shape'] or [])}  {t['bytes']} B",
              s["tensors_total"])
    if "files" in s and fmt in ("inert-checkpoint", "dump", "legacy-dcp-checkpoint"):
        lines.append(f"files: {len(s['files'])}")
        _rows(lines, s["files"], lambda f: f"{f['name']}  {_size(f['bytes'])}" + (f"  {f['rows']} rows" if "rows" in f else ""))
    if "totals" in s:
        lines.append("total: " + ", ".join(f"{k.replace('_', ' ')} {human_bytes(v) if k.endswith('bytes') else v}"
                                           for k, v in s["totals"].items()))
    if fmt.startswith("shm-"):
        lines.append(json.dumps(s["value"], sort_keys=True)[:2000])
    if "note" in s and fmt != "legacy-dcp-checkpoint":
        lines.append(f"note: {s['note']}")
    if s.get("missing_files"):
        lines.append(f"missing: {', '.join(s['missing_files'])}")
    return "\n".join(lines) + "\n"


def _title(s: dict[str, Any]) -> str:
    fmt = s["format"]
    if fmt == "inert-checkpoint":
        meta = s["metadata"]
        return f"Inert checkpoint ({meta['format']} v{meta['version']}, DCP {s['dcp_version'] or 'before 2.9'})"
    if fmt == "dump":
        return f"Inert dump ({s['manifest']['format']} v{s['manifest']['version']})"
    if fmt == "legacy-dcp-checkpoint":
        return "legacy torch.distributed.checkpoint directory (pickle; not Inert)"
    if fmt == "pickle":
        return "a pickle (not Inert)"
    if fmt == "torch-save-zip":
        return "a torch.save zip archive (pickle inside; not Inert)"
    if fmt == "safetensors":
        return f"a safetensors file ({s['tensors_total']} tensors; not Inert)"
    if fmt == "zip":
        return "a zip archive (not Inert)"
    if fmt == "unknown":
        return f"not a known format: {s['reason']}"
    return f"Inert {fmt} v{s['version']}, {human_bytes(s['bytes'])}"


# -- object stores ----------------------------------------------------------------------------------------------

def _inspect_source(source: Source) -> dict[str, Any]:
    """What an object-store location holds: its metadata or manifest in one bounded request, sizes from the listing."""
    from inert.codecs import checkpoint_metadata, dump_manifest

    kind, url, sizes = source_kind(source), source.location, source.names()

    def files(names: list[str]) -> list[dict[str, Any]]:
        return [{"name": name, "bytes": sizes.get(name)} for name in names]

    if kind == "dump":
        meta = inert_view(source.read_whole(MANIFEST_NAME, dump_manifest.MAX_SIZE), dump_manifest,
                          source.where(MANIFEST_NAME))
        return dump_summary(url, meta, files([s["file"] for s in meta["shards"]]))
    if kind == "inert-checkpoint":
        meta = inert_view(source.read_whole(METADATA_NAME, checkpoint_metadata.MAX_SIZE), checkpoint_metadata,
                          source.where(METADATA_NAME))
        return checkpoint_summary(url, METADATA_NAME, meta, files(meta["files"]))
    if kind == "legacy-dcp-checkpoint":
        return {"format": "unknown", "path": url, "reason": "a legacy pickle checkpoint (torch.distributed.checkpoint's "
                "own format), not Inert: copy it to a local directory and convert it with `inert migrate`"}
    return {"format": "unknown", "path": url, "reason": "no .metadata or MANIFEST object: not a checkpoint or dump"}
