#!/usr/bin/env python3
"""Corruption campaign: damaged copies of a checkpoint, a shared-memory batch and a dump.

``fuzz/corruption.py [--flips N] [--cuts N] [--seed S] [--only KIND ...]``

For every file of each sample, single bits are flipped (every bit, or ``N`` of
them drawn with a fixed seed where there are more) and the file is cut at up to
``--cuts`` points.  Each damaged copy is then loaded the way a user loads it
(``inert.torch.load`` through DCP into a fresh state dict, ``inert.dump.load``,
the shared-memory reader of ``inert.shm``) and must either be refused with an
``InertError`` or give exactly the original value: tensors compared by dtype,
shape and bytes, other values by type and equality.  Anything else is a silent
change (or, for an exception outside the error family, an escape); both must
stay at 0.

Files are damaged in place in a scratch copy and restored byte by byte after
each load, so one process serves thousands of loads.

The shared-memory sample data carries no checksum (it is handed over zero-copy,
and checking it would read every byte), so flips there change values by
design: for the batch only the structure (samples meta and CompletedTask
message) is damaged, and it is read as Inert's channel reads it, against the
CRC-32s of the shm-descriptor v2 that travel over the socket.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from inert._errors import InertError

__all__ = ["Counts", "Subject", "campaign", "checkpoint_subject", "dump_subject", "shm_subject", "main"]

#: Bit flips per file when the file has more bits than this (the default of ``--flips``).
DEFAULT_FLIPS = 20_000
#: Cut points per file (the default of ``--cuts``).
DEFAULT_CUTS = 400


@dataclass
class Counts:
    """What the damaged copies of one file (or one sample) did."""

    tried: int = 0
    rejected: int = 0
    identical: int = 0
    changed: int = 0
    escaped: int = 0
    #: Of the rejected: refusals DCP passed on as its own AssertionError quoting the InertError's message.
    wrapped: int = 0
    #: The first few silent changes and escapes, as "file: damage: what happened".
    examples: list[str] = field(default_factory=list)

    def add(self, other: Counts) -> None:
        self.tried += other.tried
        self.rejected += other.rejected
        self.identical += other.identical
        self.changed += other.changed
        self.escaped += other.escaped
        self.wrapped += other.wrapped
        self.examples += other.examples[: max(0, 10 - len(self.examples))]


@dataclass
class Subject:
    """A sample artifact: the bytes that may be damaged, how to load them, and the original value."""

    name: str
    #: (label, length, read the current bytes, write bytes at an offset, cut to a length (None restores)).
    files: list[tuple[str, int, Callable[[], bytes], Callable[[int, bytes], None], Callable[[int | None], None]]]
    load: Callable[[], Any]
    original: Any
    cleanup: Callable[[], None] = lambda: None


def same(a: Any, b: Any) -> bool:
    """Bit-exact equality of nested values (tensors and arrays by dtype, shape and bytes)."""
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and bytes(a.contiguous().reshape(-1).view(torch.uint8).numpy())
                == bytes(b.contiguous().reshape(-1).view(torch.uint8).numpy()))
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and a.tobytes() == b.tobytes())
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a != a:
        return b != b
    return bool(a == b)


#: An InertError's message ("<format>: offset N: <field>: <reason>") quoted inside another exception.
_QUOTED_INERT = re.compile(r"\b[a-z]+(?:-[a-z]+)+: offset -?\d+: ")


def _refusal(exc: BaseException) -> str | None:
    """``"inert"`` for the project's error, ``"wrapped"`` for DCP's AssertionError quoting one, else None.

    DCP wraps what a rank raises in a CheckpointException (one failure per rank), and
    turns a failed metadata read into ``AssertionError("... metadata read failed: <message>")``.
    """
    if isinstance(exc, InertError):
        return "inert"
    if isinstance(exc, AssertionError) and _QUOTED_INERT.search(str(exc)):
        return "wrapped"
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        kinds = {_refusal(f[0] if isinstance(f, tuple) else f) for f in failures.values()}
        return None if None in kinds else ("wrapped" if "wrapped" in kinds else "inert")
    return None


def _classify(subject: Subject, counts: Counts, where: str) -> None:
    counts.tried += 1
    try:
        value = subject.load()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # sorted below (DCP's CheckpointException is a BaseException)
        kind = _refusal(exc)
        if kind is not None:
            counts.rejected += 1
            counts.wrapped += kind == "wrapped"
            return
        counts.escaped += 1
        if len(counts.examples) < 10:
            counts.examples.append(f"{where}: {type(exc).__name__}: {exc}"[:300])
        return
    if same(subject.original, value):
        counts.identical += 1
    else:
        counts.changed += 1
        if len(counts.examples) < 10:
            counts.examples.append(f"{where}: loaded a different value")


def _positions(total: int, wanted: int, rng: random.Random) -> Iterator[int]:
    return iter(range(total)) if total <= wanted else iter(sorted(rng.sample(range(total), wanted)))


def damage(subject: Subject, flips: int, cuts: int, seed: int) -> dict[str, Counts]:
    """Flip bits and cut each file of ``subject``; the counts per file."""
    rng = random.Random(seed)
    result: dict[str, Counts] = {}
    for label, length, read, write, cut in subject.files:
        counts = result.setdefault(label, Counts())
        data = read()
        for bit in _positions(length * 8, flips, rng):
            at = bit >> 3
            write(at, bytes([data[at] ^ (1 << (bit & 7))]))
            try:
                _classify(subject, counts, f"{label}: bit {bit & 7} of byte {at}")
            finally:
                write(at, data[at : at + 1])
        for length_kept in _positions(length, cuts, rng):
            cut(length_kept)
            try:
                _classify(subject, counts, f"{label}: cut to {length_kept} bytes")
            finally:
                cut(None)
        if read() != data:
            raise RuntimeError(f"{label} was not restored after the campaign")
    return result


# -- the samples --------------------------------------------------------------------------------


def _on_disk(path: Path) -> tuple[str, int, Callable[[], bytes], Callable[[int, bytes], None], Callable[[int | None], None]]:
    """Damage operations on one file: in-place writes, and truncation restored from the original bytes."""
    original = path.read_bytes()

    def write(at: int, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, data, at)
        finally:
            os.close(fd)

    def cut(length: int | None) -> None:
        if length is None:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(fd, original, 0)
            finally:
                os.close(fd)
        else:
            os.truncate(path, length)

    return path.name, len(original), path.read_bytes, write, cut


def _adam_state() -> dict[str, Any]:
    """A small model with Adam state after one step: a few MB of tensors and some plain values."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                                torch.nn.LayerNorm(256))
    optim = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    model(torch.randn(4, 256)).sum().backward()
    optim.step()
    return {"model": model.state_dict(), "optim": optim.state_dict(), "extra": {"epoch": 3, "note": "corruption"}}


