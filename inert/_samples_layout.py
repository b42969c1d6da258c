"""The layout of a finished batch in a shared-memory chunk, shared by ``inert.shm`` and ``inert.dali``.

The layout is DALI's::

    [sample data, each array 128-byte aligned | samples meta | CompletedTask]

The samples meta is an ``shm-samples-meta`` value, the CompletedTask an
``shm-message`` value whose ``meta`` says where the samples meta lies.  This
module places a batch's arrays and encodes their meta (writers), and decodes a
samples meta into the samples it describes and builds them over the chunk
(readers).

Both directions are cached by layout: batches of a pipeline with fixed shapes
repeat the same layout, and so the same samples-meta bytes, batch after batch.
Decoding is a pure function of the bytes and the chunk size, so identical input
reuses the value decoded before (which nothing mutates); only successful
decodes of small inputs are kept, in a few slots.  The bytes of bool arrays
change every batch: :func:`check_bools` checks them on every read.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterator
from typing import Any

import numpy as np

from inert._errors import InvalidValueError
from inert._sample_bytes import BOOL_DTYPE, check_bool_bytes
from inert.codecs import shm_samples_meta
from inert.codecs._tables import COMPLETED_TASK_AT, SAMPLES_MAX_DEPTH

__all__ = [
    "SAMPLE_ALIGNMENT",
    "MAX_SAMPLE_DEPTH",
    "COMPLETED_TASK_AT",
    "align_up",
    "dtype_text",
    "EncodedLayout",
    "encode_layout",
    "encode_arrays",
    "SamplesLayout",
    "decode_layout",
    "check_bools",
    "check_before",
    "build_samples",
]

#: Each array starts at a multiple of this (DALI's ``SharedBatchWriter.SAMPLE_ALIGNMENT``).
SAMPLE_ALIGNMENT = 128
#: Deepest nesting of tuples and lists (``MAX_DEPTH`` in ``inert.spec.shm_samples_meta``).
MAX_SAMPLE_DEPTH = SAMPLES_MAX_DEPTH
# COMPLETED_TASK_AT: the byte offset of each fixed field of an ``shm-message`` CompletedTask, computed from
# the grammar by ``inert gen``.

_FORMAT = shm_samples_meta.FORMAT
_ARRAY = shm_samples_meta.SampleKind.ARRAY
_TUPLE = shm_samples_meta.SampleKind.TUPLE
_ndarray = np.ndarray

# The caches' bounds: slots, and the largest input a slot keeps.
_SLOTS = 8
_MAX_CACHED_BYTES = 1 << 16
_MAX_CACHED_ARRAYS = 1 << 12


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


_dtype_texts: dict[np.dtype[Any], str] = {}


def dtype_text(dtype: np.dtype[Any]) -> str:
    """``dtype.str``, which numpy builds anew on every access, from a small table (equal dtypes spell alike)."""
    text = _dtype_texts.get(dtype)
    if text is None:
        if len(_dtype_texts) >= 64:
            _dtype_texts.clear()
        text = _dtype_texts[dtype] = dtype.str
    return text


# --- writers -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class EncodedLayout:
    """The samples meta of a batch layout: its bytes, each array's offset, and the end of the last array."""

    meta: bytes
    offsets: list[int]
    data_end: int


_encodings: dict[tuple[Any, ...], EncodedLayout] = {}


def _meta_value(layout: tuple[Any, ...], nbytes: Iterator[int], offsets: list[int], end: int) -> tuple[dict[str, Any], int]:
    kind = layout[0]
    if kind == _ARRAY:
        offset = align_up(end, SAMPLE_ALIGNMENT)
        offsets.append(offset)
        size = next(nbytes)
        return {"kind": kind, "offset": offset, "nbytes": size, "dtype": layout[1], "shape": layout[2]}, offset + size
    items = []
    for child in layout[1]:
        item, end = _meta_value(child, nbytes, offsets, end)
        items.append(item)
    return {"kind": kind, "items": items}, end


