#!/usr/bin/env python3
"""Benchmark the shared-memory codecs against pickle and the Construct-interpreted grammar.

For each message: ns per encode and per decode with the generated codec
(``inert.codecs``), with ``pickle.dumps``/``pickle.loads`` of equivalent Python
objects (small classes mirroring DALI's), and with the Construct-interpreted
reference codec.  The candidates are measured interleaved, round after round,
so that a slow moment of the machine hits them all; the best round counts.
Then the import time of ``inert.codecs.shm_message`` in a fresh interpreter.

    python benchmarks/bench_shm.py [--rounds N] [--budget SECONDS]

Targets: decode within 1.5x of ``pickle.loads``, at least 20x faster than
Construct, import under 50 ms without torch.
"""

from __future__ import annotations

import argparse
import pickle
import re
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from inert._interpret import interpret_decode, interpret_encode
from inert.codecs import shm_message, shm_samples_meta
from inert.spec import FORMATS

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from limits import fraction, load_line, memcpy_limit  # noqa: E402

# --- Python objects as DALI pickles them ----------------------------------------------------


class SampleRange:
    def __init__(self, start: int, end: int, iteration: int, epoch_idx: int, slice_start: int = 0, slice_end: int | None = None):
        self.start, self.end, self.iteration, self.epoch_idx = start, end, iteration, epoch_idx
        self.slice_start = slice_start
        self.slice_end = end - start if slice_end is None else slice_end


class BatchInfo:
    def __init__(self, iteration: int, epoch_idx: int):
        self.iteration, self.epoch_idx = iteration, epoch_idx


class TaskArgs:
    def __init__(self, minibatch_i: int, sample_range: SampleRange | None = None, batch_args: Any = None):
        self.minibatch_i, self.sample_range, self.batch_args = minibatch_i, sample_range, batch_args


class ScheduledTask:
    def __init__(self, context_i: int, scheduled_i: int, epoch_start: int, task: TaskArgs):
        self.context_i, self.scheduled_i, self.epoch_start, self.task = context_i, scheduled_i, epoch_start, task


class BatchMeta:
    def __init__(self, offset: int, size: int):
        self.offset, self.size = offset, size


class CompletedTask:
    def __init__(
        self,
        worker_id: int,
        context_i: int,
        scheduled_i: int,
        minibatch_i: int,
        batch_meta: BatchMeta | None = None,
        exception: BaseException | None = None,
        traceback_str: str | None = None,
    ):
        self.worker_id, self.context_i, self.scheduled_i, self.minibatch_i = worker_id, context_i, scheduled_i, minibatch_i
        self.batch_meta, self.exception, self.traceback_str = batch_meta, exception, traceback_str


class SampleMeta:
    def __init__(self, offset: int, shape: tuple[int, ...], dtype: str, nbytes: int):
        self.offset, self.shape, self.dtype, self.nbytes = offset, shape, dtype, nbytes


# --- The messages, each as an Inert value and as DALI's objects -----------------------------

TRACEBACK = "Traceback (most recent call last):\n" + '  File "pipeline.py", line 42, in __call__\n    raise RuntimeError\n' * 12
HEAD = {"context_i": 3, "scheduled_i": 1051, "epoch_start": 7, "minibatch_i": 1051}
DONE = {"type": "COMPLETED_TASK", "worker_id": 1, "context_i": 3, "scheduled_i": 1051, "minibatch_i": 1051}
BATCH_INFO = {"iteration": 524, "epoch_idx": 7}
RANGE = {"start": 33536, "end": 33600, "iteration": 524, "epoch": 7, "slice_start": 0, "slice_end": 64}
SAMPLES = 256
IMAGE = (224, 224, 3)
IMAGE_BYTES = 224 * 224 * 3
ALIGNED = (IMAGE_BYTES + 127) // 128 * 128


