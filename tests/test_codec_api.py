"""The generated codecs' API as a user meets it: values round-trip, tags equal their names, a typo is refused,
the docstring lists the keys, ``help()`` is short."""

from __future__ import annotations

import copy
import importlib
import pickle
import pydoc
from types import ModuleType
from typing import Any

import pytest

from inert._canonical import from_json, to_json
from inert._errors import WriteTypeError, WriteValueError
from inert._interpret import interpret_encode
from inert.codecs import MODULES, shm_message
from inert.conformance._corpus import Vector, load_corpus
from inert.spec import FORMATS

try:
    from inert import _accel
except ImportError:  # a checkout without the accelerator built: the C writers are tested where it is
    _accel = None  # type: ignore[assignment]

ACCEPTED = [v for v in load_corpus() if v.accepted is not None]

README_VALUE = {
    "type": "SCHEDULED_TASK", "context_i": 0, "scheduled_i": 7, "epoch_start": 0, "minibatch_i": 7,
    "task": {"kind": "BATCH", "args": {"kind": "INT", "value": 7}},
}


def _codec(vector: Vector) -> tuple[ModuleType, str]:
    name, _, part = vector.format.partition(".")
    return importlib.import_module(f"inert.codecs.{MODULES[name]}"), f"_{part}" if part else ""


def _round_trip(vector: Vector, value: Any) -> Any:
    module, suffix = _codec(vector)
    data = getattr(module, f"encode{suffix}")(value, version=vector.version)
    if hasattr(module, "MAGIC") and not suffix:
        return module.decode(data, **vector.params)
    return getattr(module, f"decode{suffix}")(data, version=vector.version, **vector.params)


def test_the_readme_value_round_trips_and_its_tags_equal_their_names() -> None:
    value = shm_message.decode(shm_message.encode(README_VALUE))  # type: ignore[arg-type]
    assert value == README_VALUE
    assert value["type"] == "SCHEDULED_TASK" and "SCHEDULED_TASK" == value["type"]
    assert value["type"] is shm_message.MessageType.SCHEDULED_TASK and value["type"] == 1
    assert value["type"] != "COMPLETED_TASK" and not (value["type"] != "SCHEDULED_TASK")
    assert value["type"].name == "SCHEDULED_TASK" and hash(value["type"]) == hash(1)
    assert pickle.loads(pickle.dumps(value)) == value


@pytest.mark.parametrize("vector", ACCEPTED, ids=[v.test_name for v in ACCEPTED])
def test_every_accepted_value_of_the_corpus_round_trips_from_its_names(vector: Vector) -> None:
    assert vector.accepted is not None
    value = from_json(vector.accepted.text)  # tags by name, as a user writes them
    if vector.params.get("verify_checksums") is False:  # a damaged stored CRC-32: the writer computes its own
        assert _without_crc(_round_trip(vector, value)) == _without_crc(value)
    elif value != from_json(vector.accepted.text):  # a NaN, a BytesIO: not equal to itself; by canonical text
        assert to_json(_round_trip(vector, value)) == vector.accepted.text
    else:
        assert _round_trip(vector, value) == value


def _without_crc(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_crc(v) for k, v in value.items() if k != "crc32"}
    if isinstance(value, list):
        return [_without_crc(v) for v in value]
    return value


