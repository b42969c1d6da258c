"""PEP 561: what setuptools builds from pyproject.toml carries ``inert/py.typed``, so a user's ``mypy --strict``
checks calls into ``inert.codecs`` and ``inert.torch`` instead of skipping them as untyped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

USER_CODE = """\
from inert.codecs import shm_message
from inert.torch import load_tensors

data: bytes = shm_message.encode({
    "type": "SCHEDULED_TASK", "context_i": 0, "scheduled_i": 7, "epoch_start": 0, "minibatch_i": 7,
    "task": {"kind": "BATCH", "args": {"kind": "INT", "value": 7}},
})
value = shm_message.decode(data)
tensors = load_tensors("ckpt")
"""

# The same call with a key misspelt: the value's TypedDict makes it a type error, not a silent loss.
TYPO_CODE = USER_CODE.replace('"minibatch_i": 7', '"minibatch": 7')


def test_the_built_package_is_typed_for_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    lib = tmp_path / "lib"
    built = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    assert (lib / "inert" / "py.typed").is_file()
    assert (lib / "inert" / "codecs" / "shm_message.py").is_file()  # the codecs below the marker
    user = tmp_path / "user"
    user.mkdir()
    (user / "use.py").write_text(USER_CODE)
    # Not the project's configuration: a user's, which skips torch's own sources (a minute of checking,
    # and not what is tested here: that inert's modules are typed, not reported as import-untyped).
    (user / "mypy.ini").write_text("[mypy]\n[mypy-torch.*]\nfollow_imports = skip\n")
    env = dict(os.environ, PYTHONPATH=str(lib))
    (user / "typo.py").write_text(TYPO_CODE)
    # One mypy run over both files (it type-checks inert once): the user's code is clean, the typo is not.
    checked = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "use.py", "typo.py"],
                             cwd=user, env=env, capture_output=True, text=True, timeout=600)
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert "import-untyped" not in checked.stdout
    assert not [line for line in errors if line.startswith("use.py")], checked.stdout + checked.stderr
    assert [line for line in errors if line.startswith("typo.py:4:")], checked.stdout + checked.stderr
    assert all("[arg-type]" in line for line in errors), checked.stdout
