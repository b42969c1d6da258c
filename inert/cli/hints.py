"""The hint line after a failed command: what to run instead, for the common mistakes.

``inert.cli.main`` prints it after the command's own error or verdict, on stderr, as
``inert: <command>: hint: <text>``.  Only what ``PATH`` is decides it, read as the commands
read it: the first bytes of a regular file the user named (a link followed), and the names in
a directory (at most ``MAX_ENTRIES`` of them; ``.metadata`` and ``MANIFEST`` by name
only).  Nothing is decoded, unpickled or followed further.

* a safetensors file, a ``torch.save`` zip or a pickle given to ``inspect`` or ``verify``:
  the ``inert migrate`` line that converts it (``--trust-source`` where it is pickle);
* a whole ``nn.Module`` saved with ``torch.save`` (zip or legacy pickle: a ``torch.nn.modules``
  class among the globals its pickles name, found by walking their opcodes as ``inspect`` does),
  given to any of the three: save its ``state_dict()`` instead;
* a directory that is no checkpoint or dump: the checkpoints one level down (a framework's
  ``step-100/`` folders), or what the path must be.

A missing extra needs no hint line: its error line already says how to install it
(``inert._extras.install_hint``).
"""

from __future__ import annotations

import os
import shlex
import stat

from inert import _foreign
from inert._foreign import looks_like_pickle
from inert._objstore import is_url
from inert.codecs._tables import CHECKPOINT_METADATA_NAME, DUMP_MANIFEST_NAME

from .support import read_head

__all__ = ["hint", "MAX_ENTRIES", "MAX_LISTED"]

#: Most directory entries looked at for checkpoints one level down.
MAX_ENTRIES = 256
#: Most of them named in the hint.
MAX_LISTED = 3
_MARKERS = (CHECKPOINT_METADATA_NAME, DUMP_MANIFEST_NAME)


def hint(command: str, path: str) -> str | None:
    """The hint for ``command`` having failed on ``path`` (None: nothing to add)."""
    if is_url(path):
        return None
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            return _directory(command, path)
        if stat.S_ISREG(mode):
            module = _saved_module(path)
            if module is not None:
                return (f"it is a whole nn.Module ({module}), whose unpickling runs its class's code: save its "
                        "state_dict() instead (torch.save(model.state_dict(), 'weights.pt'), where you trust it), "
                        "then `inert migrate --trust-source weights.pt DST`")
            return _file(path) if command in ("inspect", "verify") else None
    except (OSError, ValueError):  # gone, unreadable, a link or FIFO inside: the command's own error says so
        return None
    return None


def _file(path: str) -> str | None:
    head = read_head(path, 16)
    quoted = shlex.quote(path)
    if _is_safetensors(head, os.path.getsize(path)):
        return f"a safetensors file: `inert migrate {quoted} DST` converts it (it holds no code: no --trust-source)"
    if head.startswith(b"PK\x03\x04") or looks_like_pickle(head):
        return (f"if it is a torch.save file from a source you trust, `inert migrate --trust-source {quoted} DST` "
                f"converts it (`inert inspect {quoted}` lists what its pickle would import)")
    return None


#: Pickles walked one after another in a legacy (non-zip) torch.save file: magic, protocol, system info, object.
_LEGACY_PICKLES = 4
#: Bytes of a legacy torch.save file walked for a hint: its pickles come first, its storages' bytes after them.
_HINT_BYTES = 1 << 20


def _saved_module(path: str) -> str | None:
    """The ``torch.nn.modules`` class a ``torch.save`` file's pickles name (None: none, or not such a file)."""
    head = read_head(path, 16)
    if head.startswith(b"PK\x03\x04"):
        found = _foreign.inspect_torch_zip(path) or {}
        names = found.get("data_pkl", {}).get("globals", [])
    elif looks_like_pickle(head):
        data = _foreign._read_bounded(path, _HINT_BYTES, False)[0]
        names, at = [], 0
        for _ in range(_LEGACY_PICKLES):
            scan = _foreign.scan_pickle(memoryview(data)[at:])
            names += scan.globals
            if scan.error is not None or not scan.trailing:
                break
            at = len(data) - scan.trailing
    else:
        return None
    return next((name for name in names if name.startswith("torch.nn.modules.")), None)


def _is_safetensors(head: bytes, size: int) -> bool:
    """An 8-byte little-endian header length that fits the file, then ``{``."""
    if len(head) < 9:
        return False
    length = int.from_bytes(head[:8], "little")
    return 0 < length <= size - 8 and head[8:9] == b"{"


def _directory(command: str, path: str) -> str | None:
    if any(os.path.lexists(os.path.join(path, marker)) for marker in _MARKERS):
        return None  # a checkpoint: the error is about its contents (a legacy one's already names inert migrate)
    if command == "migrate" and any(name.endswith(".safetensors") for name in _names(path)):
        return None  # a sharded model migrate reads: the error is about a shard
    inner = _checkpoints_below(path)
    if inner:
        more = "" if len(inner) <= MAX_LISTED else f" and {len(inner) - MAX_LISTED} more"
        names = ", ".join(shlex.quote(os.path.join(path, name)) for name in inner[:MAX_LISTED])
        return f"give one checkpoint, not the folder of them: {names}{more}"
    if any(name.startswith("__") and name.endswith(CHECKPOINT_METADATA_NAME) for name in _names(path)):
        return None  # rank-local metadata: a checkpoint after all
    return ("a checkpoint is the directory a save wrote (FileSystemWriter's path, dcp.save's checkpoint_id), "
            "holding .metadata and its __N_M.distcp files; a dump holds a MANIFEST")


def _names(path: str) -> list[str]:
    names: list[str] = []
    with os.scandir(path) as entries:
        for entry in entries:
            if len(names) >= MAX_ENTRIES:
                break
            names.append(entry.name)
    return names


def _checkpoints_below(path: str) -> list[str]:
    """The subdirectories of ``path`` (among its first ``MAX_ENTRIES`` entries) that hold a ``.metadata`` or ``MANIFEST``."""
    found = []
    for name in sorted(_names(path)):
        below = os.path.join(path, name)
        if os.path.isdir(below) and not os.path.islink(below) and any(
                os.path.lexists(os.path.join(below, marker)) for marker in _MARKERS):
            found.append(name)
    return found
