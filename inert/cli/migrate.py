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
checked with the code of ``inert verify``.  Nested state dicts keep their
fqns and planner data: the flat keys are nested again with the source's own
mapping before saving.
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import re
import shutil
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from inert._errors import FileKindError
from inert._files import open_in
from inert.cli.inspect import METADATA_NAME, directory_kind
from inert.cli.support import INVALID, OK, USAGE, CommandError, Progress, fail, human_bytes

__all__ = ["add_parser", "run", "migrate", "Migration", "MAX_METADATA"]

#: Largest legacy ``.metadata`` read (about 512-way sharding of a 70B model with Adam is 150 MiB).
MAX_METADATA = 1 << 30
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

The state dict is loaded whole into memory (RAM of about the checkpoint's
size), saved with inert.torch.FileSystemWriter (each tensor as one chunk;
DCP reshards on load), and DST is verified as `inert verify` does.

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


@dataclass
class Migration:
    """What was converted."""

    tensors: int
    tensor_bytes: int
    values: int
    chunks: int
    files: int
    verdict: str


def run(args: argparse.Namespace) -> int:
    from inert.cli.convert import SAFETENSORS, TORCH_SAVE, convert, source_kind

    kind = source_kind(args.src)
    if kind != SAFETENSORS and not args.trust_source:  # safetensors executes nothing: no trust needed
        what = ("a torch.save file is pickle; this command reads it with torch.load(weights_only=True)" if kind == TORCH_SAVE
                else "a legacy checkpoint is pickle; this command reads it through an allowlisted unpickler and "
                "torch.load(weights_only=True)")
        return fail("migrate", CommandError(
            f"refusing to read {args.src} without --trust-source: {what}, which is narrower than pickle but "
            "not safe against a hostile file (see `inert migrate --help`; `inert inspect` reads it without unpickling)"))
    try:
        done = migrate(args.src, args.dst) if kind is None else convert(args.src, args.dst, kind)
    except CommandError as exc:
        return fail("migrate", exc)
    print(f"inert: migrate: converted {done.tensors} tensors ({human_bytes(done.tensor_bytes)} in {done.chunks} "
          f"chunks) and {done.values} non-tensor values from {args.src} into {args.dst}")
    print(f"inert: migrate: verify: {done.verdict}")
    return OK


def _check_dirs(src: str, dst: str) -> None:
    if not os.path.isdir(src):
        raise CommandError(f"{src}: no such directory")
    kind = directory_kind(src)
    if kind != "legacy-dcp-checkpoint":
        what = {"inert-checkpoint": "already an Inert checkpoint", "dump": "an Inert dump"}.get(kind, "not a checkpoint")
        raise CommandError(f"{src} is {what}: migrate converts legacy pickle DCP checkpoints", INVALID)
    if not os.path.lexists(os.path.join(src, METADATA_NAME)):
        raise CommandError(f"{src} has only rank-local metadata (__N.metadata): not supported; "
                           "load it with each rank and save it again", INVALID)
    if os.path.exists(dst) and (not os.path.isdir(dst) or os.listdir(dst)):
        raise CommandError(f"{dst} exists and is not an empty directory")


def _read_metadata(src: str) -> Any:
    from inert._allowlist import RefusedGlobal, load_legacy_metadata

    path = os.path.join(src, METADATA_NAME)
    try:
        with os.fdopen(open_in(src, METADATA_NAME, "legacy-dcp-metadata"), "rb") as handle:
            data = handle.read(MAX_METADATA + 1)
    except FileKindError as exc:
        raise CommandError(f"{path}: {exc.reason}", INVALID) from None
    except OSError as exc:
        raise CommandError(f"{path}: {exc.strerror}") from None
    if len(data) > MAX_METADATA:
        raise CommandError(f"{path}: larger than {MAX_METADATA} bytes", INVALID)
    try:
        return load_legacy_metadata(data)
    except RefusedGlobal as exc:
        raise CommandError(f"{path}: refused by the allowlist: {exc}; nothing it names was run", INVALID) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, KeyError, IndexError,
            RecursionError, MemoryError, RuntimeError) as exc:  # RuntimeError: TensorProperties' own checks
        raise CommandError(f"{path}: not a DCP Metadata pickle: {type(exc).__name__}: {exc}", INVALID) from None


