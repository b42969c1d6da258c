"""inert.torch with torch.distributed.checkpoint in one process: exact round trips, checked reads, no unpickling.

torch is imported at module level: where torch is installed but broken, these tests fail rather than skip.
"""

from __future__ import annotations

import os
import pickle
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.stateful import Stateful

import inert.torch
from inert import ChecksumError, ForeignFormatError, InertError, InvalidValueError, TruncatedError
from inert._audit import no_execution
from inert._extras import install_hint
from inert.codecs import checkpoint_metadata as cm
from inert.codecs import checkpoint_shard as cs
from inert.torch import (
    TORCH_VERSION,
    FileSystemReader,
    FileSystemWriter,
    ShapeMismatchError,
    dumps_metadata,
    loads_metadata,
    parse_version,
)
from inert.torch._compat import TORCH_DTYPES, dcp_load, dcp_save, no_dist_options
from inert.torch._metadata import METADATA_VERSION

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


# One process, no process group: 2.2 and 2.5+ take no_dist=True, 2.3 and 2.4 infer it.
ONE = no_dist_options(dcp.save)


def save(state: dict[str, Any], path: Path, **kw: Any) -> None:
    inert.torch.save(state, path, **kw)  # dcp.save, with no_dist where this release takes it


def load(state: dict[str, Any], path: Path, **kw: Any) -> None:
    inert.torch.load(state, path, **kw)  # dcp.load from 2.4 on, the deprecated entry point before


def failure(call: Any, *args: Any, **kw: Any) -> BaseException:
    """The exception a rank raised inside ``dcp.save``/``dcp.load``: DCP wraps it in a CheckpointException,
    which ``inert.torch.load`` unwraps for an InertError (keeping it as the cause)."""
    with pytest.raises(BaseException) as info:
        call(*args, **kw)
    if isinstance(info.value, InertError):
        assert isinstance(info.value.__cause__, CheckpointException)
        return info.value
    assert isinstance(info.value, CheckpointException), repr(info.value)
    inner = info.value.failures[0]
    return inner[0] if isinstance(inner, tuple) else inner


def trained() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(5, 8)).sum().backward()
    optim.step()
    return model, optim


def fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optim = torch.optim.Adam(model.parameters(), lr=5.0)
    model(torch.randn(5, 8)).sum().backward()
    optim.step()
    optim.step()
    return model, optim


def raw(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).numpy())


