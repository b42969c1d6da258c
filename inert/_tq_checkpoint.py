"""TransferQueue's whole-system checkpoint in Inert's dump format: the pickle-free ``save_checkpoint``/``load_checkpoint``.

TransferQueue 0.1.11 pickles its controller's state and every storage unit's
data (``controller_state.pkl``, ``storage_units/su_*.pkl``).  Here the same
state is written as row dumps (``inert.dump``), by the process that holds it::

    ckpt/
      controller/                      a dump: row "controller" (controller id, index manager, sampler state,
                                       the list of storage dumps), one row "partition:<id>" per partition
                                       (its state as a value document, production and consumption tensors)
      storage/unit-00000/part-00003/   a dump written by storage unit 0: its rows of partition 3
      ...

The storage dumps are written first, each by its own unit (in the unit's
process, through ``ray``'s ``__ray_call__``: the payload never passes through
the caller), then the controller dump, which lists them; the whole directory
is staged beside its destination, synced and published with one rename.

Loading reads and checks every byte before anything changes: the controller
dump in the calling process, each unit's dumps in that unit, where the rows
are staged; only when every part is whole are the staged rows and the
controller's state swapped in.  Ints as map keys and set members are outside
the value subset (their hashes are not seeded), so an int-keyed dict or an int
set is stored as a registered object (``transferqueue.dict``: a list of
``[key, value]`` pairs; ``transferqueue.set``/``transferqueue.frozenset``: a
list of members), and a load refuses more than :data:`MAX_SAME_HASH` keys of
one hash.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import shutil
import stat
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import ray
import torch
import transfer_queue as tq
from transfer_queue import interface as _tq_interface

from inert._errors import FileKindError, ForeignFormatError, InertError, InvalidValueError
from inert._files import directory_fd, file_kind
from inert._value_types import ObjectValue
from inert.codecs._tables import DUMP_MANIFEST_NAME
from inert.dump import Row, dump, load
from inert.dump._publish import _RENAMEAT2, discard, fsync_dir, publish
from inert.torch._values import from_document, to_document

__all__ = ["save_checkpoint", "load_checkpoint", "migrate_checkpoint", "enable", "disable", "enabled", "is_enabled",
           "CONTROLLER_DIR", "STORAGE_DIR", "MAX_SAME_HASH", "SCHEMA"]

CONTROLLER_DIR = "controller"
STORAGE_DIR = "storage"
#: The controller row's tag names what the dumps hold (see docs/dump.md).
SCHEMA = {"schema": "inert.transferqueue.checkpoint", "version": 1}
#: Most keys (or set members) of one hash a loaded dict (or set) may hold: beyond, building it turns quadratic.
MAX_SAME_HASH = 16
#: TransferQueue's own checkpoint files: never unpickled, named in the refusal.
LEGACY_NAMES = ("controller_state.pkl", "storage_units", "metadata.json")
_FORMAT = "dump-shard"  # where a state document lives
_CONTROLLER_KEY = "controller"
_PARTITION_PREFIX = "partition:"
_DICT, _SET, _FROZENSET = "transferqueue.dict", "transferqueue.set", "transferqueue.frozenset"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100

# --- values: TransferQueue's Python state <-> the value subset ------------------------------------------------


def _to_doc(value: Any, path: str) -> Any:
    """``value`` in the value subset: int-keyed dicts and non-str sets as registered objects (see the module doc)."""
    kind = type(value)
    if isinstance(value, dict):  # a defaultdict too: restored as what the attribute needs
        if all(type(k) is str for k in value):
            return {k: _to_doc(v, f"{path}[{k!r}]") for k, v in value.items()}
        return ObjectValue(_DICT, [[_to_doc(k, f"{path}<key>"), _to_doc(v, f"{path}[{k!r}]")] for k, v in value.items()])
    if kind in (set, frozenset):
        if all(type(m) is str for m in value):
            return to_document(value, path)
        return ObjectValue(_SET if kind is set else _FROZENSET, [_to_doc(m, f"{path}<member>") for m in value])
    if kind is list:
        return [_to_doc(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind is tuple:
        return tuple(_to_doc(v, f"{path}[{i}]") for i, v in enumerate(value))
    return to_document(value, path)


def _bad(path: str, reason: str) -> InvalidValueError:
    return InvalidValueError(_FORMAT, -1, path, reason)


def _hashed(items: list[Any], path: str) -> None:
    """Refuse unhashable keys, and more than MAX_SAME_HASH of one hash, before a dict or set is built of them."""
    try:
        hashes = Counter(hash(item) for item in items)
    except TypeError:
        raise _bad(path, "a key or set member that does not hash") from None
    if hashes and max(hashes.values()) > MAX_SAME_HASH:
        raise _bad(path, f"more than {MAX_SAME_HASH} keys or members of one hash")


def _from_doc(value: Any, path: str) -> Any:
    """The inverse of :func:`_to_doc` on a decoded document; an ``InertError`` for anything it cannot hold."""
    kind = type(value)
    if kind is ObjectValue and value.name in (_DICT, _SET, _FROZENSET):
        if type(value.state) is not list:
            raise _bad(path, f"a {value.name} holds a list")
        if value.name == _DICT:
            if not all(type(p) is list and len(p) == 2 for p in value.state):
                raise _bad(path, "a transferqueue.dict holds [key, value] pairs")
            keys = [_from_doc(p[0], f"{path}<key>") for p in value.state]
            _hashed(keys, path)
            out = {k: _from_doc(p[1], f"{path}[{k!r}]") for k, p in zip(keys, value.state, strict=True)}
            if len(out) != len(keys):
                raise _bad(path, "a key appears twice")
            return out
        members = [_from_doc(m, f"{path}<member>") for m in value.state]
        _hashed(members, path)
        built = set(members) if value.name == _SET else frozenset(members)
        if len(built) != len(members):
            raise _bad(path, "a member appears twice")
        return built
    if kind is dict:
        return {k: _from_doc(v, f"{path}[{k!r}]") for k, v in value.items()}
    if kind is list:
        return [_from_doc(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if kind is tuple:
        return tuple(_from_doc(v, f"{path}[{i}]") for i, v in enumerate(value))
    try:
        return from_document(value, path)
    except InertError as exc:
        raise exc.in_format(_FORMAT) from None


# --- the shape TransferQueue 0.1.11's state has, checked on save (a version it was not written for) and on load ---

ANY = object()
_INTS = ("set", int)
_PARTITION: dict[str, Any] = {
    "partition_id": str, "created_at": float, "global_indexes": _INTS, "pre_allocated_global_indexes": _INTS,
    "field_name_mapping": ("dict", str, int), "field_custom_backend_meta": ("dict", int, ("dict", str, ANY)),
    "custom_meta": ("dict", int, ("dict", str, ANY)), "keys_mapping": ("dict", str, int),
    "revert_keys_mapping": ("dict", int, str),
}
_PARTITION_TENSORS = ("production_status", "consumption_status", "field_metadata")
_FIELD_META: dict[str, Any] = {
    "global_indexes": _INTS, "dtype": ("opt", torch.dtype), "shape": ("opt", ("seq", int)),
    "is_nested": ("opt", bool), "is_non_tensor": ("opt", bool), "per_sample_shapes": ("dict", int, ("seq", int)),
}
_INDEX_MANAGER: dict[str, Any] = {
    "partition_to_indexes": ("dict", str, _INTS), "reusable_indexes": ("list", int), "global_index_counter": int,
    "allocated_indexes": _INTS,
}


def _fits(value: Any, spec: Any) -> bool:
    if spec is ANY:
        return True
    if isinstance(spec, type):
        return type(value) is spec
    head = spec[0]
    if head == "opt":
        return value is None or _fits(value, spec[1])
    if head == "seq":
        return type(value) in (list, tuple, torch.Size) and all(_fits(v, spec[1]) for v in value)
    if head == "list":
        return type(value) is list and all(_fits(v, spec[1]) for v in value)
    if head == "set":
        return type(value) is set and all(_fits(v, spec[1]) for v in value)
    return isinstance(value, dict) and all(_fits(k, spec[1]) and _fits(v, spec[2]) for k, v in value.items())


def _check_attrs(attrs: dict[str, Any], specs: dict[str, Any], path: str, fail: Callable[[str, str], Exception]) -> None:
    missing = sorted(set(specs) - set(attrs))
    unknown = sorted(set(attrs) - set(specs))
    if missing or unknown:
        raise fail(path, f"attributes missing {missing}, unknown {unknown}")
    for name, spec in specs.items():
        if not _fits(attrs[name], spec):
            raise fail(f"{path}.{name}", f"a {type(attrs[name]).__name__} that is not {_spelled(spec)}")


def _spelled(spec: Any) -> str:
    if spec is ANY:
        return "any value"
    if isinstance(spec, type):
        return spec.__name__
    return f"{spec[0]}[{', '.join(_spelled(s) for s in spec[1:])}]"


def _unsupported(path: str, reason: str) -> Exception:
    return TypeError(f"inert.transferqueue.save_checkpoint: {path}: {reason}; this TransferQueue's controller state "
                     f"differs from 0.1.11's, which this checkpoint format holds")


# --- the controller: its state out (in its own process) and back -----------------------------------------------

#: An int8 tensor between processes: its shape and bytes.  A tensor itself would cross through torch's
#: reducer, which ``torch.load``s (unpickles) it on the other side.
Packed = tuple[list[int], bytes]


def _pack(tensor: torch.Tensor) -> Packed:
    return list(tensor.shape), tensor.contiguous().numpy().tobytes()


def _unpack(packed: Packed) -> torch.Tensor:
    shape, data = packed
    return torch.frombuffer(bytearray(data), dtype=torch.int8).reshape(shape) if data else torch.zeros(shape, dtype=torch.int8)


def _controller_state(controller: Any) -> dict[str, Any]:
    """Run in the controller's process: its state as plain values and tensors (what TransferQueue pickles)."""
    partitions = []
    for pid, partition in controller.partitions.items():
        attrs = {name: value for name, value in vars(partition).items() if name not in _PARTITION_TENSORS}
        _check_attrs(attrs, _PARTITION, f"partitions[{pid!r}]", _unsupported)
        metas = {name: dict(vars(meta)) for name, meta in partition.field_metadata.items()}
        for name, meta in metas.items():
            _check_attrs(meta, _FIELD_META, f"partitions[{pid!r}].field_metadata[{name!r}]", _unsupported)
        tasks = list(partition.consumption_status)
        partitions.append({
            "id": pid, "attrs": attrs, "field_metadata": metas, "tasks": tasks,
            "production_status": _pack(partition.production_status),
            "consumption": [_pack(partition.consumption_status[task]) for task in tasks],
        })
    manager = controller.index_manager
    index_manager = {name: getattr(manager, name) for name in _INDEX_MANAGER}
    index_manager["partition_to_indexes"] = dict(index_manager["partition_to_indexes"])
    _check_attrs(index_manager, _INDEX_MANAGER, "index_manager", _unsupported)
    return {"controller_id": controller.controller_id, "partitions": partitions, "index_manager": index_manager,
            "sampler": controller.sampler.save_checkpoint(), "sampler_class": type(controller.sampler).__qualname__}


