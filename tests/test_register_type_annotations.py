"""``inert.torch.register_type``: annotations a value cannot be checked against are refused at registration;
a saved field of the wrong type, and any exception of the class's own code, is an InertError naming the class.

Loads go through a real checkpoint (``inert.torch.FileSystemWriter`` and ``FileSystemReader`` with
``dcp``) where a class is saved and loaded; the decoder's own ``from_document`` is driven directly for
states a well-behaved writer would never produce (what a hostile file can hold).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import typing
from pathlib import Path
from typing import Any, NamedTuple, Optional

import numpy as np
import pytest
import torch

import inert.torch
from inert._errors import InertError
from inert._value_types import ObjectValue
from inert.torch import FileSystemReader, FileSystemWriter
from inert.torch._compat import dcp_load, dcp_save
from inert.torch._values import from_document, to_document

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@dataclasses.dataclass
class Inner:
    n: int


class Color(enum.Enum):
    RED = 1


@dataclasses.dataclass
class Typed:
    i: int
    f: float
    s: str
    b: bool
    raw: bytes
    ints: list[int]
    table: dict[str, float]
    maybe: Optional[int]  # noqa: UP045 - the typing spelling is supported as well as `int | None`
    either: int | str
    pair: tuple[int, str]
    many: tuple[float, ...]
    inner: Inner
    inners: list[Inner]
    color: Color
    size: torch.Size
    arr: np.ndarray
    anything: Any = None


def _good() -> dict[str, Any]:
    return {"i": 1, "f": 2, "s": "x", "b": True, "raw": b"r", "ints": [1, 2], "table": {"a": 1.5}, "maybe": None,
            "either": "e", "pair": (1, "p"), "many": (1.0, 2), "inner": Inner(3), "inners": [Inner(4)],
            "color": Color.RED, "size": torch.Size([2]), "arr": np.zeros(2), "anything": [{"x": 1}]}


@pytest.fixture
def registered() -> Any:
    for cls in (Inner, Color, Typed):
        inert.torch.register_type(cls)
    yield
    for cls in (Inner, Color, Typed):
        inert.torch.unregister_type(cls)


def _rebuild(cls: type, state: dict[str, Any]) -> Any:
    """The object a checkpoint holding ``state`` (host values, stored as a writer stores them) loads to."""
    stored = {k: v if isinstance(v, ObjectValue) else to_document(v, k) for k, v in state.items()}
    return from_document(ObjectValue(f"{__name__}.{cls.__qualname__}", stored), "state.obj")


# -- refused at registration --------------------------------------------------------------------------------------

@dataclasses.dataclass
class WithObject:
    step: int
    blob: object


@dataclasses.dataclass
class WithCallable:
    hook: collections.abc.Callable[[int], int]


class Unknown:
    pass


@dataclasses.dataclass
class WithUnknown:
    thing: Unknown


class TupleWithCallable(NamedTuple):
    fn: typing.Callable[..., Any]


@dataclasses.dataclass
class WithListOfObject:
    items: list[object]


@dataclasses.dataclass
class WithLiteral:
    mode: typing.Literal["a", "b"]


@pytest.mark.parametrize(("cls", "field"), [
    (WithObject, "blob"), (WithCallable, "hook"), (WithUnknown, "thing"), (TupleWithCallable, "fn"),
    (WithListOfObject, "items"), (WithLiteral, "mode"),
])
def test_annotation_the_values_format_cannot_check_is_refused_at_registration(cls: type, field: str) -> None:
    with pytest.raises(TypeError, match=rf"register_type: {cls.__qualname__}\.{field}: .* is not an annotation"):
        inert.torch.register_type(cls)
    with pytest.raises(InertError, match="register that class before loading"):  # and it was not registered
        _rebuild(cls, {})


def test_every_supported_annotation_registers_and_a_real_checkpoint_round_trips(registered: Any,
                                                                                tmp_path: Path) -> None:
    value = Typed(**_good())
    dcp_save({"w": torch.ones(1), "typed": value}, FileSystemWriter(tmp_path / "ckpt"))
    state: dict[str, Any] = {"w": torch.zeros(1), "typed": None}
    dcp_load(state, FileSystemReader(tmp_path / "ckpt"))
    got = state["typed"]
    assert isinstance(got, Typed) and got.inners == [Inner(4)] and got.color is Color.RED
    assert got.pair == (1, "p") and np.array_equal(got.arr, np.zeros(2)) and got.anything == [{"x": 1}]


# -- wrong types refused on load ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("field", "bad", "says"), [
    ("i", "not an int", "field 'i' is annotated int, the checkpoint holds a str"),
    ("i", True, "field 'i' is annotated int, the checkpoint holds a bool"),
    ("f", "1.5", "field 'f' is annotated float"),
    ("s", 3, "field 's' is annotated str"),
    ("b", 1, "field 'b' is annotated bool"),
    ("raw", "r", "field 'raw' is annotated bytes"),
    ("ints", [1, "2"], r"field 'ints'\[1\] is annotated int"),
    ("ints", (1, 2), "field 'ints' is annotated list, the checkpoint holds a tuple"),
    ("table", {"a": "x"}, r"field 'table'\['a'\] is annotated float"),
    ("table", {1: 1.0}, "field 'table' key 1 is annotated str"),
    ("maybe", "x", "field 'maybe' is annotated int | None"),
    ("either", 1.5, "field 'either' is annotated int | str"),
    ("pair", (1, 2), r"field 'pair'\[1\] is annotated str"),
    ("pair", (1, "a", 3), "field 'pair' is annotated a tuple of 2"),
    ("many", (1.0, "x"), r"field 'many'\[1\] is annotated float"),
    ("inner", {"n": 3}, "field 'inner' is annotated Inner, the checkpoint holds a dict"),
    ("inners", [Inner(1), 2], r"field 'inners'\[1\] is annotated Inner"),
    ("color", 1, "field 'color' is annotated Color"),
    ("size", [2], "field 'size' is annotated Size"),
    ("arr", [0.0], "field 'arr' is annotated ndarray"),
])
def test_saved_field_of_the_wrong_type_is_an_inert_error_naming_class_and_field(registered: Any, field: str,
                                                                                bad: Any, says: str) -> None:
    assert _rebuild(Typed, _good()).inners == [Inner(4)]  # the good state builds
    with pytest.raises(InertError, match=says) as caught:
        _rebuild(Typed, {**_good(), field: bad})
    assert "registered Typed" in caught.value.reason and caught.value.field == "state.obj"


def test_nested_registered_object_with_a_wrong_field_is_refused(registered: Any) -> None:
    nested = ObjectValue(f"{__name__}.Inner", {"n": "three"})
    with pytest.raises(InertError, match="field 'n' is annotated int"):
        _rebuild(Typed, {**_good(), "inner": nested})


# -- the class's own code ----------------------------------------------------------------------------------------

class _Boom(BaseException):
    pass


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


@pytest.mark.parametrize("raised", [AssertionError("step must be positive"), SystemExit(3), _Boom("base"),
                                    _Unprintable(), RecursionError("deep")])
def test_anything_the_class_raises_comes_out_as_an_inert_error_naming_it(raised: BaseException) -> None:
    @dataclasses.dataclass
    class Checked:
        step: int

        def __post_init__(self) -> None:
            raise raised

    inert.torch.register_type(Checked, name="tests.Checked")
    try:
        with pytest.raises(InertError, match=rf"registered .*Checked: {type(raised).__name__}") as caught:
            from_document(ObjectValue("tests.Checked", {"step": 1}), "obj")
        assert caught.value.__cause__ is None and caught.value.field == "obj"
    finally:
        inert.torch.unregister_type(Checked)


def test_keyboard_interrupt_in_the_class_is_not_swallowed() -> None:
    @dataclasses.dataclass
    class Interrupted:
        step: int

        def __post_init__(self) -> None:
            raise KeyboardInterrupt

    inert.torch.register_type(Interrupted, name="tests.Interrupted")
    try:
        with pytest.raises(KeyboardInterrupt):
            from_document(ObjectValue("tests.Interrupted", {"step": 1}), "obj")
    finally:
        inert.torch.unregister_type(Interrupted)


def test_unknown_and_missing_fields_are_inert_errors(registered: Any) -> None:
    with pytest.raises(InertError, match="registered Inner: TypeError"):
        _rebuild(Inner, {"n": 1, "extra": 2})
    with pytest.raises(InertError, match="registered Inner: TypeError"):
        _rebuild(Inner, {})