def _images(count: int) -> list[np.ndarray]:
    """``count`` uint8 images (views of one zero byte: shapes and dtypes without the memory)."""
    return [np.broadcast_to(np.uint8(0), IMAGE) for _ in range(count)]


@dataclass
class Message:
    name: str
    format: str
    value: Any  # what Inert's writers take
    objects: Any  # what DALI pickles


MESSAGES = [
    Message(
        "ScheduledTask (sample range)",
        "shm-message",
        {"type": "SCHEDULED_TASK", **HEAD, "task": {"kind": "SAMPLE_RANGE", "range": RANGE}},
        ScheduledTask(3, 1051, 7, TaskArgs(1051, sample_range=SampleRange(33536, 33600, 524, 7))),
    ),
    Message(
        "ScheduledTask (batch, BatchInfo)",
        "shm-message",
        {"type": "SCHEDULED_TASK", **HEAD, "task": {"kind": "BATCH", "args": {"kind": "BATCH_INFO", **BATCH_INFO}}},
        ScheduledTask(3, 1051, 7, TaskArgs(1051, batch_args=BatchInfo(524, 7))),
    ),
    Message(
        "CompletedTask (with meta)",
        "shm-message",
        {**DONE, "meta": {"offset": 0, "size": SAMPLES * ALIGNED}, "exception": {"kind": "NONE"}, "traceback": None},
        CompletedTask(1, 3, 1051, 1051, batch_meta=BatchMeta(0, SAMPLES * ALIGNED)),
    ),
    Message(
        "CompletedTask (no meta)",
        "shm-message",
        {**DONE, "meta": None, "exception": {"kind": "NONE"}, "traceback": None},
        CompletedTask(1, 3, 1051, 1051),
    ),
    Message(
        "CompletedTask (failed, traceback)",
        "shm-message",
        {**DONE, "meta": None, "exception": {"kind": "RUNTIME_ERROR", "message": "bad sample 17"}, "traceback": TRACEBACK},
        CompletedTask(1, 3, 1051, 1051, exception=RuntimeError("bad sample 17"), traceback_str=TRACEBACK),
    ),
    Message(
        f"samples meta ({SAMPLES} arrays)",
        "shm-samples-meta",
        {
            "samples": [
                {"kind": "ARRAY", "offset": i * ALIGNED, "nbytes": IMAGE_BYTES, "dtype": "|u1", "shape": list(IMAGE)}
                for i in range(SAMPLES)
            ]
        },
        # As DALI builds them from the batch's arrays: each sample has its own shape tuple and
        # dtype string (pickle would share one object met twice, which real batches do not have).
        [SampleMeta(i * ALIGNED, a.shape, a.dtype.str, a.nbytes) for i, a in enumerate(_images(SAMPLES))],
    ),
]

CODECS = {"shm-message": shm_message, "shm-samples-meta": shm_samples_meta}


def _candidates(message: Message) -> dict[str, Callable[[], Any]]:
    """Every (implementation, operation) to time for one message, as a no-argument call."""
    codec, fmt = CODECS[message.format], FORMATS[message.format]
    data, pickled = codec.encode(message.value), pickle.dumps(message.objects)
    assert interpret_encode(fmt, message.value) == data and pickle.loads(pickled).__class__ is message.objects.__class__
    value = message.value
    return {
        "inert.encode": lambda: codec.encode(value),
        "inert.decode": lambda: codec.decode(data),
        "pickle.dumps": lambda: pickle.dumps(message.objects),
        "pickle.loads": lambda: pickle.loads(pickled),
        "construct.encode": lambda: interpret_encode(fmt, value),
        "construct.decode": lambda: interpret_decode(fmt, data),
    }


