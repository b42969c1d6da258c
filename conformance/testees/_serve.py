"""The request loop shared by the Python testees."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from inert._canonical import from_json, to_json
from inert._errors import InertError, WriteTypeError, WriteValueError

from .._protocol import Request, Response, read_request, write_response

__all__ = ["Codec", "serve"]

#: decode(format, version, data, params) -> value; encode(format, version, value) -> bytes.
#: Either raises LookupError when it does not implement the format or version.
Decode = Callable[[str, int, bytes, dict[str, Any]], Any]
Encode = Callable[[str, int, Any], bytes]
Codec = tuple[Decode, Encode]


def answer(codec: Codec, request: Request) -> Response:
    """The response to one request.  Anything but an Inert or write error escapes: it is a bug to report."""
    decode, encode = codec
    try:
        if request.op == "decode":
            value = decode(request.format, request.version, request.payload, request.params)
            return Response("accept", payload=to_json(value).encode("utf-8"))
        data = encode(request.format, request.version, from_json(request.payload.decode("utf-8")))
        return Response("accept", payload=data)
    except LookupError as exc:
        return Response("unsupported", message=str(exc))
    except InertError as exc:
        return Response("reject", kind=exc.kind, message=str(exc))
    except WriteTypeError as exc:
        return Response("reject", kind="write-type", message=str(exc))
    except WriteValueError as exc:
        return Response("reject", kind="write-value", message=str(exc))


def serve(codec: Codec) -> None:
    """Answer requests on standard input until it ends."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while (request := read_request(stdin)) is not None:
        write_response(stdout, answer(codec, request))
