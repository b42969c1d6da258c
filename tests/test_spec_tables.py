"""The spec constants the adapters use come from one place: ``inert.codecs._tables``, generated from ``inert/spec/``.

The tables hold what the declarations say (offsets checked against bytes the interpreter encodes, not
against the generator's own arithmetic), and no module of ``inert/`` keeps a copy of its own: a module-level
assignment of a literal to one of the guarded names, the ``.metadata`` or ``MANIFEST`` name spelled out, a
literal table of CompletedTask offsets, or a literal byte offset in an error about a descriptor or a
message fails here.
"""

from __future__ import annotations

import ast
import struct
from pathlib import Path

import pytest

from inert._interpret import interpret_encode
from inert.codecs import _tables
from inert.spec import checkpoint_metadata, checkpoint_shard, dump_manifest, shm_descriptor, shm_message, shm_samples_meta

ROOT = Path(__file__).resolve().parents[1]
#: Where hand copies would be: the runtime and its adapters.  Not the generator (it computes the tables), the
#: grammar (it declares them), the codecs (generated) or the conformance builders (their copies are on purpose).
_NOT_SCANNED = {"gen", "spec", "codecs", "conformance"}
SCANNED = sorted(p for p in (ROOT / "inert").rglob("*.py") if not _NOT_SCANNED & set(p.relative_to(ROOT / "inert").parts))

#: Names a module must not bind to a literal (leading underscores ignored): each is in the tables.
GUARDED = {
    "ALIGN", "METADATA_NAME", "MANIFEST_NAME", "MAX_TEXT_LEN", "MAX_MESSAGE_BYTES", "MAX_SAMPLE_DEPTH",
    "MAX_VALUE_LEN", "COMPLETED_TASK_AT", "DESCRIPTOR_AT", "DESCRIPTOR",
}
#: File names the tables hold, never spelled out in code.
NAMES = {checkpoint_metadata.METADATA_NAME, dump_manifest.MANIFEST_NAME}
#: The formats whose fixed field offsets are in the tables: an error about them names the offset from there.
OFFSET_FORMATS = {"shm_descriptor", "shm_message"}


def test_tables_hold_the_declared_constants() -> None:
    assert _tables.SAMPLES_MAX_DEPTH == shm_samples_meta.MAX_DEPTH == 64
    assert _tables.MESSAGE_MAX_TEXT_LEN == shm_message.MAX_TEXT_LEN == 1 << 20
    assert _tables.CHECKPOINT_ALIGN == checkpoint_shard.ALIGN == 64
    assert _tables.CHECKPOINT_MAX_VALUE_LEN == checkpoint_shard.MAX_VALUE_LEN
    assert _tables.CHECKPOINT_METADATA_NAME == checkpoint_metadata.METADATA_NAME == ".metadata"
    assert _tables.DUMP_MANIFEST_NAME == dump_manifest.MANIFEST_NAME


def test_completed_task_offsets_are_where_the_encoding_puts_each_field() -> None:
    fields = {"worker_id": 11, "context_i": 22, "scheduled_i": 33, "minibatch_i": 44}
    value = {"type": "COMPLETED_TASK", **fields, "meta": {"offset": 5, "size": 6}, "exception": {"kind": "NONE"},
             "traceback": None}
    data = interpret_encode(shm_message.FORMAT, value)
    at = _tables.COMPLETED_TASK_AT
    assert set(at) == {*fields, "meta"}
    for name, number in fields.items():
        assert struct.unpack_from("<q", data, at[name])[0] == number, name
    assert data[at["meta"]] == 1 and struct.unpack_from("<QQ", data, at["meta"] + 1) == (5, 6)


def test_descriptor_offsets_and_layout_are_the_encodings() -> None:
    value = {"worker_id": 1, "shm_chunk_id": 2, "shm_capacity": 300, "offset": 4, "num_bytes": 5,
             "message_crc32": 6, "meta_crc32": 7}
    v2 = interpret_encode(shm_descriptor.FORMAT, value, version=2)
    for name, number in value.items():
        width = 4 if name in ("worker_id", "shm_chunk_id", "message_crc32", "meta_crc32") else 8
        assert int.from_bytes(v2[_tables.DESCRIPTOR_AT[name]:][:width], "little") == number, name
    v1_value = {k: v for k, v in value.items() if not k.endswith("crc32")}
    v1 = interpret_encode(shm_descriptor.FORMAT, v1_value, version=1)
    assert struct.pack(_tables.DESCRIPTOR_V1_LAYOUT, *v1_value.values()) == v1


def test_message_max_size_is_the_longest_completed_task() -> None:
    text = "a" * shm_message.MAX_TEXT_LEN
    value = {"type": "COMPLETED_TASK", "worker_id": 0, "context_i": 0, "scheduled_i": 0, "minibatch_i": 0,
             "meta": {"offset": 0, "size": 0}, "exception": {"kind": "RUNTIME_ERROR", "message": text}, "traceback": text}
    assert len(interpret_encode(shm_message.FORMAT, value)) == _tables.MESSAGE_MAX_SIZE


def _has_literal(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and not isinstance(n.value, bool) for n in ast.walk(node))


def hand_copies(path: str, source: str) -> list[str]:
    """Where ``source`` keeps its own copy of a spec constant the tables hold."""
    found = []
    tree = ast.parse(source)
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        for target in targets:
            if isinstance(target, ast.Name) and target.id.lstrip("_") in GUARDED and value is not None and _has_literal(value):
                found.append(f"{path}:{node.lineno}: {target.id} bound to a literal")
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = [node.value]
        else:
            parts = []
        found += [f"{path}:{node.lineno}: {part!r} spelled out" for part in parts if part in NAMES]
        if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "worker_id" for k in node.keys):
            if all(isinstance(v, ast.Constant) and isinstance(v.value, int) for v in node.values):
                found.append(f"{path}:{node.lineno}: a literal table of field offsets")
        if isinstance(node, ast.Call) and len(node.args) >= 2:
            fmt, offset = node.args[0], node.args[1]
            if (isinstance(fmt, ast.Attribute) and fmt.attr == "FORMAT" and isinstance(fmt.value, ast.Name)
                    and fmt.value.id in OFFSET_FORMATS and isinstance(offset, ast.Constant) and offset.value not in (0, -1)):
                found.append(f"{path}:{node.lineno}: offset {offset.value} of {fmt.value.id} written by hand")
    return found


def test_no_module_keeps_a_copy_of_a_table() -> None:
    found = [f for p in SCANNED for f in hand_copies(str(p.relative_to(ROOT)), p.read_text())]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("copy", [
    "ALIGN = 64\n",
    "_MAX_TEXT_LEN = 1 << 20\n",
    'METADATA_NAME = ".metadata"\n',
    'name = f"__{rank}.metadata"\n',
    'AT = {"worker_id": 1, "context_i": 9}\n',
    'raise InvalidValueError(shm_descriptor.FORMAT, 24, "num_bytes", reason)\n',
])
def test_the_scan_finds_a_copy(copy: str) -> None:
    assert hand_copies("x.py", copy)