def measure(candidates: dict[str, Callable[[], Any]], rounds: int, budget: float) -> dict[str, float]:
    """Best ns per call of each candidate over ``rounds`` interleaved rounds of about ``budget`` seconds each."""
    numbers = {}
    for name, func in candidates.items():
        number, elapsed = 1, 0.0
        while elapsed < budget / len(candidates) / 4:
            number *= 2
            elapsed = timeit.timeit(func, number=number)
        numbers[name] = number
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, func in candidates.items():
            times[name].append(timeit.timeit(func, number=numbers[name]) / numbers[name] * 1e9)
    return {name: min(samples) for name, samples in times.items()}


def import_time(module: str, repeat: int = 9) -> tuple[float, float, bool]:
    """Import cost of ``module`` in fresh interpreters, best of ``repeat``.

    Returns (ms that ``-X importtime`` reports for it, everything it pulls in
    included; ms of wall time over a bare interpreter; whether torch got imported).
    """
    code = f"import {module}, sys; print('torch' in sys.modules)"
    reported: list[float] = []
    walls: list[float] = []
    bare: list[float] = []
    torch = False
    for _ in range(repeat):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
        torch = torch or proc.stdout.strip() == "True"
        top = re.search(rf"\|\s*(\d+) \| {re.escape(module)}$", proc.stderr, re.M)  # one space: a top-level import
        assert top is not None, proc.stderr
        reported.append(int(top.group(1)) / 1000)
        for argv, out in (([sys.executable, "-c", code], walls), ([sys.executable, "-c", "pass"], bare)):
            start = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True)
            out.append((time.perf_counter() - start) * 1000)
    return min(reported), min(walls) - min(bare), torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds per round and message")
    args = parser.parse_args()
    print(f"Python {sys.version.split()[0]}, pickle protocol {pickle.DEFAULT_PROTOCOL}; ", end="")
    print(f"best of {args.rounds} interleaved rounds; ns per call")
    header = (
        f"{'message':<34} {'bytes':>6} {'pickled':>7} | {'inert enc':>9} {'pickle':>9} {'constr.':>9} | "
        f"{'inert dec':>9} {'pickle':>9} {'constr.':>9} | {'dec/pkl':>7} {'enc/pkl':>7} {'dec xC':>6} {'enc xC':>6}"
        f" | {'limit':>6} {'dec of':>6}"
    )
    print(header)
    print("-" * len(header))
    for message in MESSAGES:
        t = measure(_candidates(message), args.rounds, args.budget)
        size, pickled = len(CODECS[message.format].encode(message.value)), len(pickle.dumps(message.objects))
        print(
            f"{message.name:<34} {size:>6} {pickled:>7} | "
            f"{t['inert.encode']:>9.0f} {t['pickle.dumps']:>9.0f} {t['construct.encode']:>9.0f} | "
            f"{t['inert.decode']:>9.0f} {t['pickle.loads']:>9.0f} {t['construct.decode']:>9.0f} | "
            f"{t['inert.decode'] / t['pickle.loads']:>7.2f} {t['inert.encode'] / t['pickle.dumps']:>7.2f} "
            f"{t['construct.decode'] / t['inert.decode']:>6.0f} {t['construct.encode'] / t['inert.encode']:>6.0f}"
            f" | {(limit := memcpy_limit(size) * 1e9):>6.0f} {fraction(limit, t['inert.decode']):>6.3f}"
        )
        sys.stdout.flush()
    print("dec/pkl, enc/pkl: generated codec's time over pickle's (target: decode <= 1.5)")
    print("dec xC, enc xC: speedup of the generated codec over the Construct-interpreted one (target >= 20)")
    print("limit: a memcpy of the encoded bytes (benchmarks/limits.py); dec of: the limit's time over the decode's")
    print(load_line())
    reported, wall, torch = import_time("inert.codecs.shm_message")
    print(
        f"import inert.codecs.shm_message: {reported:.1f} ms by -X importtime (with inert and its helpers), "
        f"{wall:.1f} ms of wall time over a bare interpreter; torch imported: {torch} (target < 50 ms, no torch)"
    )


if __name__ == "__main__":
    main()
