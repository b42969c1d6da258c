"""``inert migrate`` of hostile safetensors files and hostile torch.save records: one InertError line, exit 1.

Each safetensors file is built byte by byte (the 8-byte little-endian header length, the JSON header,
the data) and holds one fault a reader must refuse before it trusts the header: a length past the
file or above safetensors' own 100 MB, a header that is not JSON, not UTF-8, nested without end or
naming a tensor twice, an unknown dtype, a dim outside 0..2**63-1, a shape whose bytes overflow int64,
``data_offsets`` outside the data, of the wrong size, overlapping, leaving a gap or bytes after the last
tensor.  Each refusal is the line ``inert: migrate: SRC: safetensors: offset N: FILE.FIELD: ...`` (the
header's own faults at their byte, an entry's at -1 or where its data starts), never the loader's
message.  Then the torch.save refusals (format ``torch-save``) and a legacy checkpoint whose tensor
record is a pickle that would overflow the C stack when torch's unpickler hashes it.
"""

from __future__ import annotations

import json
import pickle
import shutil
import struct
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from inert.cli.main import main
from inert.cli.migrate import MAX_DEPTH
from inert.torch import TORCH_VERSION

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled", "ignore::UserWarning")

NAME = "model.safetensors"
UNREADABLE = "not a readable safetensors file"


