"""A batch in a shared-memory chunk, without processes: write, validate, view; and what garbage gives."""

from __future__ import annotations

import errno
import mmap
import os
import pickle
import socket
import struct
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import inert
from inert import _samples_layout
from inert._extras import install_hint
from inert.codecs import shm_descriptor, shm_message, shm_samples_meta
from inert.shm import MAX_SAMPLE_DEPTH, SAMPLE_ALIGNMENT, ChannelClosedError, EndOfData, WorkerDiedError, WorkerTaskError
from inert.shm._batch import (
    TaskHeader,
    checksums,
    failure_from_exception,
    layout_failure,
    layout_success,
    plan_batch,
    read_result,
    read_samples,
    write_result,
)
from inert.shm._fdpass import FrameKind, PeerClosed, recv_frame, send_frame, socket_pair
from inert.shm._handshake import FORMAT_VERSIONS, answer, propose
from inert.shm._memory import MappedChunk, MemoryBackend, WritableChunk, create_chunk, default_backend, map_chunk

HEADER = TaskHeader(worker_id=1, context_i=0, scheduled_i=7, minibatch_i=7)

DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    np.dtype(">i4"),
    np.dtype(">f8"),
]


def _array(dtype: Any, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype.newbyteorder("="), endpoint=True).astype(dtype)


def mixed_batch() -> list[Any]:
    """Every dtype in several shapes (0-d, zero-size, odd sizes), and nested tuples and lists."""
    samples: list[Any] = []
    for i, dtype in enumerate(DTYPES):
        samples.append(_array(dtype, (), i))
        samples.append(_array(dtype, (3, 5), i))
        samples.append(_array(dtype, (0, 4), i))
    samples.append((_array(np.float32, (2, 2), 1), [_array(np.int8, (7,), 2), ()], []))
    samples.append([(_array(np.uint16, (1, 1, 1), 3),)])
    samples.append(np.float32(2.5))  # a numpy scalar is a 0-d sample
    samples.append(np.arange(12, dtype=np.int32).reshape(3, 4).T)  # not contiguous: written contiguous
    return samples


def assert_same(got: Any, want: Any) -> None:
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
        return
    want = np.asarray(want)
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def leaves(sample: Any) -> list[np.ndarray]:
    if isinstance(sample, (tuple, list)):
        return [leaf for item in sample for leaf in leaves(item)]
    return [sample]


class Written:
    """A result written into a fresh chunk, and the parent's read-only mapping of that chunk."""

    def __init__(self, batch: list[Any], extra: int = 0, backend: MemoryBackend = MemoryBackend.MEMFD) -> None:
        plan = plan_batch(batch)
        layout = layout_success(plan, HEADER)
        self.writer: WritableChunk = create_chunk(layout.size + extra, backend)
        self.offset, self.size = write_result(self.writer.buffer, plan, layout)
        self.meta_offset = layout.meta_offset
        self.chunk: MappedChunk = map_chunk(
            os.dup(self.writer.fd),
            0,
            self.writer.capacity,
            require_seals=backend is MemoryBackend.MEMFD,
            max_capacity=1 << 30,
        )

    def read(self) -> list[Any]:
        message = read_result(self.chunk, self.offset, self.size, HEADER)
        return read_samples(self.chunk, message["meta"])

    def poke(self, offset: int, data: bytes) -> None:
        self.writer.buffer[offset : offset + len(data)] = data


@pytest.mark.parametrize("backend", list(MemoryBackend))
def test_round_trip_of_every_dtype_and_shape_gives_zero_copy_read_only_views(backend: MemoryBackend) -> None:
    batch = mixed_batch()
    written = Written(batch, backend=backend)
    got = written.read()
    assert_same(got, batch)
    whole = np.frombuffer(written.chunk.buffer, np.uint8)
    for leaf in leaves(got):
        assert not leaf.flags.writeable
        if leaf.size:
            assert np.shares_memory(leaf, whole)
    # Zero-copy: a change the worker makes shows through the parent's view.
    written.poke(0, b"\x01")
    assert got[0].item() is True or got[0].item() == 1


