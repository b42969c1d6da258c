"""The request loop shared by the Python testees."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from inert._canonical import SpellingValueError, from_json, to_json
from inert._errors import InertError, WriteTypeError, WriteValueError

from .._protocol import Request, Response, read_request, write_response

__all__ = ["Codec", "serve"]

#: decode(format, version, data, params) -> value; encode(format, version, value) -> bytes.
#: Either raises LookupError when it does not implement the format or version.
Decode = Callable[[str, int, bytes, dict[str, Any]], Any]
Encode = Callable[[str, int, Any], bytes]
Codec = tuple[Decode, Encode]


def _rule(fmt: str, error: InertError) -> str:
    """The spec rule the refusal is by ("" without the spec, or when no single rule matches it)."""
    try:
        from .._rule_match import rule_of
    except ImportError:  # pragma: no cover - the spec extra (Construct) is not installed: kinds only
        return ""
    try:
        return rule_of(fmt, error) or ""
    except KeyError:  # a format the spec does not declare
        return ""


def answer(codec: Codec, request: Request) -> Response:
    """The response to one request.  Anything but an Inert or write error escapes: it is a bug to report."""
    decode, encode = codec
    try:
        if request.op == "decode":
            value = decode(request.format, request.version, request.payload, request.params)
            return Response("accept", payload=to_json(value).encode("utf-8"))
        try:
            value = from_json(request.payload.decode("utf-8"))
        except SpellingValueError as exc:  # a $map key or $set member twice: the right type breaking a rule
            return Response("reject", kind="write-value", message=f"{request.format}: <root>: {exc}")
        except ValueError as exc:  # not a value's spelling (lenient base64, ...): the wrong type (PROTOCOL.md)
            return Response("reject", kind="write-type", message=f"{request.format}: <root>: {exc}")
        return Response("accept", payload=encode(request.format, request.version, value))
    except LookupError as exc:
        return Response("unsupported", message=str(exc))
    except InertError as exc:
        return Response("reject", kind=exc.kind, message=str(exc), rule=_rule(request.format, exc))
    except WriteTypeError as exc:
        return Response("reject", kind="write-type", message=str(exc))
    except WriteValueError as exc:
        return Response("reject", kind="write-value", message=str(exc))


def serve(codec: Codec) -> None:
    """Answer requests on standard input until it ends."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while (request := read_request(stdin)) is not None:
        write_response(stdout, answer(codec, request))
