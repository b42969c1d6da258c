"""Recognising files that are not Inert's, without executing any of them.

A pickle is walked opcode by opcode with ``pickletools.genops`` (never
unpickled) to list the globals it would import and count the calls it would
make; a ``torch.save`` zip is opened as a zip and its ``data.pkl`` walked the
same way; a safetensors file is its 8-byte length and JSON header.  Every
read is bounded: at most ``MAX_PICKLE`` bytes of a pickle are walked, at most
``MAX_LISTED`` names listed.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickletools
import struct
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inert._errors import (
    InertError,
    InvalidValueError,
    LimitError,
    TrailingBytesError,
    TruncatedError,
    UnknownTagError,
)
from inert._files import open_named, open_path

__all__ = ["PickleScan", "scan_pickle", "looks_like_pickle", "inspect_pickle", "inspect_torch_zip",
           "inspect_safetensors", "check_safetensors", "read_safetensors_header", "SAFETENSORS_DTYPES",
           "MAX_PICKLE", "MAX_LISTED"]

#: Most bytes of one pickle walked (a pickled state dict carries its tensors inline).
MAX_PICKLE = 256 << 20
#: Most opcodes walked (each costs a Python iteration; a real pickle's are far fewer than its bytes).
MAX_OPCODES = 5_000_000
#: Most memo entries tracked for ``STACK_GLOBAL`` names (beyond it, names read as computed).
MAX_MEMO = 1 << 20
#: Most globals, tensors or entries listed by name.
MAX_LISTED = 64
#: safetensors refuses headers above 100 MB; so does this.
MAX_SAFETENSORS_HEADER = 100_000_000

# genops decodes protocol-0 strings with these codecs: look them up now so a walk never imports a module.
for _codec in ("raw_unicode_escape", "unicode_escape", "ascii", "latin-1", "utf-8"):
    b"a".decode(_codec)  # (an empty input would skip the lookup)

_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}
_GETS = {"GET", "BINGET", "LONG_BINGET"}
_PUTS = {"PUT", "BINPUT", "LONG_BINPUT"}
#: Opcodes that call something the pickle names: each is code execution in a plain unpickler.
_CALLS = {"REDUCE", "OBJ", "INST", "NEWOBJ", "NEWOBJ_EX", "BUILD"}


@dataclass
class PickleScan:
    """What a walk of a pickle's opcodes found."""

    protocol: int
    globals: list[str] = field(default_factory=list)
    globals_total: int = 0
    calls: int = 0
    extensions: list[int] = field(default_factory=list)
    #: Globals outside ``allowed`` (when a predicate was given), found over the whole walk, not just the listing.
    refused: list[str] = field(default_factory=list)
    opcodes: int = 0
    trailing: int = 0
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "references_globals": self.globals_total > 0 or bool(self.extensions),
                "globals": self.globals, "globals_total": self.globals_total, "calls": self.calls,
                "extensions": self.extensions, "opcodes": self.opcodes, "trailing_bytes": self.trailing,
                "error": self.error}


