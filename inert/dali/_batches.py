"""A batch's samples in a chunk: written by a worker with their meta in ``shm-samples-meta``, viewed by the parent.

The layout, its caches and the samples' views are ``inert._samples_layout``'s, shared with ``inert.shm``.
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np

from inert._errors import InvalidValueError, WriteTypeError, WriteValueError
from inert._samples_layout import (
    COMPLETED_TASK_AT,
    SAMPLE_ALIGNMENT,
    EncodedLayout,
    align_up,
    build_samples,
    check_bools,
    decode_layout,
    dtype_text,
    encode_arrays,
    encode_layout,
)
from inert.codecs import shm_message, shm_samples_meta

from ._host import _dali, _original

_SampleKind = shm_samples_meta.SampleKind
_ARRAY = _SampleKind.ARRAY
# The types in a batch of arrays alone (``_sample_to_numpy`` takes them as they are).
_ARRAYS_ALONE = {np.ndarray}


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
    return (_ARRAY, dtype_text(array.dtype), array.shape)


def _encoded(batch: Any) -> tuple[list[np.ndarray], EncodedLayout]:
    """The batch's arrays, converted as DALI converts them, and its encoded samples meta."""
    if set(map(type, batch)) == _ARRAYS_ALONE:
        arrays = list(batch)
        return arrays, encode_arrays(arrays)
    arrays = []
    layout = tuple([_layout(sample, arrays) for sample in batch])
    return arrays, encode_layout(layout, [array.nbytes for array in arrays])


def _write_batch(self: Any, batch: Any) -> None:
    """``SharedBatchWriter._write_batch`` with the samples' metadata in shm-samples-meta.

    The chunk layout is DALI's: ``[sample data | samples meta | completed task]``.
    """
    if not batch:
        return
    arrays, encoded = _encoded(batch)
    meta = encoded.meta
    self.meta_data_size = len(meta)
    self.data_size = align_up(encoded.data_end, SAMPLE_ALIGNMENT)
    self.total_size = align_up(self.data_size + self.meta_data_size, SAMPLE_ALIGNMENT)
    if self.shm_chunk.capacity < self.total_size:
        _dali.shared_batch.resize_shm_chunk(self.shm_chunk, self.total_size + self.min_trailing_offset)
    view = self.shm_chunk.buf
    for offset, array in zip(encoded.offsets, arrays, strict=True):
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
        reason = f"bytes {start}..{start + size} lie beyond the {capacity}-byte chunk"
        raise InvalidValueError(shm_message.FORMAT, COMPLETED_TASK_AT["meta"], "meta.size", reason)
    view = buffer.buf
    layout = decode_layout(bytes(view[start : start + size]), capacity)
    check_bools(view, layout)
    return build_samples(view, layout.samples)
