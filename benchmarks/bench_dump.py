"""Save and load time of inert.dump against a per-row pickle dump written and read the same way.

Rows have the shape of the selective-dump seed: 8192 int64 token ids and 8192
float32 log-probs (96 KiB) and a small tag, sliced from one large batch as a
rollout would hold them.  Both paths write one shard per owner in parallel
(threads), fsync every file and the directory, and publish with one rename;
both load by having each owner read only its byte ranges, each load in a fresh
process as a restore runs (the time is taken inside it, imports excluded).  The baseline
clones each row's tensors before pickling them (otherwise a slice pickles its
whole batch) and unpickles each row on load, as the seed's V2 does.  Inert's
default load reads every record into private memory and checks it (CRC-32 and
fields) before returning; ``inert mapped`` is ``load(mapped=True)``, which maps
the shard files copy-on-write (tensors are views of the page cache; a
truncation by another process is then a SIGBUS).  Both are measured, each
against the same pickle loads.

Runs alternate (inert, pickle, pickle, inert, ...) in one process; for each
operation the median wall time and the median process CPU time (all threads) of
the runs, and the ratios pickle / inert (above 1 means inert is faster).  Beside
them, the physical limit (benchmarks/limits.py): for a save, the same shard sizes
written (and fsynced as the run does) on the owners' threads; for a load, the
shard files read with ``os.preadv`` into preallocated buffers on the loading
owners' threads; and Inert's fraction of it (limit time / Inert's wall time)::

    python benchmarks/bench_dump.py                         # 4,096 and 16,384 rows, 8 owners, load into 8 and 4
    python benchmarks/bench_dump.py --rows 4096 --repeat 5
    python benchmarks/bench_dump.py --no-sync               # page cache only
    python benchmarks/bench_dump.py --in-process --dir /dev/shm   # repeated loads in one process, on tmpfs
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from limits import file_ranges, fraction, load_line, pread_limit, write_limit  # noqa: E402

from inert.dump import Row, dump, load
from inert.dump._publish import discard, publish, staging_dir

TOKENS = 8192


def make_rows(count: int) -> list[Row]:
    ids = torch.randint(0, 150_000, (count, TOKENS), dtype=torch.int64)
    logprobs = torch.randn(count, TOKENS, dtype=torch.float32)
    return [
        Row(f"rollout-{i}", i, {"input_ids": ids[i], "logprobs": logprobs[i]}, {"step": 7, "status": "partial", "turn": i % 5})
        for i in range(count)
    ]


# -- the baseline: one pickle per row, per-owner shard files, a pickled index ---------------


def _pickle_shard(path: str, rows: list[Row], sync: bool) -> list[tuple[int, int]]:
    spans = []
    with open(path, "wb") as out:
        for row in rows:
            # Clone so a row sliced from a batch does not pickle the whole batch.
            record = {"global_index": row.global_index, "fields": {k: v.clone() for k, v in row.fields.items()}}
            data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
            spans.append((out.tell(), len(data)))
            out.write(data)
        out.flush()
        if sync:
            os.fsync(out.fileno())
    return spans


def pickle_dump(rows: list[Row], dest: str, owners: int, sync: bool) -> None:
    staging = staging_dir(dest)
    try:
        by_owner: dict[int, list[Row]] = {}
        for row in rows:
            by_owner.setdefault(row.global_index % owners, []).append(row)
        with ThreadPoolExecutor(max_workers=len(by_owner)) as pool:
            futures = {
                owner: pool.submit(_pickle_shard, os.path.join(staging, f"shard-{owner}.pkl"), part, sync)
                for owner, part in by_owner.items()
            }
            shards = {owner: (f"shard-{owner}.pkl", [r.key for r in by_owner[owner]], f.result()) for owner, f in futures.items()}
            index = {"keys": [(row.key, row.global_index, row.tag) for row in rows], "shards": shards}
        with open(os.path.join(staging, "row_index.pkl"), "wb") as out:
            pickle.dump(index, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
            if sync:
                os.fsync(out.fileno())
        publish(staging, dest, sync)
    except BaseException:
        discard(staging)
        raise


def pickle_load(path: str, owners: int, batch_rows: int = 128) -> list[list[Row]]:
    with open(os.path.join(path, "row_index.pkl"), "rb") as handle:
        index = pickle.load(handle)
    tags = {key: (gi, tag) for key, gi, tag in index["keys"]}
    plan: list[list[tuple[int, str, int, int]]] = [[] for _ in range(owners)]
    fds = []
    for _owner, (name, keys, spans) in sorted(index["shards"].items()):
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        fds.append(fd)
        for key, (offset, length) in zip(keys, spans, strict=True):
            plan[tags[key][0] % owners].append((fd, key, offset, length))

    def run(owner: int) -> list[Row]:
        out = []
        locs = plan[owner]
        for start in range(0, len(locs), batch_rows):
            for fd, key, offset, length in locs[start : start + batch_rows]:
                record = pickle.loads(os.pread(fd, length, offset))
                out.append(Row(key, tags[key][0], record["fields"], tags[key][1]))
        return out

    try:
        with ThreadPoolExecutor(max_workers=owners) as pool:
            return list(pool.map(run, range(owners)))
    finally:
        for fd in fds:
            os.close(fd)


# -- the runs --------------------------------------------------------------------------------


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall time, process CPU time (all threads) and result of ``fn()``."""
    cpu, wall = time.process_time(), time.perf_counter()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def _digest(rows: list[Row]) -> list[Any]:
    """What a load must give back, cheaply compared across processes: keys, tags and payload sums."""
    ids = sum(int(row.fields["input_ids"].sum()) for row in rows)
    logprobs = sum(float(row.fields["logprobs"].double().sum()) for row in rows)
    return [sorted((row.key, row.global_index, sorted(row.tag.items())) for row in rows), ids, round(logprobs, 3)]


