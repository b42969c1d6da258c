"""``inert migrate SRC DST --trust-source``: a legacy pickle DCP checkpoint, converted into Inert's format.

Trust model.  A legacy checkpoint is pickle: loading it the usual way
(``dcp.load`` with DCP's ``FileSystemReader``) runs whatever its ``.metadata``
and its non-tensor values name.  This command reads it with three narrower
readers, none of which runs code the checkpoint chooses:

* ``.metadata``: an unpickler whose ``find_class`` answers only DCP's
  metadata classes and the torch values they hold (``inert._allowlist``); any other
  global refuses the file before anything is called;
* tensors: DCP's own reader, which reads every chunk with
  ``torch.load(weights_only=True)``;
* non-tensor values: ``torch.load(weights_only=True)`` here, instead of the
  ``weights_only=False`` of DCP's default planner.

They are still pickle readers (torch's restricted unpickler has had
vulnerabilities, and neither bounds memory the way Inert's readers do), so
the command runs only with ``--trust-source``: the caller states that the
checkpoint comes from someone they trust.  Before any byte of data is read,
the metadata's byte ranges must lie inside plain files of SRC and the tensors
it declares must fit in the bytes present.

The whole state dict is loaded into memory (each tensor whole, whatever its
sharding) and saved with ``inert.torch.FileSystemWriter``, then DST is
checked with the code of ``inert verify`` and loaded back and compared with
the source.  Every fault of SRC is an ``InertError`` of format
``legacy-dcp-checkpoint`` whose field starts with the file's name in SRC.  Nested state dicts keep their
fqns and planner data: the flat keys are nested again with the source's own
mapping before saving.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import re
import shutil
import sys
import warnings
from typing import Any

from inert._errors import FileKindError, InertError, InvalidValueError, LimitError, TruncatedError
from inert._files import open_in
from inert.cli._migration import LEGACY_FORMAT, MAX_DEPTH, Migration, check_depth, inner_failure, save_state, why
from inert.cli.convert import SAFETENSORS, TORCH_SAVE, convert, source_kind
from inert.cli.inspect import METADATA_NAME, directory_kind
from inert.cli.support import INVALID, OK, USAGE, CommandError, Progress, fail, human_bytes

__all__ = ["add_parser", "run", "identify", "migrate", "Migration", "MAX_METADATA", "MAX_NDIM", "MAX_CHUNKS", "MAX_DEPTH",
           "LEGACY_FORMAT"]

#: Largest legacy ``.metadata`` read (about 512-way sharding of a 70B model with Adam is 150 MiB).
MAX_METADATA = 1 << 30
#: Most dims of a tensor (as in an Inert checkpoint).
MAX_NDIM = 64
#: Most chunks of all tensors together (as many as an Inert checkpoint has entries).
MAX_CHUNKS = 1 << 22
_MAX_DIM = (1 << 63) - 1
_TORCH_SIZE: Any = None  # torch.Size, once torch is imported (the module imports without it)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}\Z")

HELP = """\
Convert a legacy torch.distributed.checkpoint directory (pickle .metadata,
torch.save chunks in .distcp files, written by DCP's own FileSystemWriter)
into an Inert checkpoint in DST (a new or empty directory).

Also converts a torch.save file of a dict (read with
torch.load(weights_only=True): needs --trust-source) and a safetensors file
or a directory of *.safetensors files (no trust needed: safetensors runs
nothing). Their tensors keep their names (a nested dict's become
"model.fc.weight", as dcp.save names them); after writing, DST is verified
and every tensor is read back with inert.torch.load_tensors and compared
with the source.

Trust model: a legacy checkpoint is pickle, and loading it the usual way runs
whatever it names. This command never does: .metadata goes through an
unpickler that answers only DCP's metadata classes, torch.Size, dtypes,
layouts, memory formats, OrderedDict and paths (anything else, e.g.
os.system, refuses the file before anything runs); tensors and non-tensor
values are read with torch.load(weights_only=True). Those are still pickle
readers with a larger attack surface than Inert's (torch's restricted
unpickler has had vulnerabilities; memory is not bounded as tightly), so
the command runs only with --trust-source, by which you state that the
checkpoint comes from a source you trust. Run `inert inspect SRC` first: it
lists the globals .metadata names without unpickling anything.

