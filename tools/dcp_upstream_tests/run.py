#!/usr/bin/env python3
"""Run PyTorch's own DCP test files with torch's storage classes, then with Inert's, side by side.

    python tools/dcp_upstream_tests/run.py DIR [FILE ...] [--mode swap|switch|both] [--gpu-gated-on-cpu] [-k EXPR]

DIR holds copies of files of PyTorch's ``test/distributed/checkpoint/`` (they are not part
of this repository: fetch them from the PyTorch release under test).  Each FILE (default:
every ``test_*.py`` in DIR) runs under pytest once as it is (side ``torch``), then once per
Inert side, each in fresh processes, ``site/sitecustomize.py`` loaded by every process
(spawned ranks included):

- ``swap`` (``--mode swap``, the default): inert.torch's ``FileSystemWriter``/``FileSystemReader``
  and fsspec pair put in place of torch's names in every module of the running release that
  defines them (2.15's public ``fsspec_filesystem`` and the old ``_fsspec_filesystem`` alike);
- ``switch`` (``--mode switch``): no name touched, ``INERT_TORCH_ENABLE=1`` in the environment,
  so Inert's start-up hook calls ``inert.torch.enable()`` at the first import of DCP, as in a
  program that never imports Inert;

``--mode both`` runs the two.  A test counts as passed for an Inert side only if pytest passed
it, every ``.metadata`` it committed starts with Inert's magic, torch's own writer and reader
were never used, and (``switch``) the switch was on in every process.  ``--gpu-gated-on-cpu``
runs tests marked ``skip_if_lt_x_gpu(n)`` on the CPU (as 2.13's ``allow_cpu=True`` does) on
every side.  Test helpers a newer test file imports and the running release lacks are added
where missing (``SHIMS`` in site/sitecustomize.py; each one used is printed).  Needs pytest
and expecttest (the ``dev`` extra).  Prints per file: passed/failed/skipped for each side,
then the tests whose outcome differs, with the Inert side's failure line.  The exit status
is 1 if any test passed with torch's classes and not on an Inert side.
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
MODES = {"swap": ("swap",), "switch": ("switch",), "both": ("swap", "switch")}
SWITCH_ENV = "INERT_TORCH_ENABLE"  # inert.torch's switch, honoured at interpreter start


def run_side(test_file: Path, side: str, scratch: Path, args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """``{test id: (outcome, first line of the failure)}`` for one pytest run of ``test_file``."""
    report = scratch / f"{test_file.stem}.{side}.xml"
    log = scratch / f"{test_file.stem}.{side}.log"
    log.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HERE / "site"), os.environ.get("PYTHONPATH")])),
               INERT_DCP_LOG=str(log), INERT_DCP_MODE=side, INERT_DCP_GPU_ON_CPU="1" if args.gpu_gated_on_cpu else "0")
    env.pop(SWITCH_ENV, None)
    if side == "switch":
        env[SWITCH_ENV] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}", str(test_file)]
    if args.k:
        command += ["-k", args.k]
    with open(scratch / f"{test_file.stem}.{side}.out", "w") as out:
        subprocess.run(command, cwd=test_file.parent, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    outcomes = parse_junit(report) if report.exists() else {}
    if side != "torch":
        failures = swap_failures(log)
        for test, (outcome, _) in outcomes.items():
            reason = failures.get(test) or failures.get("-")  # "-": outside any test (a process's start)
            if outcome == "passed" and reason:
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
    """Tests during which torch's own classes were used, a non-Inert ``.metadata`` was committed or the switch was off."""
    failures: dict[str, str] = {}
    if not log.exists():
        return failures
    for line in log.read_text().splitlines():
        _pid, test, event = line.split("\t", 2)
        if event.startswith(("TORCH-", "SWITCH-OFF")) or "NOT-INERT" in event:
            key = test.split("::", 1)[-1] if "::" in test else test
            failures.setdefault(key, f"swap check: {event}")
    return failures


def metadata_count(log: Path) -> int:
    return sum("INERT-METADATA ok" in line for line in log.read_text().splitlines()) if log.exists() else 0


def shims_used(scratch: Path, stem: str) -> set[str]:
    """The test helpers sitecustomize added in any run of one file (``SHIMS``)."""
    return {line.rsplit("SHIM ", 1)[1] for log in scratch.glob(f"{stem}.*.log")
            for line in log.read_text().splitlines() if "\tSHIM " in line}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="directory holding PyTorch's test files")
    parser.add_argument("files", nargs="*", help="test files in DIR (default: every test_*.py)")
    parser.add_argument("--mode", choices=sorted(MODES), default="swap",
                        help="how Inert's classes get in: swap the names, switch with INERT_TORCH_ENABLE=1, or both "
                             "(default %(default)s)")
    parser.add_argument("--gpu-gated-on-cpu", action="store_true",
                        help="run skip_if_lt_x_gpu(n) tests on the CPU on every side")
    parser.add_argument("-k", help="pytest -k expression")
    parser.add_argument("--scratch", type=Path, help="where reports and logs go (default: a new temporary directory)")
    args = parser.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="dcp-upstream-"))
    scratch.mkdir(parents=True, exist_ok=True)
    files = [args.dir / f for f in args.files] or sorted(args.dir.glob("test_*.py"))
    inert_sides = MODES[args.mode]
    sides = ("torch", *inert_sides)
    regressions = 0
    print(f"{'file':44} " + " ".join(f"{side + ' p/f/s':>13}" for side in sides) + "  " +
          " ".join(f"{side} .metadata checked" for side in inert_sides))
    differences = []
    for test_file in files:
        results = {side: run_side(test_file.resolve(), side, scratch, args) for side in sides}
        counts = {side: collections.Counter(o for o, _ in results[side].values()) for side in sides}
        cells = [f"{c['passed']}/{c['failed']}/{c['skipped']}" for c in counts.values()]
        checked = [str(metadata_count(scratch / f"{test_file.stem}.{side}.log")) for side in inert_sides]
        shims = shims_used(scratch, test_file.stem)
        print(f"{test_file.name:44} " + " ".join(f"{cell:>13}" for cell in cells) + "  " + " ".join(
            f"{n:>{len(side) + 18}}" for n, side in zip(checked, inert_sides, strict=True)) +
            (f"  (shimmed: {', '.join(sorted(shims))})" if shims else ""), flush=True)
        for side in inert_sides:
            for test in sorted(set(results["torch"]) | set(results[side])):
                theirs, ours = results["torch"].get(test, ("absent", "")), results[side].get(test, ("absent", ""))
                if theirs[0] != ours[0]:
                    differences.append(f"  {test_file.name}::{test}: torch {theirs[0]}, {side} {ours[0]}: "
                                       f"{ours[1] or theirs[1]}")
                    regressions += theirs[0] == "passed"
    if differences:
        print("differences:")
        print("\n".join(differences))
    print(f"reports and logs: {scratch}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
