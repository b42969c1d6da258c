"""Hostile ``ZSTD`` record bodies (checkpoint-shard version 2) and the invariant their inflation keeps.

The codecs only carry a ZSTD body's frame; the reader inflates it (``inert._zstd.Inflation``)
once its CRC-32 holds, so damage that matters here is what a writer of hostile files
computes a CRC-32 for.  Strategies (each a ``(frame, inflated_length, content or None)``):

* ``honest``: content deflated by zstandard at a random level (the only case with a known result);
* ``lying``: frames whose declared content size, or the record's ``inflated_length``, is not what
  the blocks hold (hand-built frames, as ``inert/conformance/_filelib.zstd_frame``);
* ``truncated``: a real frame cut anywhere, or followed by extra bytes;
* ``bombs``: RLE blocks (4 bytes for 128 KiB each) declaring up to 32768 times their size, some
  declaring far more than the reader's limit, some holding more or fewer blocks than declared;
* ``flipped``: a real frame with bytes changed.

The invariant (``check``): ``inflate`` returns exactly ``inflated_length`` bytes (the content,
for ``honest``) or raises an ``InertError``; within the harness's bounds for the stored bytes
plus the declared length (the reader's promise: memory follows declared sizes, which its caller
bounds beforehand, never what a frame inflates to), and a declared length above the limit
costs nothing.
"""

from __future__ import annotations

import struct
import time
import tracemalloc
from typing import Any

from hypothesis import strategies as st

from fuzz.harness import ResourceFinding, memory_limit, time_limit
from inert._errors import InertError, LimitError
from inert._zstd import inflate
from inert.conformance._filelib import zstd_frame

__all__ = ["LIMIT", "bodies", "check"]

#: The largest inflated length the fuzzed reader accepts (a tensor's declared bytes stand here).
LIMIT = 8 << 20
_BLOCK = 128 << 10
_MAGIC = 0xFD2FB528

Body = tuple[bytes, int, "bytes | None"]


def _compress(content: bytes, level: int, checksum: bool) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=checksum).compress(content)


_contents = st.one_of(
    st.binary(max_size=4096),
    st.builds(lambda unit, count: unit * count, st.binary(min_size=1, max_size=16), st.integers(1, 4096)),
)


@st.composite
def honest(draw: Any) -> Body:
    content = draw(_contents)
    return _compress(content, draw(st.integers(-5, 19)), draw(st.booleans())), len(content), content


@st.composite
def lying(draw: Any) -> Body:
    content = draw(_contents)
    declared = draw(st.one_of(st.integers(0, len(content) + 64), st.integers(0, 2**32 - 1)))
    frame = zstd_frame(content, declared=declared)
    length = draw(st.sampled_from([declared, len(content), max(0, declared - 1), declared + 1]))
    return frame, length, None


@st.composite
def truncated(draw: Any) -> Body:
    content = draw(_contents)
    frame = _compress(content, 3, draw(st.booleans()))
    if draw(st.booleans()):
        frame = frame[: draw(st.integers(0, max(0, len(frame) - 1)))]
    else:
        frame += draw(st.binary(min_size=1, max_size=16))
    return frame, len(content), None


@st.composite
def bombs(draw: Any) -> Body:
    blocks = draw(st.integers(1, 96))  # up to 12 MiB from about 400 bytes
    actual = blocks * _BLOCK
    declared = draw(st.one_of(st.just(actual), st.integers(0, 2 * actual), st.integers(LIMIT, 2**62)))
    byte = draw(st.binary(min_size=1, max_size=1))
    frame = struct.pack("<IBQ", _MAGIC, 0xE0, declared)  # FCS 8 bytes, single segment
    held = draw(st.sampled_from([blocks, max(1, blocks - 1), blocks + 1]))
    for index in range(held):
        last = int(index == held - 1)
        frame += struct.pack("<I", (_BLOCK << 3) | (1 << 1) | last)[:3] + byte
    return frame, draw(st.sampled_from([declared, actual])), None  # (an honest bomb's bytes: tests/test_fuzz_zstd_bodies.py)


@st.composite
def flipped(draw: Any) -> Body:
    frame, length, _ = draw(honest())
    data = bytearray(frame)
    for _ in range(draw(st.integers(1, 4))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    return bytes(data), length, None


bodies = st.one_of(honest(), lying(), truncated(), bombs(), flipped())


def check(body: Body) -> str:
    """Inflate ``body`` under the reader's rules and the harness's bounds; the outcome's name."""
    frame, length, content = body
    record = {"inflated_length": length, "data": memoryview(frame)}
    stored = len(frame) + 18  # the body's kind, codec and two lengths around the frame
    tracemalloc.start()
    try:
        start = time.thread_time()
        try:
            out = inflate(record, 0, "body", limit=LIMIT)
            result = "value"
        except InertError as exc:
            out, result = None, type(exc).__name__
            if length > LIMIT:
                assert isinstance(exc, LimitError), f"{length} declared above the limit: {exc!r}"
        elapsed = time.thread_time() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    cost = stored + (length if length <= LIMIT else 0)  # above the limit: refused before anything is allocated
    if elapsed > time_limit(cost):
        raise ResourceFinding(f"inflating {stored} stored bytes ({length} declared) took {elapsed:.3f} s of CPU")
    if peak > memory_limit(stored) + (length if length <= LIMIT else 0):
        raise ResourceFinding(f"inflating {stored} stored bytes ({length} declared) allocated {peak} bytes")
    if out is not None:
        assert len(out) == length, f"{len(out)} bytes inflated, {length} declared"
        assert content is None or out == content, "an honest frame inflated to other bytes"
    elif content is not None:
        raise AssertionError(f"an honest frame was refused: {result}")
    return result