def _controller_rows(state: dict[str, Any], storage: dict[str, Any], user: dict[str, Any]) -> list[Row]:
    head = {"controller_id": state["controller_id"], "index_manager": _to_doc(state["index_manager"], "index_manager"),
            "sampler": _to_doc(state["sampler"], "sampler"), "sampler_class": state["sampler_class"],
            "partitions": [p["id"] for p in state["partitions"]], "storage": storage,
            "user_metadata": _to_doc(user, "metadata")}
    rows = [Row(_CONTROLLER_KEY, 0, {"state": head}, dict(SCHEMA))]
    for position, part in enumerate(state["partitions"], start=1):
        where = f"partitions[{part['id']!r}]"
        doc = {"attrs": _to_doc(part["attrs"], where), "field_metadata": _to_doc(part["field_metadata"], where),
               "tasks": part["tasks"]}
        fields: dict[str, Any] = {"state": doc, "production_status": _unpack(part["production_status"])}
        fields.update({f"consumption[{i}]": _unpack(packed) for i, packed in enumerate(part["consumption"])})
        rows.append(Row(_PARTITION_PREFIX + part["id"], position, fields, {}))
    return rows


def _map_doc(value: Any, path: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise _bad(path, f"a {type(value).__name__}, not a map")
    return value


def _int8(value: Any, ndim: int, path: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.dtype != torch.int8 or value.dim() != ndim:
        raise _bad(path, f"not an int8 tensor of {ndim} dims")
    return value


def _read_controller(path: str) -> dict[str, Any]:
    """The checked controller state of the checkpoint at ``path`` (every byte of its dump checked first)."""
    where = os.path.join(path, CONTROLLER_DIR) + "/"
    loaded = _within(where, lambda: load(os.path.join(path, CONTROLLER_DIR)))
    rows = sorted(loaded.rows, key=lambda row: row.global_index)
    if not rows or rows[0].key != _CONTROLLER_KEY or rows[0].tag != SCHEMA:
        raise _bad(f"{where}keys[0]", f"not a TransferQueue checkpoint of this version: the first row is not "
                   f"{_CONTROLLER_KEY!r} tagged {SCHEMA}")
    head = _map_doc(rows[0].fields.get("state"), f"{where}{_CONTROLLER_KEY}.state")
    names = ("controller_id", "index_manager", "sampler", "sampler_class", "partitions", "storage", "user_metadata")
    if sorted(head) != sorted(names):
        raise _bad(f"{where}{_CONTROLLER_KEY}.state", f"holds {sorted(head)}, not {sorted(names)}")
    pids = head["partitions"]
    if type(pids) is not list or not all(type(p) is str for p in pids) or len(set(pids)) != len(pids):
        raise _bad(f"{where}{_CONTROLLER_KEY}.state.partitions", "not a list of distinct partition ids")
    if [row.key for row in rows[1:]] != [_PARTITION_PREFIX + p for p in pids] or \
            [row.global_index for row in rows] != list(range(len(rows))):
        raise _bad(f"{where}keys", "the partition rows differ from the partitions the controller row lists")
    index_manager = _from_doc(head["index_manager"], f"{where}index_manager")
    _check_attrs(_map_doc(index_manager, f"{where}index_manager"), _INDEX_MANAGER, f"{where}index_manager", _bad)
    partitions = [_read_partition(row, f"{where}{row.key}") for row in rows[1:]]
    for part in partitions:
        if part["attrs"]["partition_id"] != part["id"]:
            raise _bad(f"{where}{_PARTITION_PREFIX}{part['id']}.state.attrs.partition_id", "differs from the row's")
    return {"controller_id": _str(head["controller_id"], f"{where}controller_id"), "partitions": partitions,
            "index_manager": index_manager, "sampler": _from_doc(head["sampler"], f"{where}sampler"),
            "sampler_class": _str(head["sampler_class"], f"{where}sampler_class"),
            "storage": _read_listing(head["storage"], pids, f"{where}storage"),
            "user_metadata": _from_doc(head["user_metadata"], f"{where}user_metadata")}


def _str(value: Any, path: str) -> str:
    if type(value) is not str:
        raise _bad(path, "not a str")
    return value


def _read_partition(row: Row, where: str) -> dict[str, Any]:
    doc = _map_doc(row.fields.get("state"), f"{where}.state")
    if sorted(doc) != ["attrs", "field_metadata", "tasks"]:
        raise _bad(f"{where}.state", f"holds {sorted(doc)}, not ['attrs', 'field_metadata', 'tasks']")
    attrs = _map_doc(_from_doc(doc["attrs"], f"{where}.state.attrs"), f"{where}.state.attrs")
    _check_attrs(attrs, _PARTITION, f"{where}.state.attrs", _bad)
    metas = _map_doc(_from_doc(doc["field_metadata"], f"{where}.state.field_metadata"), f"{where}.state.field_metadata")
    for name, meta in metas.items():
        _check_attrs(_map_doc(meta, f"{where}.field_metadata[{name!r}]"), _FIELD_META,
                     f"{where}.state.field_metadata[{name!r}]", _bad)
    tasks = doc["tasks"]
    if type(tasks) is not list or not all(type(t) is str for t in tasks) or len(set(tasks)) != len(tasks):
        raise _bad(f"{where}.state.tasks", "not a list of distinct task names")
    expected = {"state", "production_status", *(f"consumption[{i}]" for i in range(len(tasks)))}
    if set(row.fields) != expected:
        raise _bad(f"{where}.fields", f"holds {sorted(row.fields)}, not {sorted(expected)}")
    production = _int8(row.fields["production_status"], 2, f"{where}.production_status")
    rows_held, columns = production.shape
    if any(not 0 <= c < columns for c in attrs["field_name_mapping"].values()):
        raise _bad(f"{where}.state.attrs.field_name_mapping", f"a column outside the {columns} of production_status")
    indexes = attrs["global_indexes"] | attrs["pre_allocated_global_indexes"]
    if indexes and not 0 <= min(indexes) <= max(indexes) < rows_held:
        raise _bad(f"{where}.state.attrs.global_indexes", f"an index outside the {rows_held} rows of production_status")
    consumption = {t: _int8(row.fields[f"consumption[{i}]"], 1, f"{where}.consumption[{i}]") for i, t in enumerate(tasks)}
    return {"id": row.key[len(_PARTITION_PREFIX):], "attrs": attrs, "field_metadata": metas,
            "production_status": _pack(production), "consumption_status": {t: _pack(c) for t, c in consumption.items()}}


def _read_listing(value: Any, pids: list[str], path: str) -> dict[str, Any]:
    """The controller row's list of storage dumps: ``{"units": n, "dumps": [[unit, partition position, rows], ...]}``."""
    listing = _map_doc(value, path)
    units, dumps = listing.get("units"), listing.get("dumps")
    if sorted(listing) != ["dumps", "units"] or type(units) is not int or units < 1 or type(dumps) is not list:
        raise _bad(path, "not {units: a positive int, dumps: a list}")
    seen = set()
    for i, entry in enumerate(dumps):
        if (type(entry) is not list or len(entry) != 3 or not all(type(x) is int for x in entry)
                or not 0 <= entry[0] < units or not 0 <= entry[1] < len(pids) or entry[2] < 0):
            raise _bad(f"{path}.dumps[{i}]", f"not [unit below {units}, partition below {len(pids)}, rows]")
        if (entry[0], entry[1]) in seen:
            raise _bad(f"{path}.dumps[{i}]", "listed twice")
        seen.add((entry[0], entry[1]))
    return listing


def _apply_controller(controller: Any, state: dict[str, Any], commit: bool) -> None:
    """Run in the controller's process: build its state from ``state``; with ``commit``, swap it in.

    Without ``commit`` this is the dry run before any unit changes: the sampler's own
    ``load_checkpoint`` is tried on a copy, so the commit cannot fail on it.
    """
    import copy

    from transfer_queue.controller import DataPartitionStatus, FieldMeta

    partitions = {}
    for part in state["partitions"]:
        status = DataPartitionStatus.__new__(DataPartitionStatus)
        for name, value in part["attrs"].items():
            setattr(status, name, value)
        status.production_status = _unpack(part["production_status"])  # writable, its own memory
        status.consumption_status = {task: _unpack(packed) for task, packed in part["consumption_status"].items()}
        status.field_metadata = {name: FieldMeta(**meta) for name, meta in part["field_metadata"].items()}
        partitions[part["id"]] = status
    sampler = controller.sampler if commit else copy.copy(controller.sampler)
    sampler.load_checkpoint(state["sampler"])
    if not commit:
        return
    im = state["index_manager"]
    controller.controller_id = state["controller_id"]
    controller.partitions = partitions
    controller.index_manager.partition_to_indexes = defaultdict(set, im["partition_to_indexes"])
    controller.index_manager.reusable_indexes = im["reusable_indexes"]
    controller.index_manager.global_index_counter = im["global_index_counter"]
    controller.index_manager.allocated_indexes = im["allocated_indexes"]


# --- the storage units: each writes and stages its own rows -----------------------------------------------------

def _unit_dir(unit: int) -> str:
    return f"unit-{unit:05d}"


def _part_dir(position: int) -> str:
    return f"part-{position:05d}"


def _plain_storage(unit: Any) -> Any:
    from transfer_queue.storage.simple_storage import StorageUnitData

    data = unit.storage_data
    if type(data) is not StorageUnitData:
        raise NotImplementedError(f"inert.transferqueue: storage unit {unit.storage_unit_id} keeps its data in "
                                  f"{type(data).__name__} (SSD offload); only in-memory SimpleStorage units are supported")
    return data


def _save_unit(unit: Any, root: str, position: int, partitions: list[tuple[int, str, list[int]]]) -> list[list[int]]:
    """Run in a storage unit's process: dump its rows of each partition; return ``[[unit, partition, rows], ...]``."""
    data = _plain_storage(unit)
    active = data._active_keys
    fields = data.field_data
    written = []
    unit_root = os.path.join(root, _unit_dir(position))
    for part, pid, indexes in partitions:
        rows = [Row(str(gi), gi, {f: held[gi] for f, held in fields.items() if gi in held}, {})
                for gi in indexes if gi in active or any(gi in held for held in fields.values())]
        if not rows:
            continue
        os.makedirs(unit_root, exist_ok=True)
        dump(rows, os.path.join(unit_root, _part_dir(part)), partition_id=pid)
        written.append([position, part, len(rows)])
    if written:
        fsync_dir(unit_root)
    return written


#: Rows a unit has read and checked, waiting for the commit (on the unit's actor object).
_STAGED = "_inert_checkpoint_staged"


def _stage_unit(unit: Any, root: str, position: int, units: int,
                parts: list[tuple[int, str, int, list[int], list[str]]]) -> int:
    """Run in a storage unit's process: read and check its dumps, keep the rows staged; return how many."""
    _plain_storage(unit)
    setattr(unit, _STAGED, None)
    field_data: dict[str, dict[int, Any]] = {}
    active: set[int] = set()
    for part, pid, count, indexes, names in parts:
        where = os.path.join(root, _unit_dir(position), _part_dir(part)) + "/"
        loaded = _within(where, functools.partial(load, where))
        allowed, known = set(indexes), set(names)
        if loaded.partition_id != pid or len(loaded.rows) != count:
            raise _bad(where + DUMP_MANIFEST_NAME, f"partition {loaded.partition_id!r} with {len(loaded.rows)} rows, the "
                       f"controller lists partition {pid!r} with {count}")
        for row in loaded.rows:
            gi = row.global_index
            if row.key != str(gi) or gi not in allowed or gi % units != position:
                raise _bad(f"{where}keys[{row.key!r}]", f"global index {gi} is not one of partition {pid!r} "
                           f"that storage unit {position} of {units} holds (its key is the index in decimal)")
            if not set(row.fields) <= known:
                raise _bad(f"{where}keys[{row.key!r}]", f"fields {sorted(set(row.fields) - known)} the partition lacks")
            for name, value in row.fields.items():
                field_data.setdefault(name, {})[gi] = value
            active.add(gi)
    setattr(unit, _STAGED, (field_data, active))
    return len(active)


def _commit_unit(unit: Any, commit: bool) -> None:
    """Run in a storage unit's process: swap the staged rows in (``commit``) or drop them."""
    staged = getattr(unit, _STAGED, None)
    setattr(unit, _STAGED, None)
    if commit and staged is not None:
        data = unit.storage_data
        data.field_data, data._active_keys = staged


# --- the directory --------------------------------------------------------------------------------------------

def _within(prefix: str, read: Callable[[], Any]) -> Any:
    """``read()``, its errors' field paths placed below the checkpoint's part ``prefix``."""
    try:
        return read()
    except InertError as exc:
        raise type(exc)(exc.format, exc.offset, prefix + exc.field, exc.reason) from None


def _entries(path: str, expected: Iterable[str]) -> None:
    """Refuse a directory of the checkpoint that holds anything but the subdirectories ``expected``, or a link."""
    want = set(expected)
    with directory_fd(path) as fd:
        names = set(os.listdir(fd))
        for name in sorted(names & want):
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            if not stat.S_ISDIR(mode):
                raise FileKindError("dump-manifest", 0, os.path.join(path, name), f"{file_kind(mode)}, not a "
                                    "directory: a checkpoint's parts are directories inside it and no link is followed")
    faults = [f"{words} {sorted(found)}" for words, found in (("holds what no part is:", names - want),
                                                              ("lacks the listed parts", want - names)) if found]
    if faults:
        raise InvalidValueError("dump-manifest", -1, path + "/", "; ".join(faults) + " (a TransferQueue checkpoint "
                                "holds exactly the parts its controller row lists)")


def _refuse_legacy(path: str) -> None:
    names = set(os.listdir(path))
    legacy = sorted(n for n in names if n in LEGACY_NAMES or n.endswith(".pkl"))
    if legacy and CONTROLLER_DIR not in names:
        raise ForeignFormatError(
            "dump-manifest", 0, os.path.join(path, legacy[0]),
            f"{path} is TransferQueue's own pickled checkpoint ({', '.join(legacy)}): loading it would run any code "
            "it holds, so it is refused unread.  To migrate a checkpoint you wrote yourself: "
            "inert.transferqueue.migrate_checkpoint(src, dst, trust_pickle=True) (in a running TransferQueue)")


def _handles() -> tuple[Any, list[Any]]:
    controller = _tq_interface._TQ_CONTROLLER
    if controller is None:
        raise RuntimeError("TransferQueue is not initialized. Call tq.init() first.")
    storage = (_tq_interface._TQ_STORAGE or {}).get("SimpleStorage")
    if not storage:
        raise NotImplementedError("inert.transferqueue checkpoints SimpleStorage backends only")
    return controller, list(storage.values())  # in routing order: unit i holds the global indexes i mod n


def _gather(refs: list[Any]) -> list[Any]:
    """``ray.get`` of each, the cause of a failed remote call raised as itself (an ``InertError`` stays one)."""
    try:
        return [ray.get(ref) for ref in refs]
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise


def _replaceable(path: str) -> bool:
    """A checkpoint (Inert's or TransferQueue's) or an empty directory: what a save may replace."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    names = set(os.listdir(path))
    return not names or CONTROLLER_DIR in names or "controller_state.pkl" in names


def _replace(staging: str, dest: str) -> None:
    """Swap the published ``staging`` with the checkpoint ``dest`` in one rename where the kernel can, then drop it."""
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(_AT_FDCWD, os.fsencode(staging), _AT_FDCWD, os.fsencode(dest), _RENAME_EXCHANGE) == 0:  # type: ignore[operator]
            fsync_dir(os.path.dirname(os.path.abspath(dest)))
            shutil.rmtree(staging)  # now the old checkpoint
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), dest)
    aside = f"{staging}.old"  # a crash before the second rename leaves the old checkpoint here, hidden
    os.rename(dest, aside)
    os.rename(staging, dest)
    fsync_dir(os.path.dirname(os.path.abspath(dest)))
    shutil.rmtree(aside)


# --- the public functions -------------------------------------------------------------------------------------

def save_checkpoint(checkpoint_dir: str | os.PathLike[str], *, include_storage: bool = True,
                    metadata: dict[str, Any] | None = None) -> None:
    """Save the running TransferQueue (controller and every SimpleStorage unit) to ``checkpoint_dir``, pickle-free.

    The signature of ``transfer_queue.save_checkpoint``: ``include_storage`` is
    ignored as TransferQueue ignores it for SimpleStorage (in-memory data must be
    saved); ``metadata`` is stored as a value document.  An existing checkpoint
    (Inert's or TransferQueue's) or empty directory at ``checkpoint_dir`` is
    replaced in one rename; anything else there is refused.  Writers must be paused, as for
    TransferQueue's own checkpoint.
    """
    del include_storage  # SimpleStorage always saves its data, as TransferQueue forces
    dest = os.path.abspath(os.fspath(checkpoint_dir))
    controller, units = _handles()
    replace = os.path.lexists(dest)
    if replace and not _replaceable(dest):
        raise FileExistsError(f"{dest}: something other than a TransferQueue checkpoint or an empty directory is there; "
                              "choose a new directory")
    parent, name = os.path.split(dest)
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{name}.staging-{uuid.uuid4().hex}")
    os.mkdir(staging)
    try:
        state = _gather([controller.__ray_call__.remote(_controller_state)])[0]
        n = len(units)
        storage_root = os.path.join(staging, STORAGE_DIR)
        os.mkdir(storage_root)
        jobs = []
        for position, unit in enumerate(units):
            parts = [(i, p["id"], sorted(g for g in p["attrs"]["global_indexes"] if g % n == position))
                     for i, p in enumerate(state["partitions"])]
            jobs.append(unit.__ray_call__.remote(_save_unit, storage_root, position, parts))
        dumps = [entry for written in _gather(jobs) for entry in written]
        fsync_dir(storage_root)
        rows = _controller_rows(state, {"units": n, "dumps": dumps}, metadata or {})
        dump(rows, os.path.join(staging, CONTROLLER_DIR))
        if replace:
            fsync_dir(staging)
            _replace(staging, dest)
        else:
            publish(staging, dest)
    except BaseException:
        discard(staging)
        raise


def load_checkpoint(checkpoint_dir: str | os.PathLike[str]) -> None:
    """Restore the running TransferQueue from a checkpoint :func:`save_checkpoint` wrote, checking every byte first.

    Nothing changes unless every part is whole: a damaged, incomplete or foreign
    directory is an :class:`inert.InertError` (TransferQueue's pickled
    checkpoints a :class:`inert.ForeignFormatError`, never unpickled); a
    checkpoint of another number of storage units is a ``ValueError``, as in
    TransferQueue.
    """
    path = os.path.abspath(os.fspath(checkpoint_dir))
    controller, units = _handles()
    if not os.path.isdir(path):
        raise FileNotFoundError(f"Checkpoint directory not found: {path}")
    _refuse_legacy(path)
    _entries(path, (CONTROLLER_DIR, STORAGE_DIR))
    state = _read_controller(path)
    listing = state.pop("storage")
    n = len(units)
    if listing["units"] != n:
        raise ValueError(f"Storage unit count mismatch: checkpoint has {listing['units']}, current system has {n}.")
    root = os.path.join(path, STORAGE_DIR)
    by_unit: dict[int, list[list[int]]] = {}
    for unit, part, count in listing["dumps"]:
        by_unit.setdefault(unit, []).append([part, count])
    _entries(root, (_unit_dir(u) for u in by_unit))
    for unit, held in by_unit.items():
        _entries(os.path.join(root, _unit_dir(unit)), (_part_dir(p) for p, _ in held))
    partitions = state["partitions"]
    _gather([controller.__ray_call__.remote(_apply_controller, state, False)])
    jobs = []
    for position, unit in enumerate(units):
        parts = [(part, partitions[part]["id"], count,
                  sorted(g for g in partitions[part]["attrs"]["global_indexes"] if g % n == position),
                  sorted(partitions[part]["attrs"]["field_name_mapping"]))
                 for part, count in by_unit.get(position, [])]
        jobs.append(unit.__ray_call__.remote(_stage_unit, root, position, n, parts))
    try:
        _gather(jobs)
    except BaseException:
        _gather([unit.__ray_call__.remote(_commit_unit, False) for unit in units])
        raise
    _gather([unit.__ray_call__.remote(_commit_unit, True) for unit in units])
    _gather([controller.__ray_call__.remote(_apply_controller, state, True)])


def migrate_checkpoint(src: str | os.PathLike[str], dst: str | os.PathLike[str], *, trust_pickle: bool = False) -> None:
    """Rewrite TransferQueue's own pickled checkpoint ``src`` as a pickle-free one at ``dst``.

    This unpickles ``src`` (TransferQueue's own loader, in the controller's and the
    units' processes), which runs any code it holds: only for checkpoints you
    wrote yourself, and only with ``trust_pickle=True``.  It goes through the
    running TransferQueue, whose state it replaces by ``src``'s.
    """
    if trust_pickle is not True:
        raise ValueError("migrate_checkpoint unpickles src, which runs any code it holds; pass trust_pickle=True "
                         "only for a checkpoint you wrote yourself")
    original = _originals.get("load_checkpoint", _tq_interface.load_checkpoint)
    original(src)
    save_checkpoint(dst)


# --- the switch -----------------------------------------------------------------------------------------------

_lock = threading.Lock()
#: TransferQueue's own functions while :func:`enable` has replaced them; empty when disabled.
_originals: dict[str, Any] = {}
_REPLACEMENTS = {"save_checkpoint": save_checkpoint, "load_checkpoint": load_checkpoint}


def is_enabled() -> bool:
    """Whether ``transfer_queue.save_checkpoint``/``load_checkpoint`` are Inert's now."""
    return bool(_originals)


def enable() -> None:
    """Make ``transfer_queue.save_checkpoint``/``load_checkpoint`` (and ``transfer_queue.interface``'s) Inert's.

    Idempotent, thread-safe, undone by :func:`disable`.  Code that bound
    TransferQueue's functions to its own names before this keeps TransferQueue's.
    """
    with _lock:
        if _originals:
            return
        for name in _REPLACEMENTS:
            original = getattr(_tq_interface, name)
            if getattr(tq, name) is not original:
                raise RuntimeError(f"inert.transferqueue.enable: transfer_queue.{name} is not transfer_queue.interface."
                                   f"{name}; this TransferQueue differs from 0.1.11, refusing to patch it")
            _originals[name] = original
        for name, replacement in _REPLACEMENTS.items():
            setattr(tq, name, replacement)
            setattr(_tq_interface, name, replacement)


def disable() -> None:
    """Give TransferQueue its own checkpoint functions back.  Idempotent, thread-safe."""
    with _lock:
        for name, original in _originals.items():
            setattr(tq, name, original)
            setattr(_tq_interface, name, original)
        _originals.clear()


@contextmanager
def enabled() -> Iterator[None]:
    """:func:`enable` for the ``with`` block; on exit, :func:`disable` unless it was enabled before."""
    with _lock:
        already = bool(_originals)
    enable()
    try:
        yield
    finally:
        if not already:
            disable()
