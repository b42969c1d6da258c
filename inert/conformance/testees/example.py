"""An example testee written only against the public protocol (inert/conformance/PROTOCOL.md) and Inert's public API.

Copy it as the start of your own: the framing below is the whole protocol (a little-endian u32 length, then
that many bytes; a request is a JSON header frame then a payload frame, a response the same).  It answers
shm-descriptor with Inert's codec and "unsupported" to every other format, which the runner counts apart
from failures.  Run: ``inert conformance run --testee 'python -m inert.conformance.testees.example'``.
"""

from __future__ import annotations

import json
import struct
import sys
from typing import IO, Any

import inert
from inert.codecs import shm_descriptor

_LENGTH = struct.Struct("<I")


def _read(stream: IO[bytes]) -> bytes | None:
    head = stream.read(4)
    if not head:
        return None  # the runner closed the stream: done
    (length,) = _LENGTH.unpack(head)
    return stream.read(length)


def _write(stream: IO[bytes], header: dict[str, Any], payload: bytes = b"") -> None:
    for frame in (json.dumps(header, sort_keys=True).encode("utf-8"), payload):
        stream.write(_LENGTH.pack(len(frame)) + frame)
    stream.flush()


def _answer(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
    if header["format"] != "shm-descriptor":
        return {"result": "unsupported", "message": "this example reads only shm-descriptor"}, b""
    try:
        if header["op"] == "decode":
            value = shm_descriptor.decode(payload, version=header["version"], **header["params"])
            # A descriptor's value holds only integers, so its canonical JSON is sorted compact JSON.
            return {"result": "accept"}, json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
        return {"result": "accept"}, shm_descriptor.encode(json.loads(payload), version=header["version"])
    except inert.InertError as exc:
        return {"result": "reject", "kind": exc.kind, "message": str(exc)}, b""
    except inert.WriteTypeError as exc:
        return {"result": "reject", "kind": "write-type", "message": str(exc)}, b""
    except inert.WriteValueError as exc:
        return {"result": "reject", "kind": "write-value", "message": str(exc)}, b""


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while (head := _read(stdin)) is not None:
        payload = _read(stdin) or b""
        _write(stdout, *_answer(json.loads(head), payload))


if __name__ == "__main__":
    main()
