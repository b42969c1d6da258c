"""The channel's opening exchange: both sides agree on the format versions or stop.

The shared-memory layout carries no version field, so the versions are agreed
once per worker when the channel starts.  The parent proposes the version of
each format it writes (the newest it has); the worker echoes the proposal when
those are the versions it writes too, and otherwise answers with its own and
exits.  (Both sides write their newest version, so a worker that only speaks
``shm-descriptor`` v1, which lacks the checksums the parent checks, is
refused; threading an older agreed version through the batch codec would let
a newer side talk to an older one.)  The parent refuses any answer that differs from its proposal with a
``VersionError`` naming the format.

HELLO payload (little-endian): magic ``b"INRTSHM\\0"``, channel version, then
the shm-message, shm-samples-meta and shm-descriptor versions (``Int32ul`` each).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping

from inert._errors import InvalidValueError, TrailingBytesError, TruncatedError, VersionError
from inert.codecs import shm_descriptor, shm_message, shm_samples_meta

from ._fdpass import CHANNEL_FORMAT, FrameKind, recv_frame, send_frame

__all__ = ["CHANNEL_VERSION", "FORMAT_VERSIONS", "propose", "answer"]

CHANNEL_VERSION = 1
_MAGIC = b"INRTSHM\0"
_HELLO = struct.Struct("<8sIIII")
_FORMATS = (shm_message.FORMAT, shm_samples_meta.FORMAT, shm_descriptor.FORMAT)
#: The versions of each format this side can read and write.
FORMAT_VERSIONS: Mapping[str, tuple[int, ...]] = {
    shm_message.FORMAT: shm_message.VERSIONS,
    shm_samples_meta.FORMAT: shm_samples_meta.VERSIONS,
    shm_descriptor.FORMAT: shm_descriptor.VERSIONS,
}


def _pack(channel: int, versions: Mapping[str, int]) -> bytes:
    return _HELLO.pack(_MAGIC, channel, *(versions[name] for name in _FORMATS))


def _unpack(payload: bytes) -> tuple[int, dict[str, int]]:
    # Offsets in errors count the frame kind byte, so they match the record.
    if len(payload) < _HELLO.size:
        raise TruncatedError(CHANNEL_FORMAT, 1 + len(payload), "hello", f"{_HELLO.size} bytes needed, {len(payload)} present")
    if len(payload) > _HELLO.size:
        raise TrailingBytesError(CHANNEL_FORMAT, 1 + _HELLO.size, "hello", f"{len(payload) - _HELLO.size} bytes after the end")
    magic, channel, *versions = _HELLO.unpack(payload)
    if magic != _MAGIC:
        raise InvalidValueError(CHANNEL_FORMAT, 1, "hello.magic", f"{magic!r} is not an Inert channel")
    return channel, dict(zip(_FORMATS, versions, strict=True))


def _newest(supported: Mapping[str, tuple[int, ...]]) -> dict[str, int]:
    return {name: max(supported[name]) for name in _FORMATS}


def propose(sock: socket.socket, timeout: float) -> dict[str, int]:
    """Parent side: propose the newest versions; return them once the worker agrees."""
    proposal = _newest(FORMAT_VERSIONS)
    send_frame(sock, FrameKind.HELLO, _pack(CHANNEL_VERSION, proposal))
    kind, payload, fds = recv_frame(sock, timeout)
    if fds or kind != FrameKind.HELLO:
        raise InvalidValueError(CHANNEL_FORMAT, 0, "kind", f"{kind.name} where the worker's HELLO belongs")
    channel, answered = _unpack(payload)
    if channel != CHANNEL_VERSION:
        raise VersionError(CHANNEL_FORMAT, 9, "hello.channel", f"worker speaks {channel}, the parent {CHANNEL_VERSION}")
    for index, name in enumerate(_FORMATS):
        if answered[name] != proposal[name]:
            raise VersionError(
                CHANNEL_FORMAT, 13 + 4 * index, f"hello.{name}", f"worker speaks {answered[name]}, the parent {proposal[name]}"
            )
    return proposal


def answer(sock: socket.socket, supported: Mapping[str, tuple[int, ...]] = FORMAT_VERSIONS) -> bool:
    """Worker side: agree to the parent's proposal if it names the newest version of each format in ``supported``.

    Returns False (after telling the parent what this side speaks) when it is not.
    """
    kind, payload, fds = recv_frame(sock, None)
    if fds or kind != FrameKind.HELLO:
        raise InvalidValueError(CHANNEL_FORMAT, 0, "kind", f"{kind.name} where the parent's HELLO belongs")
    channel, proposal = _unpack(payload)
    if channel == CHANNEL_VERSION and proposal == _newest(supported):
        send_frame(sock, FrameKind.HELLO, payload)
        return True
    send_frame(sock, FrameKind.HELLO, _pack(CHANNEL_VERSION, _newest(supported)))
    return False
