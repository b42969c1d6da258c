"""The state types real training saves, through dcp.save and dcp.load: nothing executed on load.

io.BytesIO, numpy arrays and scalars (numpy's RNG state among them), torch.Size,
torch.dtype, torch.device, and the caller's dataclasses, NamedTuples and enums
once registered (inert.torch.register_type) in the saving and the loading
program.  What the loader has not registered, and what cannot be encoded, is
refused with the key and what to do.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import re
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from dcp_features import ZStandard, needs_zstandard

import inert.torch
from inert._audit import no_execution
from inert._errors import InertError
from inert._value_types import ObjectValue
from inert.codecs import checkpoint_shard as cs
from tests.test_torch_dcp import failure, load, save

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@dataclasses.dataclass
class Schedule:
    step: int
    warmup: int
    betas: tuple[float, float]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


class Phase(enum.Enum):
    WARMUP = "warmup"
    DECAY = "decay"


class Window(typing.NamedTuple):
    start: int
    stop: int


@pytest.fixture
def registered() -> Any:
    for cls in (Schedule, Phase, Window):
        inert.torch.register_type(cls)
    yield
    for cls in (Schedule, Phase, Window):
        inert.torch.unregister_type(cls)


def training_state() -> dict[str, Any]:
    rng = np.random.RandomState(3)
    rng.random_sample(5)
    return {
        "buffer": io.BytesIO(b"\x00raw bytes\xff"),
        "rng": rng.get_state(),  # ('MT19937', uint32[624], int, int, float)
        "mask": np.array([[True, False], [False, True]]),
        "big_endian": np.arange(6, dtype=">f8").reshape(2, 3),
        "strided": np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2],
        "empty": np.zeros((0, 3), np.uint8),
        "scalars": [np.float32(1.5), np.int64(-7), np.bool_(True), np.complex64(1 - 2j), np.uint8(255)],
        "size": torch.Size([4, 0, 2]),
        "dtypes": {"param": torch.bfloat16, "reduce": torch.float32},
        "devices": [torch.device("cpu"), torch.device("cuda", 3), torch.device("meta")],
        "by_dtype": ({"half": torch.float16},),  # in a tuple: DCP flattens dicts into keys, not tuples; keys are str or bytes
    }


def empty_like(state: dict[str, Any]) -> dict[str, Any]:
    """A destination of the same structure (DCP flattens nested dicts and lists into keys)."""
    return {k: [None] * len(v) if isinstance(v, list) else ({kk: None for kk in v} if isinstance(v, dict) else None)
            for k, v in state.items()}


def check_equal(saved: Any, loaded: Any) -> None:
    assert type(loaded) is type(saved), (saved, loaded)
    if isinstance(saved, io.BytesIO):
        assert loaded.getvalue() == saved.getvalue() and loaded.tell() == 0
    elif isinstance(saved, np.ndarray):
        assert loaded.dtype == saved.dtype.newbyteorder("=") and loaded.shape == saved.shape
        assert np.array_equal(loaded, saved) and loaded.flags.writeable and loaded.flags.c_contiguous
    elif isinstance(saved, np.generic):
        assert loaded.dtype == saved.dtype and loaded == saved
    elif isinstance(saved, dict):
        assert saved.keys() == loaded.keys()
        for key in saved:
            check_equal(saved[key], loaded[key])
    elif isinstance(saved, (list, tuple)) and not isinstance(saved, torch.Size):
        assert len(saved) == len(loaded)
        for a, b in zip(saved, loaded, strict=True):
            check_equal(a, b)
    else:
        assert loaded == saved


def test_training_types_round_trip(tmp_path: Path) -> None:
    state = training_state()
    save({"w": torch.ones(2), "loader": state}, tmp_path)
    target = {"w": torch.zeros(2), "loader": empty_like(state)}
    load(target, tmp_path)  # warm: the first load imports DCP's modules (an import is an exec event)
    target = {"w": torch.zeros(2), "loader": empty_like(state)}
    with no_execution():  # no pickle, exec or compile while the values are read and rebuilt
        load(target, tmp_path, thread_count=1)
    check_equal(state, target["loader"])
    restored = np.random.RandomState()
    restored.set_state(target["loader"]["rng"])  # numpy accepts the loaded state as its own
    reference = np.random.RandomState(3)
    reference.random_sample(5)
    assert restored.random_sample(3).tolist() == reference.random_sample(3).tolist()


def test_numpy_array_bytes_are_the_tensor_layout(tmp_path: Path) -> None:
    # dtype code, ndim, u64 dims, raw little-endian C-order bytes: what a tensor record holds after its header
    value = np.arange(6, dtype=">i4").reshape(2, 3).T
    save({"a": value}, tmp_path)
    data = (tmp_path / "__0_0.distcp").read_bytes()
    expected = bytes([cs.DType.INT32, 2]) + (3).to_bytes(8, "little") + (2).to_bytes(8, "little")
    assert expected + np.ascontiguousarray(value).astype("<i4").tobytes() in data


def test_registered_classes_round_trip(tmp_path: Path, registered: None) -> None:
    state = {"sched": Schedule(10, 100, (0.9, 0.95), {"phase": Phase.DECAY, "win": Window(2, 5)}), "phase": Phase.WARMUP,
             "windows": (Window(0, 1), Window(1, 2))}
    save({"s": state}, tmp_path)
    target: dict[str, Any] = {"s": {"sched": None, "phase": None, "windows": None}}
    load(target, tmp_path)
    target = {"s": {"sched": None, "phase": None, "windows": None}}
    with no_execution():
        load(target, tmp_path, thread_count=1)
    assert target["s"] == state
    assert type(target["s"]["sched"].extra["win"]) is Window and target["s"]["phase"] is Phase.WARMUP


def test_unregistered_class_refused_at_save_with_how_to_register(tmp_path: Path) -> None:
    err = failure(save, {"s": {"sched": Schedule(1, 2, (0.9, 0.9))}}, tmp_path)
    assert isinstance(err, TypeError)
    assert re.search(r"s(\.sched|\['sched'\]).*test_torch_values\.Schedule is not a value a checkpoint can hold", str(err))
    assert "inert.torch.register_type(Schedule)" in str(err)
    assert not (tmp_path / ".metadata").exists()


def test_class_registered_only_when_saved_is_not_rebuilt(tmp_path: Path, registered: None) -> None:
    save({"sched": Schedule(1, 2, (0.9, 0.9))}, tmp_path)
    inert.torch.unregister_type(Schedule)
    err = failure(load, {"sched": None}, tmp_path)
    assert isinstance(err, InertError)
    assert f"registered as '{__name__}.Schedule' when it was saved" in str(err)
    assert f"inert.torch.register_type(cls, name='{__name__}.Schedule')" in str(err)
    # Another class under the same name is used only if its fields fit.
    inert.torch.register_type(Window, name=f"{__name__}.Schedule")
    err = failure(load, {"sched": None}, tmp_path)
    assert isinstance(err, InertError) and "does not fit the registered Window" in str(err)
    inert.torch.unregister_type(Window)


def test_unknown_device_type_is_an_inert_error() -> None:
    # A device type the grammar allows but this torch does not know: the reader's error, not torch's.
    from inert._value_types import DeviceValue
    from inert.torch._values import from_document

    with pytest.raises(InertError, match="device 'nosuchdevice'") as caught:
        from_document(DeviceValue("nosuchdevice", 0), "dev")
    assert caught.value.field == "dev"


@pytest.mark.parametrize("index", [128, 256, 2**31 - 1])
def test_device_index_torch_cannot_keep_is_an_inert_error(index: int) -> None:
    # The grammar allows indexes up to 2**31-1; torch keeps 8 bits, so 128 became -128, 256 device 0.
    from inert._value_types import DeviceValue
    from inert.torch._values import from_document

    with pytest.raises(InertError, match=f"device index {index}") as caught:
        from_document(DeviceValue("cpu", index), "dev")
    assert caught.value.field == "dev"
    assert from_document(DeviceValue("cpu", 127), "dev") == torch.device("cpu", 127)  # the largest torch keeps


def test_file_names_nothing_importable(tmp_path: Path, registered: None) -> None:
    # The registered name is only a key of the loading program's registry: a name that happens to be
    # an importable callable is refused, never imported.
    record = cs.encode_record({"body": {"kind": "VALUE", "value": ObjectValue("os.system", {"command": "true"})}})
    value = cs.decode_record(record)["body"]["value"]
    from inert.torch._values import from_document

    with pytest.raises(InertError, match="registered as 'os.system'"):
        from_document(value, "x")


@pytest.mark.parametrize(("value", "message"), [
    (np.array(["a"]), "numpy dtype <U1 has no checkpoint encoding"),
    (np.array([object()]), "numpy dtype object has no checkpoint encoding"),
    (torch.complex32, "dtype torch.complex32 has no checkpoint encoding"),
    ([torch.ones(1)], "a tensor inside a non-tensor value"),
])
def test_unencodable_values_name_their_key(tmp_path: Path, value: Any, message: str) -> None:
    err = failure(save, {"cfg": {"k": (1, value)}}, tmp_path)
    assert isinstance(err, TypeError) and "cfg" in str(err) and message in str(err)


def test_register_type_refuses_what_it_cannot_rebuild() -> None:
    class Plain:
        pass

    with pytest.raises(TypeError, match="not a dataclass, NamedTuple or Enum"):
        inert.torch.register_type(Plain)
    inert.torch.register_type(Schedule, name="x.S")
    try:
        with pytest.raises(ValueError, match="already registered"):
            inert.torch.register_type(Window, name="x.S")
    finally:
        inert.torch.unregister_type(Schedule)


def test_docs_torch_examples_run_as_written(tmp_path: Path) -> None:
    import subprocess
    import sys

    page = (Path(__file__).resolve().parent.parent / "docs" / "torch.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", page, flags=re.S) if "# not run by the tests" not in b]
    assert any("set_state_dict" in b for b in blocks) and any("register_type" in b for b in blocks)
    for block in blocks:  # each in a fresh interpreter: nothing registered or imported by the suite helps
        result = subprocess.run([sys.executable, "-W", "ignore", "-c", block], capture_output=True, text=True,
                                cwd=tmp_path, timeout=300)
        assert result.returncode == 0, result.stderr


def test_registered_object_as_a_key_is_refused_at_save(tmp_path: Path, registered: None) -> None:
    # Keys and set members are str or bytes (the canonical form: other hashes are not randomized).
    for key in (Window(0, 1), Phase.DECAY, torch.Size([2])):
        err = failure(save, {"v": ({key: "first"},)}, tmp_path)
        assert isinstance(err, TypeError) and "map key" in str(err), key


def test_verify_and_inspect_need_no_registration(tmp_path: Path, registered: None, capsys: Any) -> None:
    from inert.cli.main import main

    save({"sched": Schedule(1, 2, (0.9, 0.9)), "a": np.arange(3), "dev": torch.device("cpu")}, tmp_path)
    inert.torch.unregister_type(Schedule)
    assert main(["verify", str(tmp_path)]) == 0
    assert main(["inspect", str(tmp_path / "__0_0.distcp")]) == 0
    out = capsys.readouterr().out
    assert "inert: verify: OK: 2 files, 3 records" in out and "  sched  value  ObjectValue" in out


@needs_zstandard
def test_typed_values_in_compressed_records(tmp_path: Path) -> None:
    state = training_state()
    save({"loader": state}, tmp_path, _extensions=[ZStandard()])
    target = {"loader": empty_like(state)}
    load(target, tmp_path)
    check_equal(state, target["loader"])


class Perm(enum.IntFlag):
    READ = 1
    WRITE = 2


@dataclasses.dataclass
class Checked:
    step: int

    def __post_init__(self) -> None:
        assert self.step >= 0, "step must not be negative"


def _rebuilt(cls: Any, state: Any) -> Any:
    from inert.torch._values import from_document

    inert.torch.register_type(cls)
    try:
        return from_document(ObjectValue(f"{__name__}.{cls.__qualname__}", state), "obj")
    finally:
        inert.torch.unregister_type(cls)


@pytest.mark.parametrize(("cls", "state", "says"), [
    (Schedule, {"step": "not an int", "warmup": 1, "betas": (0.9, 0.9)}, "field 'step' is annotated int"),
    (Window, {"start": "not an int", "stop": 2}, "field 'start' is annotated int"),
    (Window, {"start": True, "stop": 2}, "field 'start' is annotated int, the checkpoint holds a bool"),
    (Checked, {"step": -1}, "AssertionError: step must not be negative"),
    (Perm, 8, "8 holds bits Perm does not define"),
])
def test_registered_class_given_what_it_does_not_take_is_an_inert_error(cls: Any, state: Any, says: str) -> None:
    with pytest.raises(InertError, match=re.escape(says)) as caught:
        _rebuilt(cls, state)
    assert caught.value.field == "obj"


def test_registered_classes_still_take_what_they_declare() -> None:
    assert _rebuilt(Perm, 3) == Perm.READ | Perm.WRITE
    assert _rebuilt(Checked, {"step": 4}) == Checked(4)
    assert _rebuilt(Window, {"start": 1, "stop": 2}) == Window(1, 2)


@pytest.mark.parametrize("shape", [(0, 2**63), (2**62, 0, 4)])
def test_array_of_a_shape_numpy_cannot_make_is_an_inert_error(shape: tuple[int, ...]) -> None:
    from inert._value_types import ArrayValue
    from inert.torch._values import from_document

    with pytest.raises(InertError, match="which numpy cannot make") as caught:
        from_document(ArrayValue("FLOAT32", shape, b""), "arr")
    assert caught.value.field == "arr"


def test_class_whose_annotations_name_a_local_type_resolves_registered_ones_and_refuses_others() -> None:
    # get_type_hints cannot resolve a name local to a function: the registered classes and builtins resolve it.
    @dataclasses.dataclass
    class Local:
        n: int

    @dataclasses.dataclass
    class Holder:
        step: int
        other: Local | None

    with pytest.raises(TypeError, match="Holder.other: annotation 'Local | None' cannot be resolved"):
        inert.torch.register_type(Holder)
    inert.torch.register_type(Local)
    try:
        with pytest.raises(InertError, match="field 'step' is annotated int"):
            _rebuilt(Holder, {"step": "x", "other": None})
        assert _rebuilt(Holder, {"step": 2, "other": None}) == Holder(2, None)
    finally:
        inert.torch.unregister_type(Local)