def looks_like_pickle(head: bytes) -> bool:
    """A pickle of protocol 2 or later starts with PROTO; older ones are recognised by a full walk."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def scan_pickle(data: bytes | memoryview, allowed: Callable[[str], bool] | None = None) -> PickleScan:
    """Walk one pickle's opcodes and list the ``module.name`` globals it references (at most ``MAX_LISTED``).

    ``STACK_GLOBAL`` takes its names from the stack: the two most recent pushes
    are tracked, through the memo, which is how every pickler writes them.
    """
    scan = PickleScan(protocol=0)
    stack: list[Any] = []  # the most recent pushes only: enough for STACK_GLOBAL's two operands
    memo: dict[int, Any] = {}
    memo_index = 0
    seen: set[str] = set()
    stream = io.BytesIO(data)  # reads past the end return short: a claimed length allocates nothing

    def reference(name: str) -> None:
        scan.globals_total += 1
        if allowed is not None and not allowed(name) and name not in scan.refused and len(scan.refused) < MAX_LISTED:
            scan.refused.append(name)
        if name not in seen and len(scan.globals) < MAX_LISTED:
            seen.add(name)
            scan.globals.append(name)

    try:
        for opcode, raw, _pos in pickletools.genops(stream):
            arg: Any = raw
            if scan.opcodes >= MAX_OPCODES:
                scan.error = f"stopped after {MAX_OPCODES} opcodes"
                break
            scan.opcodes += 1
            name = opcode.name
            if name == "PROTO":
                scan.protocol = int(arg)
            elif scan.protocol == 0 and opcode.proto == 1:
                scan.protocol = 1
            if name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                reference(f"{module}.{attr}")
            elif name == "STACK_GLOBAL":
                top: Any = stack[-2:] if len(stack) >= 2 else [None, None]
                if isinstance(top[0], str) and isinstance(top[1], str):
                    reference(f"{top[0]}.{top[1]}")
                else:
                    reference("<computed name>")
            elif name.startswith("EXT"):
                scan.globals_total += 1
                if allowed is not None and len(scan.refused) < MAX_LISTED:
                    scan.refused.append(f"<extension code {arg}>")
                if len(scan.extensions) < MAX_LISTED:
                    scan.extensions.append(int(arg))
            if name in _CALLS:
                scan.calls += 1
            if name in _STRINGS:
                stack.append(arg)
            elif name in _GETS:
                stack.append(memo.get(arg))
            elif name in _PUTS:
                if len(memo) < MAX_MEMO:
                    memo[arg] = stack[-1] if stack else None
            elif name == "MEMOIZE":
                memo_index += 1
                if len(memo) < MAX_MEMO:
                    memo[memo_index - 1] = stack[-1] if stack else None
            elif opcode.stack_after:
                stack.append(None)
            del stack[:-4]
    except ValueError as exc:  # genops' only error: a bad opcode or a truncated argument
        scan.error = str(exc)
    scan.trailing = len(data) - stream.tell() if scan.error is None else 0
    return scan


def _read_bounded(path: str, limit: int, inside: bool) -> tuple[bytes, bool, int]:
    """At most ``limit`` bytes of the file, whether it holds more, and its size."""
    with os.fdopen(open_path(path, "pickle", inside=inside), "rb") as handle:
        data = handle.read(limit + 1)
        size = os.fstat(handle.fileno()).st_size
    return data[:limit], len(data) > limit, size


def inspect_pickle(path: str, allowed: Callable[[str], bool] | None = None, *, inside: bool = False) -> dict[str, Any]:
    """``inside``: a file named by a directory's contents (``inert._files.open_in``), not by the user."""
    data, cut, size = _read_bounded(path, MAX_PICKLE, inside)
    scan = scan_pickle(data, allowed)
    result = {"format": "pickle", "path": path, "bytes": size, **scan.as_json()}
    if allowed is not None:
        result["refused"] = scan.refused
    if cut:
        result["note"] = f"only the first {MAX_PICKLE} bytes were walked"
    return result


def _zip_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> tuple[bytes, bool] | None:
    """At most ``limit`` bytes of a member, inflating no more than that, and whether it holds more
    (None: its declared size is above ``MAX_PICKLE``).  The declared size may lie: the read is capped."""
    if info.file_size > MAX_PICKLE:
        return None
    with archive.open(info) as member:
        data = member.read(limit + 1)
    return data[:limit], len(data) > limit


def _inflate_limit(info: zipfile.ZipInfo) -> int:
    """Bytes of a member walked: a stored one whole (its bytes are in the file), a compressed one at most
    its compressed size plus 256 KiB, so that walking costs what the file's own bytes allow (a zip bomb's
    data.pkl inflates a thousandfold; torch.save stores its members)."""
    if info.compress_type == zipfile.ZIP_STORED:
        return min(MAX_PICKLE, info.compress_size)
    return min(MAX_PICKLE, info.compress_size + (256 << 10))