def test_samples_are_aligned_and_laid_out_before_meta_and_message() -> None:
    batch = [np.zeros(3, np.int8), np.ones(5, np.float64), np.zeros((), np.int16)]
    plan = plan_batch(batch)
    assert [offset for offset, _ in plan.arrays] == [0, SAMPLE_ALIGNMENT, 2 * SAMPLE_ALIGNMENT]
    layout = layout_success(plan, HEADER)
    assert layout.meta_offset >= plan.data_size and layout.meta_offset % 8 == 0
    assert layout.message_offset == layout.meta_offset + len(layout.meta)
    message = shm_message.decode(layout.message)
    assert message["meta"] == {"offset": layout.meta_offset, "size": len(layout.meta)}


@pytest.mark.parametrize("part", ["message", "meta"])
def test_structure_damaged_after_the_descriptor_was_sent_fails_its_checksum(part: str) -> None:
    plan = plan_batch([np.arange(4, dtype=np.int32)])
    layout = layout_success(plan, HEADER)
    written = Written([np.arange(4, dtype=np.int32)])
    crcs = checksums(written.writer.buffer, layout)
    message = read_result(written.chunk, written.offset, written.size, HEADER, crcs["message_crc32"])
    assert len(read_samples(written.chunk, message["meta"], crcs["meta_crc32"])) == 1
    at = layout.message_offset + 9 if part == "message" else layout.meta_offset + 8 + 1 + 16 + 4 + 1
    written.poke(at, bytes([written.writer.buffer[at] ^ 0x01]))  # context_i 1, or dtype "<i4" -> "=i4"
    with pytest.raises(inert.ChecksumError) as caught:
        message = read_result(written.chunk, written.offset, written.size, HEADER, crcs["message_crc32"])
        read_samples(written.chunk, message["meta"], crcs["meta_crc32"])
    fmt, offset = ("shm-message", layout.message_offset) if part == "message" else ("shm-samples-meta", layout.meta_offset)
    assert (caught.value.format, caught.value.offset) == (fmt, offset)
    assert "the descriptor says" in str(caught.value)


def test_max_sample_depth_matches_the_spec() -> None:
    from inert.spec import shm_samples_meta as spec  # the dev extra installs Construct: a failure here is one
    assert spec.MAX_DEPTH == MAX_SAMPLE_DEPTH


def _nested(levels: int) -> Any:
    sample: Any = np.zeros(1, np.int8)
    for _ in range(levels):
        sample = (sample,)
    return sample


def test_deepest_allowed_nesting_round_trips() -> None:
    batch = [_nested(MAX_SAMPLE_DEPTH - 1)]
    assert_same(Written(batch).read(), batch)


def _self_containing() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return [loop]


@pytest.mark.parametrize(
    ("batch", "error", "where"),
    [
        ([np.array([object()], dtype=object)], inert.WriteTypeError, "samples[0]: unsupported dtype '|O'"),
        ([np.zeros(2, dtype=[("a", "i4"), ("b", "O")])], inert.WriteTypeError, "samples[0]: unsupported dtype '|V12'"),
        ([np.array(["text"])], inert.WriteTypeError, "unsupported dtype '<U4'"),
        ([(1, 2)], inert.WriteTypeError, "samples[0].items[0]: unsupported sample type int"),
        (["text"], inert.WriteTypeError, "samples[0]: unsupported sample type str"),
        ([{"a": np.zeros(1)}], inert.WriteTypeError, "unsupported sample type dict"),
        ([_nested(MAX_SAMPLE_DEPTH)], inert.WriteValueError, "nesting exceeds max_depth(64)"),
        (_self_containing(), inert.WriteValueError, "nesting exceeds max_depth(64)"),
        (np.zeros(3), inert.WriteTypeError, "a batch is a list of samples"),
    ],
)
def test_unwritable_batches_are_refused_before_any_byte_is_written(batch: Any, error: type, where: str) -> None:
    with pytest.raises(error) as caught:
        plan_batch(batch)
    assert where in str(caught.value)
    assert not isinstance(caught.value, inert.InertError)  # a caller mistake, not bad bytes


