#!/usr/bin/env python3
"""Crash consistency: a checkpoint save and a dump killed with SIGKILL at many points.

``fuzz/crashes.py [--trials N] [--seed S] [--only checkpoint|dump ...]``

Each trial forks a child (torch is imported once, in this process) that saves
while the parent kills it with SIGKILL after a random delay spread over the
measured length of a save; a trial whose child finished first counts too.
Afterwards the destination must be in one of the states a reader may see:

* checkpoint (``inert.torch.save``: ``dcp.save`` with its ``FileSystemWriter``, over an
  existing checkpoint of other values): no ``.metadata`` (the directory is
  not a checkpoint: the old one is retired before data is overwritten), or a
  checkpoint that ``inert verify`` accepts and that loads to exactly the
  previous values or exactly the new ones;
* dump (``inert.dump.dump``): no directory (staging leftovers beside it are
  allowed), or a dump that ``inert verify`` accepts and that loads to exactly
  the rows written.

Anything else is a torn state: the script prints where it happened and exits 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from fuzz.corruption import _template, same

__all__ = ["Kind", "Trials", "checkpoint_kind", "dump_kind", "run_trials", "main"]

DEFAULT_TRIALS = 200


@dataclass
class Kind:
    """What one kind of save does, and how its destination is judged afterwards."""

    name: str
    #: Prepare a fresh destination under the given directory (an older state, if any); return the destination.
    prepare: Callable[[Path], Path]
    #: The save to interrupt (runs in the forked child).
    save: Callable[[Path], None]
    #: The state found at the destination: "absent", "previous", "new", or "torn: <why>".
    judge: Callable[[Path], str]


@dataclass
class Trials:
    kind: str
    states: Counter[str] = field(default_factory=Counter)
    #: Torn states: "trial N, killed after X ms: why".
    torn: list[str] = field(default_factory=list)
    killed: int = 0


def _verified(path: Path) -> str | None:
    """None when ``inert verify`` accepts ``path``, else its verdict."""
    from inert.cli.verify import verify_path

    report = verify_path(os.fspath(path), show_progress=False)
    return None if report.ok else report.verdict()


def _quiet_load(call: Callable[[], Any]) -> Any:
    # DCP logs failed metadata reads with tracebacks on the root logger; a judge reports its own verdict.
    logging.disable(logging.WARNING)
    try:
        return call()
    finally:
        logging.disable(logging.NOTSET)


def checkpoint_kind() -> Kind:
    import copy

    import torch

    import inert.torch
    from fuzz.corruption import _adam_state

    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    previous = _adam_state()
    new = copy.deepcopy(previous)
    for tensor in new["model"].values():
        tensor.add_(1)
    new["extra"] = {"epoch": 4, "note": "newer"}
    pristine = Path(tempfile.mkdtemp(prefix="inert-crash-previous-")) / "checkpoint"
    inert.torch.save(copy.deepcopy(previous), pristine)

    def prepare(root: Path) -> Path:
        dest = root / "checkpoint"
        shutil.copytree(pristine, dest)
        return dest

    def save(dest: Path) -> None:
        torch.set_num_threads(1)
        inert.torch.save(copy.deepcopy(new), dest)

    def judge(dest: Path) -> str:
        if not (dest / ".metadata").exists():
            return "absent"
        problem = _verified(dest)
        if problem:
            return f"torn: .metadata present but verify says {problem}"
        target = _template(previous)
        target["extra"] = {"epoch": -1, "note": ""}
        try:
            _quiet_load(lambda: inert.torch.load(target, dest))
        except BaseException as exc:  # noqa: BLE001 - any failure to load a verified checkpoint is the finding
            return f"torn: verified, but loading failed: {type(exc).__name__}: {str(exc)[:200]}"
        if same(target, previous):
            return "previous"
        if same(target, new):
            return "new"
        return "torn: loads to values that are neither the previous nor the new ones"

    return Kind("checkpoint", prepare, save, judge)


def dump_kind() -> Kind:
    import torch

    from inert.dump import Row, dump, load

    torch.manual_seed(0)
    rows = [Row(f"k{i}", i, {"x": torch.randn(64, 64), "ids": torch.arange(i + 1), "v": {"i": i}}, {"t": i})
            for i in range(24)]
    expected = sorted(([r.key, r.global_index, r.fields, r.tag] for r in rows), key=lambda r: str(r[0]))

    def prepare(root: Path) -> Path:
        return root / "dump"

    def save(dest: Path) -> None:
        torch.set_num_threads(1)
        dump(rows, dest, owners=3)

    def judge(dest: Path) -> str:
        if not dest.exists():
            return "absent"
        problem = _verified(dest)
        if problem:
            return f"torn: the dump exists but verify says {problem}"
        try:
            loaded = load(dest)
        except BaseException as exc:  # noqa: BLE001 - any failure to load a verified dump is the finding
            return f"torn: verified, but loading failed: {type(exc).__name__}: {str(exc)[:200]}"
        got = sorted(([r.key, r.global_index, r.fields, r.tag] for r in loaded.rows), key=lambda r: str(r[0]))
        return "new" if same(got, expected) else "torn: loads to rows other than those written"

    return Kind("dump", prepare, save, judge)


def _fork_save(kind: Kind, dest: Path) -> tuple[int, int]:
    """Start the save in a forked child; return its pid and the read end of its 'started' pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: say it started, save, leave without running any of the parent's cleanup
        code = 0
        try:
            os.close(read_end)
            os.write(write_end, b"s")
            kind.save(dest)
            os.write(write_end, b"d")  # saved: what follows (exiting) is no part of the save
        except BaseException:  # noqa: BLE001 - reported through the exit status
            code = 1
        os._exit(code)
    os.close(write_end)
    return pid, read_end