def inspect_torch_zip(path: str) -> dict[str, Any] | None:
    """A ``torch.save`` zip (an archive holding ``<name>/data.pkl``), or None for another zip."""
    try:
        with os.fdopen(open_named(path, "zip"), "rb") as handle, zipfile.ZipFile(handle) as archive:
            infos = archive.infolist()
            pkl = next((i for i in infos if i.filename == "data.pkl" or i.filename.endswith("/data.pkl")), None)
            if pkl is None:
                return None
            prefix = pkl.filename[: -len("data.pkl")]
            storages = [i for i in infos if i.filename.startswith(prefix + "data/") and not i.is_dir()]
            data = _zip_member(archive, pkl, _inflate_limit(pkl))
            result: dict[str, Any] = {
                "format": "torch-save-zip", "path": path, "bytes": os.fstat(handle.fileno()).st_size,
                "entries": len(infos),
                "storages": len(storages), "storage_bytes": sum(i.file_size for i in storages),
            }
            version = next((i for i in infos if i.filename == prefix + ".data/version"), None)
            if version is not None:
                text = _zip_member(archive, version, 64)
                result["archive_version"] = None if text is None else text[0].decode("ascii", "replace").strip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, OSError, EOFError,
            ValueError, struct.error, zlib.error) as exc:  # RuntimeError: an encrypted member
        return {"format": "zip", "path": path, "bytes": os.path.getsize(path), "error": f"unreadable zip: {exc}"}
    if data is None:
        result["data_pkl"] = {"error": f"data.pkl of {pkl.file_size} bytes exceeds the {MAX_PICKLE}-byte limit"}
    else:
        result["data_pkl"] = scan_pickle(data[0]).as_json()
        if data[1]:
            result["data_pkl"]["note"] = f"only the first {len(data[0])} bytes were walked"
    return result


#: What safetensors' torch loader reads, by dtype name: the item size in bytes.
SAFETENSORS_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E4M3FNUZ": 1, "F8_E5M2": 1, "F8_E5M2FNUZ": 1,
                      "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8,
                      "F64": 8, "C64": 8}
_SAFETENSORS = "safetensors"
_MAX_DIM = (1 << 63) - 1


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are distinct: a name twice would let the last one silently win."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _Duplicate(key)
        found[key] = value
    return found


class _Duplicate(Exception):
    pass


