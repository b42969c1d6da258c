"""inert.transferqueue's whole-system checkpoint against a real TransferQueue (Ray, SimpleStorage units).

The same setup as tests/test_transferqueue.py (integration tests, deselected by
default; selected, they fail, never skip, if TransferQueue is missing)::

    python -m pytest -m integration tests/test_transferqueue_checkpoint.py

The reference for "restored" is TransferQueue's own pickled checkpoint of the
same state: after Inert's load the system answers every probe (rows, tags,
production and consumption status, the next sampled batch, the next index
given out) as it does after TransferQueue's own load.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.integration

PARTITIONS = ("train", "eval")


@pytest.fixture(scope="module")
def tq() -> Iterator[Any]:
    """The ``transfer_queue`` module with Ray started for this module's tests."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray  # a missing or broken TransferQueue fails here, loudly
    import transfer_queue

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors run this module's probes
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    ray.init(num_cpus=3, _temp_dir=temp, include_dashboard=False, log_to_driver=False)
    try:
        yield transfer_queue
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@contextmanager
def running(tq: Any, units: int = 2) -> Iterator[None]:
    from omegaconf import OmegaConf

    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": units}}}))
    try:
        yield
    finally:
        tq.close()


def populate(tq: Any) -> None:
    """Two partitions (one field name with two dtypes), consumed and unconsumed rows, a cleared key, a tag-only key."""
    from tensordict import TensorDict
    from tensordict.tensorclass import NonTensorStack

    keys = [f"k{i}" for i in range(6)]
    fields = {
        "ids": torch.arange(24, dtype=torch.int64).reshape(6, 4),
        "jag": torch.nested.as_nested_tensor([torch.full((i % 3 + 1, 2), float(i)) for i in range(6)]),
        "txt": NonTensorStack(*[f"text {i}" for i in range(6)]),
    }
    tq.kv_batch_put(keys=keys, partition_id="train", fields=TensorDict(fields, batch_size=6),
                    tags=[{"i": i, "status": "partial"} for i in range(6)])
    tq.kv_put(key="waiting", partition_id="train", tag={"waiting": True, "shape": (2, 3)})
    tq.kv_clear(keys=["k5"], partition_id="train")  # its index goes to the reusable pool
    tq.kv_batch_put(keys=["e0", "e1"], partition_id="eval",
                    fields=TensorDict({"ids": torch.rand(2, 3), "bools": torch.tensor([[True], [False]])}, batch_size=2),
                    tags=[{"e": 0}, {"e": 1}])
    client = tq.get_client()
    for partition in PARTITIONS:  # two rows consumed by task "actor" in each partition
        client.get_meta(data_fields=["ids"], batch_size=2 if partition == "train" else 1, partition_id=partition,
                        mode="fetch", task_name="actor")


def rows(tq: Any) -> dict[str, Any]:
    """Every key of every partition: index, tag, fields as plain values; and the status columns."""
    client = tq.get_client()
    out: dict[str, Any] = {}
    for partition in PARTITIONS:
        for key in sorted(tq.kv_list(partition).get(partition, {})):
            meta = client.kv_retrieve_meta(keys=[key], partition_id=partition, create=False)
            got: dict[str, Any] = {"index": meta.global_indexes[0], "tag": dict(meta.custom_meta[0]), "fields": {}}
            if meta.field_names:
                data = tq.kv_batch_get(keys=[key], partition_id=partition, select_fields=meta.field_names)
                for name in meta.field_names:
                    column = data[name]
                    if isinstance(column, torch.Tensor):
                        value = column.unbind()[0] if column.is_nested else column[0]
                        got["fields"][name] = (str(value.dtype), value.tolist())
                    else:
                        got["fields"][name] = column.tolist()[0]
            out[f"{partition}/{key}"] = got
        indexes, consumed = client.get_consumption_status("actor", partition)
        out[f"{partition}:consumed"] = (_plain(indexes), _plain(consumed))
        indexes, produced = client.get_production_status(data_fields=["ids"], partition_id=partition)
        out[f"{partition}:produced"] = (_plain(indexes), _plain(produced))
    return out


def _plain(tensor: torch.Tensor | None) -> Any:
    return None if tensor is None else tensor.tolist()  # None: the partition is gone


def behaviour(tq: Any) -> dict[str, Any]:
    """``rows``, then what the system does next (this changes it): the next batch task "actor" gets, the next index."""
    from tensordict import TensorDict

    client = tq.get_client()
    out = rows(tq)
    meta = client.get_meta(data_fields=["ids", "txt"], batch_size=2, partition_id="train", mode="fetch", task_name="actor")
    out["next batch"] = (meta.global_indexes, client.get_data(meta)["txt"].tolist())
    tq.kv_batch_put(keys=["new", "newer"], partition_id="train",
                    fields=TensorDict({"ids": torch.zeros(2, 4, dtype=torch.int64)}, batch_size=2))
    out["next indexes"] = client.kv_retrieve_meta(keys=["new", "newer"], partition_id="train", create=False).global_indexes
    return out


