"""``inert verify`` of a small checkpoint, the whole command: Python's start, imports and the checks.

    python benchmarks/bench_verify_small.py [--runs 7] [--against /path/to/old/checkout]

The checkpoint is tests/fixtures/checkpoints/torch-2.13.0 (32 records, 7 KiB), copied without its
expected.json.  Candidates, taking turns run by run: ``python -m inert verify`` of this tree (and of
``--against``, a checkout of an older commit), ``python -c "import torch.distributed.checkpoint"``
(what verify imported before it read with the codecs alone), and ``python -c pass`` (the floor).
Prints the median wall time of each and its ratio to this tree's verify.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(HERE, "tests", "fixtures", "checkpoints", "torch-2.13.0")


def _wall(argv: list[str], tree: str | None, cwd: str) -> float:
    env = dict(os.environ, PYTHONPATH=tree) if tree else dict(os.environ)
    start = time.perf_counter()  # (cwd: not a tree, which `python -m` would import from before PYTHONPATH)
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv}: exit {done.returncode}: {done.stderr.strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--against", help="an older checkout whose verify to time beside this tree's")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        ckpt = os.path.join(root, "ckpt")
        shutil.copytree(FIXTURE, ckpt)
        os.unlink(os.path.join(ckpt, "expected.json"))
        verify = [sys.executable, "-m", "inert", "verify", ckpt]
        candidates = {"inert verify (this tree)": (verify, HERE)}
        if args.against:
            candidates["inert verify (--against)"] = (verify, args.against)
        candidates["import torch.distributed.checkpoint"] = ([sys.executable, "-c", "import torch.distributed.checkpoint"], None)
        candidates["python -c pass"] = ([sys.executable, "-c", "pass"], None)
        times: dict[str, list[float]] = {name: [] for name in candidates}
        for _ in range(args.runs):
            for name, (argv, tree) in candidates.items():
                times[name].append(_wall(argv, tree, root))
    load = os.getloadavg()[0]
    ours = statistics.median(times["inert verify (this tree)"])
    print(f"median wall of {args.runs} runs, load average {load:.1f} on {os.cpu_count()} CPUs")
    for name, walls in times.items():
        median = statistics.median(walls)
        print(f"  {name:40s} {median * 1000:8.0f} ms   {median / ours:5.2f}x this tree's verify")


if __name__ == "__main__":
    main()
