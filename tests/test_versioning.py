"""The procedure for adding format_version N+1, exercised on a fixture format.

Declare v2 beside v1, regenerate, and: readers accept 1 and 2, writers write 2
(and 1 on request), the older vectors keep passing, and a reader generated when
only v1 existed refuses v2 naming the versions it knows.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import inert
from inert._canonical import to_json
from inert._interpret import interpret_decode, interpret_encode
from inert.gen.python import generate
from inert.spec._grammar import Format
from tests.fixtures import example_log

V1_VALUE = {"messages": ["started", "loaded 3 shards"]}
V2_VALUE = {"written_unix_s": 1_764_460_800, "entries": [{"severity": "INFO", "message": "started"}]}


def _codec(fmt: Format, tmp_path: Path, name: str) -> ModuleType:
    """Generate the codec of ``fmt`` as the generator would for ``inert/spec/``, and import it."""
    sys.modules["inert.spec.example_log"] = example_log  # where the generator finds the spec's source
    source = generate(fmt)
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def codecs(tmp_path: Path) -> tuple[ModuleType, ModuleType]:
    return _codec(example_log.FORMAT_V1, tmp_path, "example_log_v1"), _codec(example_log.FORMAT, tmp_path, "example_log")


def _same(a: Any, b: Any) -> bool:
    return to_json(a) == to_json(b)


def test_readers_accept_both_versions_and_writers_write_the_newest(codecs: tuple[ModuleType, ModuleType]) -> None:
    old, new = codecs
    v1_bytes = old.encode(V1_VALUE)
    assert v1_bytes[:10] == example_log.MAGIC + b"\x01\x00"
    assert new.VERSIONS == (1, 2) and new.LATEST == 2
    # The older vector keeps passing, byte for byte, in the new codec.
    assert _same(new.decode(v1_bytes), V1_VALUE)
    assert new.encode(V1_VALUE, version=1) == v1_bytes
    v2_bytes = new.encode(V2_VALUE)
    assert v2_bytes[8:10] == b"\x02\x00"
    assert _same(new.decode(v2_bytes), V2_VALUE)
    # Both reference codecs agree on both versions.
    for data in (v1_bytes, v2_bytes):
        assert _same(interpret_decode(example_log.FORMAT, data), new.decode(data))
    assert interpret_encode(example_log.FORMAT, V2_VALUE) == v2_bytes
    assert interpret_encode(example_log.FORMAT, V1_VALUE, version=1) == v1_bytes


def test_a_reader_that_knows_only_v1_refuses_v2_naming_what_it_knows(codecs: tuple[ModuleType, ModuleType]) -> None:
    old, new = codecs
    v2_bytes = new.encode(V2_VALUE)
    with pytest.raises(inert.VersionError) as generated:
        old.decode(v2_bytes)
    assert "version 2 is not supported (this reader knows 1)" in str(generated.value)
    assert (generated.value.offset, generated.value.field) == (8, "format_version")
    with pytest.raises(inert.VersionError) as interpreted:
        interpret_decode(example_log.FORMAT_V1, v2_bytes)
    assert str(interpreted.value) == str(generated.value)


def test_a_value_the_older_version_cannot_hold_fails_at_write_time(codecs: tuple[ModuleType, ModuleType]) -> None:
    _, new = codecs
    with pytest.raises(inert.WriteTypeError, match="messages: missing"):
        new.encode(V2_VALUE, version=1)
