"""The fuzz targets, their seed corpora and dictionaries, and the campaign that runs them (``fuzz/run``).

Targets come from the registry: one ``decode`` target per format (named after
the format), plus ``differential``, ``structured`` (Hypothesis-built values)
and ``mutator`` (a custom mutator of decoded values) over every format.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fuzz.registry import FORMATS, cases, codec

__all__ = ["Target", "TARGETS", "seeds", "dictionary", "write_seeds", "run", "main"]

FUZZ = Path(__file__).resolve().parent
#: libFuzzer's per-input hang bound, seconds (the harness's own bound is far lower).
HANG_SECONDS = 10
#: How long each minimizing step of a finding may search for a smaller crash, seconds.
MINIMIZE_SECONDS = 30


@dataclass(frozen=True)
class Target:
    name: str
    script: str
    args: tuple[str, ...]
    #: Formats whose tokens go into the target's dictionary.
    formats: tuple[str, ...]
    #: Committed seed inputs (default ``fuzz/corpus/<name>``).
    seed_dir: Path | None = None

    @property
    def seeds(self) -> Path:
        return self.seed_dir or FUZZ / "corpus" / self.name

    @property
    def command(self) -> list[str]:
        return [sys.executable, str(FUZZ / "targets" / self.script), *self.args]


TARGETS: dict[str, Target] = {name: Target(name, "decode.py", (name,), (name,)) for name in FORMATS}
TARGETS["differential"] = Target("differential", "differential.py", (), tuple(FORMATS))
TARGETS["structured"] = Target("structured", "structured.py", (), ())
TARGETS["mutator"] = Target("mutator", "mutator.py", (), tuple(FORMATS))
TARGETS["zstd-body"] = Target("zstd-body", "zstd_body.py", (), ())


def seeds(target: Target) -> list[bytes]:
    """The committed seed inputs of ``target``: valid encodings of the registry's examples."""
    if target.script == "decode.py":
        entry = FORMATS[target.name]
        return [codec(entry).encode(value) for value in entry.examples]
    if target.script in ("differential.py", "mutator.py"):
        return [
            bytes([index]) + codec(entry).encode(value)
            for index, (entry, kwargs) in enumerate(cases())
            if not kwargs
            for value in entry.examples
        ]
    # Hypothesis reads any bytes as choices: zeros give the simplest values, random bytes others.
    return [bytes(64)] + [random.Random(n).randbytes(256) for n in range(4)]


def _escape(token: bytes) -> str:
    return "".join(chr(b) if 0x20 <= b < 0x7F and b not in b'"\\' else f"\\x{b:02x}" for b in token)


def dictionary(fmt: str) -> str:
    """The libFuzzer dictionary of one format, from its registry tokens."""
    lines = [f"# Tokens of {fmt}; written by fuzz/seeds from fuzz/registry.py."]
    lines += [f't{n}="{_escape(token)}"' for n, token in enumerate(dict.fromkeys(FORMATS[fmt].tokens))]
    return "\n".join(lines) + "\n"


def _expected_files() -> dict[Path, bytes]:
    files = {FUZZ / "dicts" / f"{fmt}.dict": dictionary(fmt).encode() for fmt in FORMATS}
    for target in TARGETS.values():
        for data in seeds(target):
            files[FUZZ / "corpus" / target.name / hashlib.sha1(data).hexdigest()[:16]] = data
    return files


def write_seeds(check: bool = False) -> list[str]:
    """Write the seed corpora and dictionaries (or, with ``check``, list what is stale)."""
    expected = _expected_files()
    present = {p for d in ("dicts", "corpus") for p in (FUZZ / d).rglob("*") if p.is_file()}
    stale = sorted(str(p.relative_to(FUZZ)) for p in expected if not p.is_file() or p.read_bytes() != expected[p])
    stale += sorted(str(p.relative_to(FUZZ)) + " (not written by fuzz/seeds)" for p in present - set(expected))
    if not check:
        for path in present - set(expected):
            path.unlink()
        for path, data in expected.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return stale


@dataclass
class Result:
    target: str
    executions: int
    execs_per_second: int
    corpus: int
    findings: list[Path]
    ran: bool


def _stat(log: str, name: str) -> int:
    match = re.search(rf"stat::{name}:\s*(\d+)", log)
    if match:
        return int(match.group(1))
    if name == "average_exec_per_sec":  # a crash ends the run before the final stats
        found = re.findall(r"exec/s: (\d+)", log)
        return int(found[-1]) if found else 0
    return 0


