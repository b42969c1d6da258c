"""inert.torch.FsspecWriter/FsspecReader against a real S3 API server on localhost (moto's server mode in its own
process, reached through s3fs), and the local ``file://`` and ``memory://`` filesystems: dcp.save, dcp.load,
dcp.async_save, load_tensors, several gloo ranks; damaged objects; requests that fail mid-read and mid-write
(the server stopped, a reset connection, 500 replies) give a StorageError and leave no loadable checkpoint.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from typing import Any

import fsspec
import pytest
import ranks
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from dcp_features import ZStandard, needs_checkpoint_id, needs_one_process_async_save, needs_one_process_dcp_load, needs_zstandard
from s3_server import KINDS, NO_RETRIES, FaultProxy, S3Server, location
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

import inert.torch
from inert import ChecksumError, StorageError, TruncatedError
from inert.torch import FsspecReader, FsspecWriter, load_tensors
from inert.torch._compat import dcp_load, dcp_save, no_dist_options

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")



@pytest.fixture(params=KINDS)
def where(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[str, dict[str, Any]]:
    """A fresh checkpoint URL and its storage options, on each filesystem."""
    server = request.getfixturevalue("s3") if request.param == "s3" else None
    return location(request.param, server, tmp_path, "run/ckpt")


def model_and_adam(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(300, 400), torch.nn.ReLU(), torch.nn.Linear(400, 10))
    optim = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 300)).sum().backward()
    optim.step()
    return model, optim


def state_of(model: torch.nn.Module, optim: torch.optim.Optimizer) -> dict[str, Any]:
    return {"model": model.state_dict(), "optim": optim.state_dict(), "extra": {"step": 7, "name": "run"},
            "mask": torch.tensor([True, False, True]), "big": torch.arange(3 << 20, dtype=torch.float32)}


def blank_state() -> dict[str, Any]:
    model, optim = model_and_adam(seed=1)
    state = state_of(model, optim)
    state["extra"] = {"step": 0, "name": ""}
    state["mask"] = torch.zeros(3, dtype=torch.bool)
    state["big"] = torch.zeros(3 << 20)
    return state


def failure(exc: BaseException) -> BaseException:
    """The rank's own error inside DCP's CheckpointException (which carries each rank's)."""
    failures = getattr(exc, "failures", None)
    return next(iter(failures.values()))[0] if failures else exc


def assert_same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def test_save_and_load_a_model_and_adam_bit_exact(where: tuple[str, dict[str, Any]]) -> None:
    url, options = where
    saved = state_of(*model_and_adam())
    # Small objects and parts: the large tensor spans objects' parts, several objects upload at once.
    dcp_save(saved, FsspecWriter(url, storage_options=options, object_size=4 << 20))
    loaded = blank_state()
    dcp_load(loaded, FsspecReader(url, storage_options=options, part_size=1 << 20), planner=DefaultLoadPlanner())
    assert_same(saved, loaded)
    # A custom planner's path (results in plan order) and one request at a time give the same.
    again = blank_state()
    inert.torch.load(again, url, storage_options=options, thread_count=1)
    assert_same(saved, again)


@needs_checkpoint_id
@needs_one_process_dcp_load
def test_dcp_checkpoint_id_and_storage_options_as_keywords(s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/ckpt"
    saved = {"w": torch.randn(64, 64), "v": {"a": [1, 2.5, "x"]}}
    writer = FsspecWriter("memory://unused", **s3.options(skip_instance_cache=True))  # DCP's style: options as keywords
    dcp.save(saved, checkpoint_id=url, storage_writer=writer, **no_dist_options(dcp.save))
    assert writer.checkpoint_id == url
    loaded = {"w": torch.zeros(64, 64), "v": {"a": []}}
    dcp.load(loaded, checkpoint_id=url, storage_reader=FsspecReader("memory://unused", **s3.options()),
             **no_dist_options(dcp.load))
    assert_same(saved, loaded)
    assert FsspecReader.validate_checkpoint_id(url) and not FsspecReader.validate_checkpoint_id("/a/local/dir")


@needs_one_process_async_save
def test_async_save_then_load(s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/ckpt"
    saved = state_of(*model_and_adam())
    future = dcp.async_save(saved, storage_writer=FsspecWriter(url, storage_options=s3.options()),
                            **no_dist_options(dcp.async_save))
    future.result()
    loaded = blank_state()
    dcp_load(loaded, FsspecReader(url, storage_options=s3.options()), planner=DefaultLoadPlanner())
    assert_same(saved, loaded)


def test_load_tensors_reads_a_url(where: tuple[str, dict[str, Any]]) -> None:
    url, options = where
    saved = {"a": torch.randn(1000, 300), "b": torch.arange(10, dtype=torch.int64)}
    dcp_save(saved, FsspecWriter(url, storage_options=options))
    tensors = load_tensors(url, storage_options=options)
    assert_same(saved, tensors)


def test_overwrite_false_refuses_an_existing_checkpoint(s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/ckpt"
    dcp_save({"w": torch.ones(3)}, FsspecWriter(url, storage_options=s3.options()))
    with pytest.raises(BaseException) as caught:
        dcp_save({"w": torch.ones(3)}, FsspecWriter(url, overwrite=False, storage_options=s3.options()))
    assert str(failure(caught.value)) == f"Checkpoint already exists at {url} and overwrite=False."


def _objects(s3: S3Server, url: str) -> dict[str, bytes]:
    import s3fs

    fs = s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True)
    try:
        paths = fs.ls(url.removeprefix("s3://"), refresh=True)
    except FileNotFoundError:  # no object under the prefix
        return {}
    return {path.rsplit("/", 1)[-1]: fs.cat_file(path) for path in paths}


def _put(s3: S3Server, url: str, data: bytes) -> None:
    import s3fs

    s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True).pipe_file(url.removeprefix("s3://"), data)


def test_a_flipped_byte_in_an_object_is_a_checksum_error(s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/ckpt"
    dcp_save({"big": torch.arange(3 << 20, dtype=torch.float32), "small": torch.ones(5)},
             FsspecWriter(url, storage_options=s3.options()))
    (name, data), = [(n, d) for n, d in _objects(s3, url).items() if n.endswith(".distcp")]
    for at in (len(data) // 2, len(data) - 200):  # inside the large tensor's payload; near the end
        damaged = bytearray(data)
        damaged[at] ^= 0x10
        _put(s3, f"{url}/{name}", bytes(damaged))
        with pytest.raises(BaseException) as caught:
            dcp_load({"big": torch.zeros(3 << 20), "small": torch.zeros(5)},
                     FsspecReader(url, storage_options=s3.options(), part_size=1 << 20), planner=DefaultLoadPlanner())
        assert isinstance(failure(caught.value), ChecksumError), repr(caught.value)
    _put(s3, f"{url}/{name}", data[: len(data) - 100])
    with pytest.raises(BaseException) as caught:
        dcp_load({"big": torch.zeros(3 << 20), "small": torch.zeros(5)}, FsspecReader(url, storage_options=s3.options()),
                 planner=DefaultLoadPlanner())
    error = failure(caught.value)
    assert isinstance(error, TruncatedError) and "ends beyond" in str(error), repr(error)


@needs_zstandard
def test_zstandard_extension_writes_compressed_records_to_s3(s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/ckpt"
    saved = state_of(*model_and_adam())
    saved["zeros"] = torch.zeros(1 << 20)  # compresses to almost nothing
    writer = FsspecWriter(url, storage_options=s3.options(), object_size=4 << 20, _extensions=[ZStandard()])
    dcp.save(saved, storage_writer=writer, no_dist=True)
    objects = {name: data for name, data in _objects(s3, url).items() if name.endswith(".distcp")}
    # checkpoint-shard version 2 objects; the 4 MiB of zeros deflated to almost nothing
    assert len(objects) > 1 and all(data[8:10] == (2).to_bytes(2, "little") for data in objects.values())
    assert sum(map(len, objects.values())) < (3 << 20) * 4
    loaded = blank_state()
    loaded["zeros"] = torch.ones(1 << 20)
    dcp.load(loaded, storage_reader=FsspecReader(url, storage_options=s3.options(), part_size=1 << 20), no_dist=True)
    assert_same(saved, loaded)
    with pytest.raises(ValueError, match="Supported: None"):
        FsspecWriter(url, storage_options=s3.options(), _extensions=[object()])


def test_a_legacy_pickle_metadata_is_refused_without_unpickling(s3: S3Server, tmp_path: Any) -> None:
    url = f"s3://{s3.new_bucket()}/ckpt"
    # DCP's own format written locally and copied up (2.2's FsspecWriter takes no storage options).
    dcp_save({"w": torch.ones(3)}, dcp.FileSystemWriter(tmp_path))
    fsspec.filesystem("s3", **s3.options()).put(f"{tmp_path}/", url, recursive=True)
    with pytest.raises(ValueError, match="legacy pickle checkpoint"):
        FsspecReader(url, storage_options=s3.options()).read_metadata()


# -- faults ---------------------------------------------------------------------------------------


def _no_checkpoint(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(FileNotFoundError):
        FsspecReader(url, storage_options=options).read_metadata()


@pytest.mark.parametrize("action", ["500", "reset-upload"])
def test_a_write_failing_mid_save_leaves_nothing_loadable(s3: S3Server, action: str) -> None:
    url = f"s3://{s3.new_bucket()}/ckpt"
    old = {"big": torch.zeros(3 << 20), "w": torch.zeros(4)}
    dcp_save(old, FsspecWriter(url, storage_options=s3.options()))  # an older checkpoint
    parts = []

    def fault(method: str, path: str) -> str | None:
        if method == "PUT" and ".distcp" in path:  # the data objects' uploads (whole, or parts)
            parts.append(path)
            return action if len(parts) >= 2 else None
        return None

    proxy = FaultProxy(s3.port, fault)
    try:
        options = s3.options(proxy.endpoint, skip_instance_cache=True, **NO_RETRIES)
        new = {"big": torch.arange(12 << 20, dtype=torch.float32), "w": torch.ones(4)}
        with pytest.raises(BaseException) as caught:  # DCP wraps the rank's error in a CheckpointException
            dcp_save(new, FsspecWriter(url, storage_options=options))
        error = failure(caught.value)
        assert isinstance(error, StorageError) and "/ckpt/__0_" in str(error), repr(error)
    finally:
        proxy.close()
    assert len(parts) >= 2
    _no_checkpoint(url, s3.options())  # the older one was retired first; the new one never committed
    assert not [name for name in _objects(s3, url) if name.endswith(".distcp")]  # its objects were removed


@pytest.mark.parametrize("action", ["500", "reset"])
def test_a_read_failing_mid_load_is_a_storage_error(s3: S3Server, action: str) -> None:
    url = f"s3://{s3.new_bucket()}/ckpt"
    saved = {"big": torch.arange(6 << 20, dtype=torch.float32), "w": torch.ones(4)}
    dcp_save(saved, FsspecWriter(url, storage_options=s3.options()))
    ranged = []

    def fault(method: str, path: str) -> str | None:
        if method == "GET" and ".distcp" in path:
            ranged.append(path)
            return action if len(ranged) >= 3 else None
        return None

    proxy = FaultProxy(s3.port, fault)
    try:
        options = s3.options(proxy.endpoint, skip_instance_cache=True, **NO_RETRIES)
        with pytest.raises(BaseException) as caught:
            dcp_load({"big": torch.zeros(6 << 20), "w": torch.zeros(4)},
                     FsspecReader(url, storage_options=options, part_size=1 << 20), planner=DefaultLoadPlanner())
        error = failure(caught.value)
        assert isinstance(error, StorageError) and str(error).startswith("reading bytes "), repr(error)
    finally:
        proxy.close()


def test_a_storage_error_crosses_processes_intact() -> None:
    import pickle

    error = StorageError("reading bytes 0-8 of s3://b/ckpt/__0_0.distcp failed: OSError: reset")
    copy = pickle.loads(pickle.dumps(error))  # DCP gathers each rank's error from the others
    assert type(copy) is StorageError and isinstance(copy, OSError) and str(copy) == str(error)


def test_one_500_is_retried_by_the_backend() -> None:
    server = S3Server()
    try:
        url = f"s3://{server.new_bucket()}/ckpt"
        saved = {"big": torch.arange(3 << 20, dtype=torch.float32)}
        failed = []

        def fault(method: str, path: str) -> str | None:
            if method in ("GET", "PUT") and ".distcp" in path and len(failed) < 2:
                failed.append(path)
                return "500"
            return None

        proxy = FaultProxy(server.port, fault)
        try:
            options = server.options(proxy.endpoint, skip_instance_cache=True)  # s3fs's and botocore's retries
            dcp_save(saved, FsspecWriter(url, storage_options=options))
            loaded = {"big": torch.zeros(3 << 20)}
            dcp_load(loaded, FsspecReader(url, storage_options=options), planner=DefaultLoadPlanner())
        finally:
            proxy.close()
        assert len(failed) == 2 and torch.equal(loaded["big"], saved["big"])
    finally:
        server.stop()


def test_the_server_stopped_mid_load_is_a_storage_error() -> None:
    server = S3Server()
    try:
        url = f"s3://{server.new_bucket()}/ckpt"
        saved = {"big": torch.arange(6 << 20, dtype=torch.float32)}
        dcp_save(saved, FsspecWriter(url, storage_options=server.options()))
        gets = []

        def fault(method: str, path: str) -> str | None:
            if method == "GET" and ".distcp" in path:
                gets.append(path)
                if len(gets) == 2:
                    server.stop()  # the store goes away while the load is under way
            return None

        proxy = FaultProxy(server.port, fault)
        try:
            options = server.options(proxy.endpoint, skip_instance_cache=True, **NO_RETRIES)
            with pytest.raises(BaseException) as caught:
                dcp_load({"big": torch.zeros(6 << 20)}, FsspecReader(url, storage_options=options, part_size=1 << 20),
                         planner=DefaultLoadPlanner())
            assert isinstance(failure(caught.value), StorageError), repr(caught.value)
        finally:
            proxy.close()
    finally:
        server.stop()


def test_the_server_stopped_mid_save_is_a_storage_error() -> None:
    server = S3Server()
    try:
        url = f"s3://{server.new_bucket()}/ckpt"
        parts = []

        def fault(method: str, path: str) -> str | None:
            if method == "PUT" and ".distcp" in path:
                parts.append(path)
                if len(parts) == 2:
                    server.stop()
            return None

        proxy = FaultProxy(server.port, fault)
        try:
            options = server.options(proxy.endpoint, skip_instance_cache=True, **NO_RETRIES)
            with pytest.raises(BaseException) as caught:
                dcp_save({"a": torch.arange(6 << 20, dtype=torch.float32), "b": torch.ones(6 << 20)},  # two objects
                         FsspecWriter(url, storage_options=options))
            assert isinstance(failure(caught.value), StorageError), repr(caught.value)
        finally:
            proxy.close()
    finally:
        server.stop()


def test_a_save_killed_mid_upload_leaves_nothing_loadable(s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/ckpt"
    dcp_save({"w": torch.zeros(4)}, FsspecWriter(url, storage_options=s3.options()))
    uploads: list[str] = []
    saver: list[subprocess.Popen[str]] = []

    def fault(method: str, path: str) -> str | None:
        if method == "PUT" and ".distcp" in path:
            uploads.append(path)
            if len(uploads) == 2:  # SIGKILL while a data object is on its way: no cleanup runs
                saver[0].kill()
                return "reset-upload"
        return None

    proxy = FaultProxy(s3.port, fault)
    try:
        env = dict(os.environ, INERT_S3_ENDPOINT=proxy.endpoint)
        saver.append(subprocess.Popen([sys.executable, __file__, "plain-save", url], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        _, err = saver[0].communicate(timeout=240)
    finally:
        proxy.close()
    assert saver[0].returncode == -9 and len(uploads) == 2, err[-2000:]
    _no_checkpoint(url, s3.options())  # the older checkpoint was retired first, the new one never committed


# -- several processes ------------------------------------------------------------------------------


def test_two_gloo_ranks_save_to_s3_then_two_and_one_load(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_torch_multirank import COLS, ROWS, full

    monkeypatch.setenv("INERT_S3_ENDPOINT", s3.endpoint)
    url = f"s3://{s3.new_bucket()}/ckpt"
    ranks.ok(ranks.run_ranks(__file__, ["save", url], world=2))
    names = set(_objects(s3, url))
    assert ".metadata" in names and {"__0_0.distcp", "__1_0.distcp"} <= names
    ranks.ok(ranks.run_ranks(__file__, ["load", url], world=2))
    state: dict[str, Any] = {"dt": torch.zeros(ROWS, COLS), "rank0": torch.zeros(3), "rank1": torch.zeros(3),
                             "common": {"step": 0}}
    inert.torch.load(state, url, storage_options=s3.options())  # 2 -> 1
    assert torch.equal(state["dt"], full()) and state["common"] == {"step": 7}
    assert torch.equal(state["rank1"], torch.full((3,), 1.0))


def _worker(scenario: str, url: str) -> None:
    from test_torch_multirank import ROWS, _rank_state, full

    warnings.filterwarnings("ignore")
    options = {"key": "testing", "secret": "testing", "endpoint_url": os.environ["INERT_S3_ENDPOINT"],
               "client_kwargs": {"region_name": "us-east-1"}}
    if scenario == "plain-save":  # one process, two data objects (killed by the test while it uploads)
        state = {"a": torch.arange(6 << 20, dtype=torch.float32), "b": torch.ones(6 << 20)}
        dcp_save(state, FsspecWriter(url, storage_options=options))
        return
    ranks.init_group()
    rank = dist.get_rank()
    try:
        if scenario == "save":
            dcp.save(_rank_state(rank, zero=False), storage_writer=FsspecWriter(url, storage_options=options))
        else:
            state = _rank_state(rank, zero=True)
            dcp_load(state, FsspecReader(url, storage_options=options))  # 2.2/2.3's dcp.load drops "common"
            rows = ROWS // dist.get_world_size()
            assert torch.equal(state["dt"].to_local(), full()[rank * rows:(rank + 1) * rows])
            assert torch.equal(state[f"rank{rank}"], torch.full((3,), float(rank))) and state["common"] == {"step": 7}
        dist.barrier()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
    if sys.argv[1] != "plain-save":
        ranks.leave()  # past the process group's exit handlers