def test_failure_result_carries_kind_message_and_traceback() -> None:
    def callback() -> None:
        raise ValueError("sample 3 is bad")

    try:
        callback()
    except ValueError as exc:
        failure = failure_from_exception(exc)
    layout = layout_failure(failure, HEADER)
    assert layout.message_offset == 0
    message = shm_message.decode(layout.message)
    assert message["meta"] is None
    assert message["exception"]["kind"] == shm_message.ExceptionKind.RUNTIME_ERROR
    assert message["exception"]["message"] == "ValueError: sample 3 is bad"
    assert "in callback" in message["traceback"]
    assert failure_from_exception(StopIteration()).kind == "STOP_ITERATION"


def test_failure_text_is_clipped_to_a_bounded_size() -> None:
    failure = failure_from_exception(RuntimeError("é" * 200_000))
    assert len(failure.message.encode()) <= 64 * 1024
    shm_message.encode(
        HEADER.completed_task(meta=None, exception={"kind": failure.kind, "message": failure.message}, traceback=None)
    )


# -- garbage in the chunk -------------------------------------------------

SIMPLE = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False])]


def _expect(written: Written, error: type, fmt: str, offset: int, field: str) -> inert.InertError:
    with pytest.raises(error) as caught:
        written.read()
    exc = caught.value
    assert (exc.format, exc.offset, exc.field) == (fmt, offset, field), str(exc)
    assert str(exc).startswith(f"{fmt}: offset {offset}: {field}: ")
    return exc


def test_garbage_dtype_in_meta_names_format_offset_and_field() -> None:
    written = Written(SIMPLE)
    first = written.meta_offset + 8 + 1  # count, then the first sample's kind byte
    written.poke(first + 16 + 8, b"|O4")  # offset, nbytes, the dtype's u64 length
    _expect(written, inert.InvalidValueError, "shm-samples-meta", first, "samples[0].dtype")


def test_sample_pointing_past_the_chunk_is_refused() -> None:
    written = Written(SIMPLE)
    first = written.meta_offset + 9
    written.poke(first, struct.pack("<Q", written.chunk.capacity))
    _expect(written, inert.InvalidValueError, "shm-samples-meta", first, "samples[0].nbytes")


def test_sample_overlapping_the_meta_is_refused() -> None:
    written = Written(SIMPLE)
    first = written.meta_offset + 9
    written.poke(first, struct.pack("<Q", written.meta_offset - 8))
    _expect(written, inert.InvalidValueError, "shm-samples-meta", written.meta_offset, "samples[0].nbytes")


@pytest.mark.parametrize("size", [2, 10_000])  # checked without numpy, and with it
def test_bool_bytes_other_than_0_and_1_are_refused(size: int) -> None:
    written = Written([np.zeros(3, np.float32), np.zeros(size, np.bool_)])
    written.poke(SAMPLE_ALIGNMENT + size - 1, b"\x02")
    exc = _expect(written, inert.InvalidValueError, "shm-samples-meta", SAMPLE_ALIGNMENT, "samples[1]")
    assert exc.reason == "bool byte 2 is not 0 or 1"


# --- the layout caches (inert._samples_layout, shared with inert.dali) ------------------------------


def test_a_layout_read_before_still_has_its_bool_bytes_checked() -> None:
    written = Written(SIMPLE)
    assert_same(written.read(), SIMPLE)
    cached = _samples_layout._last[2]
    written.poke(SAMPLE_ALIGNMENT + 1, b"\xff")
    exc = _expect(written, inert.InvalidValueError, "shm-samples-meta", SAMPLE_ALIGNMENT, "samples[1]")
    assert exc.reason == "bool byte 255 is not 0 or 1"
    assert _samples_layout._last[2] is cached  # the structure came from the cache, the bytes did not


