"""The testee protocol: how the runner and an implementation under test talk.

Both directions carry messages of two frames each, a frame being a ``u32``
little-endian length then that many bytes:

* request:  header frame (a JSON object: ``op``, ``format``, ``version``,
  ``params``), then payload frame (the bytes to decode, or the canonical JSON
  text of the value to encode);
* response: header frame (a JSON object: ``result`` is ``accept``, ``reject``
  with ``kind`` and optionally ``rule``, or ``unsupported``; an optional ``message``), then payload
  frame (the canonical JSON of the decoded value, the encoded bytes, or empty).

The testee answers requests in order until its standard input ends.  The full
description, for implementers in other languages, is ``PROTOCOL.md``.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import IO, Any

from inert._errors import HarnessError

__all__ = [
    "MAX_FRAME",
    "OPS",
    "RESULTS",
    "Request",
    "Response",
    "read_frame",
    "write_frame",
    "read_request",
    "write_request",
    "read_response",
    "write_response",
]

#: Largest frame either side accepts: a broken peer must not make the other allocate without bound.
MAX_FRAME = 1 << 26
OPS = ("decode", "encode")
RESULTS = ("accept", "reject", "unsupported")

_LENGTH = struct.Struct("<I")


@dataclass(frozen=True)
class Request:
    op: str
    format: str
    version: int
    payload: bytes
    params: dict[str, Any] = field(default_factory=dict)

    def header(self) -> dict[str, Any]:
        return {"op": self.op, "format": self.format, "version": self.version, "params": self.params}


@dataclass(frozen=True)
class Response:
    result: str
    payload: bytes = b""
    kind: str = ""
    message: str = ""
    #: The id of the spec rule a refusal is by, when the testee reports it (optional in the protocol).
    rule: str = ""

    def header(self) -> dict[str, Any]:
        header: dict[str, Any] = {"result": self.result}
        if self.kind:
            header["kind"] = self.kind
        if self.rule:
            header["rule"] = self.rule
        if self.message:
            header["message"] = self.message
        return header

    def describe(self) -> str:
        """One line for a report: what the testee answered."""
        if self.result == "accept":
            text = self.payload.decode("utf-8", errors="replace")
            return f"accept {text[:200]}{'...' if len(text) > 200 else ''}"
        if self.result == "reject":
            by = f" by rule {self.rule}" if self.rule else ""
            return f"reject {self.kind}{by}" + (f" ({self.message})" if self.message else "")
        return self.result + (f" ({self.message})" if self.message else "")


def write_frame(stream: IO[bytes], data: bytes) -> None:
    stream.write(_LENGTH.pack(len(data)))
    stream.write(data)


class TextOnStdout(HarnessError):
    """The testee printed text where frames go: every request would fail the same way, so the run stops."""


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame, or ``None`` at a clean end of stream (before any length byte)."""
    head = stream.read(_LENGTH.size)
    if not head:
        return None
    if len(head) != _LENGTH.size:
        raise HarnessError(f"stream ends inside a frame length ({len(head)} of 4 bytes)")
    (length,) = _LENGTH.unpack(head)
    if length > MAX_FRAME:
        if all(32 <= b < 127 or b in b"\t\n\r" for b in head):
            # A length made of printable bytes is text the testee printed on its stdout, the protocol's channel.
            raise TextOnStdout(f"the testee wrote text to stdout ({head!r}...); frames must be the only bytes on its "
                               "stdout (a u32 length, then that many bytes): print anything else to stderr")
        raise HarnessError(f"frame of {length} bytes exceeds the protocol's {MAX_FRAME}")
    data = stream.read(length)
    if len(data) != length:
        raise HarnessError(f"stream ends inside a frame ({len(data)} of {length} bytes)")
    return data


def _header(data: bytes | None, what: str) -> dict[str, Any]:
    if data is None:
        raise HarnessError(f"stream ends before the {what} header")
    try:
        header = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise HarnessError(f"{what} header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise HarnessError(f"{what} header is not a JSON object")
    return header


def _payload(stream: IO[bytes], what: str) -> bytes:
    data = read_frame(stream)
    if data is None:
        raise HarnessError(f"stream ends before the {what} payload")
    return data


def _dump(header: dict[str, Any]) -> bytes:
    return json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def write_request(stream: IO[bytes], request: Request) -> None:
    write_frame(stream, _dump(request.header()))
    write_frame(stream, request.payload)
    stream.flush()


def read_request(stream: IO[bytes]) -> Request | None:
    """The next request, or ``None`` when the runner has closed the stream."""
    first = read_frame(stream)
    if first is None:
        return None
    header = _header(first, "request")
    op, fmt, version, params = (header.get(k) for k in ("op", "format", "version", "params"))
    if op not in OPS or not isinstance(fmt, str) or type(version) is not int or not isinstance(params, dict):
        raise HarnessError(f"malformed request header {header!r}")
    return Request(op=op, format=fmt, version=version, params=params, payload=_payload(stream, "request"))


def write_response(stream: IO[bytes], response: Response) -> None:
    write_frame(stream, _dump(response.header()))
    write_frame(stream, response.payload)
    stream.flush()


def read_response(stream: IO[bytes]) -> Response:
    header = _header(read_frame(stream), "response")
    result, kind, message = header.get("result"), header.get("kind", ""), header.get("message", "")
    rule = header.get("rule", "")
    if result not in RESULTS or not isinstance(kind, str) or not isinstance(message, str) or not isinstance(rule, str):
        raise HarnessError(f"malformed response header {header!r}")
    if result == "reject" and not kind:
        raise HarnessError("a reject response must name the error kind")
    if rule and result != "reject":
        raise HarnessError(f"only a reject response names a rule, not {result!r}")
    return Response(result=result, kind=kind, message=message, rule=rule, payload=_payload(stream, "response"))