def read_safetensors_header(handle: Any, size: int, name: str) -> tuple[int, dict[str, Any]]:
    """The header length and JSON header of the safetensors file ``handle`` (``size`` bytes, ``name`` in errors).

    Reads at most ``MAX_SAFETENSORS_HEADER`` bytes; every fault is an ``InertError`` of format ``safetensors``
    at its offset, its field starting with ``name``.
    """
    head = handle.read(8)
    if len(head) < 8:
        raise TruncatedError(_SAFETENSORS, len(head), f"{name}.header_length", "the file ends before 8 bytes")
    (length,) = struct.unpack("<Q", head)
    if length > MAX_SAFETENSORS_HEADER:
        raise LimitError(_SAFETENSORS, 0, f"{name}.header_length", f"{length} above {MAX_SAFETENSORS_HEADER} bytes")
    if 8 + length > size:
        raise TruncatedError(_SAFETENSORS, 0, f"{name}.header_length",
                             f"a {length}-byte header does not fit in the {size}-byte file")
    text = handle.read(length)
    if text[:1] != b"{":
        raise InvalidValueError(_SAFETENSORS, 8, f"{name}.header", "is not a JSON object")
    try:
        header = json.loads(text, object_pairs_hook=_unique_pairs)
    except _Duplicate as exc:
        raise InvalidValueError(_SAFETENSORS, -1, f"{name}.header", f"names {exc.args[0]!r} twice") from None
    except json.JSONDecodeError as exc:
        at = 8 + len(exc.doc[:exc.pos].encode("utf-8", "surrogatepass"))
        raise InvalidValueError(_SAFETENSORS, at, f"{name}.header", f"is not JSON: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise InvalidValueError(_SAFETENSORS, 8 + exc.start, f"{name}.header", "is not UTF-8") from None
    except RecursionError:
        raise LimitError(_SAFETENSORS, 8, f"{name}.header", "nests too deep") from None
    if not isinstance(header, dict):
        raise InvalidValueError(_SAFETENSORS, 8, f"{name}.header", "is not a JSON object")
    return length, header


def check_safetensors(handle: Any, name: str) -> dict[str, Any]:
    """The header of the safetensors file ``handle``, every entry checked as a reader must before trusting it:
    a known dtype, a shape of ints 0..2**63-1 whose element count fits in int64, ``data_offsets`` inside the
    data, of the shape's size, in order and covering it without gap or overlap, ``__metadata__`` strings."""
    size = os.fstat(handle.fileno()).st_size
    length, header = read_safetensors_header(handle, size, name)
    data_start, data_size = 8 + length, size - 8 - length
    meta = header.get("__metadata__")
    if meta is not None and (not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values())):
        raise InvalidValueError(_SAFETENSORS, -1, f"{name}.__metadata__", "is not an object of strings")
    ranges: list[tuple[int, int, str]] = []
    for tensor, entry in header.items():
        if tensor == "__metadata__":
            continue
        field = f"{name}.{tensor}"
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise InvalidValueError(_SAFETENSORS, -1, field, "is not an object of dtype, shape and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
            raise UnknownTagError(_SAFETENSORS, -1, f"{field}.dtype", f"{str(dtype)[:40]!r} is not a known dtype")
        if not isinstance(shape, list) or len(shape) > 64:
            raise InvalidValueError(_SAFETENSORS, -1, f"{field}.shape", "is not a list of at most 64 dims")
        count = 1
        for index, dim in enumerate(shape):
            if type(dim) is not int or not 0 <= dim <= _MAX_DIM:
                raise InvalidValueError(_SAFETENSORS, -1, f"{field}.shape[{index}]",
                                        f"{str(dim)[:40]} is not an int from 0 to 2**63-1")
            count *= dim or 1
        if count * SAFETENSORS_DTYPES[dtype] > _MAX_DIM:  # zero dims aside: torch computes strides in int64
            raise LimitError(_SAFETENSORS, -1, f"{field}.shape", f"{shape} of {dtype} overflows int64 bytes")
        nbytes = math.prod(shape) * SAFETENSORS_DTYPES[dtype]
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise InvalidValueError(_SAFETENSORS, -1, f"{field}.data_offsets", "is not two ints")
        begin, end = offsets
        if not 0 <= begin <= end <= data_size:
            raise InvalidValueError(_SAFETENSORS, data_start + max(begin, 0), f"{field}.data_offsets",
                                    f"[{begin}, {end}] is not a range inside the {data_size} bytes of data")
        if end - begin != nbytes:
            raise InvalidValueError(_SAFETENSORS, data_start + begin, f"{field}.data_offsets",
                                    f"holds {end - begin} bytes, the shape {shape} of {dtype} is {nbytes}")
        ranges.append((begin, end, field))
    reached = 0
    for begin, end, field in sorted(ranges):
        if begin != reached:
            what = "overlaps the tensor before it" if begin < reached else f"leaves bytes {reached}..{begin} unused"
            raise InvalidValueError(_SAFETENSORS, data_start + begin, f"{field}.data_offsets", what)
        reached = end
    if reached != data_size:
        raise TrailingBytesError(_SAFETENSORS, data_start + reached, f"{name}.data",
                                 f"{data_size - reached} bytes after the last tensor")
    return header


def inspect_safetensors(path: str) -> dict[str, Any] | None:
    """A safetensors file (8-byte little-endian header length, JSON header), or None if it is not one."""
    with os.fdopen(open_named(path, "safetensors"), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        try:
            length, header = read_safetensors_header(handle, size, os.path.basename(path))
        except InertError:
            return None
    if length < 2:
        return None
    meta = header.pop("__metadata__", None)
    tensors: list[dict[str, Any]] = []
    total = 0
    for name, entry in header.items():
        if not isinstance(entry, dict):
            continue
        offsets: Any = entry.get("data_offsets")
        shape, dtype = entry.get("shape"), entry.get("dtype")
        ints = isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
        nbytes = offsets[1] - offsets[0] if ints else 0
        total += nbytes
        if len(tensors) < MAX_LISTED:  # a hostile header's odd values are shown as absent, not trusted
            tensors.append({"name": name, "dtype": dtype if isinstance(dtype, str) else None,
                            "shape": shape if isinstance(shape, list) and all(type(d) is int for d in shape) else None,
                            "bytes": nbytes})
    return {"format": "safetensors", "path": path, "bytes": size, "header_bytes": length, "tensors_total": len(header),
            "tensor_bytes": total, "tensors": tensors, "metadata": meta if isinstance(meta, dict) else None}
