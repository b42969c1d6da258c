"""A real S3 API server on localhost for the tests: moto's server mode, in a process of its own.

``python tests/s3_server.py`` serves on a free port of 127.0.0.1 and prints the port; the
:class:`S3Server` helper starts that process, creates a bucket through the S3 API and stops the
process (``stop()``: gone mid-request, as a crashed store would be).  Clients reach it through
s3fs with :meth:`S3Server.options`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from typing import Any

#: Credentials the local server accepts (any); never real ones.
_OPTIONS = {"key": "testing", "secret": "testing", "client_kwargs": {"region_name": "us-east-1"}}


class S3Server:
    def __init__(self) -> None:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        self.process = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=env, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.process.kill()
            raise RuntimeError(f"the S3 server did not start: {line!r}")
        self.port = int(line)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def options(self, endpoint: str | None = None, **extra: Any) -> dict[str, Any]:
        """s3fs storage options for this server (or for ``endpoint``, e.g. a proxy in front of it)."""
        return {**_OPTIONS, "endpoint_url": endpoint or self.endpoint, **extra}

    def new_bucket(self) -> str:
        import boto3

        name = f"b-{uuid.uuid4().hex[:12]}"
        client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
        client.create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def _serve() -> None:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    print(port, flush=True)
    while True:  # until the parent kills this process
        time.sleep(3600)


if __name__ == "__main__":
    _serve()
