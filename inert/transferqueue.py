"""Selective dump and restore of TransferQueue rows by key, in Inert's dump format (nothing on disk executes).

Built on TransferQueue's public client API (``transferqueue`` 0.1.11: ``kv_*``
and ``TransferQueueClient``); the only module of Inert that imports
``transfer_queue``::

    import transfer_queue as tq
    from inert.transferqueue import dump_data_by_key, load_data_by_key

    tq.init()
    report = dump_data_by_key(f"{ckpt}/tq_rollout", pending_keys, partition_id="train")
    ...
    tags = load_data_by_key(f"{ckpt}/tq_rollout")     # {key: tag}, into the running TransferQueue

Dump: each key's global index, produced fields and tag are looked up one key
at a time (a row's own field set, not the intersection a batched lookup
returns), rows with the same field set are fetched together, and the rows
are written by ``inert.dump`` with one shard per owner, in parallel.  The
public API has no per-unit dump, so the payload passes through this process
once; writers for the keys must be paused, as for any consistent snapshot.

Load merges into the running system: keys that exist keep their global
index, dumped fields overwrite fields of the same name, other fields stay,
and tags are merged (dumped entries win); new keys get fresh indexes; other
keys and partitions are untouched; sampler and consumption state are not
restored.  The whole dump is read and checked, and dumped field types are
compared with the destination partition's, before any key is registered.
Writing then goes through ``kv_batch_put`` and is not transactional: after a
failure new keys may be registered without data and existing keys may hold
some dumped fields already; loading the same dump again is idempotent (every
key keeps the index it got), so a failed load is retried, or its keys cleared.

Whole-system checkpoint: :func:`save_checkpoint`/:func:`load_checkpoint` are
pickle-free equivalents of ``transfer_queue.save_checkpoint``/``load_checkpoint``
(the controller's partitions, index manager and sampler state, every storage
unit's rows, as dumps), and :func:`enable` makes TransferQueue's own two
functions use them (see ``inert._tq_checkpoint`` and docs/dump.md)::

    import inert.transferqueue
    inert.transferqueue.enable()
    tq.save_checkpoint(f"{ckpt}/tq")      # no pickle written
    tq.load_checkpoint(f"{ckpt}/tq")      # every byte checked; TransferQueue's .pkl checkpoints refused
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from inert._extras import extra_error

try:
    import torch
except ImportError as _exc:
    raise extra_error("inert.transferqueue", _exc, extra="transferqueue") from None

try:
    import transfer_queue as tq
    from tensordict import TensorDict
    from tensordict.tensorclass import NonTensorStack
except ImportError as exc:  # pragma: no cover - exercised in an environment without transferqueue
    raise ImportError(f"inert.transferqueue needs TransferQueue: pip install transferqueue==0.1.11 ({exc})") from exc

from inert._errors import InvalidValueError
from inert._objstore import is_url
from inert._tq_checkpoint import disable, enable, enabled, is_enabled, load_checkpoint, migrate_checkpoint, save_checkpoint
from inert.dump import DENSE, NESTED, VALUE, FieldSpec, Row, dump, open_dump

__all__ = ["dump_data_by_key", "load_data_by_key", "SchemaConflictError", "save_checkpoint", "load_checkpoint",
           "migrate_checkpoint", "enable", "disable", "enabled", "is_enabled"]

#: Concurrent per-key metadata lookups (each is one round trip to the controller).
_LOOKUP_THREADS = 16


class SchemaConflictError(TypeError):
    """A dumped field's type differs from the type the destination partition holds for that name."""


def _client() -> Any:
    return tq.get_client()


#: Per key: its global index, the fields it has produced (sorted), its tag.
Described = list[tuple[int, tuple[str, ...], dict[str, Any]]]


def _missing(missing: list[str], partition_id: str) -> KeyError:
    shown = ", ".join(repr(k) for k in missing[:5])
    return KeyError(f"{len(missing)} keys are not in partition {partition_id!r}: {shown}{' ...' if len(missing) > 5 else ''}")