def _file(header: dict[str, Any] | bytes, data: bytes = b"", length: int | None = None) -> bytes:
    """A safetensors file: ``length`` (the header's own by default), the header's bytes, ``data``."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def _entry(dtype: Any = "F32", shape: Any = (2,), offsets: Any = (0, 8)) -> dict[str, Any]:
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape,
            "data_offsets": list(offsets) if isinstance(offsets, tuple) else offsets}


def _at_data(header: dict[str, Any], at: int) -> int:
    """The file offset of byte ``at`` of the data after ``header``."""
    return 8 + len(json.dumps(header).encode()) + at


_TWO = {"a": _entry(offsets=(0, 8)), "b": _entry(offsets=(4, 12))}
_GAP = {"a": _entry(offsets=(0, 8)), "b": _entry(offsets=(12, 20))}
_ONE = {"a": _entry()}
_DEEP = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
_BAD_JSON = b'{"a": }'

#: (case, the file's bytes, offset, field after the file's name, reason after "not a readable safetensors file: ")
CASES: list[tuple[str, bytes, int, str, str]] = [
    ("shorter_than_the_length", b"\x01\x02\x03", 3, "header_length", "the file ends before 8 bytes"),
    ("length_above_100_mb", _file(b"{}", length=100_000_001), 0, "header_length", "100000001 above 100000000 bytes"),
    ("length_past_the_file", _file(b"{}", length=1000), 0, "header_length",
     "a 1000-byte header does not fit in the 10-byte file"),
    ("header_not_an_object", _file(b"[1, 2]"), 8, "header", "is not a JSON object"),
    ("header_not_json", _file(_BAD_JSON), 8 + _BAD_JSON.index(b"}"), "header",
     "is not JSON: Expecting value"),
    ("header_not_utf8", _file(b'{"a\xff": 1}'), 8 + 3, "header", "is not UTF-8"),
    ("header_nested_100000_deep", _file(_DEEP), 8, "header", "nests too deep"),
    ("tensor_named_twice", _file(b'{"a": ' + json.dumps(_entry()).encode() + b', "a": '
                                 + json.dumps(_entry()).encode() + b"}", bytes(8)), -1, "header", "names 'a' twice"),
    ("metadata_not_strings", _file({"__metadata__": {"format": 1}, **_ONE}, bytes(8)), -1, "__metadata__",
     "is not an object of strings"),
    ("entry_without_data_offsets", _file({"a": {"dtype": "F32", "shape": [2]}}, bytes(8)), -1, "a",
     "is not an object of dtype, shape and data_offsets"),
    ("unknown_dtype", _file({"a": _entry(dtype="F128")}, bytes(8)), -1, "a.dtype", "'F128' is not a known dtype"),
    ("shape_not_a_list", _file({"a": _entry(shape="2")}, bytes(8)), -1, "a.shape",
     "is not a list of at most 64 dims"),
    ("shape_of_65_dims", _file({"a": _entry(shape=[1] * 65, offsets=(0, 4))}, bytes(4)), -1, "a.shape",
     "is not a list of at most 64 dims"),
    ("dim_negative", _file({"a": _entry(shape=(-1, 2))}, bytes(8)), -1, "a.shape[0]",
     "-1 is not an int from 0 to 2**63-1"),
    ("dim_a_float", _file({"a": _entry(shape=(2.0,))}, bytes(8)), -1, "a.shape[0]",
     "2.0 is not an int from 0 to 2**63-1"),
    ("dim_a_bool", _file({"a": _entry(shape=(True, 2))}, bytes(8)), -1, "a.shape[0]",
     "True is not an int from 0 to 2**63-1"),
    # The case: torch's TypeError "Overflow when unpacking long long" and its C++ frames before.
    ("shape_0_by_2_63", _file({"a": _entry(shape=(0, 2**63), offsets=(0, 0))}), -1, "a.shape[1]",
     f"{2**63} is not an int from 0 to 2**63-1"),
    ("bytes_past_int64", _file({"a": _entry(shape=(0, 2**62), offsets=(0, 0))}), -1, "a.shape",
     f"[0, {2**62}] of F32 overflows int64 bytes"),
    ("offsets_not_two_ints", _file({"a": _entry(offsets=[0])}, bytes(8)), -1, "a.data_offsets", "is not two ints"),
    ("offsets_past_the_data", _file({"a": _entry(offsets=(0, 100))}, bytes(8)),
     _at_data({"a": _entry(offsets=(0, 100))}, 0), "a.data_offsets",
     "[0, 100] is not a range inside the 8 bytes of data"),
    ("offsets_of_the_wrong_size", _file({"a": _entry(offsets=(0, 4))}, bytes(4)),
     _at_data({"a": _entry(offsets=(0, 4))}, 0), "a.data_offsets", "holds 4 bytes, the shape [2] of F32 is 8"),
    ("offsets_overlapping", _file(_TWO, bytes(12)), _at_data(_TWO, 4), "b.data_offsets",
     "overlaps the tensor before it"),
    ("offsets_leaving_a_gap", _file(_GAP, bytes(20)), _at_data(_GAP, 12), "b.data_offsets",
     "leaves bytes 8..12 unused"),
    ("bytes_after_the_last_tensor", _file(_ONE, bytes(12)), _at_data(_ONE, 8), "data",
     "4 bytes after the last tensor"),
]


@pytest.mark.parametrize(("data", "offset", "field", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_safetensors_header_is_one_line_naming_offset_and_field(tmp_path: Path, capsys: Any, data: bytes,
                                                                        offset: int, field: str, reason: str) -> None:
    src = tmp_path / NAME
    src.write_bytes(data)
    code = main(["migrate", str(src), str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 1 and out == "", (code, out, err)
    assert err == f"inert: migrate: {src}: safetensors: offset {offset}: {NAME}.{field}: {UNREADABLE}: {reason}\n"
    assert not (tmp_path / "out").exists()


def test_a_directory_shard_is_refused_by_its_name_and_the_command_exits_1(tmp_path: Path) -> None:
    # The real command, in its own process: exit 1, one line, the faulty shard of a directory named.
    from safetensors.torch import save_file

    src = tmp_path / "sharded"
    src.mkdir()
    save_file({"a": torch.ones(2)}, src / "model-00001-of-00002.safetensors")
    (src / "model-00002-of-00002.safetensors").write_bytes(_file({"b": _entry(shape=(0, 2**63), offsets=(0, 0))}))
    done = subprocess.run([sys.executable, "-m", "inert", "migrate", str(src), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr.splitlines()[-1] == (f"inert: migrate: {src}: safetensors: offset -1: "
                                            f"model-00002-of-00002.safetensors.b.shape[1]: {UNREADABLE}: "
                                            f"{2**63} is not an int from 0 to 2**63-1")
    assert "Traceback" not in done.stderr and "Exception raised from" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_an_honest_file_with_every_dtype_and_an_empty_tensor_still_migrates(tmp_path: Path, capsys: Any) -> None:
    # The checks refuse nothing safetensors' own writer makes.
    from safetensors.torch import save_file

    import inert.torch

    state = {"f": torch.arange(6, dtype=torch.float32).reshape(2, 3), "h": torch.ones(3, dtype=torch.bfloat16),
             "i": torch.tensor([1, -2], dtype=torch.int64), "b": torch.tensor([True, False]),
             "e": torch.zeros(0, 5, dtype=torch.float16)}
    save_file(state, tmp_path / NAME, metadata={"format": "pt"})
    assert main(["migrate", str(tmp_path / NAME), str(tmp_path / "out")]) == 0, capsys.readouterr().err
    got = inert.torch.load_tensors(tmp_path / "out")
    assert got.keys() == state.keys() and all(torch.equal(got[k], state[k]) for k in state)


# -- torch.save sources (--trust-source): format torch-save ------------------------------------------------------

@pytest.mark.parametrize(("make", "reason"), [
    (lambda path: torch.save(torch.ones(2), path), "holds a torch.Tensor, not a dict: migrate converts state dicts"),
    (lambda path: path.write_bytes(b"\x80\x02a."), "torch.load(weights_only=True) refuses it: "),
    (lambda path: path.write_bytes(b"\x80\x02}K\x01s."), "torch.load(weights_only=True) refuses it: "),
], ids=["not_a_dict", "append_on_an_empty_stack", "setitem_of_one_item"])
def test_torch_save_refusal_is_an_inert_error_of_format_torch_save(tmp_path: Path, capsys: Any, make: Any,
                                                                  reason: str) -> None:
    path = tmp_path / "bad.pt"
    make(path)
    code = main(["migrate", "--trust-source", str(path), str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 1 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"inert: migrate: {path}: torch-save: offset -1: {path}: {reason}"), err
    assert not (tmp_path / "out").exists()


# -- a legacy checkpoint's tensor record -----------------------------------------------------------------------

@pytest.mark.skipif(TORCH_VERSION < (2, 4), reason="inert migrate needs PyTorch 2.4 or later (by design)")
def test_legacy_tensor_record_of_a_nested_tuple_key_is_refused_before_torch_unpickles_it(tmp_path: Path) -> None:
    # The record is a legacy (not zip) torch.save pickle whose dict key is a million nested tuples: torch's
    # unpickler hashes it in C without a depth check, a segfault before the record's depth was checked.
    import torch.distributed.checkpoint as dcp

    from inert.torch._compat import dcp_save

    src = tmp_path / "src"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_save({"w": torch.ones(4), "step": 3}, dcp.FileSystemWriter(src))
        metadata = dcp.FileSystemReader(src).read_metadata()  # our own file: safe to unpickle
    (key, info), = ((k, v) for k, v in metadata.storage_data.items() if k.fqn == "w")
    record = b"\x80\x02}" + b")" + b"\x85" * 1_000_000 + b"Ns."
    data_file = src / info.relative_path
    offset = data_file.stat().st_size
    with open(data_file, "ab") as out:
        out.write(record)
    info.offset, info.length = offset, len(record)
    (src / ".metadata").write_bytes(pickle.dumps(metadata))
    done = subprocess.run([sys.executable, "-m", "inert", "migrate", "--trust-source", str(src), str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert done.stderr.splitlines()[-1] == (f"inert: migrate: {src}: legacy-dcp-checkpoint: offset {offset}: "
                                            f"{info.relative_path}: w: the tensor record nests objects more than "
                                            f"{MAX_DEPTH} deep")
    assert not (tmp_path / "o").exists()
    shutil.rmtree(src)
