"""Real gloo process groups for tests: a script run once per rank, joined over a file rendezvous."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def run_ranks(script: str, args: list[str], world: int) -> list[subprocess.CompletedProcess[str]]:
    """Run ``script args`` as ranks 0..world-1 of one group (see ``init_group``); each rank's result."""
    # A file rendezvous: no port to pick, so no port another process can take first.
    with tempfile.TemporaryDirectory() as rendezvous:
        env = dict(os.environ, INERT_RENDEZVOUS=f"file://{rendezvous}/store", WORLD_SIZE=str(world))
        procs = [
            subprocess.Popen([sys.executable, script, *args], env=dict(env, RANK=str(rank)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for rank in range(world)
        ]
        results = []
        try:
            for proc in procs:
                out, err = proc.communicate(timeout=240)
                results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        finally:
            for proc in procs:  # a rank left waiting for a dead peer must not outlive the test
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    return results


def ok(results: list[subprocess.CompletedProcess[str]]) -> None:
    for rank, result in enumerate(results):
        assert result.returncode == 0, f"rank {rank}: {result.stderr[-3000:]}"


def init_group() -> None:
    """In a rank: join the gloo group ``run_ranks`` started."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=os.environ["INERT_RENDEZVOUS"], rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=datetime.timedelta(seconds=120))


def leave() -> None:
    """In a rank, after a last barrier: exit without tearing the group down.

    Tearing a file-store group down can wait forever for a peer that already exited
    (seen on 2.3, and on 2.4 in about one run in three).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


__all__ = ["run_ranks", "ok", "init_group", "leave", "Path"]
