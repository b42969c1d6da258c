"""The rules compiled into the generated Python codecs (inert/gen/py_rules.py) against the declarations.

Every record the interpreted grammar checks over the conformance corpus (and over 2,000 manifests
breaking several rules at once) is checked a second time by the generated codec's ``_rules_<Typename>``:
both must name the same first fault, field and reason (the rule's declared ``message``).  The inline test
a generated reader runs before calling that function must hold exactly when the rules do (random records
of every record with one: a test that accepted more would let a fault through, one that refused more
would reach the function with nothing to report).
"""

from __future__ import annotations

import importlib
import random
from types import SimpleNamespace
from typing import Any

import pytest
from dump_manifests import faulty_manifest
from hypothesis import given, settings
from hypothesis import strategies as st

from inert import _checks
from inert._errors import InertError
from inert.conformance._corpus import load_corpus
from inert.conformance.testees import inert_construct
from inert.spec import FORMATS, _grammar, _rule_expr


def _rules_by_checks() -> dict[int, tuple[Any, Any, Any]]:
    """id(record.checks) -> (format, record, the generated codec module), for the records with rules."""
    out = {}
    for fmt in FORMATS.values():
        codec = importlib.import_module(f"inert.codecs.{fmt.module_name}")
        by_name = _rule_expr.record_rules(fmt)
        stack = [con for table in (fmt.versions, *fmt.parts.values()) for con in table.values()]
        seen: set[int] = set()
        while stack:
            con = stack.pop()
            if id(con) in seen:
                continue
            seen.add(id(con))
            if isinstance(con, _grammar.Record):
                # A record shared with another format is checked by the codec that holds its functions.
                if con.typename in by_name and hasattr(codec, f"_rules_{con.typename}"):
                    out[id(con.checks)] = (fmt, con, codec)
                stack.extend(sub for _, sub in con.fields)
            elif isinstance(con, _grammar.Union):
                stack.extend(case for case in con.cases.values() if case is not None)
            elif isinstance(con, (_grammar.Array, _grammar.Optional)):
                stack.append(con.element)
            elif isinstance(con, _grammar.Recursive):
                stack.append(con.target())
    return out


def _compare(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """From here on, every interpreted check also runs the generated function: (faults found by typename)."""
    covered = _rules_by_checks()
    original = _grammar._run_checks
    faults: dict[str, int] = {}

    def both(checks: list[Any], fields: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
        declared = original(checks, fields, ctx)
        entry = covered.get(id(checks))
        if entry is not None and ctx is not None:
            _fmt, record, codec = entry
            generated = getattr(codec, f"_rules_{record.typename}")(dict(fields), ctx)
            assert generated == declared, f"{record.typename} {fields}: generated {generated}, declared {declared}"
            if declared is not None:
                faults[record.typename] = faults.get(record.typename, 0) + 1
        return declared

    monkeypatch.setattr(_grammar, "_run_checks", both)
    return faults


def test_generated_rules_name_the_declared_fault_and_message_over_the_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    faults = _compare(monkeypatch)
    for vector in load_corpus():
        if vector.value is not None:
            continue
        try:
            inert_construct.decode(vector.format, vector.version, vector.data, dict(vector.params))
        except InertError:
            pass
    expected = {"TensorRecord", "CompressedRecord", "TensorEntry", "CheckpointMetadata", "DumpManifest", "ArraySample",
                "SampleRange", "Descriptor", "DescriptorV2", "BatchMeta"}
    assert expected <= set(faults), faults


def test_generated_rules_agree_on_manifests_breaking_several_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    faults = _compare(monkeypatch)
    rng = random.Random(26)
    for _ in range(2000):
        try:
            inert_construct.decode("dump-manifest", 1, faulty_manifest(rng), {})
        except InertError:
            pass
    assert faults["DumpManifest"] > 1500, faults


def _quick(codec: Any, typename: str, value: dict[str, Any], ctx: dict[str, Any]) -> bool:
    test = codec._QUICK_TESTS[typename]
    return bool(eval(test, {"_checks": _checks, "this": SimpleNamespace(**value), "ctx": ctx}))  # noqa: S307


_U64 = st.integers(0, (1 << 64) - 1)
_SMALL = st.integers(0, 8) | _U64


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(list(_checks.CHECKPOINT_ITEMSIZES)), st.lists(_SMALL, max_size=4), st.binary(max_size=24),
       st.booleans())
def test_the_inline_test_of_a_tensor_record_holds_exactly_when_its_rules_do(dtype: str, shape: list[int], data: bytes,
                                                                          fit: bool) -> None:
    from inert.codecs import checkpoint_shard as cs

    member = cs.DType[dtype]
    if fit and all(d < 4 for d in shape):  # often a consistent record, so that both answers occur
        size = _checks.prod(shape) * _checks.CHECKPOINT_ITEMSIZES[dtype]
        data = bytes(len(data) % 3 if dtype == "BOOL" else 7 for _ in range(size))
    value = {"dtype": member, "shape": shape, "data": data}
    assert _quick(cs, "TensorRecord", value, {}) == (cs._rules_TensorRecord(value, {}) is None)


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from([*_checks.ITEMSIZE, "<f08", "|O", "=f4", ""]), st.lists(st.integers(0, 4) | _U64, max_size=3),
       _SMALL, _SMALL, st.none() | _SMALL, st.booleans())
def test_the_inline_test_of_an_array_sample_holds_exactly_when_its_rules_do(dtype: str, shape: list[int], offset: int,
                                                                           nbytes: int, chunk: int | None, fit: bool) -> None:
    from inert.codecs import shm_samples_meta as sm

    if fit:
        itemsize = _checks.ITEMSIZE.get(dtype, 1)
        nbytes = min(_checks.prod(shape) * itemsize, (1 << 64) - 1)
        offset -= offset % itemsize
    value = {"offset": offset, "nbytes": nbytes, "dtype": dtype, "shape": shape}
    ctx = {"chunk_size": chunk}
    assert _quick(sm, "ArraySample", value, ctx) == (sm._rules_ArraySample(value, ctx) is None)


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.integers(-3, 8), min_size=6, max_size=6), st.lists(st.integers(-2, 6), min_size=5, max_size=5),
       st.none() | st.integers(0, 6))
def test_the_inline_tests_of_shm_records_hold_exactly_when_their_rules_do(ranges: list[int], places: list[int],
                                                                         chunk: int | None) -> None:
    from inert.codecs import shm_descriptor, shm_message

    value = dict(zip(("start", "end", "iteration", "epoch", "slice_start", "slice_end"), ranges, strict=True))
    assert _quick(shm_message, "SampleRange", value, {}) == (shm_message._rules_SampleRange(value, {}) is None)
    place = dict(zip(("worker_id", "shm_chunk_id", "shm_capacity", "offset", "num_bytes"), places, strict=True))
    ctx = {"chunk_size": chunk}
    for typename in ("Descriptor", "DescriptorV2"):
        rules = getattr(shm_descriptor, f"_rules_{typename}")
        assert _quick(shm_descriptor, typename, place, ctx) == (rules(place, ctx) is None)
