"""Shared test setup: the no-execution guard runs around every test.

Every Inert reader (each generated ``decode`` in ``inert.codecs`` and the
Construct-interpreted ``interpret_decode``) is watched: a test during which
one of them loaded or ran code (a ``pickle.find_class``, ``exec``,
``compile`` or ``marshal.loads`` audit event) fails, naming the event.  Other
readers (integrations) join with ``inert._audit.watch_readers(func)``.

The repository root goes at the END of ``sys.path`` so that ``fuzz`` (the
format registry and oracle shared with the fuzzers) imports while the top-level
``codecs`` folder can never shadow the standard library's.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from inert import _audit
from inert.codecs import MODULES

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))


def _readers() -> list[Callable[..., Any]]:
    modules = [importlib.import_module(f"inert.codecs.{m}") for m in MODULES.values()]
    # Every reader: decode() and each part's decode_<part>() (e.g. checkpoint-shard's decode_record).
    readers: list[Callable[..., Any]] = [
        getattr(module, name) for module in modules for name in dir(module) if name == "decode" or name.startswith("decode_")
    ]
    try:
        from inert._interpret import interpret_decode
    except ImportError:  # the spec extra (Construct) is optional
        pass
    else:
        readers.append(interpret_decode)
    return readers


_audit.watch_readers(*_readers())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    _audit.take_reader_events()  # events from before this test belong to no test
    try:
        return (yield)
    finally:
        events = _audit.take_reader_events()
        if events:
            pytest.fail("a reader loaded or ran code: " + "; ".join(events), pytrace=False)


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a clean copy of the checkout, built once per run (compiling the accelerator takes a minute)
    for every test that installs or unpacks it."""
    from scratch_tree import build_wheel, clean_copy

    base = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "INERT_PURE_PYTHON", "INERT_ACCEL", "PYTHONPATH")}
    return build_wheel(clean_copy(base / "src"), base / "dist", env)


@pytest.fixture(scope="session")
def s3() -> Generator[Any, None, None]:
    """A real S3 API server on localhost (``tests/s3_server.py``), shared by the session; each test takes a bucket."""
    from s3_server import S3Server

    server = S3Server()
    try:
        yield server
    finally:
        server.stop()