def same(a: Any, b: Any) -> bool:
    """Bit-exact equality of nested state (tensors compared by dtype, shape and bytes)."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and raw(a) == raw(b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=False))
    return type(a) is type(b) and a == b


def test_model_and_adam_round_trip(tmp_path: Path) -> None:
    model, optim = trained()
    save({"model": model.state_dict(), "optim": optim.state_dict()}, tmp_path)
    model2, optim2 = fresh()
    state = {"model": model2.state_dict(), "optim": optim2.state_dict()}
    load(state, tmp_path)
    model2.load_state_dict(state["model"])
    optim2.load_state_dict(state["optim"])
    assert same(model2.state_dict(), model.state_dict())
    assert same(optim2.state_dict(), optim.state_dict())  # step tensors, exp_avg(_sq), param_groups with betas tuple
    assert optim2.state_dict()["param_groups"][0]["lr"] == 1e-3
    assert sorted(os.listdir(tmp_path)) == [".metadata", "__0_0.distcp"]


def every_dtype() -> dict[str, torch.Tensor]:
    base = torch.arange(-6, 6, dtype=torch.float64).reshape(3, 4)
    out = {}
    for name, dtype in TORCH_DTYPES.items():
        if dtype.is_floating_point or dtype.is_complex:
            out[name] = (base / 4).to(dtype)
        elif dtype == torch.bool:
            out[name] = base > 0
        else:
            out[name] = torch.arange(12, dtype=torch.int64).reshape(3, 4).to(dtype) * (1 if name.startswith("UINT") else -1)
    # FP8 bit patterns: every byte, including NaN and infinity encodings
    for name in ("FLOAT8_E4M3FN", "FLOAT8_E5M2", "FLOAT8_E4M3FNUZ", "FLOAT8_E5M2FNUZ", "FLOAT8_E8M0FNU"):
        if name in TORCH_DTYPES:
            out[name + "_bits"] = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(TORCH_DTYPES[name])
    out["UINT64_max"] = torch.tensor([2**64 - 1, 0], dtype=torch.uint64) if "UINT64" in TORCH_DTYPES else torch.zeros(1)
    return out


def test_every_dtype_shape_and_layout(tmp_path: Path) -> None:
    tensors = every_dtype()
    tensors.update({
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 7),
        "empty_bf16": torch.empty(3, 0, dtype=torch.bfloat16),
        "transposed": torch.arange(12.0).reshape(3, 4).t(),
        "channels_last": torch.arange(120.0).reshape(2, 3, 4, 5).to(memory_format=torch.channels_last),
        "sliced": torch.arange(100.0)[::3],
    })
    assert {t.dtype for t in tensors.values()} >= set(TORCH_DTYPES.values())
    save({"t": tensors}, tmp_path)
    target = {"t": {k: torch.zeros_like(v) if v.numel() else torch.empty_like(v) for k, v in tensors.items()}}
    load(target, tmp_path)
    for key, value in tensors.items():
        assert same(target["t"][key], value.contiguous()), key


class Counter(Stateful):
    def __init__(self, n: int) -> None:
        self.n = n

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n, "hist": torch.full((3,), float(self.n))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n = state["n"]
        self.hist = state["hist"]


def test_values_and_stateful(tmp_path: Path) -> None:
    values = {"int": 7, "float": 0.25, "none": None, "str": "é", "bytes": b"\x00\xff",
              "tuple": (1, "a", (2.0,), {"3": "k", b"k": "b"}),
              "complex": 1 - 2j, "bytearray": bytearray(b"ab"), "set": {"a", b"b"}, "list": [1, [2, [3]]]}
    stateful = TORCH_VERSION >= (2, 4)  # before 2.4, only dcp.load (not usable there) handles Stateful
    save({"v": values, **({"counter": Counter(5)} if stateful else {})}, tmp_path)
    # DCP flattens nested dicts and lists into keys: the target mirrors their structure
    target = {k: None for k in values} | {"list": [0, [0, [0]]]}
    counter = Counter(0)  # held here: 2.4's dcp.load replaces a Stateful entry with its state dict
    state = {"v": target, **({"counter": counter} if stateful else {})}
    load(state, tmp_path)
    assert state["v"] == values and type(state["v"]["tuple"]) is tuple
    assert not stateful or (counter.n == 5 and torch.equal(counter.hist, torch.full((3,), 5.0)))


def test_value_outside_subset_fails_at_save(tmp_path: Path) -> None:
    class Opaque:
        pass

    err = failure(save, {"cfg": {"k": [1, Opaque()]}}, tmp_path)
    # the path: cfg.k[1] where DCP flattens dicts (2.4+), cfg['k'][1] before
    assert isinstance(err, TypeError)
    assert re.search(r"cfg(\.k|\['k'\])\[1\].*Opaque is not a value a checkpoint can hold", str(err))
    assert "inert.torch.register_type(" in str(err)
    assert not (tmp_path / ".metadata").exists()
    err = failure(save, {"c": torch.zeros(2, dtype=torch.complex32)}, tmp_path)
    assert isinstance(err, TypeError) and "c: dtype torch.complex32 has no checkpoint encoding (supported: BFLOAT16" in str(err)


@pytest.mark.skipif(TORCH_VERSION < (2, 4), reason="async_save needs a process group before PyTorch 2.4")
def test_async_save(tmp_path: Path) -> None:
    model, optim = trained()
    state = {"model": model.state_dict(), "optim": optim.state_dict()}
    future = dcp.async_save(state, storage_writer=FileSystemWriter(tmp_path), **no_dist_options(dcp.async_save))
    (future.result() if hasattr(future, "result") else future.staging_completion.result())
    model2, optim2 = fresh()
    target = {"model": model2.state_dict(), "optim": optim2.state_dict()}
    load(target, tmp_path)
    assert same(target["model"], model.state_dict()) and same(target["optim"], optim.state_dict())


def test_metadata_round_trip_and_checks(tmp_path: Path) -> None:
    model, optim = trained()
    save({"model": model.state_dict(), "optim": optim.state_dict()}, tmp_path)
    data = (tmp_path / ".metadata").read_bytes()
    metadata = loads_metadata(data)
    assert dumps_metadata(metadata) == data
    if TORCH_VERSION >= (2, 9):  # Metadata.version exists from 2.9 on
        assert metadata.version == "1.0.0"
    if TORCH_VERSION >= (2, 4):  # Metadata.storage_meta exists from 2.4 on
        assert metadata.storage_meta.checkpoint_id == os.fspath(tmp_path)
    assert pickle.loads(pickle.dumps(metadata)) == metadata
    with pytest.raises(ValueError, match="max_size"):
        loads_metadata(data, max_size=100)


def test_legacy_pickle_checkpoint_is_named_not_unpickled(tmp_path: Path) -> None:
    dcp_save({"w": torch.ones(2)}, dcp.FileSystemWriter(tmp_path))
    with no_execution() as events, pytest.raises(ForeignFormatError, match="legacy pickle checkpoint.*inert migrate"):
        FileSystemReader(tmp_path).read_metadata()
    assert events == []
    assert "legacy pickle checkpoint" in str(failure(load, {"w": torch.zeros(2)}, tmp_path))


def test_no_code_runs_during_load(tmp_path: Path) -> None:
    model, optim = trained()
    stateful = TORCH_VERSION >= (2, 4)
    extra = {"c": Counter(3)} if stateful else {}
    state = {"model": model.state_dict(), "optim": optim.state_dict(), "extra": {"t": (1, 2)}, **extra}
    save(state, tmp_path)
    model2, optim2 = fresh()
    counter = Counter(0)
    extra = {"c": counter} if stateful else {}
    target = {"model": model2.state_dict(), "optim": optim2.state_dict(), "extra": {"t": None}, **extra}
    load(target, tmp_path)  # warm: the first load imports DCP's modules (an import is an exec event)
    with no_execution() as events:  # this thread: no pickle.find_class, exec, compile or marshal.loads at all
        load(target, tmp_path, thread_count=1)
    assert events == []
    assert same(target["model"], model.state_dict()) and target["extra"]["t"] == (1, 2)
    assert counter.n == (3 if stateful else 0)
    # every thread (the reader's workers included): no global is ever resolved for a pickle
    found: list[Any] = []
    watching = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if watching[0] and event in ("pickle.find_class", "marshal.loads"):
            found.append((event, args))

    sys.addaudithook(hook)
    try:
        load(target, tmp_path, thread_count=2)
        assert found == []
        # the control: PyTorch's own reader of its own checkpoint does unpickle
        legacy = tmp_path / "legacy"
        dcp_save(state, dcp.FileSystemWriter(legacy))
        dcp_load(target, dcp.FileSystemReader(legacy))
        assert any(event == "pickle.find_class" for event, _ in found)
    finally:
        watching[0] = False  # audit hooks cannot be removed


def _rewrite_record(path: Path, fqn: str, change: Any) -> None:
    """Change a record in place (then fix both checksums), as a forger who knows the format would."""
    meta = cm.decode((path / ".metadata").read_bytes())
    entry = next(e for e in meta["tensors"] if e["fqn"] == fqn)
    shard_path = path / meta["files"][entry["chunk_files"][0]]
    blob = bytearray(shard_path.read_bytes())
    at, length = entry["chunk_byte_offsets"][0], entry["chunk_byte_lengths"][0]
    record = cs.decode_record(bytes(blob[at:at + length]))
    body = dict(record["body"], data=bytes(record["body"]["data"]))
    change(body)
    new = cs.encode_record({"body": body})
    assert len(new) == length
    blob[at:at + length] = new
    shard_path.write_bytes(bytes(blob))
    entry["chunk_crcs"][0] = struct.unpack("<I", new[-4:])[0]
    (path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))


def test_shape_and_dtype_mismatch_is_named(tmp_path: Path) -> None:
    save({"w": torch.arange(6.0).reshape(2, 3)}, tmp_path)
    _rewrite_record(tmp_path, "w", lambda body: body.update(shape=[3, 2]))
    err = failure(load, {"w": torch.zeros(2, 3)}, tmp_path)
    assert isinstance(err, ShapeMismatchError)
    assert re.search(r"w: record holds \(3, 2\) torch.float32, the read plan expects \(2, 3\)", str(err))
    _rewrite_record(tmp_path, "w", lambda body: body.update(shape=[2, 3], dtype="INT32"))
    err = failure(load, {"w": torch.zeros(2, 3)}, tmp_path)
    assert isinstance(err, ShapeMismatchError) and "torch.int32" in str(err)


def test_damaged_checkpoints(tmp_path: Path) -> None:
    save({"w": torch.arange(64.0), "v": {"x": 1}}, tmp_path)
    meta = cm.decode((tmp_path / ".metadata").read_bytes())
    shard_path = tmp_path / meta["files"][0]
    good = shard_path.read_bytes()
    at = meta["tensors"][0]["chunk_byte_offsets"][0]
    # a flipped payload byte: the record checksum catches it; verify_checksums=False is the documented opt-out
    bad = bytearray(good)
    bad[at + 64 + 5] ^= 1
    shard_path.write_bytes(bytes(bad))
    assert isinstance(failure(load, {"w": torch.zeros(64), "v": {"x": 0}}, tmp_path), ChecksumError)
    state = {"w": torch.zeros(64), "v": {"x": 0}}
    load(state, tmp_path, verify_checksums=False)
    assert not torch.equal(state["w"], torch.arange(64.0)) and state["v"]["x"] == 1
    # a record swapped for another valid record: its CRC differs from the one the metadata holds
    other = bytearray(good)
    value_at = meta["values"][0]["byte_offset"]
    value = cs.decode_record(good[value_at:value_at + meta["values"][0]["byte_length"]])["body"]["value"]
    swapped = 2 if value == 1 else {"x": 2}  # "v.x" where DCP flattens dicts (2.4+), "v" before
    other[value_at:value_at + meta["values"][0]["byte_length"]] = cs.encode_record({"body": {"kind": "VALUE", "value": swapped}})
    shard_path.write_bytes(bytes(other))
    err = failure(load, {"w": torch.zeros(64), "v": {"x": 0}}, tmp_path)
    assert isinstance(err, ChecksumError) and "metadata expects" in str(err)
    # a truncated shard file
    shard_path.write_bytes(good[: at + 100])
    err = failure(load, {"w": torch.zeros(64), "v": {"x": 0}}, tmp_path)
    assert isinstance(err, TruncatedError) and "beyond" in str(err)
    shard_path.write_bytes(good)
    # records that overlap
    meta["values"][0]["byte_offset"] = at + 64
    (tmp_path / ".metadata").write_bytes(cm.encode(meta, version=METADATA_VERSION))
    err = failure(load, {"w": torch.zeros(64), "v": {"x": 0}}, tmp_path)
    assert isinstance(err, InvalidValueError) and "overlaps" in str(err)
    # a metadata byte flipped anywhere
    data = cm.encode(cm.decode((tmp_path / ".metadata").read_bytes()), version=METADATA_VERSION)
    for index in range(0, len(data), 7):
        flipped = bytearray(data)
        flipped[index] ^= 0x40
        with pytest.raises(InertError):
            loads_metadata(bytes(flipped))


def test_custom_planner_gets_locally_serialized_bytes(tmp_path: Path) -> None:
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    seen = []

    class Planner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: Any) -> None:
            seen.append(value.getvalue()[:4])
            super().load_bytes(read_item, value)

    save({"v": {"x": (1, 2)}}, tmp_path)
    state: dict[str, Any] = {"v": {"x": None}}
    inert.torch.load(state, tmp_path, planner=Planner())
    assert state["v"]["x"] == (1, 2) and seen == [b"PK\x03\x04"]  # a torch.save made here, not the file's bytes


def test_version_parsing_and_import_boundaries() -> None:
    assert parse_version("2.13.0+cpu") == (2, 13)
    assert parse_version("2.16.0.dev20260101") == (2, 16)
    assert parse_version("2.10.0rc1") == (2, 10)
    code = "import sys, inert, inert.codecs.checkpoint_shard; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
    code = "import sys; sys.modules['torch'] = None; import inert.torch"
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stderr
    assert install_hint("torch") in err


def test_single_and_multi_file_writers_and_threads(tmp_path: Path) -> None:
    state = {f"t{i}": torch.randn(100 + i) for i in range(8)}
    for kw in ({"thread_count": 2}, {"single_file_per_rank": False}):
        path = tmp_path / str(len(kw))
        save(state, path, **kw)
        target = {k: torch.zeros_like(v) for k, v in state.items()}
        load(target, path, thread_count=1)
        assert same(target, state)
    assert len(os.listdir(tmp_path / "1")) == 9 or len(os.listdir(tmp_path / "1")) == 3


def test_overwrite_false_and_record_checksum_is_zlib(tmp_path: Path) -> None:
    save({"w": torch.ones(3)}, tmp_path)
    assert "overwrite=False" in str(failure(save, {"w": torch.ones(3)}, tmp_path, overwrite=False))
    meta = cm.decode((tmp_path / ".metadata").read_bytes())
    blob = (tmp_path / meta["files"][0]).read_bytes()
    at, length = meta["tensors"][0]["chunk_byte_offsets"][0], meta["tensors"][0]["chunk_byte_lengths"][0]
    assert at % 64 == 0 and zlib.crc32(blob[at:at + length - 4]) == meta["tensors"][0]["chunk_crcs"][0]


def test_custom_planner_tensor_calls_stay_on_the_calling_thread(tmp_path: Path) -> None:
    import threading

    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    threads = set()

    class Planner(DefaultLoadPlanner):
        def resolve_tensor(self, read_item: Any) -> torch.Tensor:
            threads.add(threading.get_ident())
            return super().resolve_tensor(read_item)

    state = {f"t{i}": torch.randn(64) for i in range(6)}
    save(state, tmp_path)
    target = {k: torch.zeros(64) for k in state}
    inert.torch.load(target, tmp_path, thread_count=2, planner=Planner())
    assert same(target, state) and threads == {threading.get_ident()}


def test_quickstart_example_runs() -> None:
    script = Path(__file__).resolve().parent.parent / "examples" / "quickstart.py"
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "bit-exactly" in result.stdout


@pytest.mark.skipif(TORCH_VERSION < (2, 9), reason="use_collectives exists from PyTorch 2.9 on")
def test_rank_local_metadata_without_collectives(tmp_path: Path) -> None:
    """2.9+ saves without collectives write ``__{rank}.metadata``; dcp.load falls back to it."""
    import logging

    dcp.save({"w": torch.ones(3), "v": 3}, storage_writer=FileSystemWriter(tmp_path), **ONE, use_collectives=False)
    assert sorted(os.listdir(tmp_path)) == ["__0.metadata", "__0_0.distcp"]
    state: dict[str, Any] = {"w": torch.zeros(3), "v": 0}
    logging.disable(logging.WARNING)  # DCP logs the missing global .metadata before it falls back
    try:
        load(state, tmp_path)
    finally:
        logging.disable(logging.NOTSET)
    assert torch.equal(state["w"], torch.ones(3)) and state["v"] == 3


def test_load_helper_picks_the_entry_point(tmp_path: Path) -> None:
    import inert.torch

    save({"w": torch.arange(4.0), "opt": {"step": 3}}, tmp_path)
    state: dict[str, Any] = {"w": torch.zeros(4), "opt": {"step": 0}}
    inert.torch.load(state, tmp_path, thread_count=1)
    assert torch.equal(state["w"], torch.arange(4.0)) and state["opt"] == {"step": 3}