# Bytes of a 1-d array's record with a 3-letter dtype: kind, offset, nbytes, dtype length and text, ndim, dim.
_RECORD = 1 + 8 + 8 + 8 + 3 + 4 + 8


def test_the_same_meta_is_checked_again_against_a_smaller_chunk() -> None:
    meta = plan_batch([np.zeros(4096, np.uint8), np.zeros(8, np.uint8)]).meta
    assert [s["offset"] for s in _samples_layout.decode_layout(meta, 8192).samples] == [0, 4096]
    with pytest.raises(inert.InvalidValueError) as caught:
        _samples_layout.decode_layout(meta, 4096)
    assert (caught.value.field, caught.value.offset) == ("samples[1].nbytes", 8 + _RECORD + 1)


def test_a_meta_differing_in_one_byte_is_decoded_afresh() -> None:
    meta = plan_batch([np.zeros(4, np.int32), np.zeros(4, np.int32)]).meta
    first = _samples_layout.decode_layout(meta, 1 << 20)
    changed = bytearray(meta)
    offset_at = 8 + _RECORD + 1  # the second sample's offset, after the count, the first record and its kind
    assert struct.unpack_from("<Q", changed, offset_at) == (SAMPLE_ALIGNMENT,)
    struct.pack_into("<Q", changed, offset_at, 2 * SAMPLE_ALIGNMENT)
    second = _samples_layout.decode_layout(bytes(changed), 1 << 20)
    assert [s["offset"] for s in first.samples] == [0, SAMPLE_ALIGNMENT]
    assert [s["offset"] for s in second.samples] == [0, 2 * SAMPLE_ALIGNMENT]
    assert _samples_layout.decode_layout(meta, 1 << 20) is first


def test_metas_alike_in_their_last_bytes_are_told_apart() -> None:
    """The decode cache's key holds a meta's last bytes, not all of them: a meta differing only before them
    (the first sample's offset, 40 records back) is decoded afresh, and each decodes to its own layout."""
    meta = plan_batch([np.zeros(4, np.int32)] * 40).meta
    assert len(meta) > _samples_layout._TAIL + 8 + _RECORD
    changed = bytearray(meta)
    struct.pack_into("<Q", changed, 8 + 1, 100 * SAMPLE_ALIGNMENT)  # the first sample's offset, after the count and kind
    other = bytes(changed)
    assert other[-_samples_layout._TAIL:] == meta[-_samples_layout._TAIL:]
    for _ in range(2):  # taking turns in one slot
        first = _samples_layout.decode_layout(meta, 1 << 20)
        second = _samples_layout.decode_layout(other, 1 << 20)
        assert first.samples[0]["offset"] == 0 and second.samples[0]["offset"] == 100 * SAMPLE_ALIGNMENT
        assert first.samples[1:] == second.samples[1:]