def _describe(client: Any, keys: Sequence[str], partition_id: str) -> Described:
    """One lookup per key: a batched lookup returns only the fields every key has produced."""

    def one(key: str) -> Any:
        return client.kv_retrieve_meta(keys=[key], partition_id=partition_id, create=False)

    with ThreadPoolExecutor(max_workers=_LOOKUP_THREADS) as pool:
        metas = list(pool.map(one, keys))
    missing = [key for key, meta in zip(keys, metas, strict=True) if meta.size != 1]
    if missing:
        raise _missing(missing, partition_id)
    return [(meta.global_indexes[0], tuple(sorted(meta.field_names)), dict(meta.custom_meta[0])) for meta in metas]


def _describe_with_fields(client: Any, keys: Sequence[str], partition_id: str, fields: Sequence[str]) -> Described:
    """Round trips in proportion to the fields, not the keys: the keys' indexes and tags, the partition's
    field types, then per field its production status for every row."""
    meta = client.kv_retrieve_meta(keys=list(keys), partition_id=partition_id, create=False)
    if meta.size != len(keys):
        present = set(tq.kv_list(partition_id).get(partition_id, {}))
        raise _missing([key for key in keys if key not in present], partition_id)
    unnamed = sorted(set(meta.field_names) - set(fields))
    if unnamed:  # fields every key has are visible here; others cannot be checked
        raise ValueError(f"fields= must name every field of partition {partition_id!r}; missing {unnamed}")
    produced: list[list[str]] = [[] for _ in keys]
    for name in sorted(_destination_schema(client, partition_id, list(fields))):
        # One field per request: the controller returns the columns of several in its own order, not the request's.
        indexes, status = client.get_production_status(data_fields=[name], partition_id=partition_id)
        ready = dict(zip(indexes.tolist(), status.reshape(-1).tolist(), strict=True))
        for names, index in zip(produced, meta.global_indexes, strict=True):
            if ready.get(index) == 1:
                names.append(name)
    return [
        (index, tuple(names), dict(tag))
        for index, names, tag in zip(meta.global_indexes, produced, meta.custom_meta, strict=True)
    ]


def _column_rows(column: Any, count: int) -> list[Any]:
    """The per-row values of a column returned by ``kv_batch_get`` (views of the column's storage)."""
    if isinstance(column, torch.Tensor):
        return list(column.unbind()) if column.is_nested else [column[i] for i in range(count)]
    return list(column.tolist())


def dump_data_by_key(
    dump_dir: str | os.PathLike[str],
    keys: Sequence[str],
    partition_id: str,
    *,
    owners: int | None = None,
    fields: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, int]:
    """Save ``keys`` of ``partition_id`` (all their produced fields and their tags) into the new directory ``dump_dir``.

    ``owners`` shards are written in parallel (default: the number of storage
    units).  Each key's own field set takes one lookup per key; a caller that
    knows every field name of the partition passes ``fields=`` and the lookups
    take two round trips plus one per field (a field it leaves out that only some keys
    have is not saved).  Returns ``{"keys", "rows_with_data", "shards", "bytes"}``.
    ``dump_dir`` may be a URL (``s3://bucket/rollout``; ``storage_options`` for its filesystem),
    published by ``inert.dump`` without rename.
    """
    keys = list(keys)
    if len(set(keys)) != len(keys) or not all(isinstance(k, str) for k in keys):
        raise ValueError("keys must be distinct strings")
    if not is_url(dump_dir) and os.path.lexists(dump_dir):  # a URL's MANIFEST is checked by dump()
        raise FileExistsError(f"{os.fspath(dump_dir)}: a dump (or another file) is already there; choose a new directory")
    client = _client()
    if not keys:
        described: Described = []
    elif fields is None:
        described = _describe(client, keys, partition_id)
    else:
        described = _describe_with_fields(client, keys, partition_id, fields)
    groups: dict[tuple[str, ...], list[int]] = {}
    for position, (_, names, _) in enumerate(described):
        groups.setdefault(names, []).append(position)
    values: list[dict[str, Any]] = [{} for _ in keys]
    for names, positions in groups.items():
        if not names:
            continue
        data = tq.kv_batch_get(keys=[keys[p] for p in positions], partition_id=partition_id, select_fields=list(names))
        for name in names:
            for position, value in zip(positions, _column_rows(data[name], len(positions)), strict=True):
                values[position][name] = value
    rows = [Row(key, index, row_fields, tag) for key, (index, _, tag), row_fields in zip(keys, described, values, strict=True)]
    report = dump(rows, dump_dir, partition_id=partition_id, owners=owners or _storage_units(client),
                  storage_options=storage_options)
    return {"keys": report.keys, "rows_with_data": report.rows_with_data, "shards": report.shards, "bytes": report.bytes}


