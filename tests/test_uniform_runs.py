"""The generated readers' sweep over arrays of alike records (``inert.gen.runs``).

A run must read exactly what the element-wise reader reads: the same values,
and, for damaged input, the same error (class, offset, field path) as the
Construct-interpreted grammar.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from fuzz.oracle import differential, outcome
from fuzz.registry import FORMATS
from inert.codecs import checkpoint_metadata, shm_samples_meta
from inert.gen.runs import RUN_MIN

ALIKE = [
    {"kind": shm_samples_meta.SampleKind.ARRAY, "offset": 64 * i, "nbytes": 48, "dtype": "<f4", "shape": [2, 3, 2]}
    for i in range(16)
]


def _run(data: bytes) -> Any:
    """What the samples' run reader makes of a batch's bytes (None: it leaves them to the element-wise reader)."""
    (count,) = struct.unpack_from("<Q", data)
    return shm_samples_meta._run_ArraySample(data, 8, count, {"chunk_size": None})


def test_a_batch_of_alike_arrays_is_read_as_one_run() -> None:
    data = shm_samples_meta.encode({"samples": ALIKE})
    run = _run(data)
    assert run is not None and run[1] == len(data)
    assert [dict(v) for v in run[0]] == ALIKE
    assert shm_samples_meta.decode(data)["samples"] == ALIKE


@pytest.mark.parametrize(
    ("index", "change"),
    [
        (15, {"shape": [48], "nbytes": 192}),  # another rank
        (4, {"dtype": "<c16", "nbytes": 192}),  # a longer dtype string
        (9, {"dtype": "|u1", "nbytes": 12}),  # another dtype of the same length: still one layout
    ],
)
def test_a_batch_alike_in_part_reads_the_same_either_way(index: int, change: dict[str, Any]) -> None:
    samples = [dict(s) for s in ALIKE]
    samples[index].update(change)
    data = shm_samples_meta.encode({"samples": samples})
    assert shm_samples_meta.decode(data)["samples"] == samples
    assert (_run(data) is None) == (change.get("dtype") != "|u1")


def test_every_damaged_byte_of_a_run_gets_the_interpreters_answer() -> None:
    """Each byte of a 16-array batch set to 0x00, 0x01, 0x80 and 0xff: both codecs agree on every copy."""
    data = shm_samples_meta.encode({"samples": ALIKE})
    entry = FORMATS["shm-samples-meta"]
    outcomes = set()
    for at in range(len(data)):
        for byte in (0x00, 0x01, 0x80, 0xFF):
            if data[at] != byte:
                damaged = data[:at] + bytes([byte]) + data[at + 1 :]
                kind, _ = differential(entry, damaged, {"chunk_size": 2048})
                outcomes.add(kind)
    assert {"value", "InvalidValueError", "LimitError", "UnknownTagError"} <= outcomes


def test_short_arrays_are_read_element_by_element(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    run = shm_samples_meta._run_ArraySample
    monkeypatch.setattr(shm_samples_meta, "_ACCEL", None)  # the Python reader's paths, not the accelerator's
    monkeypatch.setattr(
        shm_samples_meta, "_run_ArraySample", lambda buf, off, count, ctx: calls.append(count) or run(buf, off, count, ctx)
    )
    for count in (RUN_MIN - 1, RUN_MIN):
        data = shm_samples_meta.encode({"samples": ALIKE[:count]})
        assert shm_samples_meta.decode(data)["samples"] == ALIKE[:count]
    assert calls == [RUN_MIN]  # the shorter batch never reached the run reader


def test_a_run_stops_at_the_first_fault_and_the_reader_names_it() -> None:
    samples = [dict(s) for s in ALIKE]
    samples[11]["nbytes"] = 47
    data = bytearray(shm_samples_meta.encode({"samples": ALIKE}))
    entry_size = (len(data) - 8) // len(ALIKE)
    struct.pack_into("<Q", data, 8 + 11 * entry_size + 9, 47)  # the twelfth array's nbytes
    assert _run(bytes(data)) is None
    error = outcome(shm_samples_meta.decode, bytes(data))
    assert error[0] == "InvalidValueError" and "samples[11].nbytes" in error[1], error


def test_metadata_values_with_fqns_of_one_length_are_read_as_one_run() -> None:
    values = [{"fqn": f"opt.{i:03d}", "file": 0, "byte_offset": 64 * i, "byte_length": 8, "crc": i} for i in range(12)]
    value = {"dcp_version": None, "storage_meta": None, "planner_data": None, "files": ["a"], "tensors": [], "values": values}
    data = checkpoint_metadata.encode(value)
    assert checkpoint_metadata.decode(data)["values"] == values
    offset = data.index(b"opt.000") - 4  # the first entry: its fqn's length prefix
    run = checkpoint_metadata._run_ValueEntry(data, offset, len(values), {})
    assert run is not None and run[0] == values
