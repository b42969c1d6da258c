"""A declaration two formats share is generated once, in the codec of the format that declares it."""

from __future__ import annotations

import inspect

import pytest

from inert._errors import InvalidValueError, UnknownTagError, WriteValueError
from inert.codecs import checkpoint_shard, dump_shard
from inert.gen import py_shared
from inert.spec import FORMATS
from inert.spec import checkpoint_shard as spec_shard

ROW = {"global_index": 7, "fields": [{"name": "t", "body": {"kind": "TENSOR", "dtype": "BOOL", "shape": [1],
                                                             "data": b"\x01"}}]}


def test_dump_shard_imports_checkpoint_shards_record_body() -> None:
    shared = py_shared.imported(FORMATS["dump-shard"])
    assert [(con.typename, owner.name) for con, owner in shared.values()] == [("RecordBody", "checkpoint-shard")]
    assert py_shared.exported(FORMATS["checkpoint-shard"]) == {id(spec_shard.RecordBody)}
    assert py_shared.imported(FORMATS["checkpoint-shard"]) == {}
    # One reader, writer, rule function and enum, held by the owner; the other codec has no copy.
    assert dump_shard._read_RecordBody is checkpoint_shard._read_RecordBody
    assert dump_shard._write_RecordBody is checkpoint_shard._write_RecordBody
    assert dump_shard.DType is checkpoint_shard.DType and dump_shard.TensorRecord is checkpoint_shard.TensorRecord
    source = inspect.getsource(dump_shard)
    assert "def _read_RecordBody" not in source and "_rules_TensorRecord" not in source
    assert "class DType" not in source


def test_a_shared_readers_fault_names_the_format_being_read() -> None:
    data = bytearray(dump_shard.encode_record(ROW))
    kind = 8 + 4 + 4 + 1  # global_index, the field count, the name's length and its one byte
    assert data[kind:kind + 3] == b"\x01\x01\x01"  # TENSOR, BOOL, one dimension
    data[kind] = 9
    with pytest.raises(UnknownTagError) as info:
        dump_shard.decode_record(bytes(data), verify_checksums=False)
    assert (info.value.format, info.value.offset, info.value.field) == ("dump-shard", kind, "fields[0].body.kind")
    data[kind] = 1
    data[-5] = 2  # the tensor's one boolean byte, before the CRC-32: a rule of checkpoint-shard's codec refuses it
    with pytest.raises(InvalidValueError) as rule:
        dump_shard.decode_record(bytes(data), verify_checksums=False)
    assert (rule.value.format, rule.value.field) == ("dump-shard", "fields[0].body.data")
    bad = {**ROW, "fields": [{"name": "t", "body": {**ROW["fields"][0]["body"], "data": b"\x02"}}]}
    with pytest.raises(WriteValueError) as write:
        dump_shard.encode_record(bad)
    assert (write.value.format, write.value.field) == ("dump-shard", "fields[0].body.data")


def test_rules_that_differ_keep_a_copy_each(monkeypatch: pytest.MonkeyPatch) -> None:
    fmt = FORMATS["dump-shard"]
    monkeypatch.setattr(fmt, "declared", fmt.declared[1:])  # one tensor rule fewer than checkpoint-shard's
    assert py_shared.imported(fmt) == {}
