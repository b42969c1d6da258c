"""``inert inspect`` and ``inert verify`` of checkpoints and dumps at s3:// URLs, against a real S3 API server on
localhost (moto's server mode, through s3fs), configured as a user would: through the environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import s3fs
import torch
from s3_server import S3Server

from inert.dump import Row, dump
from inert.torch import FsspecWriter
from inert.torch._compat import dcp_save

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def cli(s3: S3Server | None, *args: str, endpoint: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AWS_ENDPOINT_URL_S3=endpoint or (s3.endpoint if s3 else ""), AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing",
               AWS_DEFAULT_REGION="us-east-1")
    return subprocess.run([sys.executable, "-m", "inert", *args], env=env, capture_output=True, text=True, timeout=120)


def test_inspect_and_verify_a_checkpoint_then_find_a_flipped_byte(s3: S3Server) -> None:
    url = f"s3://{s3.new_bucket()}/ckpt"
    dcp_save({"w": torch.arange(4096, dtype=torch.float32), "v": {"a": 1}}, FsspecWriter(url, storage_options=s3.options()))
    shown = cli(s3, "inspect", url)
    assert shown.returncode == 0 and "Inert checkpoint" in shown.stdout and "w  float32  (4096,)" in shown.stdout, shown
    checked = cli(s3, "verify", url)
    assert checked.returncode == 0 and checked.stdout.startswith("inert: verify: OK: 2 files, 2 records"), checked
    fs = s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True)
    path = f"{url.removeprefix('s3://')}/__0_0.distcp"
    data = bytearray(fs.cat_file(path))
    data[len(data) // 2] ^= 0x40
    fs.pipe_file(path, bytes(data))
    damaged = cli(s3, "verify", url)
    assert damaged.returncode == 1 and "checkpoint-shard" in damaged.stderr and "CRC-32" in damaged.stderr, damaged


def test_inspect_and_verify_a_dump_and_refuse_what_is_neither(s3: S3Server) -> None:
    bucket = s3.new_bucket()
    url = f"s3://{bucket}/rollout"
    dump([Row(f"k{i}", i, {"x": torch.full((8,), float(i))}, {"i": i}) for i in range(5)], url, owners=2,
         storage_options=s3.options())
    shown = cli(s3, "inspect", url)
    assert shown.returncode == 0 and "Inert dump" in shown.stdout and "x  dense  float32  (8,)" in shown.stdout, shown
    checked = cli(s3, "verify", url)
    assert checked.returncode == 0 and checked.stdout.startswith("inert: verify: OK: 3 files, 5 records"), checked
    nothing = cli(s3, "verify", f"s3://{bucket}/nothing")
    assert nothing.returncode == 1 and "not a checkpoint or dump" in nothing.stderr, nothing


def test_an_unreachable_store_is_an_io_error() -> None:
    import socket

    with socket.socket() as probe:  # a port of this host with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for command in ("inspect", "verify"):
        result = cli(None, command, "s3://bucket/ckpt", endpoint=f"http://127.0.0.1:{port}")
        assert result.returncode == 2 and "listing s3://bucket/ckpt failed" in result.stderr, result
