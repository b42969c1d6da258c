"""A hostile object store: every response bounded by the range asked for, every request and listing by a deadline.

A real Inert checkpoint and a real dump are served by :class:`hostile_s3.HostileS3` (an S3 API
server on localhost); each case makes it misbehave and reads through ``load_tensors``,
``inert.dump.load`` or ``inert verify s3://`` in a child process, which reports its peak RSS
growth, CPU time and wall time (from the read's start, its imports done).  Each must end in a
``StorageError`` naming the URL (verify: exit 2 and that message) within the stated bound: memory
a small multiple of the bytes the read asked for, time the deadline (``INERT_STORAGE_TIMEOUT`` and
friends, set low here) plus a margin, CPU well under the deadline (waiting on a store costs none).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_s3 import HUGE, HostileS3  # noqa: E402

#: Peak RSS growth allowed to a read whose requests ask for a few MiB at most (the bodies are HUGE).
RSS_BOUND = 96 << 20
#: The deadlines set for the children, and the margin allowed on top (retries, a loaded machine).
DEADLINE = 3.0
MARGIN = 20.0
#: CPU seconds allowed to the read (its imports done before), every thread's: below the deadline, so a reader
#: that spins while a store trickles or lists (rather than sleeping on the event loop) fails; about 1 s measured.
CPU_BOUND = 2.0
#: A child that has not ended after this long has hung (the test fails, the child is killed).
HANG = 90.0


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostileS3]:
    import torch
    import torch.distributed.checkpoint as dcp

    from inert.dump import Row, dump
    from inert.torch import FileSystemWriter
    from inert.torch._compat import no_dist_options

    root = tmp_path_factory.mktemp("bucket")
    state = {"w": torch.arange(1 << 18, dtype=torch.float32), "b": torch.ones(64)}
    dcp.save(state, storage_writer=FileSystemWriter(str(root / "ckpt")), **no_dist_options(dcp.save))
    dump([Row(f"k{i}", i, {"x": torch.full((1024,), float(i))}, {"i": i}) for i in range(8)], root / "rollout", owners=2)
    server = HostileS3(str(root))
    yield server
    server.close()


def run_child(store: HostileS3, op: str, key: str, **env: str) -> dict[str, Any]:
    """``op`` on ``key`` in a child process: its outcome, peak RSS growth (bytes) and wall time (seconds)."""
    environ = {**os.environ, **store.env(), "INERT_STORAGE_TIMEOUT": str(DEADLINE),
               "INERT_STORAGE_LIST_TIMEOUT": str(DEADLINE), **env}
    began = time.monotonic()
    try:
        done = subprocess.run([sys.executable, __file__, op, store.url(key), json.dumps(store.options())],
                              env=environ, capture_output=True, text=True, timeout=HANG)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{op} of {key} hung: no end after {HANG} s")
    finally:
        store.misbehave("")
    lines = done.stdout.strip().splitlines()
    assert lines, f"the child died: {done.stderr[-2000:]}"
    outcome: dict[str, Any] = json.loads(lines[-1])
    outcome["wall"] = time.monotonic() - began
    outcome["stderr"] = done.stderr
    return outcome


def assert_refused(outcome: dict[str, Any], url: str, *words: str) -> None:
    """A StorageError naming ``url`` and ``words`` (verify: exit 2 with the message), within the bounds."""
    if outcome["op"] == "verify":
        assert outcome["code"] == 2, outcome
        message = outcome["stderr"]
    else:
        assert outcome["error"] == "StorageError", outcome
        message = outcome["message"]
    assert url.split("/", 3)[2] in message and all(word in message for word in words), message
    assert outcome["rss_growth"] < RSS_BOUND, f"peak RSS grew by {outcome['rss_growth'] >> 20} MiB"
    assert outcome["op_wall"] < DEADLINE + MARGIN, f"{outcome['op_wall']:.1f} s"
    assert outcome["cpu"] < CPU_BOUND, f"{outcome['cpu']:.2f} s of CPU"


CASES = [("load_tensors", "ckpt/"), ("dump_load", "rollout/shard-"), ("verify", "ckpt/__0_0"), ("verify", "rollout/shard-")]


@pytest.mark.parametrize(("op", "match"), CASES)
def test_range_ignored_huge_body(store: HostileS3, op: str, match: str) -> None:
    """A GET answered 200 with an 800 MiB body, whatever Range asked: refused from its Content-Length."""
    store.misbehave("range-ignored", match)
    key = match.split("/")[0]
    outcome = run_child(store, op, key)
    assert_refused(outcome, store.url(key), "Content-Length", str(HUGE))


@pytest.mark.parametrize(("op", "match"), CASES[:2])
def test_lying_content_length(store: HostileS3, op: str, match: str) -> None:
    """206 with the Content-Range asked for and a Content-Length of 800 MiB (and that many bytes): refused."""
    store.misbehave("long-length", match)
    key = match.split("/")[0]
    assert_refused(run_child(store, op, key), store.url(key), "Content-Length", str(HUGE))


@pytest.mark.parametrize(("op", "match"), CASES)
def test_endless_chunked_body(store: HostileS3, op: str, match: str) -> None:
    """A chunked body without end: refused one byte past the range asked for."""
    store.misbehave("endless-chunked", match)
    key = match.split("/")[0]
    assert_refused(run_child(store, op, key), store.url(key), "more than")


@pytest.mark.parametrize(("op", "match"), CASES[:3])
def test_trickle_one_byte_a_second(store: HostileS3, op: str, match: str) -> None:
    """The right body at one byte a second: refused at the request deadline."""
    store.misbehave("trickle", match)
    key = match.split("/")[0]
    assert_refused(run_child(store, op, key), store.url(key), "INERT_STORAGE_TIMEOUT")


def test_slow_headers(store: HostileS3) -> None:
    """No answer at all for minutes: refused at the request deadline."""
    store.misbehave("slow-headers", "ckpt/")
    assert_refused(run_child(store, "load_tensors", "ckpt"), store.url("ckpt"), "INERT_STORAGE_TIMEOUT")


@pytest.mark.parametrize("op", ["load_tensors", "dump_load", "verify"])
def test_is_truncated_forever(store: HostileS3, op: str) -> None:
    """A listing that says IsTruncated forever, a new token each page: refused after the stated number of pages."""
    key = "rollout" if op == "dump_load" else "ckpt"
    store.misbehave("list-forever")
    before = len(store.requests)
    # The listing deadline well above 20 quick pages, so that the page bound is what ends it on a loaded machine.
    outcome = run_child(store, op, key, INERT_STORAGE_LIST_PAGES="20", INERT_STORAGE_LIST_TIMEOUT=str(MARGIN))
    listings = sum("list-type=2" in path for _, path in store.requests[before:])
    assert_refused(outcome, store.url(key), "20 pages", "INERT_STORAGE_LIST_PAGES")
    assert listings <= 20, listings


def test_is_truncated_forever_deadline(store: HostileS3) -> None:
    """The same listing, its pages slow: refused at the listing deadline, whatever the page bound."""
    store.misbehave("list-forever")
    outcome = run_child(store, "load_tensors", "ckpt", INERT_STORAGE_LIST_PAGES="1000000", INERT_STORAGE_LIST_TIMEOUT="1")
    assert_refused(outcome, store.url("ckpt"), "INERT_STORAGE_LIST_TIMEOUT")


def test_honest_store_reads(store: HostileS3) -> None:
    """The same server behaving: every reader reads what was written (the bounds refuse nothing honest)."""
    for op, key in [("load_tensors", "ckpt"), ("dump_load", "rollout"), ("verify", "ckpt"), ("verify", "rollout")]:
        outcome = run_child(store, op, key)
        assert outcome.get("error") is None and outcome.get("code", 0) == 0, outcome
        assert outcome["result"], outcome


def _child(op: str, url: str, options: dict[str, Any]) -> None:
    """The child's side: run ``op``, print one JSON line of what happened."""
    import inert.dump
    import inert.torch
    from inert.cli.main import main

    outcome: dict[str, Any] = {"op": op}
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    began, started = _cpu(), time.monotonic()
    try:
        if op == "load_tensors":
            outcome["result"] = sorted(inert.torch.load_tensors(url, storage_options=options))
        elif op == "dump_load":
            outcome["result"] = len(inert.dump.load(url, storage_options=options).rows)
        else:
            outcome["code"] = main(["verify", url])
            outcome["result"] = outcome["code"] == 0
    except Exception as exc:  # noqa: BLE001 - the outcome is what is reported
        outcome["error"], outcome["message"] = type(exc).__name__, str(exc)
    except SystemExit as exc:
        outcome["code"] = exc.code
    outcome["cpu"], outcome["op_wall"] = _cpu() - began, time.monotonic() - started
    outcome["rss_growth"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline) << 10
    print(json.dumps(outcome), flush=True)
    os._exit(0)  # no waiting for s3fs's threads on the way out


def _cpu() -> float:
    """CPU seconds of this process so far, every thread's (the event loop's included), user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