def _timed_save(kind: Kind, root: Path, runs: int = 3) -> float:
    """Seconds an uninterrupted save takes in a child, the median of ``runs`` (the kill delays spread over it)."""
    times = []
    for run in range(runs):
        (root / str(run)).mkdir(parents=True)
        dest = kind.prepare(root / str(run))
        pid, pipe = _fork_save(kind, dest)
        os.read(pipe, 1)
        start = time.perf_counter()
        os.read(pipe, 1)
        times.append(time.perf_counter() - start)
        os.close(pipe)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0 or kind.judge(dest) != "new":
            raise RuntimeError(f"{kind.name}: an uninterrupted save did not produce the new state")
    return sorted(times)[runs // 2]


def run_trials(kind: Kind, trials: int, seed: int, report: Callable[[str], None] = print) -> Trials:
    """Kill ``trials`` saves of ``kind`` at random points and judge each destination."""
    rng = random.Random(seed)
    result = Trials(kind.name)
    with tempfile.TemporaryDirectory(prefix=f"inert-crash-{kind.name}-") as tmp:
        duration = _timed_save(kind, Path(tmp) / "timing")
        for trial in range(trials):
            root = Path(tmp) / f"t{trial}"
            root.mkdir()
            dest = kind.prepare(root)
            delay = rng.uniform(0, duration * 1.1)  # a tenth of the trials let the save finish
            pid, pipe = _fork_save(kind, dest)
            os.read(pipe, 1)
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)  # not reaped yet: the pid is still the child's
            finished = os.read(pipe, 1) == b"d"
            os.close(pipe)
            os.waitpid(pid, 0)
            result.killed += not finished
            state = kind.judge(dest)
            result.states[state.split(":")[0]] += 1
            if state.startswith("torn"):
                result.torn.append(f"trial {trial}, killed after {delay * 1000:.1f} ms: {state}")
                report(f"  {kind.name}: {result.torn[-1]}")
                shutil.copytree(root, Path(tempfile.gettempdir()) / f"inert-torn-{kind.name}-{trial}")
            shutil.rmtree(root, ignore_errors=True)
        report(f"{kind.name:<11} {trials:>6} {result.killed:>6} {duration * 1000:>9.0f} "
               + " ".join(f"{state}={count}" for state, count in sorted(result.states.items())))
    return result


KINDS: dict[str, Callable[[], Kind]] = {"checkpoint": checkpoint_kind, "dump": dump_kind}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fuzz/crashes.py", description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=DEFAULT_TRIALS, help=f"trials per kind (default {DEFAULT_TRIALS})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill delays (default 0)")
    parser.add_argument("--only", nargs="*", choices=tuple(KINDS), help="kinds of save to interrupt")
    args = parser.parse_args(argv)
    print(f"{'kind':<11} {'trials':>6} {'killed':>6} {'save (ms)':>9} states")
    torn = 0
    for name, make in KINDS.items():
        if not args.only or name in args.only:
            torn += len(run_trials(make(), args.trials, args.seed).torn)
    print(f"{torn} torn state(s)")
    return 1 if torn else 0


if __name__ == "__main__":
    sys.exit(main())