SRC is identified first: an Inert checkpoint, a dump, or anything else
migrate does not convert is said so in one line, before any trust is asked.

The state dict is loaded whole into memory (RAM of about the checkpoint's
size), saved with inert.torch.FileSystemWriter (each tensor as one chunk;
DCP reshards on load), DST is verified as `inert verify` does, then loaded
back and compared with the source, tensor for tensor and value for value.
Bounds on a legacy .metadata (see docs/cli.md): 64 dims, 2**22 chunks,
containers nested 64 deep.

exit codes: 0 converted and verified; 1 SRC is refused or invalid (the
allowlist, a value weights_only refuses, a damaged file) or DST fails
verification; 2 usage or I/O error, including a missing --trust-source.
"""


def add_parser(sub: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        "migrate", help="convert a legacy DCP checkpoint or a torch.save file (both need --trust-source), or safetensors",
        description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("src", metavar="SRC", help="a legacy DCP checkpoint directory, a torch.save file, "
                        "a safetensors file or a directory of them")
    parser.add_argument("dst", metavar="DST", help="the new Inert checkpoint directory (absent or empty)")
    parser.add_argument("--trust-source", action="store_true",
                        help="state that SRC comes from a trusted source (required: see above)")
    return parser


def identify(src: str) -> str:
    """What ``src`` is, before anything is unpickled: ``legacy-dcp-checkpoint``, ``torch-save`` or
    ``safetensors`` (what migrate converts), ``legacy-rank-local``, ``inert-checkpoint``, ``dump``,
    ``missing`` or ``unknown``."""
    if not os.path.lexists(src):
        return "missing"
    kind = source_kind(src)
    if kind is not None:
        return kind
    if os.path.isdir(src):
        try:
            kind = directory_kind(src)
        except InertError:  # a .metadata that is a link or a FIFO: the legacy reader refuses it by name
            return "legacy-dcp-checkpoint"
        if kind == "legacy-dcp-checkpoint" and not os.path.lexists(os.path.join(src, METADATA_NAME)):
            return "legacy-rank-local"
        return kind
    return "unknown"


#: Why SRC cannot be converted, by what it is.
_NOT_CONVERTED = {
    "missing": "no such file or directory",
    "inert-checkpoint": "already an Inert checkpoint: nothing to migrate (`inert verify` checks it)",
    "dump": "an Inert dump: nothing to migrate (`inert verify` checks it)",
    "legacy-rank-local": "a legacy DCP checkpoint with only rank-local metadata (__N.metadata): not supported; "
                         "load it with each rank and save it again",
    "unknown": "neither a legacy DCP checkpoint, a torch.save file nor safetensors (a file or a directory of "
               "*.safetensors): nothing migrate converts (`inert inspect` says what it is)",
}


def run(args: argparse.Namespace) -> int:
    kind = identify(args.src)
    if kind in _NOT_CONVERTED:
        return fail("migrate", CommandError(f"{args.src}: {_NOT_CONVERTED[kind]}",
                                            USAGE if kind == "missing" else INVALID))
    if kind != SAFETENSORS and not args.trust_source:  # safetensors executes nothing: no trust needed
        what = ("a torch.save file is pickle; this command reads it with torch.load(weights_only=True)" if kind == TORCH_SAVE
                else "a legacy checkpoint is pickle; this command reads it through an allowlisted unpickler and "
                "torch.load(weights_only=True)")
        return fail("migrate", CommandError(
            f"refusing to read {args.src} without --trust-source: {what}, which is narrower than pickle but "
            "not safe against a hostile file (see `inert migrate --help`; `inert inspect` reads it without unpickling)"))
    try:
        done = migrate(args.src, args.dst) if kind == "legacy-dcp-checkpoint" else convert(args.src, args.dst, kind)
    except CommandError as exc:
        return fail("migrate", exc)
    except InertError as exc:  # a fault of SRC: the line names SRC, the error the file in it and the field
        return fail("migrate", CommandError(f"{args.src}: {exc}", INVALID))
    print(f"inert: migrate: converted {done.tensors} tensors ({human_bytes(done.tensor_bytes)} in {done.chunks} "
          f"chunks) and {done.values} non-tensor values from {args.src} into {args.dst}")
    print(f"inert: migrate: verify: {done.verdict}")
    return OK


def _refusal(field: str, reason: str, kind: type[InertError] = InvalidValueError, offset: int = -1) -> InertError:
    """A fault of the legacy checkpoint: ``field`` starts with the name of the file in SRC it is in."""
    return kind(LEGACY_FORMAT, offset, field, reason)


def _check_dirs(src: str, dst: str) -> None:
    if not os.path.isdir(src):
        raise CommandError(f"{src}: no such directory")
    kind = directory_kind(src)
    if kind != "legacy-dcp-checkpoint":
        raise CommandError(f"{src} is {_what_kind(kind)}: migrate converts legacy pickle DCP checkpoints", INVALID)
    if not os.path.lexists(os.path.join(src, METADATA_NAME)):
        raise CommandError(f"{src} has only rank-local metadata (__N.metadata): not supported; "
                           "load it with each rank and save it again", INVALID)
    if os.path.exists(dst) and (not os.path.isdir(dst) or os.listdir(dst)):
        raise CommandError(f"{dst} exists and is not an empty directory")


def _what_kind(kind: str) -> str:
    return {"inert-checkpoint": "already an Inert checkpoint", "dump": "an Inert dump"}.get(kind, "not a checkpoint")


def _read_metadata(src: str) -> Any:
    from inert._allowlist import MalformedPickle, RefusedGlobal, load_legacy_metadata

    path = os.path.join(src, METADATA_NAME)
    try:
        with os.fdopen(open_in(src, METADATA_NAME, LEGACY_FORMAT), "rb") as handle:
            data = handle.read(MAX_METADATA + 1)
    except FileKindError:
        raise
    except OSError as exc:
        raise CommandError(f"{path}: {exc.strerror}") from None
    if len(data) > MAX_METADATA:
        raise _refusal(METADATA_NAME, f"larger than {MAX_METADATA} bytes", LimitError, MAX_METADATA)
    try:
        return load_legacy_metadata(data)
    except RefusedGlobal as exc:
        raise _refusal(METADATA_NAME, f"refused by the allowlist: {exc}; nothing it names was run",
                       offset=exc.offset) from None
    except MalformedPickle as exc:
        raise _refusal(METADATA_NAME, f"not a DCP Metadata pickle: {exc.reason}",
                       TruncatedError if exc.truncated else InvalidValueError, exc.offset) from None


def _dims(field: str, dims: Any, ndim: int | None = None) -> tuple[int, ...]:
    """``dims`` as a tuple of ints 0..2**63-1 (``ndim`` of them when given), else a refusal naming ``field``."""
    if not isinstance(dims, (tuple, list)) or len(dims) > MAX_NDIM:
        raise _refusal(field, f"is not a list of at most {MAX_NDIM} dims")
    if ndim is not None and len(dims) != ndim:
        raise _refusal(field, f"has {len(dims)} dims, the tensor has {ndim}")
    if _TORCH_SIZE is not None and type(dims) is _TORCH_SIZE and (not dims or 0 <= min(dims) <= max(dims) <= _MAX_DIM):
        return tuple(dims)  # the common case, in C: a torch.Size holds only ints
    for index, dim in enumerate(dims):
        if type(dim) is not int or not 0 <= dim <= _MAX_DIM:
            shown = dim if type(dim) is int else type(dim).__name__
            raise _refusal(f"{field}[{index}]", f"{shown} is not an int from 0 to 2**63-1")
    return tuple(dims)


def _check_metadata(src: str, metadata: Any) -> tuple[int, int, int]:
    """The metadata's shape and every number in it, before anything trusts them: each tensor's size and
    chunks (ints 0..2**63-1, at most ``MAX_NDIM`` dims, chunks inside the tensor tiling it exactly, at most
    ``MAX_CHUNKS`` in all), each record in a plain file of ``src``, the declared tensors fitting in the
    bytes present, the planner data nested at most ``MAX_DEPTH`` deep.

    Returns (tensor bytes, value bytes, chunks): what the load will read.
    """
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        ChunkStorageMetadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    from inert._records import check_tiling

    global _TORCH_SIZE
    _TORCH_SIZE = torch.Size
    where = METADATA_NAME
    entries = getattr(metadata, "state_dict_metadata", None)
    storage = getattr(metadata, "storage_data", None)
    if not isinstance(entries, dict) or not all(type(k) is str for k in entries):
        raise _refusal(f"{where}.state_dict_metadata", "is not a dict of fqns")
    if storage is None:
        storage = {}
    if not isinstance(storage, dict):
        raise _refusal(f"{where}.storage_data", "is not a dict")
    check_depth(f"{where}.planner_data", getattr(metadata, "planner_data", None))
    sizes: dict[str, int] = {}
    value_bytes = 0
    for key, info in storage.items():
        if not isinstance(key, MetadataIndex) or type(key.fqn) is not str:
            raise _refusal(f"{where}.storage_data", f"a key of type {type(key).__name__} is not DCP's MetadataIndex")
        field = f"{where}.storage_data[{key.fqn!r}]"
        if not isinstance(info, _StorageInfo) or type(info.relative_path) is not str:
            raise _refusal(field, "is not DCP's file-system location")
        name = info.relative_path
        if not _PLAIN_NAME.match(name):
            raise _refusal(f"{field}.relative_path", f"{name!r} is not a plain file name inside SRC")
        if getattr(info, "transform_descriptors", None):
            raise _refusal(field, "stream transforms are not supported")
        if name not in sizes:
            try:  # a regular file inside src: no link followed, no FIFO that would block the load
                fd = open_in(src, name, LEGACY_FORMAT)
            except FileNotFoundError:
                raise _refusal(name, "missing: the metadata has records in it") from None
            try:
                sizes[name] = os.fstat(fd).st_size
            finally:
                os.close(fd)
        if not (type(info.offset) is int and type(info.length) is int
                and 0 <= info.offset and 0 <= info.length and info.offset + info.length <= sizes[name]):
            shown = (info.offset, info.length) if all(type(v) is int for v in (info.offset, info.length)) else "?"
            raise _refusal(field, f"record at (offset, length) {shown} lies outside {name} ({sizes[name]} bytes)")
    tensor_bytes = chunks = 0
    for fqn, md in entries.items():
        field = f"{where}.{fqn}"
        if isinstance(md, BytesStorageMetadata):
            if MetadataIndex(fqn) not in storage:
                raise _refusal(field, "a value with no storage record")
            continue
        if not isinstance(md, TensorStorageMetadata) or not isinstance(md.properties, TensorProperties):
            raise _refusal(field, f"a {type(md).__name__}: only dense tensors and values can be migrated")
        if not isinstance(md.properties.dtype, torch.dtype) or md.properties.layout != torch.strided:
            raise _refusal(f"{field}.properties", "only dense tensors of a torch dtype can be migrated")
        if type(md.properties.requires_grad) is not bool:
            raise _refusal(f"{field}.properties.requires_grad", "is not a bool")
        size = _dims(f"{field}.size", md.size)
        nbytes = math.prod(size) * md.properties.dtype.itemsize
        if nbytes > _MAX_DIM:
            raise _refusal(f"{field}.size", f"{size} of {md.properties.dtype} is {nbytes} bytes, above 2**63-1")
        if not isinstance(md.chunks, list):
            raise _refusal(f"{field}.chunks", "is not a list")
        chunks += len(md.chunks)
        if chunks > MAX_CHUNKS:
            raise _refusal(f"{field}.chunks", f"more than max_chunks({MAX_CHUNKS}) chunks in all", LimitError)
        boxes = []
        first: dict[int, int] = {}
        for index, chunk in enumerate(md.chunks):
            at = f"{field}.chunks[{index}]"
            if type(chunk) is not ChunkStorageMetadata:
                raise _refusal(at, f"a {type(chunk).__name__}, not DCP's ChunkStorageMetadata")
            if first.setdefault(id(chunk), index) != index:  # DCP pickles each chunk once; a memo reference repeats it
                raise _refusal(at, f"the same chunk object as chunks[{first[id(chunk)]}]")
            offsets = _dims(f"{at}.offsets", chunk.offsets, len(size))
            lengths = _dims(f"{at}.sizes", chunk.sizes, len(size))
            if any(o + n > d for o, n, d in zip(offsets, lengths, size, strict=True)):
                raise _refusal(at, f"offsets {offsets} and sizes {lengths} reach outside the tensor's size {size}")
            boxes.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(lengths)))
        try:
            check_tiling(fqn, torch.Size(size), boxes)
        except InertError as exc:
            raise _refusal(f"{where}.{exc.field}", exc.reason, type(exc)) from None
        for index, box in enumerate(boxes):
            if MetadataIndex(fqn, box.offsets) not in storage:
                raise _refusal(f"{field}.chunks[{index}]", f"the chunk at {tuple(box.offsets)} has no storage record")
        tensor_bytes += nbytes
    for key, info in storage.items():
        if isinstance(entries.get(key.fqn), BytesStorageMetadata):
            value_bytes += info.length
    if tensor_bytes > sum(sizes.values()):  # torch.save stores raw bytes: a tensor never takes less room
        raise _refusal(where, f"the metadata declares {tensor_bytes} bytes of tensors, the data files hold "
                       f"{sum(sizes.values())}")
    return tensor_bytes, value_bytes, chunks


def _load(src: str, metadata: Any, progress: Progress) -> dict[str, Any]:
    """The flat state dict: tensors through DCP's reader (weights_only), values through weights_only here."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    from inert.cli._pickle_depth import torch_save_depth
    from inert.torch import TORCH_VERSION

    class Reader(dcp.FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:  # the allowlisted copy, never pickle.load
            return metadata

    class Planner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            fqn = read_item.dest_index.fqn
            data = value.getvalue()
            if torch_save_depth(data, MAX_DEPTH) > MAX_DEPTH:  # before torch's unpickler hashes what it builds
                refusals.append(_refusal(_file_of(read_item), f"{fqn}: nests objects more than {MAX_DEPTH} deep",
                                         LimitError, _offset_of(read_item)))
                raise refusals[-1]
            try:
                loaded = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            except Exception as exc:  # noqa: BLE001 - torch.load raises many kinds for a refused pickle
                refusals.append(_refusal(_file_of(read_item), f"{fqn}: torch.load(weights_only=True) refused the "
                                         f"value: {why(exc)}", offset=_offset_of(read_item)))
                raise
            try:
                check_depth(f"{_file_of(read_item)}: {fqn}", loaded)
            except InertError as exc:
                refusals.append(exc)
                raise
            self.state_dict[fqn] = loaded
            progress.advance(len(data))

        def commit_tensor(self, read_item: Any, tensor: Any) -> None:
            progress.advance(tensor.numel() * tensor.element_size())

    def _file_of(read_item: Any) -> str:
        info = metadata.storage_data.get(read_item.storage_index)
        return info.relative_path if info is not None else METADATA_NAME

    def _offset_of(read_item: Any) -> int:
        info = metadata.storage_data.get(read_item.storage_index)
        return info.offset if info is not None else -1

    state: dict[str, Any] = {}
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            state[fqn] = None
            continue
        try:  # the sizes are checked ints and the bytes fit in the files: only memory can fail here
            state[fqn] = torch.empty(tuple(md.size), dtype=md.properties.dtype)
        except (RuntimeError, MemoryError) as exc:
            raise _refusal(f"{METADATA_NAME}.{fqn}", f"a tensor of size {tuple(md.size)} cannot be allocated: "
                           f"{why(exc)}", LimitError) from None
    _check_tensor_records(src, metadata)
    options: dict[str, Any] = {} if TORCH_VERSION < (2, 5) else {"no_dist": True}
    refusals: list[InertError] = []
    try:
        with warnings.catch_warnings():  # DCP warns that it runs in one process: that is the intent
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
            warnings.filterwarnings("ignore", ".*weights_only Unpickler might not support")  # the refusal says it
            dcp.load(state, storage_reader=Reader(src),
                     planner=Planner(flatten_state_dict=False, flatten_sharded_tensors=False), **options)
    except BaseException as exc:  # DCP wraps every rank's failure in a CheckpointException (a BaseException)
        if refusals:
            raise refusals[0] from None
        if not isinstance(exc, Exception) and not hasattr(exc, "failures"):
            raise  # KeyboardInterrupt, SystemExit
        inner = inner_failure(exc)
        item = _failed_item(inner)
        info = metadata.storage_data.get(item.storage_index) if item is not None else None
        if info is None:
            raise _refusal("", f"reading failed: {why(inner)}") from None
        raise _refusal(f"{info.relative_path}: {item.storage_index.fqn}",  # type: ignore[union-attr]
                       f"torch.load(weights_only=True) refused the tensor record: {why(inner)}",
                       offset=info.offset) from None
    for fqn, md in metadata.state_dict_metadata.items():
        if not isinstance(md, BytesStorageMetadata) and md.properties.requires_grad and state[fqn].is_floating_point():
            state[fqn].requires_grad_(True)
    return state


def _check_tensor_records(src: str, metadata: Any) -> None:
    """Every tensor record's pickle nests at most ``MAX_DEPTH`` deep, read from its opcodes before DCP's reader
    gives the record to torch's unpickler, which would hash a dict key of a million nested tuples in C without
    a depth check (a segfault).  Only each record's ``data.pkl`` is read, not the tensor's bytes."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    from inert.cli._pickle_depth import record_depth

    by_file: dict[str, list[Any]] = {}
    for key, info in metadata.storage_data.items():
        if not isinstance(metadata.state_dict_metadata.get(key.fqn), BytesStorageMetadata):
            by_file.setdefault(info.relative_path, []).append((key, info))
    for name, records in by_file.items():
        fd = open_in(src, name, LEGACY_FORMAT)
        try:
            for key, info in records:
                if record_depth(fd, info.offset, info.length, MAX_DEPTH) > MAX_DEPTH:
                    raise _refusal(f"{name}: {key.fqn}", f"the tensor record nests objects more than {MAX_DEPTH} deep",
                                   LimitError, info.offset)
        finally:
            os.close(fd)


def _failed_item(exc: BaseException) -> Any:
    """The ``ReadItem`` DCP's reader was reading when ``exc`` was raised (its frame's ``req``), or None."""
    tb = exc.__traceback__
    found = None
    while tb is not None:
        req = tb.tb_frame.f_locals.get("req") if tb.tb_frame.f_code.co_name == "read_data" else None
        if req is not None and hasattr(req, "storage_index"):
            found = req
        tb = tb.tb_next
    return found


def _nest(state: dict[str, Any], planner_data: Any) -> tuple[dict[str, Any], bool]:
    """The state dict nested as the source's planner data says, when it is DCP's flattening map."""
    from torch.distributed.checkpoint._nested_dict import unflatten_state_dict

    if not isinstance(planner_data, dict) or set(planner_data) != set(state):
        return state, False
    for path in planner_data.values():
        if not isinstance(path, tuple) or not path or not all(isinstance(p, (str, int)) for p in path):
            return state, False
    return unflatten_state_dict(state, planner_data), True


def migrate(src: str, dst: str, *, show_progress: bool = True) -> Migration:
    """Convert ``src`` (legacy) into ``dst`` (Inert) and verify it; a ``CommandError`` says why not."""
    import torch
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    from inert.cli.verify import verify_path
    from inert.torch import TORCH_VERSION

    _check_dirs(src, dst)
    metadata = _read_metadata(src)
    # Before any tensor or value is read: the load below runs through dcp.load, which 2.2 runs
    # only in a process group and 2.3 runs dropping nested values.
    if TORCH_VERSION < (2, 4):
        raise CommandError(f"migrate needs PyTorch 2.4 or later (found {torch.__version__})")
    try:
        tensor_bytes, value_bytes, chunks = _check_metadata(src, metadata)
    except InertError:
        raise
    except (AttributeError, TypeError, ValueError, KeyError) as exc:  # allowed classes missing their attributes
        raise _refusal(METADATA_NAME, f"malformed DCP metadata: {type(exc).__name__}: {why(exc)}") from None
    stream = sys.stderr if show_progress else io.StringIO()
    progress = Progress("migrate: reading", tensor_bytes + value_bytes, stream=stream)
    try:
        state = _load(src, metadata, progress)
    finally:
        progress.close()
    nested, is_nested = _nest(state, metadata.planner_data)
    created = not os.path.exists(dst)  # else an empty directory (checked above): a failure leaves it as it was
    os.makedirs(dst, exist_ok=True)
    progress = Progress("migrate: writing", tensor_bytes, stream=stream)
    try:
        save_state(nested, is_nested, dst, progress)
    except BaseException:
        if created:
            shutil.rmtree(dst, ignore_errors=True)
        else:
            for name in os.listdir(dst):
                full = os.path.join(dst, name)
                shutil.rmtree(full) if os.path.isdir(full) else os.unlink(full)
        raise
    finally:
        progress.close()
    report = verify_path(dst, show_progress=show_progress)
    if not report.ok:
        raise CommandError(f"{dst}: the converted checkpoint fails verification: {report.verdict()}", INVALID)
    _check_readback(dst, state)
    values = sum(isinstance(md, BytesStorageMetadata) for md in metadata.state_dict_metadata.values())
    tensors = len(metadata.state_dict_metadata) - values
    return Migration(tensors=tensors, tensor_bytes=tensor_bytes, values=values, chunks=chunks, files=report.files,
                     verdict=report.verdict() + f"; {tensors} tensors and {values} values read back equal to the source")


def _same(got: Any, want: Any) -> bool:
    """Equal types and values; tensors bit for bit, floats by their bits (a NaN equals itself); depth is
    bounded by ``MAX_DEPTH`` (checked on load)."""
    import struct

    import torch

    if type(got) is not type(want):
        return False
    if isinstance(want, torch.Tensor):
        if got.dtype != want.dtype or got.shape != want.shape:
            return False
        if not want.numel():
            return True
        raw = want.detach().contiguous().reshape(-1).view(torch.uint8)
        return torch.equal(raw, got.detach().contiguous().reshape(-1).view(torch.uint8))
    if isinstance(want, float):
        return struct.pack("<d", got) == struct.pack("<d", want)
    if isinstance(want, dict):
        return got.keys() == want.keys() and all(_same(got[k], v) for k, v in want.items())
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want, strict=True))
    try:
        return bool(got == want)
    except Exception:  # noqa: BLE001 - a value type whose == does not answer a bool (a numpy array)
        return repr(got) == repr(want)


def _check_readback(dst: str, state: dict[str, Any]) -> None:
    """``dst`` loaded back through Inert's reader equals ``state`` (the source's flat state dict: its keys
    are the fqns of the checkpoint, tensors and values its leaves), value for value."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    from inert.torch import FileSystemReader
    from inert.torch._compat import no_dist_options

    loaded = {k: torch.empty_like(v) if isinstance(v, torch.Tensor) else None for k, v in state.items()}
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
            planner = DefaultLoadPlanner(flatten_state_dict=False, flatten_sharded_tensors=False)  # loads into `loaded`
            dcp.load(loaded, storage_reader=FileSystemReader(dst), planner=planner,
                     **no_dist_options(dcp.load))
    except BaseException as exc:
        if not isinstance(exc, Exception) and not hasattr(exc, "failures"):
            raise
        raise CommandError(f"{dst}: the converted checkpoint does not load back: {why(inner_failure(exc))}", INVALID) from None
    for key, want in state.items():
        if key not in loaded or not _same(loaded[key], want):
            raise CommandError(f"{dst}: read back, {key!r} differs from the source's", INVALID)


_ = USAGE  # exit code 2 (usage, I/O, no --trust-source) is CommandError's default
