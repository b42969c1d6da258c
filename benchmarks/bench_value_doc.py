#!/usr/bin/env python3
"""Benchmark the value-document reader (canonical form checked, then built) against its baselines.

For each document: the time to decode it with Inert's reader (``inert._value_doc.unpack_value``:
the linear scan that checks the canonical form, then msgpack's build), with plain
``msgpack.unpackb`` (the same build, no checks: what Inert's reader did before the canonical form)
and with ``pickle.loads`` of the same Python value.  Interleaved rounds, the best counts.  The
last line is the hostile case of issue 16 (a million empty maps), as CPU seconds per MiB against
the bound of 1 s per MiB.

    python benchmarks/bench_value_doc.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from limits import fraction, load_line, memcpy_limit  # noqa: E402

from inert._value_doc import _Build, _scan, pack_value, unpack_value

MIB = 1 << 20


def documents() -> dict[str, Any]:
    layers = [f"model.layers.{i}.{p}" for i in range(80) for p in (
        "attn.q.weight", "attn.k.weight", "attn.v.weight", "attn.o.weight", "mlp.gate.weight", "mlp.up.weight",
        "mlp.down.weight", "norm1.weight", "norm2.weight")]
    fqns = [f"{kind}.{name}" for kind in ("model", "optim.exp_avg", "optim.exp_avg_sq", "optim.step") for name in layers]
    return {
        "planner data, 2,880 fqns -> path tuples": {fqn: tuple(fqn.split(".")) for fqn in fqns},
        "optimizer settings, 4 groups of 1,000 params": {
            "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01,
                              "params": list(range(g * 1000, (g + 1) * 1000))} for g in range(4)],
        },
        "100,000 floats": [i * 0.5 for i in range(100_000)],
        "a dump tag of 8 keys": {"step": 7, "rank": 3, "source": "rollout", "score": 0.25, "ok": True,
                                 "ids": [1, 2, 3], "meta": {"a": "b"}, "t": (1, 2)},
    }


def best(runs: dict[str, Callable[[], Any]], rounds: int, inner: int) -> dict[str, float]:
    """CPU seconds per call of each run, the best round (CPU time: the machine is shared)."""
    times = {name: float("inf") for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            start = time.process_time()
            for _ in range(inner):
                fn()
            times[name] = min(times[name], (time.process_time() - start) / inner)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(load_line())
    print(f"{'document':44} {'bytes':>9} {'inert':>10} {'msgpack':>10} {'pickle':>10} {'inert/msgpack':>14} {'inert/pickle':>13}"
          f" {'limit':>9} {'of limit':>8}")
    for label, value in documents().items():
        data = pack_value("bench", "", value, 64 * MIB, 64)
        pickled = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        build = _Build("bench", 0, "", 64, _scan(data, 64))  # msgpack's build of a document already scanned
        inner = max(3, 2_000_000 // len(data))
        t = best({
            "inert": lambda data=data: unpack_value("bench", data, 0, "", 64),
            "msgpack": lambda data=data, build=build: build.unpack(data),
            "pickle": lambda pickled=pickled: pickle.loads(pickled),
        }, args.rounds, inner)
        print(f"{label:44} {len(data):9d} {t['inert'] * 1e6:8.1f}us {t['msgpack'] * 1e6:8.1f}us {t['pickle'] * 1e6:8.1f}us "
              f"{t['inert'] / t['msgpack']:13.2f}x {t['inert'] / t['pickle']:12.2f}x"
              f" {(limit := memcpy_limit(len(data))) * 1e6:7.1f}us {fraction(limit, t['inert']):8.3f}")
    count = 1_000_000
    hostile = b"\xdd" + count.to_bytes(4, "big") + b"\x80" * count
    cpu = float("inf")
    for _ in range(3):
        start = time.process_time()
        unpack_value("bench", hostile, 0, "", 64)
        cpu = min(cpu, time.process_time() - start)
    print(f"a million empty maps ({len(hostile)} bytes): {cpu / (len(hostile) / MIB):.2f} s of CPU per MiB (bound: 1 s per MiB)")


if __name__ == "__main__":
    main()
