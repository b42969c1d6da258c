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

#: Client options for fault tests: one attempt by botocore (s3fs still retries some errors a few times, with backoff).
NO_RETRIES = {"config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 5, "read_timeout": 20}}
#: The filesystems the object-storage tests run on.
KINDS = ("s3", "memory", "file")

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


def location(kind: str, server: S3Server | None, tmp_path: Any, path: str) -> tuple[str, dict[str, Any]]:
    """A fresh URL ending in ``path`` on ``kind`` (one of ``KINDS``; "s3" on ``server``), with its storage options."""
    if kind == "s3":
        assert server is not None
        return f"s3://{server.new_bucket()}/{path}", server.options(skip_instance_cache=True)
    if kind == "memory":
        return f"memory://inert-{uuid.uuid4().hex}/{path}", {}
    return f"file://{tmp_path}/{path}", {}

if __name__ == "__main__":
    _serve()


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of the server that fails chosen requests.

    ``fault(method, path_and_query)`` decides per request: None forwards it; ``"500"`` answers
    500 InternalError without forwarding; ``"reset"`` forwards it, then sends the reply's headers
    and half its body and resets the connection (a read cut mid-stream); ``"reset-upload"`` reads
    half the request body and resets (a write cut mid-stream).  ``seen`` lists the requests.
    """

    def __init__(self, upstream_port: int, fault: Any) -> None:
        import http.server
        import threading

        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _reset(self) -> None:
                import socket
                import struct

                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True

            def _body(self) -> bytes:
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            def _any(self) -> None:
                import http.client

                action = proxy.fault(self.command, self.path)
                proxy.seen.append((self.command, self.path, action))
                if action == "reset-upload":
                    length = int(self.headers.get("Content-Length") or 0)
                    self.rfile.read(length // 2)
                    self._reset()
                    return
                body = self._body()
                if action == "500":
                    reply = b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"
                    self.send_response(500)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "expect")}
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                finally:
                    upstream.close()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if action == "reset" and self.command != "HEAD":
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self._reset()
                    return
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.upstream_port = upstream_port
        self.fault = fault
        self.seen: list[tuple[str, str, Any]] = []
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