def _check_metadata(src: str, metadata: Any) -> tuple[int, int, int]:
    """Every record lies in a plain file of ``src``; the declared tensors fit in the bytes present.

    Returns (tensor bytes, value bytes, chunks): what the load will read.
    """
    import torch
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata

    sizes: dict[str, int] = {}
    value_bytes = 0
    for key, info in (metadata.storage_data or {}).items():
        if not isinstance(info, _StorageInfo) or not isinstance(info.relative_path, str):
            raise CommandError(f"{key.fqn}: storage location {info!r} is not DCP's file-system location", INVALID)
        name = info.relative_path
        if not _PLAIN_NAME.match(name):
            raise CommandError(f"{key.fqn}: data file {name!r} is not a plain file name inside {src}", INVALID)
        if getattr(info, "transform_descriptors", None):
            raise CommandError(f"{key.fqn}: stream transforms {info.transform_descriptors} are not supported", INVALID)
        if name not in sizes:
            full = os.path.join(src, name)
            try:  # a regular file inside src: no link followed, no FIFO that would block the load
                fd = open_in(src, name, "legacy-dcp-checkpoint")
            except FileNotFoundError:
                raise CommandError(f"{full}: missing: the metadata has records in it", INVALID) from None
            except FileKindError as exc:
                raise CommandError(f"{full}: {exc.reason}", INVALID) from None
            try:
                sizes[name] = os.fstat(fd).st_size
            finally:
                os.close(fd)
        if not (isinstance(info.offset, int) and isinstance(info.length, int)
                and 0 <= info.offset and 0 <= info.length and info.offset + info.length <= sizes[name]):
            raise CommandError(f"{key.fqn}: record at {info.offset} of {info.length} bytes lies outside {name}", INVALID)
    tensor_bytes = chunks = 0
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            continue
        if not isinstance(md, TensorStorageMetadata) or md.properties.layout != torch.strided:
            raise CommandError(f"{fqn}: only dense tensors and values can be migrated", INVALID)
        numel = 1
        for dim in md.size:
            if type(dim) is not int or dim < 0:
                raise CommandError(f"{fqn}: size {tuple(md.size)} is not a list of non-negative ints", INVALID)
            numel *= dim
        tensor_bytes += numel * md.properties.dtype.itemsize
        chunks += len(md.chunks)
    for key, info in (metadata.storage_data or {}).items():
        if isinstance(metadata.state_dict_metadata.get(key.fqn), BytesStorageMetadata):
            value_bytes += info.length
    if tensor_bytes > sum(sizes.values()):  # torch.save stores raw bytes: a tensor never takes less room
        raise CommandError(f"the metadata declares {tensor_bytes} bytes of tensors, the data files hold "
                           f"{sum(sizes.values())}", INVALID)
    return tensor_bytes, value_bytes, chunks


