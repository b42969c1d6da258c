"""Throughput of DALI's parallel external source with inert.dali against DALI's own pickle path.

Runs alternate (adapter, pickle, adapter, ...) in one process, each with a
fresh pipeline and worker pool, and prints the median samples per second of
each path, their ratio (adapter / pickle; 1.0 means equal speed), and the CPU
time per sample of the parent and of the workers (less sensitive to other load).

    python benchmarks/bench_dali.py                  # defaults: small samples, where messages weigh most
    python benchmarks/bench_dali.py --vary-shapes    # no two batches alike: every meta encoded and decoded
    python benchmarks/bench_dali.py --shape 3,224,224 --dtype uint8 --batch-size 32

Beside the ratio it prints the limit (benchmarks/limits.py): a batch's array bytes copied once
between preallocated buffers, the copy a worker makes into shared memory, against inert.dali's wall
time per batch; and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
from nvidia.dali import Pipeline, fn

import inert.dali

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from limits import load_line, memcpy_limit, report  # noqa: E402


class Source:
    """A sample-mode callback returning preallocated arrays: the work is the transport.

    With ``vary`` the first dimension is drawn at random per sample, so no two
    batches share a layout and every samples meta is encoded and decoded afresh.
    """

    def __init__(self, shape: tuple[int, ...], dtype: str, outputs: int, vary: bool) -> None:
        first = range(max(1, shape[0] // 2), shape[0] * 3 // 2 + 1) if vary and shape else range(1)
        self.choices = [
            tuple(np.ones(((n,) + shape[1:]) if vary and shape else shape, dtype) for _ in range(outputs)) for n in first
        ]
        self.rng = np.random.default_rng()

    def __call__(self, info: Any) -> Any:
        arrays = self.choices[int(self.rng.integers(len(self.choices)))] if len(self.choices) > 1 else self.choices[0]
        return arrays if len(arrays) > 1 else arrays[0]


def _workers_cpu(pids: list[int]) -> float:
    """CPU seconds the worker processes used so far (Linux /proc; 0 elsewhere)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def throughput(args: argparse.Namespace, adapter: bool) -> tuple[float, float, float]:
    """Samples per second of one fresh pipeline, with or without the adapter, and the CPU
    time per sample in microseconds of the parent (all its threads) and of the workers.

    CPU time per sample is what the path costs; samples per second also depends
    on whatever else the machine runs."""
    if adapter:
        inert.dali.enable()
    else:
        inert.dali.disable()
    pipe = Pipeline(
        batch_size=args.batch_size,
        num_threads=1,
        device_id=None,
        py_num_workers=args.workers,
        py_start_method="fork",
        prefetch_queue_depth=2,
    )
    source = Source(args.shape, args.dtype, args.outputs, args.vary_shapes)
    with pipe:
        outs = fn.external_source(source=source, parallel=True, batch=False, num_outputs=args.outputs)
        pipe.set_outputs(*(outs if isinstance(outs, (list, tuple)) else [outs]))
    try:
        pipe.build()
        for _ in range(args.warmup):
            pipe.run()
        pids = pipe._py_pool.pids()
        start, cpu_start, workers_start = time.perf_counter(), time.process_time(), _workers_cpu(pids)
        for _ in range(args.iterations):
            pipe.run()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        workers = _workers_cpu(pids) - workers_start
    finally:
        pool = getattr(pipe, "_py_pool", None)
        if pool is not None:
            pool.close()
        pipe._shutdown()
    samples = args.iterations * args.batch_size
    return samples / elapsed, cpu / samples * 1e6, workers / samples * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--shape", type=lambda s: tuple(int(d) for d in s.split(",")), default=(16,))
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--outputs", type=int, default=1, help="arrays per sample (a tuple when more than 1)")
    parser.add_argument("--vary-shapes", action="store_true", help="a random first dimension per sample")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7, help="runs of each path, alternating")
    args = parser.parse_args(argv)
    print(load_line())

    runs: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    workers_cpu: dict[bool, list[float]] = {True: [], False: []}
    for repeat in range(args.repeats):
        # Alternate which path goes first so drift (thermal, other load) hits both alike.
        order = (True, False) if repeat % 2 == 0 else (False, True)
        for adapter in order:
            rate, parent_cpu, worker_cpu = throughput(args, adapter)
            runs[adapter].append(rate)
            cpu[adapter].append(parent_cpu)
            workers_cpu[adapter].append(worker_cpu)
    inert.dali.disable()

    shape = "x".join(map(str, args.shape))
    print(
        f"DALI parallel external source, sample mode, batch {args.batch_size}, {args.outputs} x {shape} {args.dtype}"
        f"{' (first dimension varied)' if args.vary_shapes else ''}, "
        f"{args.workers} workers (fork), {args.iterations} iterations x {args.repeats} runs each"
    )
    for adapter, label in ((True, "inert.dali"), (False, "DALI pickle")):
        values = runs[adapter]
        print(
            f"  {label:12s} median {statistics.median(values):10,.0f} samples/s, "
            f"CPU us/sample parent {statistics.median(cpu[adapter]):5.2f} workers {statistics.median(workers_cpu[adapter]):5.2f}"
            "   runs: " + ", ".join(f"{v:,.0f}" for v in values)
        )
    ratio = statistics.median(runs[True]) / statistics.median(runs[False])
    paired = statistics.median(a / b for a, b in zip(runs[True], runs[False], strict=True))
    print(f"  ratio (inert.dali / DALI pickle): {ratio:.3f}  (median of the {args.repeats} paired runs' ratios: {paired:.3f})")
    # The sample bytes of one batch (the mean over the first dimensions drawn when varied), copied once.
    choices = Source(args.shape, args.dtype, args.outputs, args.vary_shapes).choices
    batch_bytes = sum(array.nbytes for choice in choices for array in choice) * args.batch_size // len(choices)
    per_batch = args.batch_size / statistics.median(runs[True])
    print(report("a batch", memcpy_limit(batch_bytes), per_batch, f"a memcpy of its {batch_bytes:,} sample bytes"))
    print(load_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