def _load_in_child(name: str, path: str, owners: int) -> tuple[float, float, list[Any]]:
    """Load in a fresh process, as a restore does: no memory left over from the save or an earlier load."""
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child-load", name, path, str(owners)],
        check=True, capture_output=True, text=True,
    ).stdout
    wall, cpu, digest = json.loads(out)
    return wall, cpu, digest


def _child_load(name: str, path: str, owners: int) -> None:
    if name != "pickle":
        wall, cpu, loaded = _timed(lambda: load(path, owners=owners, mapped=name == "mapped").rows_by_owner)
    else:
        wall, cpu, loaded = _timed(partial(pickle_load, path, owners))
    print(json.dumps([wall, cpu, _digest([row for part in loaded for row in part])]))


def _load_in_process(name: str, path: str, owners: int) -> tuple[float, float, list[Any]]:
    """Load in this process: memory the allocator already holds is reused (the steady state of repeated loads)."""
    if name != "pickle":
        wall, cpu, loaded = _timed(lambda: load(path, owners=owners, mapped=name == "mapped").rows_by_owner)
    else:
        wall, cpu, loaded = _timed(partial(pickle_load, path, owners))
    return wall, cpu, json.loads(json.dumps(_digest([row for part in loaded for row in part])))


def bench(
    count: int, owners: int, load_owners: list[int], repeat: int, sync: bool, root: str, in_process: bool
) -> None:
    rows = make_rows(count)
    expected = json.loads(json.dumps(_digest(rows)))
    gib = sum(v.numel() * v.element_size() for r in rows for v in r.fields.values()) / (1 << 30)
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    paths = []
    for run in range(repeat):
        # Alternate which path goes first: writeback and discards of one run must not always land on the same path.
        for name in ("inert", "pickle") if run % 2 == 0 else ("pickle", "inert"):
            dest = os.path.join(root, f"{name}-{count}-{run}")
            paths.append(dest)
            if name == "inert":
                w, c, _ = _timed(partial(dump, rows, dest, partition_id="train", owners=owners, sync=sync))
            else:
                w, c, _ = _timed(partial(pickle_dump, rows, dest, owners, sync))
            wall.setdefault(f"{name} save", []).append(w)
            cpu.setdefault(f"{name} save", []).append(c)
            for target in load_owners:
                # Inert's default (private memory) and its mapped opt-in load the same files, in turn.
                for loader in (name, "mapped") if name == "inert" else (name,):
                    w, c, digest = (_load_in_process if in_process else _load_in_child)(loader, dest, target)
                    assert digest == expected, f"{loader} load {owners}->{target} gave other rows back"
                    wall.setdefault(f"{loader} load {owners}->{target}", []).append(w)
                    cpu.setdefault(f"{loader} load {owners}->{target}", []).append(c)
    # The limits, on the last Inert dump's files: its shards' bytes written, then read back.
    last = next(path for path in reversed(paths) if os.path.basename(path).startswith("inert-"))
    shards = sorted(os.path.join(last, name) for name in os.listdir(last) if name.startswith("shard-"))
    limits = {"save": write_limit([os.path.getsize(p) for p in shards], root, threads=owners, sync=sync, repeat=repeat)}
    for target in load_owners:
        limits[f"load {owners}->{target}"] = pread_limit(file_ranges(shards), threads=target, repeat=repeat)
    for path in paths:
        shutil.rmtree(path)
    where = "in this process" if in_process else "in fresh processes"
    print(
        f"\n{count} rows ({gib:.2f} GiB), {owners} owners, {repeat} runs each, fsync {'on' if sync else 'off'}, "
        f"loads {where} (inert: private memory, the default; mapped: load(mapped=True))"
    )
    print(f"{'':22}{'wall: inert':>12}{'pickle':>9}{'ratio':>8}   {'CPU: inert':>11}{'pickle':>9}{'ratio':>8}"
          f"   {'limit':>8}{'fraction':>9}")
    ops = [("inert", "save")] + [(loader, f"load {owners}->{t}") for t in load_owners for loader in ("inert", "mapped")]
    for ours_name, op in ops:
        line = f"{op if ours_name == 'inert' else op + ' mapped':22}"
        for table in (wall, cpu):
            ours, theirs = statistics.median(table[f"{ours_name} {op}"]), statistics.median(table[f"pickle {op}"])
            line += f"{ours:>11.3f}s{theirs:>8.3f}s{theirs / ours:>7.2f}x   "
        ours = statistics.median(wall[f"{ours_name} {op}"])
        print(line + f"{limits[op]:>7.3f}s{fraction(limits[op], ours):>9.2f}")
    print("medians of the runs; ratio = pickle / inert: above 1 means inert is faster; "
          "fraction = limit / inert wall (1.0: at the limit)")
    print(load_line())


def main() -> None:
    if sys.argv[1:2] == ["--child-load"]:
        _child_load(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--owners", type=int, default=8)
    parser.add_argument("--load-owners", type=int, nargs="+", default=[8, 4])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-sync", action="store_true", help="skip fsync (page cache only)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    parser.add_argument("--in-process", action="store_true", help="load in this process instead of a fresh one per load")
    args = parser.parse_args()
    print(load_line())
    root = tempfile.mkdtemp(prefix="bench-dump-", dir=args.dir)
    try:
        for count in args.rows:
            bench(count, args.owners, args.load_owners, args.repeat, not args.no_sync, root, args.in_process)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