def _load(src: str, metadata: Any, progress: Progress) -> dict[str, Any]:
    """The flat state dict: tensors through DCP's reader (weights_only), values through weights_only here."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    from inert.torch import TORCH_VERSION

    class Reader(dcp.FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:  # the allowlisted copy, never pickle.load
            return metadata

    class Planner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            fqn = read_item.dest_index.fqn
            data = value.getvalue()
            try:
                loaded = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
            except Exception as exc:  # noqa: BLE001 - torch.load raises many kinds for a refused pickle
                refusals.append(CommandError(f"{fqn}: torch.load(weights_only=True) refused the value: {_why(exc)}",
                                             INVALID))
                raise
            self.state_dict[fqn] = loaded
            progress.advance(len(data))

        def commit_tensor(self, read_item: Any, tensor: Any) -> None:
            progress.advance(tensor.numel() * tensor.element_size())

    state: dict[str, Any] = {}
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            state[fqn] = None
        else:
            state[fqn] = torch.empty(tuple(md.size), dtype=md.properties.dtype)
    options: dict[str, Any] = {} if TORCH_VERSION < (2, 5) else {"no_dist": True}
    refusals: list[CommandError] = []
    try:
        with warnings.catch_warnings():  # DCP warns that it runs in one process: that is the intent
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
            dcp.load(state, storage_reader=Reader(src),
                     planner=Planner(flatten_state_dict=False, flatten_sharded_tensors=False), **options)
    except BaseException as exc:  # DCP wraps every rank's failure in a CheckpointException (a BaseException)
        if refusals:
            raise refusals[0] from None
        if not isinstance(exc, Exception) and not hasattr(exc, "failures"):
            raise  # KeyboardInterrupt, SystemExit
        raise CommandError(f"{src}: reading failed: {_why(_inner(exc))}", INVALID) from None
    for fqn, md in metadata.state_dict_metadata.items():
        if not isinstance(md, BytesStorageMetadata) and md.properties.requires_grad and state[fqn].is_floating_point():
            state[fqn].requires_grad_(True)
    return state


def _inner(exc: BaseException) -> BaseException:
    """The failure a ``CheckpointException`` wraps (``failures``: rank -> (exception, traceback))."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        first = next(iter(failures.values()))
        if isinstance(first, tuple) and first and isinstance(first[0], BaseException):
            return first[0]
    return exc


def _why(exc: BaseException) -> str:
    """The useful part of a loader's message: torch's weights_only refusal names the global it refused."""
    text = " ".join(str(exc).split())
    found = re.search(r"[Uu]nsupported (?:global: )?GLOBAL (\S+)", text)  # 2.13: "...load unsupported GLOBAL x.y whose"
    if found:
        return f"it names {found[1]}, which is not an allowed global"
    return text[:300]


def _nest(state: dict[str, Any], planner_data: Any) -> tuple[dict[str, Any], bool]:
    """The state dict nested as the source's planner data says, when it is DCP's flattening map."""
    from torch.distributed.checkpoint._nested_dict import unflatten_state_dict

    if not isinstance(planner_data, dict) or set(planner_data) != set(state):
        return state, False
    for path in planner_data.values():
        if not isinstance(path, tuple) or not path or not all(isinstance(p, (str, int)) for p in path):
            return state, False
    return unflatten_state_dict(state, planner_data), True


def _save(state: dict[str, Any], nested: bool, dst: str, progress: Progress) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

    from inert.torch import FileSystemWriter
    from inert.torch._compat import no_dist_options

    class Planner(DefaultSavePlanner):
        def resolve_data(self, write_item: Any) -> Any:
            data = super().resolve_data(write_item)
            if isinstance(data, torch.Tensor):
                progress.advance(data.numel() * data.element_size())
            return data

    options = no_dist_options(dcp.save)  # 2.2 saves in one process only with no_dist=True, 2.3 and 2.4 infer it
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "torch.distributed is disabled")
            dcp.save(state, storage_writer=FileSystemWriter(dst), planner=Planner(flatten_state_dict=nested), **options)
    except Exception as exc:  # noqa: BLE001 - e.g. a value outside Inert's value subset, named by the writer
        raise CommandError(f"cannot be written in Inert's format: {_why(_inner(exc))}", INVALID) from None
    except BaseException as exc:  # DCP's CheckpointException wraps the failure of each rank
        if not hasattr(exc, "failures"):
            raise
        raise CommandError(f"cannot be written in Inert's format: {_why(_inner(exc))}", INVALID) from None


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
    except (AttributeError, TypeError, ValueError, KeyError) as exc:  # allowed classes holding the wrong things
        raise CommandError(f"{src}: malformed DCP metadata: {type(exc).__name__}: {exc}", INVALID) from None
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
        _save(nested, is_nested, dst, progress)
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
    values = sum(isinstance(md, BytesStorageMetadata) for md in metadata.state_dict_metadata.values())
    return Migration(tensors=len(metadata.state_dict_metadata) - values, tensor_bytes=tensor_bytes, values=values,
                     chunks=chunks, files=report.files, verdict=report.verdict())


_ = USAGE  # exit code 2 (usage, I/O, no --trust-source) is CommandError's default
