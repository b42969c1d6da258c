"""``inert verify`` of a local checkpoint: this tree against another (``--against DIR``, a checkout of an older commit).

    python benchmarks/bench_verify.py [--mib 256] [--repeat 3] [--against /path/to/old/checkout]

One checkpoint written once: ``--mib`` MiB of float32 parameters (64 tensors), 2,000 small tensors
and values, and a ZSTD-compressed copy of the parameters (inflated a block at a time by verify).
Each tree verifies both in a process of its own (its own ``PYTHONPATH``), taking turns; each figure
is the best of ``--repeat`` runs.  A ratio above 1 means this tree is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from limits import file_ranges, fraction, load_line, pread_limit  # noqa: E402


def write(root: str, mib: int) -> list[str]:
    import torch

    from inert.torch import FileSystemWriter
    from inert.torch._compat import dcp_save

    warnings.filterwarnings("ignore")
    per = mib * (1 << 20) // 64 // 4
    state: dict[str, object] = {f"p{i}": torch.randn(per) for i in range(64)}
    state.update({f"s{i}": torch.arange(16, dtype=torch.float32) + i for i in range(2000)})
    state["v"] = {"step": 7, "lr": [0.1] * 100}
    plain = os.path.join(root, "plain")
    dcp_save(state, FileSystemWriter(plain, sync_files=False, thread_count=2))
    from torch.distributed.checkpoint._extension import ZStandard

    packed = os.path.join(root, "zstd")
    dcp_save({k: v for k, v in state.items() if k.startswith("p")},
             FileSystemWriter(packed, sync_files=False, thread_count=2, _extensions=[ZStandard()]))
    return [plain, packed]


def child(paths: list[str], repeat: int) -> None:
    warnings.filterwarnings("ignore")
    from inert.cli.verify import verify_path

    best = {}
    for path in paths:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            report = verify_path(path, show_progress=False)
            times.append(time.perf_counter() - start)
            assert report.ok, report.problems
        best[os.path.basename(path)] = (min(times), report.bytes)
    print(json.dumps(best))


def run(tree: str, paths: list[str], repeat: int) -> dict[str, list[float]]:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *paths, "--repeat", str(repeat)],
                         env=env, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", help="another checkout to compare with")
    parser.add_argument("--child", nargs="*")
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.repeat)
        return
    print(load_line())
    with tempfile.TemporaryDirectory() as root:
        paths = write(root, args.mib)
        trees = [("this tree", HERE)] + ([("against", os.path.abspath(args.against))] if args.against else [])
        results = {label: run(tree, paths, args.repeat) for label, tree in trees}
        for name in (os.path.basename(p) for p in paths):
            line = f"verify {name:6s}"
            for label, _ in trees:
                seconds, nbytes = results[label][name]
                line += f"  {label}: {seconds:.3f} s ({nbytes / seconds / 1e9:.2f} GB/s)"
            if args.against:
                line += f"  ratio {results['against'][name][0] / results['this tree'][name][0]:.2f}"
            # The limit: the checkpoint's files read with os.preadv into preallocated buffers on verify's 2 threads.
            path = next(p for p in paths if os.path.basename(p) == name)
            limit = pread_limit(file_ranges(sorted(os.path.join(path, f) for f in os.listdir(path))), threads=2,
                                repeat=args.repeat)
            line += f"  limit (os.preadv, 2 threads) {limit:.3f} s: {fraction(limit, results['this tree'][name][0]):.2f} of it"
            print(line)
        print(load_line())


if __name__ == "__main__":
    main()
