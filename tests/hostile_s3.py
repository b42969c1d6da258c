"""A hostile S3 API server on localhost, for the tests: real HTTP, enough S3 for s3fs, switchable misbehaviours.

:class:`HostileS3` serves the files under a local directory as the objects of one bucket
(ListObjectsV2, HeadObject, GetObject with ``Range``; path-style requests, any credentials)
from a ``ThreadingHTTPServer`` in a daemon thread.  ``misbehave(mode, match)`` makes the
GETs of keys containing ``match`` (every key when empty; listings for ``"list-forever"``)
answer as a broken or hostile store would:

* ``"range-ignored"``: 200 and the whole of a ``HUGE``-byte body, whatever ``Range`` asked;
* ``"long-length"``: 206, the ``Content-Range`` asked for, a ``Content-Length`` of ``HUGE``
  bytes and that many bytes sent (a lying length);
* ``"endless-chunked"``: 206, ``Transfer-Encoding: chunked``, chunks without end;
* ``"trickle"``: 206, the right length, one byte a second;
* ``"slow-headers"``: nothing at all for ``SLOW`` seconds, then the right answer;
* ``"list-forever"``: every listing page ``IsTruncated`` with a new continuation token.

Bodies are generated as they are sent (never held in memory) and every loop of the
fixture is bounded: ``HUGE`` bytes, ``ENDLESS`` bytes, ``SLOW`` seconds, ``MAX_REQUESTS``
requests, and all of them end when the client goes away or :meth:`HostileS3.close` is called.
"""

from __future__ import annotations

import http.server
import os
import threading
import time
import urllib.parse
from email.utils import formatdate
from typing import Any
from xml.sax.saxutils import escape

#: Bytes of a huge body (the issue's 800 MiB).
HUGE = 800 << 20
#: Bytes after which an "endless" chunked body ends after all (the fixture's own bound).
ENDLESS = 2 << 30
#: Seconds of silence before slow headers, and the longest a trickle goes on.
SLOW = 120.0
#: Requests the server answers at most; later ones get 503.
MAX_REQUESTS = 100_000
#: The bucket served.
BUCKET = "hostile"

_BLOCK = b"\0" * (1 << 20)
_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


