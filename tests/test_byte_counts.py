"""A message says "1 byte", never "1 bytes": one helper (``inert._errors.byte_count``, ``inert_bytes`` in C) words
every number of bytes the readers and writers report, and the generated readers and the interpreter agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inert._errors import InertError, byte_count
from inert._interpret import interpret_decode
from inert.codecs import shm_descriptor, shm_message
from inert.spec import FORMATS

ROOT = Path(__file__).resolve().parents[1]
#: The emitters and runtimes whose messages count bytes.
PYTHON = ["inert/gen/python.py", "inert/_codec_runtime.py", "inert/_value_doc.py", "inert/_value_types.py",
          "inert/_interpret.py", "inert/spec/_grammar.py"]
C = ["c/inert_runtime.c", "c/inert_msgpack.c", "c/inert_writer.c"]


def test_the_helper() -> None:
    assert [byte_count(n) for n in (0, 1, 2)] == ["0 bytes", "1 byte", "2 bytes"]


def _reason(decode: object, data: bytes) -> str:
    with pytest.raises(InertError) as caught:
        decode(data)  # type: ignore[operator]
    return caught.value.reason


@pytest.mark.parametrize(("fmt", "data", "kwargs", "reason"), [
    (shm_descriptor, bytes(33), {"version": 1}, "1 byte after the end of the value"),
    (shm_message, b"", {}, "1 byte needed, 0 present"),
    (shm_message, b"\x02" + bytes(7), {}, "8 bytes needed, 7 present"),
])
def test_generated_and_interpreted_readers_word_one_byte_alike(fmt: object, data: bytes, kwargs: dict[str, int],
                                                              reason: str) -> None:
    generated = _reason(lambda d: fmt.decode(d, **kwargs), data)  # type: ignore[attr-defined]
    interpreted = _reason(lambda d: interpret_decode(FORMATS[fmt.FORMAT], d, **kwargs), data)  # type: ignore[attr-defined]
    assert generated == interpreted == reason


def test_no_message_counts_bytes_by_hand() -> None:
    """A number then ``bytes`` in an f-string or a C format is the helper's to word."""
    found = []
    for name in PYTHON:
        for number, line in enumerate((ROOT / name).read_text().splitlines(), 1):
            if re.search(r"\{[^{}]+\}\}? bytes\b", line) and "byte_count" not in line and "1 to" not in line:
                found.append(f"{name}:{number}: {line.strip()}")
    for name in C:
        for number, line in enumerate((ROOT / name).read_text().splitlines(), 1):
            if re.search(r"%(ll|z)?u bytes\b", line) and "1 to" not in line:  # "1 to 256 bytes": a range
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