def _first_nested(value: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The path and dict of the first record inside ``value`` (depth first), if any."""
    for key, item in value.items():
        if isinstance(item, dict) and not any(k.startswith("$") for k in item):
            return key, item
    return None


_TOPS = [v for v in ACCEPTED if v.format in ("shm-message", "shm-descriptor", "checkpoint-metadata", "dump-manifest",
                                            "shm-samples-meta")]
_ONE_PER_FORMAT = list({(v.format, v.version): v for v in _TOPS}.values())


@pytest.mark.parametrize("vector", _ONE_PER_FORMAT, ids=[v.test_name for v in _ONE_PER_FORMAT])
def test_an_unknown_key_is_refused_with_its_path(vector: Vector) -> None:
    assert vector.accepted is not None
    value = from_json(vector.accepted.text)
    typo = dict(value, no_such_key=1)
    with pytest.raises(WriteValueError) as caught:
        _round_trip(vector, typo)
    assert caught.value.field == "no_such_key" and "unknown key" in caught.value.reason
    assert str(caught.value) == f"{vector.format}: no_such_key: {caught.value.reason}"
    nested = _first_nested(value) if vector.format.startswith("shm-") else None  # elsewhere: value documents
    if nested is not None:
        deep = copy.deepcopy(value)
        deep[nested[0]]["no_such_key"] = 1
        with pytest.raises(WriteValueError) as caught:
            _round_trip(vector, deep)
        assert caught.value.field == f"{nested[0]}.no_such_key"
    elif vector.format == "shm-message":
        raise AssertionError("a message has a nested record")


def _refusal(encode: Any, value: Any) -> tuple[str, str, str] | None:
    try:
        encode(value)
    except (WriteTypeError, WriteValueError) as exc:
        return "write-type" if isinstance(exc, WriteTypeError) else "write-value", exc.field, exc.reason
    except ValueError as exc:  # the accelerator's C writers: (kind, field, reason)
        kind, field, reason = exc.args
        return kind, field, reason
    return None


_C_WRITERS = set(_accel.writers()) if _accel is not None else set()
_WRITTEN_IN_C = [v for v in ACCEPTED if v.format in _C_WRITERS]
_ALL_WRITERS = _ONE_PER_FORMAT + list({(v.format, v.version): v for v in _WRITTEN_IN_C}.values())


@pytest.mark.parametrize("vector", _ALL_WRITERS, ids=[v.test_name for v in _ALL_WRITERS])
def test_every_writer_refuses_an_unknown_key_alike(vector: Vector) -> None:
    """The generated Python writer, the interpreted grammar (same text) and the C writer (same kind and field)."""
    assert vector.accepted is not None
    value = from_json(vector.accepted.text)
    base, _, part = vector.format.partition(".")
    module, suffix = _codec(vector)
    typos = [dict(value, no_such_key=1)]
    nested = _first_nested(value) if base.startswith("shm-") else None
    if nested is not None:
        typos.append(copy.deepcopy(value))
        typos[-1][nested[0]]["no_such_key"] = 1
    for typo in typos:
        generated = _refusal(lambda v: getattr(module, f"encode{suffix}")(v, version=vector.version), typo)
        assert generated is not None and generated[0] == "write-value" and generated[1].endswith("no_such_key")
        interpreted = _refusal(lambda v: interpret_encode(FORMATS[base], v, vector.version, part or None), typo)
        assert interpreted == generated
        if vector.format in _C_WRITERS:
            in_c = _refusal(lambda v: _accel.encode(vector.format, v, vector.version), typo)
            assert in_c is not None and in_c[:2] == generated[:2] and "unknown key" in in_c[2]


def test_a_typo_is_named_on_both_sides() -> None:
    typo = {k if k != "scheduled_i" else "sheduled_i": v for k, v in README_VALUE.items()}
    with pytest.raises(WriteTypeError) as missing:
        shm_message.encode(typo)  # type: ignore[arg-type]
    assert missing.value.field == "scheduled_i"
    assert "missing: ScheduledTask requires this key (an unknown key 'sheduled_i' is given: a typo?)" in str(missing.value)
    extra = dict(README_VALUE, sheduled_i=7)
    with pytest.raises(WriteValueError, match=r"shm-message: sheduled_i: unknown key: .* did you mean 'scheduled_i'\?"):
        shm_message.encode(extra)  # type: ignore[arg-type]
    extra_in_case = copy.deepcopy(README_VALUE)
    extra_in_case["task"]["args"] = {"kind": "NONE", "value": 7}  # type: ignore[index]
    with pytest.raises(WriteValueError) as caught:
        shm_message.encode(extra_in_case)  # type: ignore[arg-type]
    assert caught.value.field == "task.args.value"


def test_a_decoded_value_with_its_checksum_key_encodes_again() -> None:
    """The protocol's ``crc32`` key aside: decode gives it, encode takes it and computes its own."""
    vector = next(v for v in ACCEPTED if v.format == "checkpoint-metadata" and not v.params)
    module, _ = _codec(vector)
    value = module.decode(vector.data)
    assert module.decode(module.encode(value, version=vector.version)) == value


def test_whole_value_faults_say_so() -> None:
    with pytest.raises(ValueError) as caught:
        shm_message.decode(shm_message.encode(README_VALUE) + b"x")  # type: ignore[arg-type]
    assert "offset 43: the whole value: 1 byte after the end of the value" in str(caught.value)
    assert caught.value.field == ""  # type: ignore[attr-defined]
    with pytest.raises(WriteTypeError, match=r"^shm-message: the whole value: expected dict \(ShmMessage\), got int$"):
        shm_message.encode(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(MODULES.values()))
def test_help_is_short_and_lists_the_keys(name: str) -> None:
    module = importlib.import_module(f"inert.codecs.{name}")
    text = pydoc.render_doc(module, renderer=pydoc.plaintext)  # type: ignore[attr-defined]
    assert len(text.splitlines()) < 200
    doc = module.__doc__ or ""
    assert f"docs/spec/{name}.md" in doc
    for version in module.VERSIONS:
        assert f"* version {version}: ``" in doc
    assert "decode(encode(v)) == v" in doc


def test_the_docstring_lists_every_key_of_a_record() -> None:
    doc = shm_message.__doc__ or ""
    block = doc.split("``ScheduledTask``\n", 1)[1].split("``", 1)[0]
    assert [line.split(":")[0].strip() for line in block.strip().splitlines()] == [
        "type", "context_i", "scheduled_i", "epoch_start", "minibatch_i", "task"]
    assert '    type: "SCHEDULED_TASK"' in doc and "``MessageType``: SCHEDULED_TASK = 1, COMPLETED_TASK = 2" in doc
