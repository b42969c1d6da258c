"""The cost campaign: inputs designed for cost, grown until a reader leaves its bounds or the size cap.

Mutating bytes rarely finds what costs most: a million empty containers, keys that all hash
alike, a record that declares 2**43 bytes in a sparse file.  This campaign builds such inputs
on purpose, at growing sizes, and runs every entry point a user reaches on them (the codec,
the adapters ``load_tensors`` and ``inert.dump.load``, the CLI's ``inspect``, ``verify`` and
``decode``), each in a fresh process, against the bounds of :mod:`fuzz.harness`
(``time_limit``: CPU time; ``memory_limit``: peak traced allocation and growth of the peak
resident set, which also sees torch's and mmap's memory).  The invariant is the fuzzers':
a value or an ``InertError`` (CLI: exit 0 or 1, one line), within the bounds.

    python -m fuzz.cost                        # every design, up to 1 MiB inputs
    python -m fuzz.cost --max-bytes 65536 collisions
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))

from fuzz.harness import memory_limit, time_limit  # noqa: E402

__all__ = ["DESIGNS", "Case", "cases", "measure", "main"]

#: The first size tried; each step quadruples it.
FIRST_BYTES = 4 << 10


@dataclass(frozen=True)
class Case:
    """One designed input: a directory laid out for ``entries``, and its size on disk (the input's size:
    a sparse file's holes are not input an attacker paid for)."""

    design: str
    directory: Path
    size: int
    #: Entry points to run: ``load_tensors``, ``dump.load``, ``loads_metadata``, ``cli:inspect``, ...
    entries: tuple[str, ...]


def _checkpoint(directory: Path, metadata: dict[str, Any], data: dict[str, int] | None = None) -> int:
    """A checkpoint directory whose ``.metadata`` is ``metadata`` (rules skipped, as a hostile writer
    would) and whose data files are sparse files of the given sizes; returns the input's size."""
    from unittest import mock

    from inert.codecs import checkpoint_metadata as cm
    from inert.torch._metadata import METADATA_VERSION  # the version this release's writer writes

    directory.mkdir(parents=True)
    rules = {f"_rules_{name}": (lambda value, ctx: None) for name in ("TensorEntry", "CheckpointMetadata")}
    with mock.patch.multiple(cm, **rules):  # the codec's compiled rules of those records, skipped
        encoded = cm.encode(metadata, version=METADATA_VERSION)
    (directory / ".metadata").write_bytes(encoded)
    for name, size in (data or {}).items():
        with open(directory / name, "wb") as out:
            out.write(b"\x89INRTSH\n\x01\x00" + len(metadata["tensors"] + metadata["values"]).to_bytes(4, "little"))
            out.truncate(size)
    return len(encoded)


def _metadata(planner_data: Any = None, tensors: list[Any] | None = None, values: list[Any] | None = None,
              files: list[str] | None = None) -> dict[str, Any]:
    return {"dcp_version": "1.0.0", "storage_meta": None, "planner_data": planner_data, "files": files or [],
            "tensors": tensors or [], "values": values or []}


def _dump(directory: Path, tag: Any) -> int:
    """A dump of one row whose tag is ``tag``; returns the manifest's size."""
    from inert.dump import Row, dump

    dump([Row("k", 0, {}, tag)], directory)
    return (directory / "MANIFEST").stat().st_size


def _containers(directory: Path, size: int) -> tuple[int, tuple[str, ...]]:
    count = max(1, size - 64)  # an empty map is one byte of MessagePack
    return _checkpoint(directory, _metadata(planner_data=[{} for _ in range(count)])), (
        "loads_metadata", "load_tensors", "cli:inspect", "cli:verify", "cli:decode:checkpoint-metadata")


def _nesting(directory: Path, size: int) -> tuple[int, tuple[str, ...]]:
    value: Any = []
    for _ in range(32):  # below the spec's depth: valid, and as deep as a document may be
        value = [value]
    return _checkpoint(directory, _metadata(planner_data=[value] * max(1, size // 34))), (
        "loads_metadata", "load_tensors", "cli:inspect")


def _collisions(directory: Path, size: int) -> tuple[int, tuple[str, ...]]:
    # hash(complex(x, y)) is hash(x) + 1000003 * hash(y): every key differs, all hash alike.
    count = max(1, size // 21)
    tag = {complex(float(1_000_003 * (count - y)), float(y)): 0 for y in range(count)}
    return _dump(directory, tag), ("dump.load", "cli:inspect", "cli:verify")


def _int_collisions(directory: Path, size: int) -> tuple[int, tuple[str, ...]]:
    # An int hashes to itself modulo 2**61 - 1.
    count = max(1, size // 12)
    return _dump(directory, {7 + y * ((1 << 61) - 1): 0 for y in range(count)}), ("dump.load", "cli:verify")


def _declared(directory: Path, size: int) -> tuple[int, tuple[str, ...]]:
    """Records declaring far more than the file holds on disk: a sparse file places them for free."""
    numel = size << 20  # 4 bytes an element: a tensor a million times the metadata
    tensor = {"fqn": "w", "dtype": "FLOAT32", "layout": "STRIDED", "memory_format": "CONTIGUOUS",
              "requires_grad": False, "pin_memory": False, "size": [numel], "chunk_offsets": [0],
              "chunk_sizes": [numel], "chunk_files": [0], "chunk_byte_offsets": [64],
              "chunk_byte_lengths": [64 + 4 * numel + 4], "chunk_crcs": [0]}
    value = {"fqn": "v", "file": 0, "byte_offset": 128 + 4 * numel, "byte_length": 1 << 43, "crc": 0}
    metadata = _metadata(planner_data={"w": ("w",), "v": ("v",)}, tensors=[tensor], values=[value],
                         files=["__0_0.distcp"])
    written = _checkpoint(directory, metadata, {"__0_0.distcp": 128 + 4 * numel + (1 << 43)})
    return written, ("load_tensors", "cli:verify", "cli:inspect")


#: Each design builds a directory of about ``size`` bytes of input and names the entry points it targets.
DESIGNS: dict[str, Callable[[Path, int], tuple[int, tuple[str, ...]]]] = {
    "containers": _containers,
    "nesting": _nesting,
    "collisions": _collisions,
    "int-collisions": _int_collisions,
    "declared-sizes": _declared,
}


def _on_disk(directory: Path) -> int:
    """Bytes the directory's files take on disk (at most their length: a sparse file's holes take none)."""
    return sum(min(p.stat().st_size, p.stat().st_blocks * 512) for p in directory.iterdir() if p.is_file())


def cases(root: Path, designs: list[str], max_bytes: int) -> Iterator[Case]:
    """Every design at 4 KiB, 16 KiB, ... up to ``max_bytes``."""
    for design in designs:
        size = FIRST_BYTES
        while size <= max_bytes:
            directory = root / f"{design}-{size}"
            _, entries = DESIGNS[design](directory, size)
            yield Case(design, directory, _on_disk(directory), entries)
            size *= 4


# -- one entry point on one input, in a fresh process --------------------------------------------------------

_CHILD = r"""
import json, os, resource, sys, time, tracemalloc
sys.path.append(sys.argv[3])
entry, directory = sys.argv[1], sys.argv[2]
import torch, inert, inert.torch, inert.dump, inert.cli.main, inert.cli.inspect, inert.cli.verify, inert.cli.migrate
import inert.codecs, importlib  # imports and the CLI's parser are not the input's cost: done once first
for module in inert.codecs.MODULES.values():
    importlib.import_module(f"inert.codecs.{module}")
from inert import InertError

def call():
    if entry == "loads_metadata":
        with open(os.path.join(directory, ".metadata"), "rb") as f:
            inert.torch.loads_metadata(f.read())
    elif entry == "load_tensors":
        inert.torch.load_tensors(directory)
    elif entry == "dump.load":
        inert.dump.load(directory)
    elif entry.startswith("cli:decode:"):
        code = inert.cli.main.main(["decode", "--format", entry.split(":")[2], os.path.join(directory, ".metadata")])
    else:
        code = inert.cli.main.main([entry.split(":")[1], directory])
    assert code in (0, 1), code  # 2 would be a usage error: the campaign's own mistake
    return f"exit {code}"

sys.stdout = open(os.devnull, "w")
inert.cli.main.main(["formats"])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
tracemalloc.start()
start = time.process_time()
try:
    outcome = call() or "value"
except InertError as exc:
    outcome = type(exc).__name__
cpu = time.process_time() - start
traced = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
print(json.dumps({"outcome": outcome, "cpu": cpu, "traced": traced, "rss": rss}), file=sys.__stdout__)
"""


@dataclass(frozen=True)
class Measure:
    case: Case
    entry: str
    outcome: str
    cpu: float
    memory: int

    @property
    def finding(self) -> str | None:
        """Why this run breaks the invariant or a bound, or None."""
        if self.outcome.startswith("crash"):
            return self.outcome
        if self.cpu > time_limit(self.case.size):
            return f"{self.cpu:.2f} s of CPU > {time_limit(self.case.size):.2f} s"
        if self.memory > memory_limit(self.case.size):
            return f"{self.memory} bytes > {memory_limit(self.case.size)}"
        return None


def measure(case: Case, entry: str, timeout: float = 600) -> Measure:
    """``entry`` run on ``case`` in a fresh process: its outcome, CPU time and peak memory."""
    try:
        result = subprocess.run([sys.executable, "-c", _CHILD, entry, str(case.directory), str(ROOT)],
                                capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Measure(case, entry, f"crash: no end within {timeout:g} s", timeout, 0)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1]
        return Measure(case, entry, f"crash: {last}", 0.0, 0)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    return Measure(case, entry, found["outcome"], found["cpu"], max(found["traced"], found["rss"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-bytes", type=int, default=1 << 20, help="largest input built (default 1 MiB)")
    parser.add_argument("designs", nargs="*", metavar="design", help=f"default: all of {', '.join(DESIGNS)}")
    args = parser.parse_args(argv)
    unknown = [name for name in args.designs if name not in DESIGNS]
    if unknown:
        parser.error(f"unknown design {', '.join(unknown)}; designs are {', '.join(DESIGNS)}")
    print(f"{'design':<16}{'bytes':>9}  {'entry point':<32}{'outcome':<22}{'CPU s':>7}{'memory':>12}  finding")
    findings = 0
    with tempfile.TemporaryDirectory(prefix="inert-cost-") as root:
        for case in cases(Path(root), args.designs or list(DESIGNS), args.max_bytes):
            for entry in case.entries:
                run = measure(case, entry)
                finding = run.finding
                findings += finding is not None
                print(f"{case.design:<16}{case.size:>9}  {entry:<32}{run.outcome[:21]:<22}{run.cpu:>7.2f}"
                      f"{run.memory:>12}  {finding or ''}", flush=True)
    print(f"{findings} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
