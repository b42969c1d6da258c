"""inert.transferqueue against a real TransferQueue (Ray, SimpleStorage units): the seed's merge semantics.

Heavy (Ray, about 10 s per TransferQueue start, about 2.4 GB of memory), so
these are integration tests, deselected by default (``addopts`` in
pyproject.toml); selected, they fail (never skip) if TransferQueue is missing
or broken::

    pip install transferqueue==0.1.11 && python -m pytest -m integration tests/test_transferqueue.py

On a 2-core machine Ray gets ``num_cpus=3`` (the controller and each storage
unit reserve one CPU) and TransferQueue at most 2 storage units.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tq() -> Iterator[Any]:
    """The ``transfer_queue`` module with Ray started for this module's tests."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray  # a missing or broken TransferQueue fails here, loudly
    import transfer_queue

    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    ray.init(num_cpus=3, _temp_dir=temp, include_dashboard=False, log_to_driver=False)
    try:
        yield transfer_queue
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@contextmanager
def running(tq: Any, units: int) -> Iterator[None]:
    from omegaconf import OmegaConf

    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": units}}}))
    try:
        yield
    finally:
        tq.close()


def put_rows(tq: Any, partition: str, keys: list[str], start: int = 0, **extra: Any) -> None:
    from tensordict import TensorDict
    from tensordict.tensorclass import NonTensorStack

    count = len(keys)
    fields = {
        "ids": torch.arange(count * 4, dtype=torch.int64).reshape(count, 4) + start,
        "jag": torch.nested.as_nested_tensor([torch.full((i % 3 + 1, 2), float(start + i)) for i in range(count)]),
        "txt": NonTensorStack(*[f"text {start + i}" for i in range(count)]),
        **extra,
    }
    tags = [{"i": start + i, "status": "partial"} for i in range(count)]
    tq.kv_batch_put(keys=keys, partition_id=partition, fields=TensorDict(fields, batch_size=count), tags=tags)


def snapshot(tq: Any, partition: str, key: str) -> dict[str, Any]:
    """Everything TransferQueue holds for ``key``: index, fields (as plain values), tag."""
    client = tq.get_client()
    meta = client.kv_retrieve_meta(keys=[key], partition_id=partition, create=False)
    assert meta.size == 1, key
    out: dict[str, Any] = {"index": meta.global_indexes[0], "tag": dict(meta.custom_meta[0]), "fields": {}}
    if meta.field_names:
        data = tq.kv_batch_get(keys=[key], partition_id=partition, select_fields=meta.field_names)
        for name in meta.field_names:
            column = data[name]
            if isinstance(column, torch.Tensor):
                value = column.unbind()[0] if column.is_nested else column[0]
                out["fields"][name] = value.tolist()
            else:
                out["fields"][name] = column.tolist()[0]
    return out


def test_dump_then_merge_into_a_running_system(tq: Any, tmp_path: Path) -> None:
    from tensordict import TensorDict

    from inert.transferqueue import dump_data_by_key, load_data_by_key

    with running(tq, 2):
        keys = [f"k{i}" for i in range(6)]
        put_rows(tq, "train", keys)
        tq.kv_put(key="tag-only", partition_id="train", tag={"waiting": True})
        tq.kv_batch_put(keys=["other-fields"], partition_id="train",
                        fields=TensorDict({"ids": torch.tensor([[5, 5, 5, 5]]), "extra": torch.ones(1, 3)}, batch_size=1),
                        tags=[{"x": 1}])
        put_rows(tq, "eval", ["e0"], start=50)
        selected = ["k0", "k2", "k5", "tag-only", "other-fields"]
        before = {key: snapshot(tq, "train", key) for key in selected + ["k1"]}
        eval_before = snapshot(tq, "eval", "e0")

        report = dump_data_by_key(tmp_path / "dump", selected, "train")
        assert report["keys"] == 5 and report["rows_with_data"] == 4 and report["shards"] == 2

        # The system moves on: an existing key changes and gains a field, keys go away.
        tq.kv_batch_put(keys=["k0"], partition_id="train",
                        fields=TensorDict({"ids": torch.full((1, 4), 99), "late": torch.ones(1, 2)}, batch_size=1),
                        tags=[{"i": 100, "seen": "later"}])
        tq.kv_clear(keys=["k2", "k5", "tag-only"], partition_id="train")

        tags = load_data_by_key(tmp_path / "dump")
        assert tags == {key: before[key]["tag"] for key in selected}
        k0 = snapshot(tq, "train", "k0")
        assert k0["index"] == before["k0"]["index"]  # existing keys keep their index
        assert k0["fields"]["ids"] == before["k0"]["fields"]["ids"]  # dumped fields overwrite
        assert k0["fields"]["late"] == [1.0, 1.0]  # other fields stay
        assert k0["tag"] == {"i": 0, "status": "partial", "seen": "later"}  # tags merge, dumped entries win
        for key in ("k2", "k5", "tag-only", "other-fields"):
            got = snapshot(tq, "train", key)
            assert (got["fields"], got["tag"]) == (before[key]["fields"], before[key]["tag"]), key
        assert snapshot(tq, "train", "k1") == before["k1"]  # bystanders untouched
        assert snapshot(tq, "eval", "e0") == eval_before  # other partitions untouched
        assert sorted(tq.kv_list("train")["train"]) == sorted(keys + ["tag-only", "other-fields"])

        # Loading again changes nothing: a failed load is retried this way.
        indexes = {key: snapshot(tq, "train", key)["index"] for key in selected}
        load_data_by_key(tmp_path / "dump")
        assert {key: snapshot(tq, "train", key)["index"] for key in selected} == indexes
        assert snapshot(tq, "train", "k2")["fields"] == before["k2"]["fields"]