def _minimize(target: Target, artifact: Path, findings: Path, seconds: int) -> Path:
    """Minimize one crashing input into ``findings``, with its report beside it.

    Each minimizing step may search ``seconds`` for a smaller input that still crashes.
    """
    findings.mkdir(parents=True, exist_ok=True)
    out = findings / f"{target.name}-{artifact.name}"
    subprocess.run(
        [*target.command, "-minimize_crash=1", f"-max_total_time={seconds}", f"-exact_artifact_path={out}", str(artifact)],
        capture_output=True,
        timeout=seconds * 20 + 60,
        check=False,
    )
    if not out.is_file():
        shutil.copy(artifact, out)
    report = subprocess.run([*target.command, str(out)], capture_output=True, text=True, timeout=HANG_SECONDS * 6, check=False)
    out.with_suffix(".txt").write_text(f"$ {' '.join(target.command)} {out}\n\n{report.stdout}{report.stderr}")
    return out


def run(
    target: Target,
    seconds: int,
    work: Path,
    findings: Path,
    minimize_seconds: int = MINIMIZE_SECONDS,
    runs: int | None = None,
) -> Result:
    """Fuzz ``target`` for ``seconds`` (or until ``runs`` inputs, if sooner), keeping its corpus under
    ``work``; minimize what it finds."""
    home = work / target.name
    corpus, artifacts = home / "corpus", home / "artifacts"
    shutil.rmtree(artifacts, ignore_errors=True)
    for path in (corpus, artifacts):
        path.mkdir(parents=True, exist_ok=True)
    flags = [
        f"-max_total_time={seconds}",
        f"-timeout={HANG_SECONDS}",
        "-rss_limit_mb=2048",
        "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/",
    ]
    if runs is not None:
        flags.append(f"-runs={runs}")
    if target.formats:
        dict_file = home / "tokens.dict"
        dict_file.write_text("".join(dictionary(fmt) for fmt in target.formats))
        flags.append(f"-dict={dict_file}")
    proc = subprocess.run(
        [*target.command, *flags, str(corpus), str(target.seeds)],
        capture_output=True,
        text=True,
        timeout=seconds + 300,
        check=False,
        env={**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")},
    )
    log = proc.stdout + proc.stderr
    (home / "log.txt").write_text(log)
    crashes = sorted(p for p in artifacts.iterdir() if p.is_file())
    found = [_minimize(target, crash, findings, minimize_seconds) for crash in crashes]
    return Result(
        target.name,
        _stat(log, "number_of_executed_units"),
        _stat(log, "average_exec_per_sec"),
        sum(1 for _ in corpus.iterdir()),
        found,
        ran=proc.returncode == 0 or bool(crashes),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fuzz/run", description="Run Inert's fuzz targets; exit 1 on findings.")
    parser.add_argument("--seconds", type=int, default=60, help="how long to fuzz each target (default 60)")
    parser.add_argument(
        "--runs", type=int, default=None, help="stop a target after this many inputs, if sooner (the long campaign)"
    )
    parser.add_argument("--work", type=Path, default=FUZZ / "work", help="where corpora and logs are kept (default fuzz/work)")
    parser.add_argument(
        "--findings", type=Path, default=FUZZ / "findings", help="where minimized findings go (default fuzz/findings)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="how many targets fuzz at once (default 1)")
    parser.add_argument("targets", nargs="*", metavar="target", help=f"default: all of {', '.join(TARGETS)}")
    args = parser.parse_args(argv)
    unknown = [name for name in args.targets if name not in TARGETS]
    if unknown:
        parser.error(f"unknown target {', '.join(unknown)}; targets are {', '.join(TARGETS)}")
    width = max(map(len, TARGETS)) + 1
    print(f"{'target':<{width}} {'executions':>10} {'exec/s':>8} {'corpus':>7} {'findings':>8}")
    failed = findings = 0
    started = time.monotonic()
    names = args.targets or list(TARGETS)
    # Targets are separate processes: with --jobs N, N of them fuzz at once (one per core).
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        running = [pool.submit(run, TARGETS[name], args.seconds, args.work, args.findings, runs=args.runs) for name in names]
        for name, future in zip(names, running, strict=True):
            result = future.result()
            findings += len(result.findings)
            failed += not result.ran
            note = "" if result.ran else f"  did not run: see {args.work / name / 'log.txt'}"
            counts = f"{result.executions:>10} {result.execs_per_second:>8} {result.corpus:>7} {len(result.findings):>8}"
            row = f"{name:<{width}} {counts}"
            print(row + note)
            for path in result.findings:
                print(f"  finding: {path} (report: {path.with_suffix('.txt')})")
            sys.stdout.flush()
    print(f"{findings} finding(s) in {time.monotonic() - started:.0f} s")
    return 1 if findings or failed else 0