def _storage_units(client: Any) -> int:
    # SimpleStorage's manager lists its units; with another backend, one shard.
    infos = getattr(getattr(client, "storage_manager", None), "storage_unit_infos", None)
    return len(infos) if infos else 1


def _destination_schema(client: Any, partition_id: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """The destination partition's declared type of each field in ``names`` it already holds."""
    if not names or partition_id not in (client.get_partition_list() or []):
        return {}
    meta = client.get_meta(data_fields=names, batch_size=1, partition_id=partition_id, mode="force_fetch")
    return {name: schema for name, schema in meta.field_schema.items() if name in names}


def _conflict(spec: FieldSpec, held: dict[str, Any]) -> str | None:
    if held.get("is_non_tensor"):
        return None if spec.layout == VALUE else f"the partition holds values, the dump {spec.layout} {spec.dtype} tensors"
    if held.get("dtype") is None:  # registered, never written
        return None
    if spec.layout == VALUE:
        return f"the partition holds {held['dtype']} tensors, the dump values"
    if held["dtype"] != spec.dtype:
        return f"the partition holds {held['dtype']} tensors, the dump {spec.dtype}"
    return None


def _batch(rows: list[Row], names: tuple[str, ...], schema: dict[str, FieldSpec]) -> TensorDict:
    columns: dict[str, Any] = {}
    for name in names:
        values = [row.fields[name] for row in rows]
        layout = schema[name].layout
        if layout == DENSE:
            columns[name] = torch.stack(values)
        elif layout == NESTED:
            columns[name] = torch.nested.as_nested_tensor(values)
        else:
            columns[name] = NonTensorStack(*values)
    return TensorDict(columns, batch_size=len(rows))


def load_data_by_key(dump_dir: str | os.PathLike[str], *, batch_rows: int = 128, readers: int = 4,
                     storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge the rows of ``dump_dir`` into the running TransferQueue; return ``{key: dumped tag}``.

    The partition comes from the dump.  Raises an :class:`inert.InertError` for
    a damaged dump and :class:`SchemaConflictError` for a field whose type the
    destination partition holds differently, both before any key is registered.
    """
    client = _client()
    with open_dump(dump_dir, storage_options=storage_options) as reader:
        partition_id = reader.partition_id
        schema = {spec.name: spec for spec in reader.schema}
        for info in reader.keys:
            if not isinstance(info.tag, dict):
                raise InvalidValueError("dump-manifest", -1, f"keys[{info.index}].tag", "a TransferQueue tag must be a map")
        held = _destination_schema(client, partition_id, list(schema))
        conflicts = [f"{name!r}: {reason}" for name, spec in schema.items() if (reason := _conflict(spec, held.get(name, {})))]
        if conflicts:
            raise SchemaConflictError(f"partition {partition_id!r}: " + "; ".join(conflicts))
        loaded = reader.read(owners=readers, batch_rows=batch_rows)
    rows = loaded.rows
    groups: dict[tuple[str, ...], list[Row]] = {}
    for row in rows:
        groups.setdefault(tuple(row.fields), []).append(row)
    for names, members in groups.items():
        for start in range(0, len(members), batch_rows):
            chunk = members[start : start + batch_rows]
            keys = [row.key for row in chunk]
            tags = [dict(row.tag) for row in chunk]
            if names:
                tq.kv_batch_put(keys=keys, partition_id=partition_id, fields=_batch(chunk, names, schema), tags=tags)
            else:
                tq.kv_batch_put(keys=keys, partition_id=partition_id, tags=tags)
    return {row.key: row.tag for row in rows}
