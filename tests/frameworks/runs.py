"""Launching a framework worker under torchrun and checking what it left: shared by the framework tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from inert.codecs.checkpoint_metadata import MAGIC

HERE = Path(__file__).parent


def launch(worker: str, route: str, args: list[str], base: Path, nproc: int) -> subprocess.CompletedProcess[str]:
    """``torchrun`` the worker on nproc ranks; route ``env`` sets ``INERT_TORCH_ENABLE=1`` (the program never
    imports inert), every other route runs without it."""
    env = {k: v for k, v in os.environ.items() if k != "INERT_TORCH_ENABLE"}
    if route == "env":
        env["INERT_TORCH_ENABLE"] = "1"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    return subprocess.run(
        [*command, str(HERE / worker), route, *args, str(base)], env=env, capture_output=True, text=True, timeout=240
    )


def run(worker: str, route: str, args: list[str], base: Path, nproc: int) -> list[dict[str, object]]:
    """:func:`launch`, which must succeed; each rank's result-PHASE-RANK.json (PHASE the last of args)."""
    proc = launch(worker, route, args, base, nproc)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((base / f"result-{args[-1]}-{rank}.json").read_text()) for rank in range(nproc)]


def verify(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inert", "verify", str(directory)], capture_output=True, text=True)


def assert_inert_metadata(directory: Path) -> None:
    assert (directory / ".metadata").read_bytes().startswith(MAGIC)


def assert_pickled_metadata(directory: Path) -> None:
    """What torch's own FileSystemWriter writes: a pickle (protocol 2 or above opens with 0x80)."""
    metadata = (directory / ".metadata").read_bytes()
    assert metadata[:1] == b"\x80" and not metadata.startswith(MAGIC)


def assert_only_unpicklers(result: dict[str, object], allowed: tuple[str, ...]) -> None:
    """Every find_class came from the ranks' object collectives, every unpickling call from an allowed file."""
    for event in result["find_class"]:  # type: ignore[attr-defined]
        assert str(event).endswith("torch/distributed/distributed_c10d.py"), event
    for caller in result["unpickle_calls"]:  # type: ignore[attr-defined]
        assert str(caller).endswith(allowed), caller