def test_layout_caches_are_bounded() -> None:
    for n in range(3 * _samples_layout._SLOTS):
        _samples_layout.decode_layout(plan_batch([np.zeros(n, np.int8)]).meta, 1 << 20)
    assert len(_samples_layout._layouts) <= _samples_layout._SLOTS
    assert len(_samples_layout._encodings) <= _samples_layout._SLOTS
    many = [np.zeros(1, np.int8)] * (_samples_layout._MAX_CACHED_BYTES // 30)
    meta = plan_batch(many).meta
    assert len(meta) > _samples_layout._MAX_CACHED_BYTES
    layout = _samples_layout.decode_layout(meta, 1 << 30)
    assert len(layout.samples) == len(many)
    assert all(kept is not meta for kept, _ in _samples_layout._layouts.values()) and _samples_layout._last[0] != meta


def test_a_batch_shaped_like_the_last_reuses_its_encoded_meta() -> None:
    plan = plan_batch(SIMPLE)
    again = plan_batch([np.ones((2, 3), np.float32), np.array([False, True])])
    assert again.meta is plan.meta and [o for o, _ in again.arrays] == [o for o, _ in plan.arrays]
    samples = shm_samples_meta.decode(plan.meta)["samples"]
    assert [(s["offset"], s["nbytes"]) for s in samples] == [(0, 24), (SAMPLE_ALIGNMENT, 2)]
    assert plan_batch([np.ones((3, 2), np.float32), np.array([False, True])]).meta != plan.meta


def test_a_batch_of_arrays_alone_is_encoded_as_its_layout_says_and_reused_only_when_alike() -> None:
    batch = [np.zeros((2, 3), np.float32), np.zeros(5, np.bool_), np.zeros((), np.dtype(">i8"))]
    encoded = _samples_layout.encode_arrays(batch)
    assert encoded.meta == plan_batch(batch).meta
    assert (encoded.offsets, encoded.data_end) == ([0, SAMPLE_ALIGNMENT, 2 * SAMPLE_ALIGNMENT], 2 * SAMPLE_ALIGNMENT + 8)
    assert _samples_layout.encode_arrays([np.ones_like(a) for a in batch]) is encoded
    for changed in (
        [batch[0].reshape(3, 2), *batch[1:]],
        [batch[0].astype(np.int32), *batch[1:]],
        [*batch[:2], np.zeros((), np.dtype("<i8"))],
        batch[:2],
    ):
        again = _samples_layout.encode_arrays(changed)
        assert again.meta == plan_batch(changed).meta != encoded.meta


def test_zero_size_sample_with_a_shape_numpy_cannot_hold_is_refused() -> None:
    written = Written([np.zeros((0, 1), np.float32)])
    first = written.meta_offset + 9
    shape_at = first + 16 + 8 + 3 + 4  # offset, nbytes, dtype length and text, ndim
    written.poke(shape_at + 8, struct.pack("<Q", 1 << 62))
    _expect(written, inert.InvalidValueError, "shm-samples-meta", first, "samples[0].shape")


def test_garbage_message_tag_is_refused_at_its_chunk_offset() -> None:
    written = Written(SIMPLE)
    written.poke(written.offset, b"\x07")
    _expect(written, inert.UnknownTagError, "shm-message", written.offset, "type")


def test_message_answering_another_task_is_refused() -> None:
    written = Written(SIMPLE)
    written.poke(written.offset + 17, struct.pack("<q", 99))
    _expect(written, inert.InvalidValueError, "shm-message", written.offset + 17, "scheduled_i")


def test_meta_placed_after_the_message_is_refused() -> None:
    written = Written(SIMPLE, extra=4096)
    written.poke(written.offset + 34, struct.pack("<Q", written.offset + written.size))
    _expect(written, inert.InvalidValueError, "shm-message", written.offset + 34, "meta")


def test_success_without_meta_is_refused() -> None:
    written = Written(SIMPLE)
    message = shm_message.encode(HEADER.completed_task(meta=None, exception={"kind": "NONE"}, traceback=None))
    written.poke(written.offset, message)
    written.size = len(message)
    _expect(written, inert.InvalidValueError, "shm-message", written.offset + 33, "meta")


def test_every_single_byte_corruption_gives_a_value_or_an_inert_error() -> None:
    """The invariant of the reader: parse it or raise InertError, nothing else, for each byte of meta and message."""
    batch = [np.arange(4, dtype=np.int16), (np.ones((2, 2), np.complex64), [np.zeros(0, np.uint8)]), np.array(True)]
    written = Written(batch)
    end = written.offset + written.size
    original = bytes(written.writer.buffer[written.meta_offset : end])
    outcomes = {"ok": 0, "error": 0}
    for position in range(written.meta_offset, end):
        for value in {0x00, 0xFF, 0x80, original[position - written.meta_offset] ^ 0x01}:
            written.poke(position, bytes((value,)))
            try:
                written.read()
            except inert.InertError:
                outcomes["error"] += 1
            else:
                outcomes["ok"] += 1
            written.poke(position, original[position - written.meta_offset : position - written.meta_offset + 1])
    assert outcomes["error"] > 0 and outcomes["ok"] > 0


# -- chunks ---------------------------------------------------------------


def test_memfd_chunk_is_sealed_against_shrinking() -> None:
    chunk = create_chunk(8192, MemoryBackend.MEMFD)
    with pytest.raises(PermissionError):
        os.ftruncate(chunk.fd, 4096)
    chunk.close()


def _unsealed_memfd(size: int) -> int:
    fd = os.memfd_create("unsealed")
    os.ftruncate(fd, size)
    return fd


def test_parent_refuses_an_unsealed_memfd() -> None:
    with pytest.raises(inert.InvalidValueError, match="not sealed"):
        map_chunk(_unsealed_memfd(4096), 0, 4096, require_seals=True, max_capacity=1 << 20)


def test_parent_refuses_a_chunk_whose_size_differs_from_the_declared_capacity() -> None:
    chunk = create_chunk(4096, MemoryBackend.MEMFD)
    with pytest.raises(inert.InvalidValueError, match="8192 declared, the chunk file holds 4096"):
        map_chunk(os.dup(chunk.fd), 0, 8192, require_seals=True, max_capacity=1 << 20)
    chunk.close()


def test_parent_refuses_a_chunk_above_max_chunk_size() -> None:
    with pytest.raises(inert.LimitError, match="max_chunk_size"):
        map_chunk(_unsealed_memfd(8192), 0, 8192, require_seals=False, max_capacity=4096)


def test_parent_refuses_a_descriptor_that_is_not_a_file() -> None:
    read_end, write_end = os.pipe()
    os.close(write_end)
    with pytest.raises(inert.InvalidValueError, match="not a shared-memory file"):
        map_chunk(read_end, 0, 4096, require_seals=False, max_capacity=1 << 20)
    with pytest.raises(OSError):
        os.fstat(read_end)  # closed either way


def test_parent_mapping_is_read_only() -> None:
    written = Written(SIMPLE)
    assert isinstance(written.chunk.buffer, mmap.mmap)
    with pytest.raises(TypeError):
        written.chunk.buffer[0:1] = b"\x00"


# -- framing and handshake -------------------------------------------------


def test_frames_carry_kind_payload_and_descriptors() -> None:
    left, right = socket_pair()
    fd = os.memfd_create("x")
    send_frame(left, FrameKind.CHUNK, b"abc", (fd,))
    kind, payload, fds = recv_frame(right, 1.0)
    assert (kind, payload, len(fds)) == (FrameKind.CHUNK, b"abc", 1)
    os.close(fds[0])
    os.close(fd)
    left.sendall(b"\x63")
    with pytest.raises(inert.UnknownTagError, match="shm-channel: offset 0: kind: unknown FrameKind 99"):
        recv_frame(right, 1.0)
    left.sendall(b"\x06" + b"x" * 1000)
    with pytest.raises(inert.InvalidValueError, match="record longer than 512 bytes"):
        recv_frame(right, 1.0)
    with pytest.raises(TimeoutError):
        recv_frame(right, 0.05)
    left.close()
    with pytest.raises(PeerClosed):
        recv_frame(right, 1.0)
    right.close()


def _run_worker_answer(sock: socket.socket, versions: dict[str, tuple[int, ...]], out: list[bool]) -> None:
    out.append(answer(sock, versions))


@pytest.mark.parametrize("format_name", sorted(FORMAT_VERSIONS))
def test_handshake_refuses_a_version_mismatch(format_name: str, request: pytest.FixtureRequest) -> None:
    parent, worker = socket_pair()
    request.addfinalizer(parent.close)
    request.addfinalizer(worker.close)
    newest = max(FORMAT_VERSIONS[format_name])
    versions = {**FORMAT_VERSIONS, format_name: (*FORMAT_VERSIONS[format_name], newest + 1)}
    agreed: list[bool] = []
    thread = threading.Thread(target=_run_worker_answer, args=(worker, versions, agreed))
    thread.start()
    with pytest.raises(inert.VersionError) as caught:
        propose(parent, 5.0)
    thread.join(5.0)
    assert agreed == [False]
    assert caught.value.field == f"hello.{format_name}"
    assert f"worker speaks {newest + 1}, the parent {newest}" in str(caught.value)


def test_handshake_agrees_on_equal_versions(request: pytest.FixtureRequest) -> None:
    parent, worker = socket_pair()
    request.addfinalizer(parent.close)
    request.addfinalizer(worker.close)
    agreed: list[bool] = []
    thread = threading.Thread(target=_run_worker_answer, args=(worker, dict(FORMAT_VERSIONS), agreed))
    thread.start()
    assert propose(parent, 5.0) == {name: max(v) for name, v in FORMAT_VERSIONS.items()}
    thread.join(5.0)
    assert agreed == [True]


def test_handshake_with_something_that_is_not_a_channel(request: pytest.FixtureRequest) -> None:
    parent, worker = socket_pair()
    request.addfinalizer(parent.close)
    request.addfinalizer(worker.close)
    worker.sendall(bytes((FrameKind.HELLO,)) + b"\x80\x04K\x03." + b"\x00" * 19)  # a pickle where HELLO belongs
    with pytest.raises(inert.InvalidValueError, match="hello.magic"):
        propose(parent, 5.0)


# -- errors crossing processes ---------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        WorkerTaskError("ValueError: x", "Traceback ...", 1, 7),
        EndOfData("StopIteration: ", 0, 3),
        WorkerDiedError(1, 1234, -9),
        ChannelClosedError("the worker pool is closed"),
    ],
)
def test_errors_pickle_intact(error: BaseException) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert vars(copy) == vars(error)