def encode_layout(layout: tuple[Any, ...], nbytes: list[int]) -> EncodedLayout:
    """The samples meta of a batch whose samples have ``layout``, arrays placed from offset 0.

    A sample's layout is ``(ARRAY, dtype.str, shape)`` for an array and ``(TUPLE or LIST,
    (item layouts...))`` for a tuple or list; ``nbytes`` gives each array's size in order
    (a function of its dtype and shape).  Cached by layout.
    """
    encoded = _encodings.get(layout)
    if encoded is None:
        offsets: list[int] = []
        samples: list[dict[str, Any]] = []
        end = 0
        if all(sample[0] == _ARRAY for sample in layout):  # arrays alone (the common batch): placed inline
            for (kind, dtype, shape), size in zip(layout, nbytes, strict=True):
                offset = -(-end // SAMPLE_ALIGNMENT) * SAMPLE_ALIGNMENT
                offsets.append(offset)
                samples.append({"kind": kind, "offset": offset, "nbytes": size, "dtype": dtype, "shape": shape})
                end = offset + size
        else:
            sizes = iter(nbytes)
            for sample in layout:
                value, end = _meta_value(sample, sizes, offsets, end)
                samples.append(value)
        encoded = EncodedLayout(shm_samples_meta.encode({"samples": samples}), offsets, end)
        if len(nbytes) <= _MAX_CACHED_ARRAYS:
            if len(_encodings) >= _SLOTS:
                _encodings.clear()
            _encodings[layout] = encoded
    return encoded


# The dtypes and shapes of the last batch of arrays alone, and its encoding; see ``encode_arrays``.
_last_arrays: tuple[list[np.dtype[Any]], list[tuple[int, ...]], EncodedLayout | None] = ([], [], None)
_get_dtype = operator.attrgetter("dtype")
_get_shape = operator.attrgetter("shape")


def encode_arrays(arrays: list[np.ndarray]) -> EncodedLayout:
    """``encode_layout`` of a batch whose samples are arrays alone (the common batch).

    A batch with the dtypes and shapes of the batch before (so the same sizes) reuses its
    encoding without building its layout.
    """
    global _last_arrays
    dtypes, shapes = list(map(_get_dtype, arrays)), list(map(_get_shape, arrays))
    last_dtypes, last_shapes, encoded = _last_arrays
    if encoded is not None and shapes == last_shapes and dtypes == last_dtypes:
        return encoded
    layout = tuple([(_ARRAY, dtype_text(dtype), shape) for dtype, shape in zip(dtypes, shapes, strict=True)])
    encoded = encode_layout(layout, [array.nbytes for array in arrays])
    _last_arrays = (dtypes, shapes, encoded) if len(arrays) <= _MAX_CACHED_ARRAYS else ([], [], None)
    return encoded


# --- readers -------------------------------------------------------------------------------------


class SamplesLayout:
    """A decoded samples meta: its samples, and where its bool arrays lie."""

    __slots__ = ("samples", "bools", "_data_end")

    def __init__(self, samples: list[dict[str, Any]], bools: list[tuple[str, int, int]]) -> None:
        self.samples = samples
        self.bools = bools  # (field path, offset, nbytes) of each bool array
        self._data_end: int | None = None

    @property
    def data_end(self) -> int:
        """The end of the array ending last (0 without arrays); computed once per layout."""
        if self._data_end is None:
            self._data_end = _data_end(self.samples)
        return self._data_end


def _data_end(samples: list[dict[str, Any]]) -> int:
    end = 0
    for sample in samples:
        stop = sample["offset"] + sample["nbytes"] if sample["kind"] is _ARRAY else _data_end(sample["items"])
        if stop > end:
            end = stop
    return end


def _bool_arrays(samples: list[dict[str, Any]], path: str, found: list[tuple[str, int, int]]) -> None:
    for i, sample in enumerate(samples):
        if sample["kind"] is _ARRAY:
            if sample["dtype"] == BOOL_DTYPE:
                found.append((f"{path}[{i}]", sample["offset"], sample["nbytes"]))
        else:
            _bool_arrays(sample["items"], f"{path}[{i}].items", found)


# A bool array's dtype is these bytes in the meta: a meta without them has none to look for.  Their second byte
# is looked for first: one memchr rules most metas out, where the search for the three bytes took 9 us of a
# 256-array meta's 14 KB (its '|' and '1' bytes recur in every other dtype).
_BOOL_BYTES = BOOL_DTYPE.encode()
_BOOL_MARK = _BOOL_BYTES[1:2]
# The decoded layouts by (size, chunk size, last bytes of the meta), each beside the whole meta it was decoded
# from, compared on a hit: hashing all of a new 14 KB meta took 7 us, a tenth of its decode.  Two metas alike
# in the key and not in full take turns in the slot.
_TAIL = 256
_layouts: dict[tuple[int, int, bytes], tuple[bytes, SamplesLayout]] = {}
# The layout decoded or found last: a pipeline with fixed shapes finds it without hashing the bytes.
_last: tuple[bytes, int, SamplesLayout | None] = (b"", -1, None)


def decode_layout(data: bytes, chunk_size: int) -> SamplesLayout:
    """The samples meta in ``data`` decoded and checked by ``shm-samples-meta`` against a chunk of ``chunk_size`` bytes.

    ``data`` is the caller's private copy of the meta.  Raises the codec's ``InertError``
    (offsets within ``data``).
    """
    global _last
    last_data, last_size, layout = _last
    if chunk_size == last_size and data == last_data and layout is not None:
        return layout
    key = (len(data), chunk_size, data[-_TAIL:])
    found = _layouts.get(key)
    if found is not None and found[0] == data:
        layout = found[1]
    else:
        samples = shm_samples_meta.decode(data, chunk_size=chunk_size)["samples"]
        bools: list[tuple[str, int, int]] = []
        if _BOOL_MARK in data and _BOOL_BYTES in data:
            _bool_arrays(samples, "samples", bools)
        layout = SamplesLayout(samples, bools)
        if len(data) > _MAX_CACHED_BYTES:
            return layout
        if len(_layouts) >= _SLOTS:
            _layouts.clear()
        _layouts[key] = (data, layout)
    _last = (data, chunk_size, layout)
    return layout


def check_bools(view: memoryview, layout: SamplesLayout) -> None:
    """Each bool array of ``layout`` holds only 0 and 1 bytes in ``view`` (the chunk) now."""
    for path, offset, nbytes in layout.bools:
        try:
            check_bool_bytes(_FORMAT, view, offset, nbytes)
        except InvalidValueError as exc:
            raise exc.within(path) from None


def _first_beyond(samples: list[dict[str, Any]], path: str, end: int) -> tuple[str, int, int]:
    for i, sample in enumerate(samples):
        if sample["kind"] is _ARRAY:
            if sample["offset"] + sample["nbytes"] > end:
                return f"{path}[{i}].nbytes", sample["offset"], sample["nbytes"]
        elif sample["items"]:
            found = _first_beyond(sample["items"], f"{path}[{i}].items", end)
            if found[0]:
                return found
    return "", 0, 0


def check_before(layout: SamplesLayout, meta_offset: int) -> None:
    """Every array of ``layout`` ends before the samples meta at ``meta_offset``: the first that does not is named."""
    if layout.data_end > meta_offset:
        field, offset, nbytes = _first_beyond(layout.samples, "samples", meta_offset)
        reason = f"bytes {offset}..{offset + nbytes} overlap the meta at {meta_offset}"
        raise InvalidValueError(_FORMAT, meta_offset, field, reason)


_dtypes: dict[str, np.dtype[Any]] = {}


def _dtype(text: str) -> np.dtype[Any]:
    # The codec has already restricted ``text`` to a few dozen plain numeric dtypes.
    dtype = _dtypes.get(text)
    if dtype is None:
        dtype = _dtypes[text] = np.dtype(text)
    return dtype


def build_samples(buffer: Any, samples: list[dict[str, Any]]) -> list[Any]:
    """The arrays (over ``buffer``, the chunk, zero-copy), tuples and lists ``samples`` describe.

    Runs once per sample of every batch: array samples are built inline.
    """
    built: list[Any] = []
    for sample in samples:
        kind = sample["kind"]
        if kind is _ARRAY:
            text = sample["dtype"]
            built.append(_ndarray(sample["shape"], _dtypes.get(text) or _dtype(text), buffer, sample["offset"]))
        else:
            items = build_samples(buffer, sample["items"])
            built.append(tuple(items) if kind == _TUPLE else items)
    return built
