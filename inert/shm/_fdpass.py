"""Framed records over a Unix ``SOCK_SEQPACKET`` socket, with file descriptors attached.

Each record is one frame kind byte followed by its payload; ``SOCK_SEQPACKET``
keeps record boundaries, so no length prefix is needed.  File descriptors
(shared-memory chunks) travel beside a record as ``SCM_RIGHTS``.  Every receive
on the parent side has a deadline: a silent peer gives ``TimeoutError``, a
closed one :class:`PeerClosed`, never a hang.
"""

from __future__ import annotations

import enum
import os
import select
import socket
import time

from inert._errors import InvalidValueError, UnknownTagError

__all__ = ["FrameKind", "PeerClosed", "CHANNEL_FORMAT", "MAX_FRAME_LEN", "socket_pair", "send_frame", "recv_frame", "close_fds"]

#: Format name used in errors about the channel's own framing.
CHANNEL_FORMAT = "shm-channel"
#: Longest record either side sends (a ScheduledTask is at most 83 bytes).
MAX_FRAME_LEN = 512
#: Most descriptors accepted with one record.
_MAX_FDS = 1


class FrameKind(enum.IntEnum):
    HELLO = 1  # both ways: the versions each side speaks
    TASK = 2  # parent -> worker: an shm-message ScheduledTask
    RELEASE = 3  # parent -> worker: the shm-descriptor of a result the parent is done with
    STOP = 4  # parent -> worker: exit
    CHUNK = 5  # worker -> parent: a new chunk (fd attached), described by an shm-descriptor
    RESULT = 6  # worker -> parent: the shm-descriptor of a CompletedTask in a chunk


_BY_VALUE = {int(kind): kind for kind in FrameKind}


class PeerClosed(ConnectionError):
    """The other end of the channel closed (the process exited or was killed)."""


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair of record sockets (parent end, worker end)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def send_frame(sock: socket.socket, kind: FrameKind, payload: bytes = b"", fds: tuple[int, ...] = ()) -> None:
    """Send one record; raise :class:`PeerClosed` if the peer is gone."""
    data = bytes((kind,)) + payload
    try:
        if fds:
            socket.send_fds(sock, [data], list(fds))
        else:
            sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise PeerClosed(str(exc)) from None


def recv_frame(sock: socket.socket, timeout: float | None) -> tuple[FrameKind, bytes, list[int]]:
    """Receive one record: its kind, payload and attached descriptors.

    ``timeout`` None blocks (the worker side, whose parent ending closes the
    socket); otherwise ``TimeoutError`` after that many seconds.  A record
    that is too long, carries too many descriptors or has an unknown kind is
    an ``InertError`` of format ``shm-channel``; descriptors received with a
    faulty record are closed.
    """
    if timeout is not None:
        deadline = time.monotonic() + timeout
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        while not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no message from the peer within {timeout:g} s")
    try:
        data, fds, flags, _ = socket.recv_fds(sock, MAX_FRAME_LEN, _MAX_FDS)
    except ConnectionResetError as exc:
        raise PeerClosed(str(exc)) from None
    if not data and not fds:
        raise PeerClosed("end of stream")
    try:
        if flags & socket.MSG_TRUNC:
            raise InvalidValueError(CHANNEL_FORMAT, 0, "frame", f"record longer than {MAX_FRAME_LEN} bytes")
        if flags & socket.MSG_CTRUNC:
            raise InvalidValueError(CHANNEL_FORMAT, 0, "fds", f"more than {_MAX_FDS} descriptors attached")
        if not data:
            raise InvalidValueError(CHANNEL_FORMAT, 0, "kind", "empty record")
        kind = _BY_VALUE.get(data[0])
        if kind is None:
            raise UnknownTagError(CHANNEL_FORMAT, 0, "kind", f"unknown FrameKind {data[0]}")
    except BaseException:
        close_fds(fds)
        raise
    return kind, data[1:], fds


def close_fds(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
