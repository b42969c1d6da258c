#!/usr/bin/env python3
"""Run PyTorch's own DCP test files with torch's storage classes, then with Inert's, side by side.

    python tools/dcp_upstream_tests/run.py DIR [FILE ...] [--gpu-gated-on-cpu] [-k EXPR]

DIR holds copies of files of PyTorch's ``test/distributed/checkpoint/`` (they are not part
of this repository: fetch them from the PyTorch release under test).  Each FILE (default:
every ``test_*.py`` in DIR) runs twice under pytest, each in fresh processes: once as it is,
once with ``INERT_DCP_SWAP=1``, where ``site/sitecustomize.py`` puts inert.torch's
``FileSystemWriter``/``FileSystemReader`` (and fsspec ones) in place of torch's in every
process, spawned ranks included.  A test counts as passed for Inert only if pytest passed it,
every ``.metadata`` it committed starts with Inert's magic, and torch's own writer and reader
were never used.  ``--gpu-gated-on-cpu`` runs tests marked ``skip_if_lt_x_gpu(n)`` on the CPU
(as 2.13's ``allow_cpu=True`` does) in both runs.  Needs pytest and expecttest (the ``dev``
extra).  Prints per file: passed/failed/skipped for each side, then the tests whose outcome
differs, with Inert's failure line.  The exit status is 1 if any test passed with torch's
classes and not with Inert's.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIDES = ("torch", "inert")


def run_side(test_file: Path, side: str, scratch: Path, args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """``{test id: (outcome, first line of the failure)}`` for one pytest run of ``test_file``."""
    report = scratch / f"{test_file.stem}.{side}.xml"
    log = scratch / f"{test_file.stem}.{side}.log"
    log.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE / "site"), os.environ.get("PYTHONPATH")])),
               INERT_DCP_LOG=str(log), INERT_DCP_SWAP="1" if side == "inert" else "0",
               INERT_DCP_GPU_ON_CPU="1" if args.gpu_gated_on_cpu else "0")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", str(test_file)]
    if args.k:
        command += ["-k", args.k]
    with open(scratch / f"{test_file.stem}.{side}.out", "w") as out:
        subprocess.run(command, cwd=test_file.parent, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    outcomes = parse_junit(report) if report.exists() else {}
    if side == "inert":
        for test, reason in swap_failures(log).items():
            if outcomes.get(test, ("", ""))[0] == "passed":
                outcomes[test] = ("failed", reason)
    return outcomes


def parse_junit(report: Path) -> dict[str, tuple[str, str]]:
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome, reason = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, reason = "failed", (child.get("message") or "").splitlines()[0][:200] if child.get("message") else ""
            elif child.tag == "skipped":
                outcome, reason = "skipped", (child.get("message") or "")[:120]
        outcomes[test] = (outcome, reason)
    return outcomes


def swap_failures(log: Path) -> dict[str, str]:
    """Tests during which torch's own classes were used or a non-Inert ``.metadata`` was committed."""
    failures: dict[str, str] = {}
    if not log.exists():
        return failures
    for line in log.read_text().splitlines():
        _pid, test, event = line.split("\t", 2)
        if event.startswith("TORCH-") or "NOT-INERT" in event:
            key = test.split("::", 1)[-1] if "::" in test else test
            failures.setdefault(key, f"swap check: {event}")
    return failures


def metadata_count(log: Path) -> int:
    return sum("INERT-METADATA ok" in line for line in log.read_text().splitlines()) if log.exists() else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="directory holding PyTorch's test files")
    parser.add_argument("files", nargs="*", help="test files in DIR (default: every test_*.py)")
    parser.add_argument("--gpu-gated-on-cpu", action="store_true",
                        help="run skip_if_lt_x_gpu(n) tests on the CPU in both runs")
    parser.add_argument("-k", help="pytest -k expression")
    parser.add_argument("--scratch", type=Path, help="where reports and logs go (default: a new temporary directory)")
    args = parser.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="dcp-upstream-"))
    scratch.mkdir(parents=True, exist_ok=True)
    files = [args.dir / f for f in args.files] or sorted(args.dir.glob("test_*.py"))
    regressions = 0
    print(f"{'file':44} {'torch p/f/s':>12} {'inert p/f/s':>12}  inert .metadata checked")
    differences = []
    for test_file in files:
        results = {side: run_side(test_file.resolve(), side, scratch, args) for side in SIDES}
        counts = {side: collections.Counter(o for o, _ in results[side].values()) for side in SIDES}
        cells = [f"{c['passed']}/{c['failed']}/{c['skipped']}" for c in (counts["torch"], counts["inert"])]
        print(f"{test_file.name:44} {cells[0]:>12} {cells[1]:>12}  "
              f"{metadata_count(scratch / f'{test_file.stem}.inert.log')}", flush=True)
        for test in sorted(set(results["torch"]) | set(results["inert"])):
            theirs, ours = results["torch"].get(test, ("absent", "")), results["inert"].get(test, ("absent", ""))
            if theirs[0] != ours[0]:
                differences.append(f"  {test_file.name}::{test}: torch {theirs[0]}, inert {ours[0]}: {ours[1] or theirs[1]}")
                regressions += theirs[0] == "passed"
    if differences:
        print("differences:")
        print("\n".join(differences))
    print(f"reports and logs: {scratch}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