def _template(value: Any) -> Any:
    """A state dict of the same structure with every tensor zeroed (what a fresh process loads into)."""
    import torch

    if isinstance(value, torch.Tensor):
        return torch.zeros_like(value)
    if isinstance(value, dict):  # the same mapping type: a module's state dict is an OrderedDict
        return type(value)((k, _template(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_template(v) for v in value]
    return value


def checkpoint_subject(root: Path) -> Subject:
    """A DCP checkpoint of a model and its Adam state, saved through ``inert.torch.FileSystemWriter``."""
    import copy

    import inert.torch

    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    state = _adam_state()
    path = root / "checkpoint"
    inert.torch.save(copy.deepcopy(state), path)
    original = copy.deepcopy(state)

    def load() -> Any:
        target = _template(original)
        # Non-tensor leaves start as a value the checkpoint never holds, so a skipped one shows.
        target["extra"] = {"epoch": -1, "note": ""}
        # DCP logs each failed metadata read with its traceback on the root logger: silenced for the load only.
        logging.disable(logging.WARNING)
        try:
            inert.torch.load(target, path)
        finally:
            logging.disable(logging.NOTSET)
        return target

    if not same(load(), original):
        raise RuntimeError("the undamaged checkpoint does not load back bit-exactly")
    files = [_on_disk(p) for p in sorted(path.iterdir()) if p.is_file()]
    return Subject("checkpoint", files, load, original)


def dump_subject(root: Path) -> Subject:
    """A dump of rows with dense, nested and value fields and tags, over two shards."""
    import torch

    from inert.dump import Row, dump, load

    torch.manual_seed(0)
    rows = [
        Row(f"key-{i}", 100 + i,
            {"ids": torch.arange(64, dtype=torch.int64) * i, "logits": torch.randn(i % 3 + 1, 32).to(torch.bfloat16),
             "mask": torch.rand(16) > 0.5, "meta": {"source": f"doc{i}", "score": i / 7}},
            {"step": i, "split": "train"})
        for i in range(12)
    ]
    path = root / "dump"
    dump(rows, path, partition_id="p0", owners=2)

    def read() -> Any:
        loaded = load(path)
        return sorted(([r.key, r.global_index, r.fields, r.tag] for r in loaded.rows), key=lambda r: str(r[0]))

    original = sorted(([r.key, r.global_index, r.fields, r.tag] for r in rows), key=lambda r: str(r[0]))
    if not same(read(), original):
        raise RuntimeError("the undamaged dump does not load back exactly")
    files = [_on_disk(p) for p in sorted(path.iterdir()) if p.is_file()]
    return Subject("dump", files, read, original)


def shm_subject() -> Subject:
    """A batch result in a chunk, as a worker writes it; the parent's reader checks and views it."""
    import numpy as np

    from inert.shm._batch import (
        TaskHeader,
        checksums,
        layout_success,
        plan_batch,
        read_result,
        read_samples,
        write_result,
    )
    from inert.shm._memory import MappedChunk

    rng = np.random.default_rng(0)
    batch = [
        (rng.standard_normal((3, 5)).astype("<f4"), np.arange(7, dtype=">i8")),
        [rng.integers(0, 255, (4, 4, 3), dtype=np.uint8), np.array(True)],
        np.zeros((0, 3), dtype="<c16"),
        rng.standard_normal(9).astype("<f2"),
    ]
    header = TaskHeader(worker_id=1, context_i=0, scheduled_i=7, minibatch_i=7)
    plan = plan_batch(batch)
    layout = layout_success(plan, header)
    buffer = bytearray(layout.size)
    offset, size = write_result(buffer, plan, layout)
    crcs = checksums(buffer, layout)  # what the shm-descriptor v2 carries over the socket
    chunk = MappedChunk(0, len(buffer), buffer)  # type: ignore[arg-type]  # a bytearray maps as a chunk does
    message_size = [size]

    def load() -> Any:
        message = read_result(chunk, offset, message_size[0], header, crcs["message_crc32"])
        samples = read_samples(chunk, message["meta"], crcs["meta_crc32"])
        return [np.array(s) if isinstance(s, np.ndarray) else s for s in samples]

    def copied(value: Any) -> Any:  # views into the chunk would change with it: compare against copies
        if isinstance(value, np.ndarray):
            return value.copy()
        if isinstance(value, (list, tuple)):
            return type(value)(copied(v) for v in value)
        return value

    original = copied(load())
    structure = layout.meta_offset

    def read() -> bytes:
        return bytes(buffer[structure:])

    def write(at: int, data: bytes) -> None:
        buffer[structure + at : structure + at + len(data)] = data

    def cut(length: int | None) -> None:
        # The message handed over shorter than written (its descriptor's num_bytes), or the chunk cut there.
        message_size[0] = size if length is None else max(0, length - (offset - structure))

    def load_copies() -> Any:
        return copied(load())

    return Subject("shm-batch", [("samples meta + message", len(buffer) - structure, read, write, cut)], load_copies, original)


def campaign(flips: int, cuts: int, seed: int, only: list[str] | None = None,
             report: Callable[[str], None] = print) -> dict[str, dict[str, Counts]]:
    """Run the campaign over the samples; counts per sample and file."""
    results: dict[str, dict[str, Counts]] = {}
    with tempfile.TemporaryDirectory(prefix="inert-corruption-") as tmp:
        makers: dict[str, Callable[[], Subject]] = {
            "checkpoint": lambda: checkpoint_subject(Path(tmp)),
            "shm-batch": shm_subject,
            "dump": lambda: dump_subject(Path(tmp)),
        }
        for name, make in makers.items():
            if only and name not in only:
                continue
            subject = make()
            results[name] = damage(subject, flips, cuts, seed)
            for label, counts in results[name].items():
                report(f"{name:<11} {label:<24} {counts.tried:>7} {counts.rejected:>8} {counts.identical:>9} "
                       f"{counts.changed:>7} {counts.escaped:>7} {counts.wrapped:>7}")
                for example in counts.examples:
                    report(f"  {example}")
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fuzz/corruption.py", description=__doc__.split("\n")[0])
    parser.add_argument("--flips", type=int, default=DEFAULT_FLIPS, help=f"bit flips per file at most (default {DEFAULT_FLIPS})")
    parser.add_argument("--cuts", type=int, default=DEFAULT_CUTS, help=f"cut points per file at most (default {DEFAULT_CUTS})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampled positions (default 0)")
    parser.add_argument("--only", nargs="*", choices=("checkpoint", "shm-batch", "dump"), help="samples to damage")
    args = parser.parse_args(argv)
    heads = ("tried", 7), ("rejected", 8), ("identical", 9), ("changed", 7), ("escaped", 7), ("wrapped", 7)
    print(f"{'sample':<11} {'file':<24} " + " ".join(f"{head:>{width}}" for head, width in heads))
    results = campaign(args.flips, args.cuts, args.seed, args.only)
    total = Counts()
    for per_file in results.values():
        for counts in per_file.values():
            total.add(counts)
    print(f"total: {total.tried} tried, {total.rejected} rejected, {total.identical} identical, "
          f"{total.changed} silent changes, {total.escaped} other exceptions "
          f"({total.wrapped} of the rejections reached the caller as DCP's AssertionError)")
    return 1 if total.changed or total.escaped else 0


if __name__ == "__main__":
    sys.exit(main())