class HostileS3:
    """The objects under ``root`` as bucket ``BUCKET``, at ``endpoint``; see the module for the misbehaviours."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.mode = ""
        self.match = ""
        self.requests: list[tuple[str, str]] = []
        self.stopping = threading.Event()
        server_ref = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's names
                server_ref._answer(self, head=True)

            def do_GET(self) -> None:  # noqa: N802
                server_ref._answer(self, head=False)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    # -- the test's side -----------------------------------------------------------------
    def url(self, key: str) -> str:
        return f"s3://{BUCKET}/{key}"

    def options(self) -> dict[str, Any]:
        """s3fs storage options: this endpoint, any credentials, a fresh filesystem instance."""
        return {"key": "testing", "secret": "testing", "endpoint_url": self.endpoint, "skip_instance_cache": True,
                "client_kwargs": {"region_name": "us-east-1"}}

    def env(self) -> dict[str, str]:
        """The environment that makes botocore (and so ``inert verify s3://``) reach this server."""
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_EC2_METADATA_DISABLED": "true"}

    def misbehave(self, mode: str, match: str = "") -> None:
        self.mode, self.match = mode, match

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    # -- the server's side ---------------------------------------------------------------
    def _answer(self, handler: http.server.BaseHTTPRequestHandler, *, head: bool) -> None:
        parsed = urllib.parse.urlsplit(handler.path)
        query = dict(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
        bucket, _, key = urllib.parse.unquote(parsed.path).lstrip("/").partition("/")
        self.requests.append((handler.command, handler.path))
        if len(self.requests) > MAX_REQUESTS or bucket != BUCKET:
            self._reply(handler, 503 if bucket == BUCKET else 404, b"<Error><Code>NoSuchBucket</Code></Error>", head)
            return
        if not key:
            if query.get("list-type") == "2":
                self._list(handler, query.get("prefix", ""), query.get("continuation-token"))
            else:
                self._reply(handler, 200, b"", head)  # HeadBucket
            return
        file = os.path.join(self.root, key)
        if not os.path.isfile(file):
            self._reply(handler, 404, b"<Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>", head)
            return
        size = os.path.getsize(file)
        stamp = {"ETag": f'"{int(os.path.getmtime(file))}-{size}"',
                 "Last-Modified": formatdate(os.path.getmtime(file), usegmt=True)}
        if head:
            self._reply(handler, 200, b"", True, {**stamp, "Content-Length": str(size)})
            return
        start, end = _range(handler.headers.get("Range"), size)
        hostile = self.mode and self.mode != "list-forever" and self.match in key
        if hostile and self.mode == "slow-headers":
            self.stopping.wait(SLOW)
        if not hostile or self.mode == "slow-headers":
            with open(file, "rb") as source:
                source.seek(start)
                data = source.read(end - start)
            self._reply(handler, 206 if handler.headers.get("Range") else 200, data, False,
                        {**stamp, "Content-Range": f"bytes {start}-{end - 1}/{size}"})
            return
        self._hostile_body(handler, start, end, size, file, stamp)

    def _hostile_body(self, handler: http.server.BaseHTTPRequestHandler, start: int, end: int, size: int,
                      file: str, stamp: dict[str, str]) -> None:
        handler.close_connection = True
        if self.mode == "range-ignored":
            handler.send_response(200)
            headers = {"Content-Length": str(HUGE)}
        else:
            handler.send_response(206)
            headers = {"Content-Range": f"bytes {start}-{end - 1}/{size}"}
            if self.mode == "long-length":
                headers["Content-Length"] = str(HUGE)
            elif self.mode == "endless-chunked":
                headers["Transfer-Encoding"] = "chunked"
            else:  # trickle
                headers["Content-Length"] = str(end - start)
        for name, value in {**stamp, **headers, "Content-Type": "binary/octet-stream"}.items():
            handler.send_header(name, value)
        handler.end_headers()
        try:
            if self.mode == "trickle":
                with open(file, "rb") as source:
                    source.seek(start)
                    data = source.read(end - start)
                began = time.monotonic()
                for index in range(len(data)):
                    if self.stopping.wait(1.0) or time.monotonic() - began > SLOW:
                        return
                    handler.wfile.write(data[index : index + 1])
                    handler.wfile.flush()
            elif self.mode == "endless-chunked":
                chunk = b"%x\r\n" % len(_BLOCK) + _BLOCK + b"\r\n"
                for _ in range(ENDLESS // len(_BLOCK)):
                    if self.stopping.is_set():
                        return
                    handler.wfile.write(chunk)
            else:
                for _ in range(HUGE // len(_BLOCK)):
                    if self.stopping.is_set():
                        return
                    handler.wfile.write(_BLOCK)
        except OSError:  # the client went away: what a bounded reader does
            return

    def _list(self, handler: http.server.BaseHTTPRequestHandler, prefix: str, token: str | None) -> None:
        rows = []
        base = os.path.join(self.root, prefix.rstrip("/")) if prefix else self.root
        if os.path.isdir(base):
            for name in sorted(os.listdir(base)):
                full = os.path.join(base, name)
                key = f"{prefix}{name}"
                if os.path.isdir(full):
                    rows.append(f"<CommonPrefixes><Prefix>{escape(key)}/</Prefix></CommonPrefixes>")
                else:
                    rows.append(f"<Contents><Key>{escape(key)}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                                f'<ETag>"0"</ETag><Size>{os.path.getsize(full)}</Size>'
                                "<StorageClass>STANDARD</StorageClass></Contents>")
        forever = self.mode == "list-forever"
        more = (f"<IsTruncated>true</IsTruncated><NextContinuationToken>t{len(self.requests)}</NextContinuationToken>"
                if forever else "<IsTruncated>false</IsTruncated>")
        if forever and token:  # later pages: one more object each, never the last page
            rows = [f"<Contents><Key>{escape(prefix)}more-{token}</Key><LastModified>2026-01-01T00:00:00.000Z"
                    '</LastModified><ETag>"0"</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass></Contents>']
        body = (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{_NS}"><Name>{BUCKET}</Name>'
                f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(rows)}</KeyCount><MaxKeys>1000</MaxKeys>"
                f"<Delimiter>/</Delimiter>{more}{''.join(rows)}</ListBucketResult>").encode()
        self._reply(handler, 200, body, False, {"Content-Type": "application/xml"})

    @staticmethod
    def _reply(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes, head: bool,
               headers: dict[str, str] | None = None) -> None:
        handler.send_response(status)
        for name, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
            handler.send_header(name, value)
        handler.end_headers()
        if not head:
            try:
                handler.wfile.write(body)
            except OSError:
                handler.close_connection = True


def _range(header: str | None, size: int) -> tuple[int, int]:
    """The bytes ``bytes=a-b`` asks for, clipped to the object (the whole object without a header)."""
    if not header or not header.startswith("bytes="):
        return 0, size
    first, _, last = header[6:].partition("-")
    start = min(int(first or 0), size)
    end = min(int(last) + 1, size) if last else size
    return start, max(start, end)
