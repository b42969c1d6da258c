"""The unmodified-program route, directly: a program that never imports inert (tests/frameworks/plain_dcp.py)
run under torchrun with 2 gloo ranks saves pickle-free with ``INERT_TORCH_ENABLE=1`` alone, and writes torch's
pickled ``.metadata`` without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from frameworks.runs import assert_inert_metadata, assert_only_unpicklers, assert_pickled_metadata, verify

PROGRAM = Path(__file__).parent / "frameworks" / "plain_dcp.py"


def run_program(base: Path, enable: bool) -> list[dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if k != "INERT_TORCH_ENABLE"}
    if enable:
        env["INERT_TORCH_ENABLE"] = "1"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(PROGRAM)]
    proc = subprocess.run([*command, str(base)], env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((base / f"result-{rank}.json").read_text()) for rank in range(2)]


def test_env_var_alone_makes_dcp_pickle_free(tmp_path: Path) -> None:
    results = run_program(tmp_path, enable=True)
    assert_inert_metadata(tmp_path / "ckpt")
    proc = verify(tmp_path / "ckpt")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for result in results:
        assert result["exact"] is True and result["inert_imported"] is True
        # Only the ranks' object collectives unpickle (their plans); nothing read from the directory.
        assert_only_unpicklers(result, ("torch/distributed/distributed_c10d.py",))


def test_without_the_env_var_nothing_changes(tmp_path: Path) -> None:
    results = run_program(tmp_path, enable=False)
    assert_pickled_metadata(tmp_path / "ckpt")
    for result in results:
        assert result["exact"] is True and result["inert_imported"] is False
        assert any("metadata.Metadata" in str(e) for e in result["find_class"])  # type: ignore[attr-defined]
