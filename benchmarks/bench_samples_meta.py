#!/usr/bin/env python3
"""The samples meta of a DALI batch through inert.dali's hand-written path, beside pickling the same value.

A batch of 256 ``(224, 224, 3)`` uint8 arrays (the shape of ``bench_shm.py``'s samples meta) is
written into a real DALI shared-memory chunk by DALI's own ``SharedBatchWriter``, once with the
adapter enabled (Inert's ``shm-samples-meta``) and once without (DALI's pickle).  Then, in CPU
time, interleaved round after round (the best round counts), with the adapter's code as the parent
and the worker run it (``inert._samples_layout`` and ``inert.dali``):

* decode: the meta's bytes copied out of the chunk, decoded and checked (bool bytes too), when the
  batch has the layout of the batch before (a pipeline with fixed shapes) and when every batch has
  a new one (the caches emptied before each call: the generated codec's cost); beside
  ``pickle.loads`` of the same value (the decoded samples) and DALI's own restricted unpickling of
  its ``SampleMeta`` objects; then the whole batch (meta and the 256 array views) against DALI's
  ``deserialize_batch``;
* encode: the batch's layout taken from its arrays and its meta encoded, same two cases, beside
  ``pickle.dumps`` of the same value and of DALI's ``SampleMeta`` objects.

Each ratio is Inert's time over the baseline's (target, issue 30: samples meta at most 0.5x of
pickling the same value).  ``--runs`` whole runs; the median of each ratio is printed with the load
average.  Needs nvidia.dali (the ``dali`` extra).

    python benchmarks/bench_samples_meta.py [--runs 3] [--rounds 30]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from nvidia.dali._multiproc import shared_batch

import inert.dali
from inert import _samples_layout
from inert.dali import _batches

sys.path.insert(0, str(Path(__file__).resolve().parent))
from limits import fraction, memcpy_limit  # noqa: E402

#: The encoded samples meta's size in bytes (set by candidates()): what the limit copies.
META_BYTES = 0

SAMPLES = 256
IMAGE = (224, 224, 3)


def loadavg() -> str:
    path = Path("/proc/loadavg")
    return " ".join(path.read_text().split()[:3]) if path.exists() else "?"


def best(candidates: dict[str, Callable[[], Any]], rounds: int, inner: int) -> dict[str, float]:
    """Best CPU time per call of each candidate in microseconds, measured interleaved."""
    times = dict.fromkeys(candidates, float("inf"))
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.process_time_ns()
            for _ in range(inner):
                fn()
            times[name] = min(times[name], (time.process_time_ns() - start) / inner / 1000)
    return times


def _forget_layouts() -> None:
    _samples_layout._layouts.clear()
    _samples_layout._last = (b"", -1, None)


def _chunk(batch: list[np.ndarray], adapter: bool) -> tuple[Any, Any]:
    """A DALI chunk holding ``batch`` as DALI's writer puts it, with or without the adapter; and its meta."""
    (inert.dali.enable if adapter else inert.dali.disable)()
    chunk = shared_batch.BufShmChunk.allocate(0, 4096)
    writer = shared_batch.SharedBatchWriter(chunk, batch)
    return chunk, shared_batch.SharedBatchMeta(writer.data_size, writer.meta_data_size)