def test_dump_to_and_load_from_an_s3_url(tq: Any) -> None:
    from s3_server import S3Server

    from inert.transferqueue import dump_data_by_key, load_data_by_key

    server = S3Server()  # moto's S3 API on localhost, reached through s3fs
    try:
        url = f"s3://{server.new_bucket()}/tq_rollout"
        with running(tq, 2):
            keys = [f"s{i}" for i in range(4)]
            put_rows(tq, "train", keys)
            before = {key: snapshot(tq, "train", key) for key in keys}
            report = dump_data_by_key(url, keys, "train", storage_options=server.options())
            assert report["keys"] == 4 and report["shards"] == 2
            with pytest.raises(FileExistsError):  # the MANIFEST is there: a dump is never written over
                dump_data_by_key(url, keys, "train", storage_options=server.options())
            tq.kv_clear(keys=keys, partition_id="train")
            tags = load_data_by_key(url, storage_options=server.options())
            assert tags == {key: before[key]["tag"] for key in keys}
            for key in keys:
                got = snapshot(tq, "train", key)
                assert (got["fields"], got["tag"]) == (before[key]["fields"], before[key]["tag"]), key
    finally:
        server.stop()


def test_conflicting_field_types_are_refused_before_any_key_is_registered(tq: Any, tmp_path: Path) -> None:
    from tensordict import TensorDict
    from tensordict.tensorclass import NonTensorStack

    from inert.transferqueue import SchemaConflictError, dump_data_by_key, load_data_by_key

    with running(tq, 2):
        put_rows(tq, "p", ["a", "b"])
        dump_data_by_key(tmp_path / "dump", ["a", "b"], "p")
        tq.kv_clear(keys=["a", "b"], partition_id="p")
        # The destination now holds "ids" as values, not int64 tensors.
        tq.kv_batch_put(keys=["q"], partition_id="p", fields=TensorDict({"ids": NonTensorStack("v")}, batch_size=1))
        with pytest.raises(SchemaConflictError, match="'ids'"):
            load_data_by_key(tmp_path / "dump")
        assert sorted(tq.kv_list("p")["p"]) == ["q"]


def test_missing_keys_are_refused_before_anything_is_written(tq: Any, tmp_path: Path) -> None:
    from inert.transferqueue import dump_data_by_key

    with running(tq, 2):
        put_rows(tq, "p", ["a"])
        with pytest.raises(KeyError, match="'nope'"):
            dump_data_by_key(tmp_path / "dump", ["a", "nope"], "p")
        assert not (tmp_path / "dump").exists()


@pytest.mark.parametrize(("dumped", "loaded"), [(2, 1), (1, 2)])
def test_restore_onto_another_number_of_storage_units(tq: Any, tmp_path: Path, dumped: int, loaded: int) -> None:
    from inert.transferqueue import dump_data_by_key, load_data_by_key

    keys = [f"r{i}" for i in range(9)]
    with running(tq, dumped):
        put_rows(tq, "train", keys, start=10)
        expected = {key: snapshot(tq, "train", key) for key in keys}
        dump_data_by_key(tmp_path / "dump", keys, "train")
    with running(tq, loaded):
        load_data_by_key(tmp_path / "dump")
        for key in keys:
            got = snapshot(tq, "train", key)
            assert (got["fields"], got["tag"]) == (expected[key]["fields"], expected[key]["tag"]), key


def test_named_fields_give_the_same_dump_in_a_few_round_trips(tq: Any, tmp_path: Path) -> None:
    from tensordict import TensorDict

    from inert.transferqueue import dump_data_by_key

    with running(tq, 2):
        keys = [f"k{i}" for i in range(5)]
        put_rows(tq, "p", keys)
        tq.kv_batch_put(keys=["k1"], partition_id="p", fields=TensorDict({"extra": torch.ones(1, 3)}, batch_size=1))
        tq.kv_put(key="bare", partition_id="p", tag={"waiting": True})
        selected = keys + ["bare"]
        dump_data_by_key(tmp_path / "slow", selected, "p")
        dump_data_by_key(tmp_path / "fast", selected, "p", fields=["ids", "jag", "txt", "extra", "never-written"])
        for name in sorted(os.listdir(tmp_path / "slow")):
            assert (tmp_path / "fast" / name).read_bytes() == (tmp_path / "slow" / name).read_bytes(), name
        with pytest.raises(ValueError, match=r"missing \['ids'\]"):
            dump_data_by_key(tmp_path / "partial", keys, "p", fields=["jag", "txt"])
        with pytest.raises(KeyError, match="'nope'"):
            dump_data_by_key(tmp_path / "missing", ["k0", "nope"], "p", fields=["ids"])
