"""The declared rules' check expressions (spec/_rule_expr.py) against the Python readers' own checks.

Every record of every corpus vector that the interpreted grammar reads up to its checks is checked
twice: by the grammar's hand-written checks (``Validate``/``Rule``) and by the expressions of the
rules declared ``on`` its record.  Both must give the same verdict and name the same field; the C
generator compiles the same expressions, so this is what ties the C readers' rules to Python's.
"""

from __future__ import annotations

import ctypes
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from dump_manifests import faulty_manifest
from inert.conformance._corpus import load_corpus
from inert.conformance.testees import inert_construct
from inert.spec import FORMATS, _grammar, _rule_expr

from inert import _rule_eval
from inert._errors import InertError

C_DIR = Path(__file__).resolve().parent.parent / "c"


def _records_by_checks() -> dict[int, tuple[Any, Any, list[Any]]]:
    """id(record.checks) -> (format, record, its rules with their steps), for records with rules."""
    out = {}
    for fmt in FORMATS.values():
        by_name = _rule_expr.record_rules(fmt)
        found: dict[str, Any] = {}
        for table in (fmt.versions, *fmt.parts.values()):
            for con in table.values():
                _rule_expr._records(con, found, set())
        for typename, rules in by_name.items():
            out[id(found[typename].checks)] = (fmt, found[typename], rules)
    return out


def test_every_record_with_a_hand_written_check_has_declared_rules() -> None:
    covered = _records_by_checks()
    for fmt in FORMATS.values():
        found: dict[str, Any] = {}
        for table in (fmt.versions, *fmt.parts.values()):
            for con in table.values():
                _rule_expr._records(con, found, set())
        for record in found.values():
            assert not record.checks or id(record.checks) in covered, f"{fmt.name}: {record.typename} has no declared rules"


def test_every_rule_on_a_record_is_an_expression() -> None:
    """No rule on a record is held only as a Python function: the generators compile every one."""
    python_only = {rule.id for fmt in FORMATS.values() for rule in fmt.declared if rule.on and rule.check.startswith("check:")}
    assert python_only == set()


def _compare_rules_with_checks(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, int], list[int]]:
    """From here on, every record's hand-written checks also run its rules' expressions, which must name the
    same field: (records compared by typename, [faults found])."""
    covered = _records_by_checks()
    original = _grammar._run_checks
    compared: dict[str, int] = {}
    found = [0]

    def both(checks: list[Any], fields: dict[str, Any], ctx: dict[str, Any]) -> tuple[str, str] | None:
        result = original(checks, fields, ctx)
        entry = covered.get(id(checks))
        if entry is not None:
            fmt, record, rules = entry
            env = _rule_expr.environment(fmt, record, fields, ctx)
            declared = None
            for _rule, steps in rules:
                declared = _rule_eval.first_fault(steps, env)
                if declared is not None:
                    break
            expected = None if result is None else result[0]
            assert declared == expected, f"{fmt.name} {record.typename} {fields}: rules {declared}, check {expected}"
            compared[record.typename] = compared.get(record.typename, 0) + 1
            found[0] += declared is not None
        return result

    monkeypatch.setattr(_grammar, "_run_checks", both)
    return compared, found


def test_rule_expressions_agree_with_the_hand_written_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    compared, found = _compare_rules_with_checks(monkeypatch)
    for vector in load_corpus():
        if vector.value is not None:
            continue
        try:
            inert_construct.decode(vector.format, vector.version, vector.data, dict(vector.params))
        except InertError:
            pass
    assert found[0] > 50 and len(compared) >= 5, (found, compared)


def test_rule_expressions_name_the_first_fault_of_manifests_breaking_several_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The order of dump-manifest's rules: 2,000 manifests with one to four cross-reference faults."""
    compared, found = _compare_rules_with_checks(monkeypatch)
    rng = random.Random(20)
    for _ in range(2000):
        try:
            inert_construct.decode("dump-manifest", 1, faulty_manifest(rng), {})
        except InertError:
            pass
    assert compared["DumpManifest"] == 2000 and found[0] > 1500, (compared, found)


def test_the_c_runtime_products_saturate_as_the_language_says(tmp_path: Path) -> None:
    """inert_i128_mul_sat against exact products: equal while |a * b| <= 2**100, else +-2**100 (the rules'
    comparisons are exact below that bound); 20,000 pairs around the 32-, 64- and 100-bit edges."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "the C readers need a C compiler"
    subprocess.run(["make", "-s", "-C", str(C_DIR), f"BUILD={tmp_path}", f"CC={compiler}", f"{tmp_path}/libinert_c.so"],
                   check=True, timeout=300)
    lib = ctypes.CDLL(str(tmp_path / "libinert_c.so"))

    class I128(ctypes.Structure):
        _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_int64)]

    lib.inert_i128_mul_sat.restype = I128
    lib.inert_i128_mul_sat.argtypes = [I128, I128]

    def pack(value: int) -> I128:
        bits = value & ((1 << 128) - 1)
        hi = bits >> 64
        return I128(bits & ((1 << 64) - 1), hi - (1 << 64) if hi >= 1 << 63 else hi)

    rng = random.Random(5)
    edges = [0, 1, 2, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, (1 << 64) - 1, 1 << 64, (1 << 100) - 1, 1 << 100, 1 << 110]
    for _ in range(20000):
        a, b = (rng.choice(edges) + rng.randrange(-2, 3) if rng.random() < 0.5 else rng.getrandbits(rng.randrange(1, 120))
                for _ in range(2))
        a, b = (max(-(1 << 120), min(1 << 120, x)) * rng.choice((1, -1)) for x in (a, b))
        exact = a * b
        want = exact if abs(exact) <= _rule_expr.SATURATE else (_rule_expr.SATURATE if exact > 0 else -_rule_expr.SATURATE)
        got = lib.inert_i128_mul_sat(pack(a), pack(b))
        assert (got.hi << 64) + got.lo == want, (a, b)
