"""A batch's samples in a chunk: written by a worker with their meta in ``shm-samples-meta``, viewed by the parent."""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np

from inert._errors import InvalidValueError, WriteTypeError, WriteValueError
from inert._sample_bytes import BOOL_DTYPE, check_bool_bytes
from inert.codecs import shm_message, shm_samples_meta

from ._host import _dali, _original
from ._messages import _AT_META

# DALI's own alignment (``SharedBatchWriter``): samples start on 128-byte boundaries.
_SAMPLE_ALIGNMENT = 128

_SampleKind = shm_samples_meta.SampleKind
_ARRAY = _SampleKind.ARRAY
_ndarray = np.ndarray
_dtypes: dict[str, np.dtype[Any]] = {}
# Samples meta decoded lately, by (bytes, chunk size), with where its bool arrays
# lie; see ``_decode_samples_meta``.
_layouts: dict[tuple[bytes, int], tuple[list[dict[str, Any]], list[tuple[str, int, int]]]] = {}
# Samples meta encoded lately, by batch layout; see ``_encode_layout``.
_encodings: dict[tuple[Any, ...], tuple[bytes, list[int], int]] = {}
_LAYOUT_SLOTS = 8
_LAYOUT_MAX_BYTES = 1 << 16
_LAYOUT_MAX_ARRAYS = 1 << 12