def test_descriptor_codec_is_what_travels() -> None:
    # RELEASE and RESULT records carry exactly an shm-descriptor.
    descriptor = {"worker_id": 1, "shm_chunk_id": 0, "shm_capacity": 4096, "offset": 128, "num_bytes": 60}
    assert len(shm_descriptor.encode({**descriptor, "message_crc32": 1, "meta_crc32": 2})) == 40
    assert len(shm_descriptor.encode(descriptor, version=1)) == 32


def test_missing_numpy_extra_names_it() -> None:
    import subprocess
    import sys

    block = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'numpy':\n"
        "            raise ImportError('blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import inert.shm\n"
    )
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, cwd="/", timeout=60)
    assert result.returncode != 0
    assert f"inert.shm needs numpy: {install_hint('numpy')}" in result.stderr


@pytest.mark.parametrize("errno_value", [errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EINVAL])
def test_kernels_without_memfd_fall_back_to_unlinked_files(monkeypatch: pytest.MonkeyPatch, errno_value: int) -> None:
    def refuse(*args: Any) -> int:
        raise OSError(errno_value, os.strerror(errno_value))

    monkeypatch.setattr(os, "memfd_create", refuse)  # the kernel's answer, not the code under test
    assert default_backend() is MemoryBackend.FILE
    chunk = create_chunk(4096, MemoryBackend.FILE)
    assert os.fstat(chunk.fd).st_nlink == 0  # no name left in the filesystem
    chunk.close()


def test_memfd_is_the_default_where_the_kernel_has_it() -> None:
    assert default_backend() is MemoryBackend.MEMFD


_leaf_arrays = hnp.arrays(
    dtype=st.sampled_from([np.dtype(d) for d in DTYPES]),
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4),
)
_samples = st.recursive(
    _leaf_arrays,
    lambda inner: st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_samples, max_size=6))
def test_any_batch_of_arrays_tuples_and_lists_round_trips(batch: list[Any]) -> None:
    got = Written(batch).read()
    assert len(got) == len(batch)
    for g, w in zip(got, batch, strict=True):
        _assert_same_bits(g, w)


def _assert_same_bits(got: Any, want: Any) -> None:
    # Compared byte for byte: NaNs and signed zeros must come back as they went.
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _assert_same_bits(g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()
