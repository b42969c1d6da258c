"""The ZSTD-body fuzz strategies (``fuzz/zstd_bodies.py``) under the harness's bounds, and cases of each family."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings

from fuzz.zstd_bodies import LIMIT, bodies, check, honest
from inert.conformance._filelib import zstd_frame


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(body=bodies)
def test_every_hostile_body_inflates_exactly_or_is_an_inert_error(body: tuple) -> None:
    assert check(body) in ("value", "InvalidValueError", "LimitError")


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(body=honest())
def test_honest_frames_inflate_to_their_content(body: tuple) -> None:
    assert check(body) == "value"


def test_a_true_bomb_within_the_limit_inflates_and_one_above_it_costs_nothing() -> None:
    from inert._zstd import inflate

    blocks = b"".join(struct.pack("<I", (128 << 10) << 3 | 2 | (i == 63))[:3] + b"\x07" for i in range(64))
    frame = struct.pack("<IBQ", 0xFD2FB528, 0xE0, LIMIT) + blocks
    assert check((frame, LIMIT, None)) == "value"
    assert inflate({"inflated_length": LIMIT, "data": frame}, 0, "b", limit=LIMIT) == b"\x07" * LIMIT
    assert check((frame, LIMIT + 1, None)) == "LimitError"


def test_lying_and_cut_frames_are_refused() -> None:
    content = b"abc" * 1000
    assert check((zstd_frame(content, declared=len(content) + 1), len(content) + 1, None)) == "InvalidValueError"
    assert check((zstd_frame(content, declared=len(content) - 1), len(content) - 1, None)) == "InvalidValueError"
    assert check((zstd_frame(content)[:-5], len(content), None)) == "InvalidValueError"
    assert check((zstd_frame(content) + b"\0", len(content), None)) == "InvalidValueError"
    rle = struct.pack("<IBQ", 0xFD2FB528, 0xE0, 64 << 20) + b"\x03\x00\x10\x00"  # 17 bytes declaring 64 MiB
    assert check((rle, 64 << 20, None)) == "LimitError"  # above the limit: refused before anything is allocated
    assert check((rle, 128 << 10, None)) == "InvalidValueError"  # the frame declares 64 MiB, the record 128 KiB
