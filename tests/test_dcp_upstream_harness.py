"""tools/dcp_upstream_tests/site/sitecustomize.py on the running release: what each mode puts in place.

A fresh interpreter with the harness's site directory on PYTHONPATH, as every process of a run has:
``swap`` replaces torch's storage classes in every module of the release that defines them (2.15's
public ``fsspec_filesystem`` and the old ``_fsspec_filesystem`` included); ``switch`` touches no
name and has ``inert.torch`` enabled by ``INERT_TORCH_ENABLE=1`` alone; a helper of ``SHIMS`` is
added only where the release lacks it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SITE = Path(__file__).resolve().parent.parent / "tools" / "dcp_upstream_tests" / "site"

PROBE = r"""
import importlib, json, warnings
import torch.distributed.checkpoint as dcp
import torch.distributed.checkpoint.filesystem as fs
import inert.torch as it
names = {}
for name in ("torch.distributed.checkpoint", "torch.distributed.checkpoint.filesystem",
             "torch.distributed.checkpoint._storage_utils", "torch.distributed.checkpoint.format_utils",
             "torch.distributed.checkpoint.fsspec_filesystem", "torch.distributed.checkpoint._fsspec_filesystem"):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(name)
    except ModuleNotFoundError:
        continue
    for cls in ("FileSystemWriter", "FileSystemReader", "FsspecWriter", "FsspecReader"):
        if cls in vars(module):
            names[f"{name}.{cls}"] = getattr(module, cls).__module__.split(".")[0]
import torch.testing._internal.distributed._tensor.common_dtensor as common_dtensor
shim = getattr(common_dtensor, "_get_device_type", None)
print(json.dumps({"names": names, "enabled": it.is_enabled(),
                  "built": type(dcp.FileSystemWriter("probe-dir")).__module__.split(".")[0],
                  "shim": None if shim is None else [shim.__module__, shim(2)]}))
"""


def probe(mode: str, tmp_path: Path, **env: str) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if k != "INERT_TORCH_ENABLE"}
    environ.update(PYTHONPATH=os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")])),
                   INERT_DCP_MODE=mode, INERT_DCP_LOG=str(tmp_path / "log"), **env)
    done = subprocess.run([sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["log"] = (tmp_path / "log").read_text() if (tmp_path / "log").exists() else ""
    return result


@pytest.fixture(scope="module")
def swapped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return probe("swap", tmp_path_factory.mktemp("swap"))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_swap_replaces_the_names_in_every_module_that_defines_them(swapped: dict[str, Any]) -> None:
    found = swapped
    assert found["names"], "no module of this release defines the storage classes"
    assert set(found["names"].values()) == {"inert"}, found["names"]
    fsspec_modules = {name.rsplit(".", 1)[0] for name in found["names"] if name.endswith(".FsspecWriter")}
    import torch.distributed.checkpoint as dcp

    modules = {m for m in ("fsspec_filesystem", "_fsspec_filesystem") if (Path(dcp.__file__).parent / f"{m}.py").exists()}
    assert {f"torch.distributed.checkpoint.{m}" for m in modules} <= fsspec_modules
    assert not found["enabled"] and found["built"] == "inert"


def test_switch_touches_no_name_and_enables_inert(tmp_path: Path) -> None:
    found = probe("switch", tmp_path, INERT_TORCH_ENABLE="1")
    assert set(found["names"].values()) == {"torch"}, found["names"]
    assert found["enabled"] and found["built"] == "inert"  # torch's class, built as Inert's
    assert "SWITCH on" in found["log"]


def test_switch_without_the_variable_is_logged_as_off(tmp_path: Path) -> None:
    found = probe("switch", tmp_path)
    assert not found["enabled"] and found["built"] == "torch"
    assert "SWITCH-OFF" in found["log"]


def test_shim_only_where_the_release_lacks_the_helper(swapped: dict[str, Any]) -> None:
    import torch.testing._internal.distributed._tensor.common_dtensor as common_dtensor

    has_own = "_get_device_type" in vars(common_dtensor)
    found = swapped  # shims apply in every mode
    assert found["shim"] is not None and found["shim"][1] in ("cpu", common_dtensor.DEVICE_TYPE)
    assert (found["shim"][0] == "sitecustomize") is (not has_own)
    assert ("SHIM torch.testing._internal.distributed._tensor.common_dtensor._get_device_type" in found["log"]) is (
        not has_own)