def move_on(tq: Any) -> None:
    """The system after the checkpoint: keys cleared and added, rows consumed, a partition gone."""
    from tensordict import TensorDict

    tq.kv_clear(keys=["k0", "waiting"], partition_id="train")
    tq.kv_batch_put(keys=["late"], partition_id="train",
                    fields=TensorDict({"ids": torch.ones(1, 4, dtype=torch.int64)}, batch_size=1))
    tq.get_client().get_meta(data_fields=["ids"], batch_size=1, partition_id="train", mode="fetch", task_name="actor")
    tq.get_client().clear_partition("eval")


def _forbid(_: Any) -> None:
    """Run in an actor (and here): make file unpickling and torch.load raise until ``_allow``."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("pickle used while loading an Inert checkpoint")

    saved = {"load": pickle.load, "Unpickler": pickle.Unpickler, "torch.load": torch.load}
    pickle._inert_saved = saved  # type: ignore[attr-defined]
    pickle.load = refuse  # type: ignore[assignment]
    pickle.Unpickler = refuse  # type: ignore[assignment,misc]
    torch.load = refuse  # type: ignore[assignment]


def _allow(_: Any) -> None:
    saved = pickle._inert_saved  # type: ignore[attr-defined]
    pickle.load = saved["load"]
    pickle.Unpickler = saved["Unpickler"]  # type: ignore[misc]
    torch.load = saved["torch.load"]


def _actors() -> list[Any]:
    from transfer_queue import interface

    return [interface._TQ_CONTROLLER, *interface._TQ_STORAGE["SimpleStorage"].values()]


@contextmanager
def no_unpickling() -> Iterator[None]:
    import ray

    ray.get([actor.__ray_call__.remote(_forbid) for actor in _actors()])
    _forbid(None)
    try:
        yield
    finally:
        _allow(None)
        ray.get([actor.__ray_call__.remote(_allow) for actor in _actors()])


def assert_inert_files_only(root: Path) -> None:
    """Every file of the checkpoint is a dump manifest or shard (nothing a pickle reader would take)."""
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files and all(p.read_bytes()[:8] in (b"\x89INRTDM\n", b"\x89INRTDS\n") for p in files), files
    assert not [p for p in root.rglob("*") if p.is_symlink() or p.name.startswith(".")]


def test_round_trip_behaves_as_after_transferqueues_own_load(tq: Any, tmp_path: Path) -> None:
    from inert.transferqueue import load_checkpoint, save_checkpoint

    with running(tq):
        populate(tq)
        before = rows(tq)
        assert (sum(before["train:consumed"][1]), sum(before["eval:consumed"][1])) == (2, 1)
        save_checkpoint(tmp_path / "inert")
        tq.save_checkpoint(tmp_path / "pickled")  # TransferQueue's own, the reference
        assert_inert_files_only(tmp_path / "inert")
        assert sorted(os.listdir(tmp_path / "inert" / "storage")) == ["unit-00000", "unit-00001"]

        move_on(tq)
        assert rows(tq) != before
        with no_unpickling():
            load_checkpoint(tmp_path / "inert")
        assert rows(tq) == before
        ours = behaviour(tq)

        move_on(tq)
        tq.load_checkpoint(tmp_path / "pickled")
        assert behaviour(tq) == ours
        assert ours["next batch"][1] == ["text 2", "text 3"]  # unconsumed rows come next, in order


def test_enable_routes_transferqueues_own_functions(tq: Any, tmp_path: Path) -> None:
    import transfer_queue.interface as interface

    import inert.transferqueue as itq
    from inert import ForeignFormatError

    own_save, own_load = tq.save_checkpoint, tq.load_checkpoint
    with running(tq):
        populate(tq)
        before = rows(tq)
        with itq.enabled():
            itq.enable()  # idempotent
            assert tq.save_checkpoint is itq.save_checkpoint and interface.load_checkpoint is itq.load_checkpoint
            tq.save_checkpoint(tmp_path / "ckpt", metadata={"step": 10})
            move_on(tq)
            tq.save_checkpoint(tmp_path / "ckpt")  # an existing checkpoint is replaced, as TransferQueue does
            moved = rows(tq)
            populate(tq)
            assert rows(tq) != moved
            tq.load_checkpoint(tmp_path / "ckpt")
            assert rows(tq) == moved != before
        assert (tq.save_checkpoint, tq.load_checkpoint) == (own_save, own_load) and not itq.is_enabled()
        assert_inert_files_only(tmp_path / "ckpt")

        # TransferQueue's pickled checkpoint: refused unread through the switched path, migrated only when trusted.
        current = rows(tq)
        tq.save_checkpoint(tmp_path / "legacy")
        assert (tmp_path / "legacy" / "controller_state.pkl").exists()
        with itq.enabled(), no_unpickling(), pytest.raises(ForeignFormatError) as refused:
            tq.load_checkpoint(tmp_path / "legacy")
        assert str(tmp_path / "legacy") in str(refused.value) and "migrate_checkpoint" in str(refused.value)
        with pytest.raises(ValueError, match="trust_pickle=True"):
            itq.migrate_checkpoint(tmp_path / "legacy", tmp_path / "migrated")
        itq.migrate_checkpoint(tmp_path / "legacy", tmp_path / "migrated", trust_pickle=True)
        populate(tq)
        itq.load_checkpoint(tmp_path / "migrated")
        assert rows(tq) == current
        (tmp_path / "other").mkdir()
        itq.save_checkpoint(tmp_path / "other")  # an empty directory is replaced, as TransferQueue does
        assert_inert_files_only(tmp_path / "other")
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "mine.txt").write_text("x")
        with pytest.raises(FileExistsError):  # neither a checkpoint nor empty: never replaced
            itq.save_checkpoint(tmp_path / "notes")
        assert os.listdir(tmp_path / "notes") == ["mine.txt"]


def _corrupt_cases(root: Path) -> dict[str, Any]:
    unit0 = root / "storage" / "unit-00000"

    def truncate() -> None:
        shard = root / "controller" / "shard-00000.bin"
        shard.write_bytes(shard.read_bytes()[:-10])

    def flip(path: Path, at: int) -> Any:
        def run() -> None:
            data = bytearray(path.read_bytes())
            data[at if at >= 0 else len(data) + at] ^= 0x10
            path.write_bytes(bytes(data))
        return run

    def missing() -> None:
        shutil.rmtree(root / "storage" / "unit-00001")

    def linked_part() -> None:
        part = unit0 / "part-00000"
        shutil.move(part, root.parent / "elsewhere")
        part.symlink_to(root.parent / "elsewhere")

    def linked_file() -> None:
        shard = unit0 / "part-00000" / "shard-00000.bin"
        shutil.move(shard, root.parent / "shard-elsewhere")
        shard.symlink_to(root.parent / "shard-elsewhere")

    def swapped_parts() -> None:  # each unit's dump of partition 0 where the other's belongs
        other = root / "storage" / "unit-00001" / "part-00000"
        os.rename(unit0 / "part-00000", root / "storage" / "tmp")
        os.rename(other, unit0 / "part-00000")
        os.rename(root / "storage" / "tmp", other)

    def extra() -> None:
        (root / "notes.txt").write_text("x")

    return {"truncated controller shard": (truncate, "TruncatedError"),
            "bit flip in a storage shard": (flip(unit0 / "part-00000" / "shard-00000.bin", -3), "ChecksumError"),
            "bit flip in the controller manifest": (flip(root / "controller" / "MANIFEST", 40), "ChecksumError"),
            "missing unit": (missing, "InvalidValueError"),
            "linked part": (linked_part, "FileKindError"),
            "linked shard": (linked_file, "FileKindError"),
            "parts swapped between units": (swapped_parts, "InvalidValueError"),
            "extra file": (extra, "InvalidValueError")}


def test_hostile_directories_are_refused_and_nothing_changes(tq: Any, tmp_path: Path) -> None:
    from inert import InertError
    from inert.transferqueue import load_checkpoint, save_checkpoint

    with running(tq):
        populate(tq)
        save_checkpoint(tmp_path / "good")
        move_on(tq)
        now = rows(tq)
        for name, (_, kind) in _corrupt_cases(tmp_path / "good").items():
            case = tmp_path / name.replace(" ", "-") / "ckpt"
            shutil.copytree(tmp_path / "good", case, symlinks=True)
            _corrupt_cases(case)[name][0]()
            with pytest.raises(InertError) as refused:
                load_checkpoint(case)
            assert type(refused.value).__name__ == kind, (name, refused.value)
            assert rows(tq) == now, name  # refused before anything changed
        load_checkpoint(tmp_path / "good")  # the original still loads
        assert rows(tq) != now


def test_int_keyed_state_round_trips_and_hash_floods_are_refused() -> None:
    from inert import InvalidValueError
    from inert._tq_checkpoint import MAX_SAME_HASH, _from_doc, _to_doc
    from inert._value_types import ObjectValue

    state = {"_states": {"train": {"actor": {0: {None: [1, 2], 3: [4]}}}}, "_balanced_cache": {("train", "a", 2): [[1]]},
             "sets": [{1, 2}, frozenset({"a"}), {3.5}], "dtype": torch.float16, "size": torch.Size([2, 3]), "t": (1, [2])}
    assert _from_doc(_to_doc(state, "s"), "s") == state
    modulus = sys.hash_info.modulus  # ints n and n + modulus hash alike
    flood = ObjectValue("transferqueue.set", [7 + i * modulus for i in range(MAX_SAME_HASH + 1)])
    with pytest.raises(InvalidValueError, match="of one hash"):
        _from_doc(flood, "sampler")
    with pytest.raises(InvalidValueError, match="appears twice"):
        _from_doc(ObjectValue("transferqueue.dict", [[1, 2], [1, 3]]), "sampler")
    with pytest.raises(InvalidValueError, match="registered as 'os.system'"):
        _from_doc(ObjectValue("os.system", ["echo"]), "sampler")