def _align_up(x: int, alignment: int) -> int:
    return -(-x // alignment) * alignment


def _layout(sample: Any, arrays: list[np.ndarray]) -> tuple[Any, ...]:
    """The hashable layout of one sample; its arrays, converted as DALI converts them, go to ``arrays``.

    An array is ``(ARRAY, dtype string, shape)``, a tuple or list
    ``(TUPLE or LIST, (item layouts...))``.
    """
    if sample.__class__ is np.ndarray:
        array = sample
    elif isinstance(sample, (tuple, list)):
        kind = _SampleKind.TUPLE if isinstance(sample, tuple) else _SampleKind.LIST
        return (kind, tuple([_layout(part, arrays) for part in sample]))
    else:
        sb = _dali.shared_batch
        array = sb._sample_to_numpy(sample, sb._sample_error_msg)
    arrays.append(array)
    return (_SampleKind.ARRAY, array.dtype.str, array.shape)


def _meta_value(
    layout: tuple[Any, ...], arrays: Iterator[np.ndarray], offsets: list[int], end: int
) -> tuple[dict[str, Any], int]:
    """The shm-samples-meta value of one sample laid out from ``end`` (128-byte aligned, as DALI does)."""
    kind = layout[0]
    if kind == _SampleKind.ARRAY:
        offset = _align_up(end, _SAMPLE_ALIGNMENT)
        offsets.append(offset)
        nbytes = next(arrays).nbytes
        return {"kind": kind, "offset": offset, "nbytes": nbytes, "dtype": layout[1], "shape": layout[2]}, offset + nbytes
    items = []
    for child in layout[1]:
        item, end = _meta_value(child, arrays, offsets, end)
        items.append(item)
    return {"kind": kind, "items": items}, end


def _encode_layout(layout: tuple[Any, ...], arrays: list[np.ndarray]) -> tuple[bytes, list[int], int]:
    """The encoded samples meta of a batch, each array's offset, and the end of the data.

    Cached by layout: a batch shaped like a recent one reuses its encoding.
    """
    encoded = _encodings.get(layout)
    if encoded is None:
        offsets: list[int] = []
        samples = []
        end = 0
        remaining = iter(arrays)
        for sample in layout:
            value, end = _meta_value(sample, remaining, offsets, end)
            samples.append(value)
        encoded = (shm_samples_meta.encode({"samples": samples}), offsets, end)
        if len(arrays) <= _LAYOUT_MAX_ARRAYS:
            if len(_encodings) >= _LAYOUT_SLOTS:
                _encodings.clear()
            _encodings[layout] = encoded
    return encoded


def _write_batch(self: Any, batch: Any) -> None:
    """``SharedBatchWriter._write_batch`` with the samples' metadata in shm-samples-meta.

    The chunk layout is DALI's: ``[sample data | samples meta | completed task]``.
    """
    if not batch:
        return
    arrays: list[np.ndarray] = []
    layout = tuple([_layout(sample, arrays) for sample in batch])
    meta, offsets, end = _encode_layout(layout, arrays)
    self.meta_data_size = len(meta)
    self.data_size = _align_up(end, _SAMPLE_ALIGNMENT)
    self.total_size = _align_up(self.data_size + self.meta_data_size, _SAMPLE_ALIGNMENT)
    if self.shm_chunk.capacity < self.total_size:
        _dali.shared_batch.resize_shm_chunk(self.shm_chunk, self.total_size + self.min_trailing_offset)
    view = self.shm_chunk.buf
    for offset, array in zip(offsets, arrays, strict=True):
        nbytes = array.nbytes
        if nbytes and array.flags.c_contiguous:
            view[offset : offset + nbytes] = array.data.cast("B")
        else:
            np.ndarray(array.shape, array.dtype, buffer=view[offset : offset + nbytes])[...] = array
    view[self.data_size : self.data_size + self.meta_data_size] = meta


def _serialize_done_task(self: Any, processed_task: Any) -> Any:
    """A batch the formats cannot carry (an object array, say) fails its task with the reason.

    Without this the writer's error would end the worker's dispatcher thread
    and the parent would only learn that the worker stopped.
    """
    original = _original(_dali.worker_modules.worker.SharedBatchDispatcher, "_serialize_done_task")
    try:
        return original(self, processed_task)
    except (WriteTypeError, WriteValueError) as exc:
        reason = f"the callback's output cannot be sent through shared memory (inert.dali): {exc}"
        processed_task.exception = RuntimeError(reason)
        # DALI shows the user the traceback text: end it with the reason.
        processed_task.traceback_str = f"{traceback.format_exc()}\n{reason}\n"
        return self._serialize_failed_task(processed_task)


def _dtype(text: str) -> np.dtype[Any]:
    # The codec has already restricted ``text`` to a few dozen plain numeric dtypes.
    dtype = _dtypes.get(text)
    if dtype is None:
        dtype = _dtypes[text] = np.dtype(text)
    return dtype


def _build(view: memoryview, samples: list[dict[str, Any]]) -> list[Any]:
    """The arrays (over ``view``), tuples and lists ``samples`` describe.

    Runs once per sample of every batch: array samples are built inline.
    """
    built: list[Any] = []
    for sample in samples:
        kind = sample["kind"]
        if kind == _ARRAY:
            text = sample["dtype"]
            dtype = _dtypes.get(text) or _dtype(text)
            built.append(_ndarray(sample["shape"], dtype, buffer=view, offset=sample["offset"]))
        else:
            items = _build(view, sample["items"])
            built.append(tuple(items) if kind == _SampleKind.TUPLE else items)
    return built


def _deserialize_batch(buffer: Any, batch_meta: Any) -> list[Any]:
    """The samples of a finished batch: arrays over the chunk, as DALI's ``deserialize_batch``.

    shm-samples-meta checks every array against itself and against the chunk
    (dtype, a shape numpy can describe, nbytes, alignment, bounds) and each
    bool array's bytes are checked to be 0 or 1, before any array is built.
    """
    start, size = batch_meta.meta_offset, batch_meta.meta_size
    if size == 0:
        return []
    capacity = buffer.capacity
    if start + size > capacity:
        raise InvalidValueError(
            shm_message.FORMAT, _AT_META, "meta.size", f"bytes {start}..{start + size} lie beyond the {capacity}-byte chunk"
        )
    view = buffer.buf
    samples, bools = _decode_samples_meta(bytes(view[start : start + size]), capacity)
    for path, offset, nbytes in bools:
        try:
            check_bool_bytes(shm_samples_meta.FORMAT, view, offset, nbytes)
        except InvalidValueError as exc:
            raise exc.within(path) from None
    return _build(view, samples)


def _bool_arrays(samples: list[dict[str, Any]], path: str, found: list[tuple[str, int, int]]) -> None:
    """Append (field path, offset, nbytes) of every bool array in ``samples`` to ``found``."""
    for i, sample in enumerate(samples):
        if sample["kind"] == _ARRAY:
            if sample["dtype"] == BOOL_DTYPE:
                found.append((f"{path}[{i}]", sample["offset"], sample["nbytes"]))
        else:
            _bool_arrays(sample["items"], f"{path}[{i}].items", found)


def _decode_samples_meta(data: bytes, chunk_size: int) -> tuple[list[dict[str, Any]], list[tuple[str, int, int]]]:
    """The decoded samples meta and where its bool arrays lie, from a small cache of the latest layouts.

    Pipelines with fixed shapes send the same metadata bytes batch after batch;
    decoding is a pure function of the bytes and the chunk size, so identical
    input reuses the value decoded before (which nothing mutates).  Only
    successful decodes of small inputs are kept: the cache is bounded.  The
    bytes of bool arrays change every batch: they are checked by the caller.
    """
    key = (data, chunk_size)
    layout = _layouts.get(key)
    if layout is None:
        samples = shm_samples_meta.decode(data, chunk_size=chunk_size)["samples"]
        bools: list[tuple[str, int, int]] = []
        _bool_arrays(samples, "samples", bools)
        layout = (samples, bools)
        if len(data) <= _LAYOUT_MAX_BYTES:
            if len(_layouts) >= _LAYOUT_SLOTS:
                _layouts.clear()
            _layouts[key] = layout
    return layout