def candidates() -> tuple[dict[str, Callable[[], Any]], dict[str, Callable[[], Any]]]:
    batch = [np.zeros(IMAGE, np.uint8) for _ in range(SAMPLES)]
    dali_deserialize_batch = shared_batch.deserialize_batch
    dali_sample_meta = shared_batch.deserialize_sample_meta
    chunk, meta = _chunk(batch, adapter=True)
    dali_chunk, dali_meta = _chunk(batch, adapter=False)  # the adapter stays disabled from here on
    start, size, capacity, view = meta.meta_offset, meta.meta_size, chunk.capacity, chunk.buf
    global META_BYTES
    META_BYTES = size

    def inert_meta() -> Any:
        layout = _samples_layout.decode_layout(bytes(view[start : start + size]), capacity)
        _samples_layout.check_bools(view, layout)
        return layout

    def inert_meta_new() -> Any:
        _forget_layouts()
        return inert_meta()

    value = inert_meta().samples
    pickled_value = pickle.dumps(value)
    dali_objects = dali_sample_meta(dali_chunk, dali_meta)
    pickled_objects = pickle.dumps(dali_objects)
    assert [s["offset"] for s in value] == [s.offset for s in dali_objects]

    def inert_encode() -> Any:
        return _batches._encoded(batch)  # what the worker's writer does before copying the arrays

    def inert_encode_new() -> Any:
        _samples_layout._encodings.clear()
        _samples_layout._last_arrays = ([], [], None)
        return inert_encode()

    decode = {
        "inert meta, layout as before": inert_meta,
        "inert meta, new layout": inert_meta_new,
        "pickle.loads, same value": lambda: pickle.loads(pickled_value),
        "DALI meta (restricted unpickler)": lambda: dali_sample_meta(dali_chunk, dali_meta),
        "inert batch, layout as before": lambda: _batches._deserialize_batch(chunk, meta),
        "DALI deserialize_batch": lambda: dali_deserialize_batch(dali_chunk, dali_meta),
    }
    encode = {
        "inert encode, layout as before": inert_encode,
        "inert encode, new layout": inert_encode_new,
        "pickle.dumps, same value": lambda: pickle.dumps(value),
        "pickle.dumps, DALI's SampleMeta": lambda: pickle.dumps(dali_objects),
    }
    assert pickle.loads(pickled_objects)[0].offset == 0
    return decode, encode


RATIOS = [
    ("decode, layout as before / pickle.loads same value", "inert meta, layout as before", "pickle.loads, same value"),
    ("decode, new layout / pickle.loads same value", "inert meta, new layout", "pickle.loads, same value"),
    ("decode, layout as before / DALI's unpickler", "inert meta, layout as before", "DALI meta (restricted unpickler)"),
    ("decode, new layout / DALI's unpickler", "inert meta, new layout", "DALI meta (restricted unpickler)"),
    ("whole batch / DALI deserialize_batch", "inert batch, layout as before", "DALI deserialize_batch"),
    ("encode, layout as before / pickle.dumps same value", "inert encode, layout as before", "pickle.dumps, same value"),
    ("encode, new layout / pickle.dumps same value", "inert encode, new layout", "pickle.dumps, same value"),
    ("encode, new layout / pickle.dumps SampleMeta", "inert encode, new layout", "pickle.dumps, DALI's SampleMeta"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--inner", type=int, default=20)
    args = parser.parse_args()
    decode, encode = candidates()
    print(f"samples meta of {SAMPLES} x {IMAGE} uint8; CPU us per call, best of {args.rounds} rounds; load average {loadavg()}")
    runs: list[dict[str, float]] = []
    for run in range(args.runs):
        times = {**best(decode, args.rounds, args.inner), **best(encode, args.rounds, args.inner)}
        runs.append(times)
        print(f"run {run + 1}: " + ", ".join(f"{name} {t:.1f}" for name, t in times.items()))
    print(f"{'ratio (Inert / baseline)':<54} {'median':>7}   runs")
    for label, ours, theirs in RATIOS:
        ratios = [times[ours] / times[theirs] for times in runs]
        print(f"{label:<54} {statistics.median(ratios):>7.3f}   " + " ".join(f"{r:.3f}" for r in ratios))
    limit = memcpy_limit(META_BYTES) * 1e6
    for name in ("inert meta, layout as before", "inert meta, new layout"):
        ours = statistics.median(times[name] for times in runs)
        print(f"limit of {name}: a memcpy of the {META_BYTES} meta bytes {limit:.2f} us; "
              f"Inert {ours:.1f} us = {fraction(limit, ours):.3f} of the limit")
    print(f"load average after: {loadavg()}")


if __name__ == "__main__":
    main()
