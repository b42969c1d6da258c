"""Vectors of ``shm-samples-meta``: where each sample of a batch lies in a shared-memory chunk."""

from __future__ import annotations

from typing import Any

from ._vectorlib import U64_MAX, Corpus, Piece, text64, u32, u64

SAMPLE_KINDS = {"ARRAY": 0, "TUPLE": 1, "LIST": 2}
MAX_DEPTH = 64
MAX_SAMPLES = 1 << 24
MAX_NDIM = 64
MAX_DTYPE_LEN = 16
# numpy's dtype.str for the plain numeric kinds; 1-byte types take '|', wider ones '<' or '>'.
ITEMSIZES = {"b": (1,), "i": (1, 2, 4, 8), "u": (1, 2, 4, 8), "f": (2, 4, 8), "c": (8, 16)}


#: Arrays in the uniform batches: enough that a reader's sweep over alike elements is worth taking.
UNIFORM = 16


def dtype_names() -> list[str]:
    names = []
    for kind, sizes in ITEMSIZES.items():
        for size in sizes:
            names += [f"|{kind}{size}"] if size == 1 else [f"<{kind}{size}", f">{kind}{size}"]
    return names


def array(dtype: str, shape: list[int], offset: int = 0, nbytes: int | None = None, raw_dtype: bytes | None = None) -> Piece:
    if nbytes is None:
        nbytes = int(dtype[2:])
        for dim in shape:
            nbytes *= dim
    dtype_bytes = dtype.encode("utf-8") if raw_dtype is None else raw_dtype
    data = b"\x00" + u64(offset, nbytes) + text64(dtype_bytes) + u32(len(shape)) + u64(*shape)
    return Piece(data, {"kind": "ARRAY", "offset": offset, "nbytes": nbytes, "dtype": dtype, "shape": shape})


def group(kind: str, items: list[Piece]) -> Piece:
    data = bytes([SAMPLE_KINDS[kind]]) + u64(len(items)) + b"".join(i.data for i in items)
    return Piece(data, {"kind": kind, "items": [i.value for i in items]})


def batch(samples: list[Piece]) -> Piece:
    return Piece(u64(len(samples)) + b"".join(s.data for s in samples), {"samples": [s.value for s in samples]})


def nested(depth: int, kind: str = "TUPLE") -> Piece:
    """An array wrapped so that it sits at level ``depth`` (a top-level sample is level 1)."""
    sample = array("|u1", [1])
    for _ in range(depth - 1):
        sample = group(kind, [sample])
    return sample


def build() -> Corpus:
    c = Corpus("shm-samples-meta", 1)
    rep = batch(
        [
            array("<f4", [2, 3]),
            group("TUPLE", [array("|b1", [], offset=128), array("<i8", [4], offset=256)]),
            group("LIST", []),
        ]
    )
    c.accept("Representative", "an array, a tuple of two arrays and an empty list", rep)
    c.accept("EmptyBatch", "a batch of no samples", batch([]))
    c.accept("OneArray", "one float32 array of shape (2, 3)", batch([array("<f4", [2, 3])]))
    c.accept("ScalarArray", "a 0-dimensional array: nbytes is the itemsize", batch([array("<f8", [])]))
    c.accept("ZeroSizeArray", "an array with a zero dimension holds no bytes", batch([array("<f4", [0, 5])]))
    c.accept(
        "ZeroSizeLargestDimension",
        "a zero dimension beside a 2**63-1 one: empty, and numpy can describe it",
        batch([array("|u1", [0, (1 << 63) - 1])]),
    )
    c.accept("EmptyTuple", "a tuple of no samples", batch([group("TUPLE", [])]))
    c.accept("EmptyList", "a list of no samples", batch([group("LIST", [])]))
    c.accept(
        "MixedNesting",
        "lists and tuples inside each other",
        batch([group("LIST", [group("TUPLE", [array("|u1", [3])]), group("LIST", [])])]),
    )

    # dtypes: every accepted spelling, and refused ones.
    for name in dtype_names():
        label = {"|": "", "<": "Little", ">": "Big"}[name[0]] + name[1:].upper()
        c.accept(f"Dtype{label}", f"an array of dtype {name}", batch([array(name, [3])]))
    bad_dtypes = {
        "Object": "|O",
        "Unicode": "<U4",
        "Bytes": "|S4",
        "Datetime": "<M8",
        "Float128": "<f16",
        "Float8": "|f1",
        "Int3": "<i3",
        "Complex4": "<c4",
        "NativeOrder": "=f4",
        "NoOrder": "f4",
        "PipeOnWide": "|i4",
        "LittleOnByte": "<i1",
        "BigOnBool": ">b1",
        "TrailingSpace": "<f4 ",
        "UpperCase": "<F4",
        "LeadingZero": "<f08",
        "Empty": "",
        "Structured": "[('a','<f4')]",
    }
    for label, dtype in bad_dtypes.items():
        # nbytes as a lax reader would compute it, so that only the dtype rule can refuse the vector.
        lax_itemsize = int("".join(ch for ch in dtype if ch.isdigit()) or 1)
        refused = array("|u1", [4], nbytes=4 * lax_itemsize, raw_dtype=dtype.encode())
        c.reject(
            f"DtypeRefused{label}",
            f"dtype {dtype!r} is not a plain numeric dtype in numpy's spelling",
            batch([refused]).data,
            "invalid-value",
        )
    c.reject("DtypeNotUtf8", "a dtype that is not UTF-8", batch([array("|u1", [4], raw_dtype=b"<f\xff")]).data, "invalid-value")
    at_limit = "<f4" + " " * (MAX_DTYPE_LEN - 3)
    c.reject(
        "DtypeAtLengthLimit",
        f"a {MAX_DTYPE_LEN}-byte dtype is read, then refused as unsupported",
        batch([array("|u1", [4], raw_dtype=at_limit.encode())]).data,
        "invalid-value",
    )
    # The same limits where a sample is read inside a tuple, and in a batch of 8 arrays (each place reads them).
    at_limit_array = array("|u1", [4], raw_dtype=at_limit.encode())
    deep = array("<f4", [1] * MAX_NDIM)
    for where, wrap in (("InTuple", lambda p: batch([group("TUPLE", [p])])), ("InBatchOf8", lambda p: batch([p] * 8))):
        c.reject(f"DtypeAtLengthLimit{where}", f"a {MAX_DTYPE_LEN}-byte dtype, {where}: read, then refused as "
                 "unsupported", wrap(at_limit_array).data, "invalid-value", rule="shm-samples-meta.dtype")
        c.accept(f"NdimAtLimit{where}", f"an array of {MAX_NDIM} dimensions, {where}", wrap(deep))
        c.reject(f"NdimOverLimit{where}", f"an array of {MAX_NDIM + 1} dimensions, {where}",
                 wrap(array("<f4", [1] * (MAX_NDIM + 1))).data, "limit")
    c.reject(
        "DtypeOverLengthLimit",
        f"a {MAX_DTYPE_LEN + 1}-byte dtype",
        batch([array("|u1", [4], raw_dtype=b"<" * (MAX_DTYPE_LEN + 1))]).data,
        "limit",
    )
    c.reject("DtypeLengthU64Max", "a dtype length of 2**64-1", u64(1) + b"\x00" + u64(0, 0) + u64(U64_MAX), "limit")
    c.reject(
        "DtypeLengthHighWord",
        "a dtype length of 2**32 + 3: a reader of a 32-bit length would see 3",
        u64(1) + b"\x00" + u64(0, 4) + u64((1 << 32) + 3) + b"<f4" + u32(1) + u64(1),
        "limit",
    )
    c.reject(
        "DtypeLength32Bit",
        "an array written with a 32-bit dtype length (Inert before the layout fix)",
        u64(1) + b"\x00" + u64(0, 4) + u32(3) + b"<f4" + u32(1) + u64(1),
        "limit",
    )

    # Size, placement and the chunk.
    c.reject(
        "NbytesTooSmall",
        "nbytes one less than shape and dtype give",
        batch([array("<f4", [2, 3], nbytes=23)]).data,
        "invalid-value",
    )
    c.reject(
        "NbytesTooLarge",
        "nbytes one more than shape and dtype give",
        batch([array("<f4", [2, 3], nbytes=25)]).data,
        "invalid-value",
    )
    c.accept("OffsetAligned", "a float64 array at offset 8", batch([array("<f8", [1], offset=8)]))
    c.accept("OffsetUnalignedByte", "a 1-byte dtype may start at any offset", batch([array("|u1", [1], offset=3)]))
    c.reject("OffsetMisaligned", "a float32 array at offset 2", batch([array("<f4", [1], offset=2)]).data, "invalid-value")
    c.reject(
        "OffsetMisalignedComplex",
        "a complex128 array at offset 8 (its itemsize is 16)",
        batch([array("<c16", [1], offset=8)]).data,
        "invalid-value",
    )
    c.accept("OffsetLargest", "the largest aligned offset, no chunk size given", batch([array("<f8", [1], offset=U64_MAX - 7)]))
    largest = batch([array("|u1", [(1 << 63) - 1])])
    c.accept("SpanAtLimit", "uint8 of shape (2**63-1,): the largest array numpy can describe", largest)
    c.reject(
        "SpanOverLimit",
        "uint8 of shape (2**63,): one byte more than numpy can describe",
        batch([array("|u1", [1 << 63])]).data,
        "invalid-value",
    )
    c.accept("ItemsizeSpanAtLimit", "float64 of shape (2**60-1,)", batch([array("<f8", [(1 << 60) - 1])]))
    c.reject(
        "ItemsizeSpanOverLimit", "float64 of shape (2**60,): 2**63 bytes", batch([array("<f8", [1 << 60])]).data, "invalid-value"
    )
    c.reject(
        "ProductOverflows",
        "uint8 of shape (2**32, 2**32): 2**64 bytes",
        batch([array("|u1", [1 << 32, 1 << 32], nbytes=0)]).data,
        "invalid-value",
    )
    c.reject(
        "ItemsizeProductOverflows",
        "float64 of shape (2**61,): 2**64 bytes",
        batch([array("<f8", [1 << 61], nbytes=0)]).data,
        "invalid-value",
    )
    for name, what, piece, params, rule in (
        ("DtypeBeforeSpan", "the dtype <q8, which numpy lacks, of shape (2**63,)",
         array("|u1", [1 << 63], nbytes=0, raw_dtype=b"<q8"), {}, "shm-samples-meta.dtype"),
        ("NbytesBeforeAligned", "a float32 [1] at offset 2 declaring 8 bytes", array("<f4", [1], offset=2, nbytes=8), {},
         "shm-samples-meta.nbytes"),
        ("AlignedBeforeInsideChunk", "a float32 [4] at offset 2 of an 8-byte chunk", array("<f4", [4], offset=2),
         {"chunk_size": 8}, "shm-samples-meta.offset-aligned"),
    ):
        c.reject(name, f"{what}: the rule listed first decides", batch([piece]).data, "invalid-value", params, rule=rule)
    for label, shape, what in (
        ("EmptySpanOverLimit", [0, 1 << 63], "shape (0, 2**63): empty, but a dimension numpy cannot hold"),
        ("EmptySpanHugeDimension", [0, U64_MAX], "shape (0, 2**64-1): empty, but a dimension numpy cannot hold"),
        ("EmptySpanProduct", [1 << 62, 0, 4], "shape (2**62, 0, 4): empty, but the other dimensions span 2**64 bytes"),
        ("EmptySpanOverflowBeforeZero", [1 << 63, 4, 0], "shape (2**63, 4, 0): a partial product overflows 64 bits"),
    ):
        c.reject(label, f"uint8 of {what}", batch([array("|u1", shape)]).data, "invalid-value")
    c.accept(
        "EmptySpanAtLimit",
        "float32 of shape (2**31, 0, 2**30-1): empty, spanning 2**63 - 2**33 bytes",
        batch([array("<f4", [1 << 31, 0, (1 << 30) - 1])]),
    )
    chunk = {"chunk_size": 24}
    c.accept("ChunkExactFit", "an array ending exactly at the end of the chunk", batch([array("<f4", [2, 3])]), chunk)
    c.reject(
        "ChunkOneBeyond",
        "an array ending one byte past the chunk",
        batch([array("<f4", [2, 3])]).data,
        "invalid-value",
        {"chunk_size": 23},
    )
    c.accept(
        "ChunkEmptyArrayAtEnd", "an empty array placed at the end of the chunk", batch([array("<f4", [0], offset=24)]), chunk
    )
    c.reject(
        "ChunkEmptyArrayBeyond",
        "an empty array placed past the end of the chunk",
        batch([array("<f4", [0], offset=28)]).data,
        "invalid-value",
        chunk,
    )
    c.reject(
        "ChunkNestedBeyond",
        "an array inside a tuple lying past the chunk",
        batch([group("TUPLE", [array("<f4", [8])])]).data,
        "invalid-value",
        chunk,
    )
    c.reject(
        "ChunkOffsetHuge",
        "offset near 2**64 with a chunk: the sum must not wrap",
        batch([array("|u1", [16], offset=U64_MAX - 7)]).data,
        "invalid-value",
        chunk,
    )

    # Limits: nesting, dimensions, counts.
    c.accept("DepthAtLimit", f"an array nested in tuples at level {MAX_DEPTH}", batch([nested(MAX_DEPTH)]))
    c.accept("DepthAtLimitLists", f"an array nested in lists at level {MAX_DEPTH}", batch([nested(MAX_DEPTH, "LIST")]))
    c.reject(
        "DepthOverLimit", f"an array nested in tuples at level {MAX_DEPTH + 1}", batch([nested(MAX_DEPTH + 1)]).data, "limit"
    )
    c.reject("DepthOverLimitEmpty", f"an empty list at level {MAX_DEPTH + 1}", batch([nested_group(MAX_DEPTH + 1)]).data, "limit")
    c.accept("NdimAtLimit", f"an array of {MAX_NDIM} dimensions", batch([array("<f4", [1] * MAX_NDIM)]))
    c.reject("NdimOverLimit", f"an array of {MAX_NDIM + 1} dimensions", batch([array("<f4", [1] * (MAX_NDIM + 1))]).data, "limit")
    ndim_max = u64(1) + b"\x00" + u64(0, 4) + text64(b"<f4") + u32(0xFFFFFFFF)
    c.reject("NdimU32Max", "a dimension count of 2**32-1", ndim_max, "limit")
    c.reject(
        "NdimBeyondInput",
        "3 dimensions declared, 1 present",
        u64(1) + b"\x00" + u64(0, 4) + text64(b"<f4") + u32(3) + u64(1),
        "truncated",
    )
    c.reject("CountOverLimit", f"a batch of {MAX_SAMPLES + 1} samples declared", u64(MAX_SAMPLES + 1), "limit")
    c.reject("CountU64Max", "a batch of 2**64-1 samples declared", u64(U64_MAX), "limit")
    c.reject("CountAtLimitBeyondInput", f"a batch of {MAX_SAMPLES} samples declared, none present", u64(MAX_SAMPLES), "truncated")
    c.reject("CountBeyondInput", "two samples declared, one present", u64(2) + group("LIST", []).data, "truncated")
    c.reject("ItemsOverLimit", f"a tuple of {MAX_SAMPLES + 1} items declared", u64(1) + b"\x01" + u64(MAX_SAMPLES + 1), "limit")
    c.reject(
        "ListItemsOverLimit", f"a list of {MAX_SAMPLES + 1} items declared", u64(1) + b"\x02" + u64(MAX_SAMPLES + 1), "limit"
    )
    for label, code, what in (("Items", b"\x01", "tuple"), ("ListItems", b"\x02", "list")):
        c.reject(f"{label}AtLimitBeyondInput", f"a {what} of {MAX_SAMPLES} items declared, none present: the limit "
                 "itself, cut short", u64(1) + code + u64(MAX_SAMPLES), "truncated", rule="grammar.truncated")
    c.reject("ItemsBeyondInput", "a tuple of 1000 items declared, none present", u64(1) + b"\x01" + u64(1000), "truncated")
    c.reject("ListItemsBeyondInput", "a list of 1000 items declared, none present", u64(1) + b"\x02" + u64(1000), "truncated")
    bad_first = u64(3) + b"\x07" + bytes(10)
    c.reject(
        "CountBeyondInputBadFirst",
        "three samples declared, too few bytes for them, the first one of an unknown kind: the count is checked first",
        bad_first,
        "truncated",
        rule="grammar.truncated",
    )

    # A top-level array cut short: one sample declared, so the count fits what is left.
    whole = array("<f4", [2, 3]).data
    c.reject("ArrayCutInHeader", "one array declared, cut inside its offset and nbytes", u64(1) + whole[:11], "truncated")
    c.reject("ArrayCutInDtype", "one array declared, cut inside its dtype", u64(1) + whole[:22], "truncated")

    # The faults of an array one level down, inside a tuple: a reader must find them at any depth.
    deeper = [
        ("DtypeOverLengthLimit", "a dtype too long", array("|u1", [4], raw_dtype=b"<" * (MAX_DTYPE_LEN + 1)), "limit"),
        ("DtypeNotUtf8", "a dtype that is not UTF-8", array("|u1", [4], raw_dtype=b"<f\xff"), "invalid-value"),
        ("DtypeRefused", "an object dtype", array("|u1", [4], raw_dtype=b"|O"), "invalid-value"),
        ("NdimOverLimit", f"an array of {MAX_NDIM + 1} dimensions", array("<f4", [1] * (MAX_NDIM + 1)), "limit"),
        ("NbytesTooSmall", "nbytes one less than shape and dtype give", array("<f4", [2, 3], nbytes=23), "invalid-value"),
        ("OffsetMisaligned", "a float32 array at offset 2", array("<f4", [1], offset=2), "invalid-value"),
    ]
    for label, what, sample, kind in deeper:
        c.reject(f"Nested{label}", f"inside a tuple: {what}", batch([group("TUPLE", [sample])]).data, kind)

    # Order: a record's rules run once all its fields are read.
    cut = batch([array("|u1", [4], raw_dtype=b"|O")]).data[:-1]
    c.reject(
        "ArrayRulesAfterFields",
        "an array with a refused dtype, cut short in its shape: truncation is found first",
        cut,
        "truncated",
    )

    # Every kind, and the first values beyond.
    for name, value in SAMPLE_KINDS.items():
        sample = array("|u1", [2]) if name == "ARRAY" else group(name, [array("|u1", [2])])
        c.accept(f"SampleKind{value}", f"sample kind {value} ({name})", batch([sample]))
    for value in (3, 0xFF):
        c.reject(
            f"SampleKind{value:02X}Unknown",
            f"sample kind byte {value}, not a SampleKind",
            u64(1) + bytes([value]) + bytes(40),
            "unknown-tag",
        )
    c.reject("TrailingByte", "one byte after a complete batch", rep.data + b"\x00", "trailing-bytes")
    array_value = array("<f4", [2, 3]).value
    refusals: list[tuple[str, str, Any, str]] = [
        ("KindUnknown", "a sample kind that is not a SampleKind", {"samples": [{"kind": "SET", "items": []}]}, "write-value"),
        ("DtypeRefused", "an object dtype", {"samples": [{**array_value, "dtype": "|O", "nbytes": 48}]}, "write-value"),
        (
            "DtypeTooLong",
            f"a dtype of {MAX_DTYPE_LEN + 1} bytes",
            {"samples": [{**array_value, "dtype": "<" * 17}]},
            "write-value",
        ),
        (
            "NbytesMismatch",
            "nbytes one more than shape and dtype give",
            {"samples": [{**array_value, "nbytes": 25}]},
            "write-value",
        ),
        ("OffsetMisaligned", "a float32 array at offset 2", {"samples": [{**array_value, "offset": 2}]}, "write-value"),
        ("ShapeNotList", "a string as the shape", {"samples": [{**array_value, "shape": "2,3"}]}, "write-type"),
        ("DimensionNegative", "a dimension of -1", {"samples": [{**array_value, "shape": [-1, 3]}]}, "write-value"),
        ("DimensionFloat", "a dimension of 2.0", {"samples": [{**array_value, "shape": [2.0, 3]}]}, "write-type"),
        (
            "NdimOverLimit",
            f"an array of {MAX_NDIM + 1} dimensions",
            {"samples": [{**array_value, "shape": [1] * (MAX_NDIM + 1), "nbytes": 4}]},
            "write-value",
        ),
        (
            "ProductOverflows",
            "uint8 of shape (2**32, 2**32)",
            {"samples": [array("|u1", [1 << 32, 1 << 32], nbytes=0).value]},
            "write-value",
        ),
        ("DepthOverLimit", f"an array nested at level {MAX_DEPTH + 1}", batch([nested(MAX_DEPTH + 1)]).value, "write-value"),
        (
            "DepthOverLimitLists",
            f"an array nested in lists at level {MAX_DEPTH + 1}",
            batch([nested(MAX_DEPTH + 1, "LIST")]).value,
            "write-value",
        ),
        (
            "BadItemInList",
            "a list holding an array with a refused dtype",
            {"samples": [{"kind": "LIST", "items": [{**array("|u1", [1]).value, "dtype": "|O"}]}]},
            "write-value",
        ),
    ]
    for name, what, value, kind in refusals:
        c.refuse_write(name, what, value, kind)
    uniform_vectors(c)
    c.malformed_values("Representative", "the representative batch", rep.value)
    c.truncations("Representative", "the representative batch", rep)
    return c


def uniform_vectors(c: Corpus) -> None:
    """Batches of many alike arrays (one dtype, one rank), as data loaders send them.

    A reader may read such a batch in one sweep; each fault must still be found
    in whichever array holds it, and a batch that is alike only in part still reads.
    """
    alike = [array("|u1", [2, 3, 4], offset=32 * i) for i in range(UNIFORM)]
    c.accept("UniformBatch", f"{UNIFORM} uint8 arrays of shape (2, 3, 4)", batch(alike))
    c.accept(
        "UniformBatchFloat",
        f"{UNIFORM} float32 arrays of shape (5,)",
        batch([array("<f4", [5], offset=32 * i) for i in range(UNIFORM)]),
    )
    for index, other, what in (
        (UNIFORM - 1, array("|u1", [24], offset=0), "the last of another rank"),
        (3, array("<f4", [2, 3, 1], offset=0), "the fourth of another dtype of the same length"),
        (5, array("<c16", [2, 3, 4], offset=0), "the sixth of a longer dtype"),
        (7, group("TUPLE", [array("|u1", [2])]), "the eighth a tuple"),
        (1, array("|u1", [2, 12]), "the second of another rank, shorter"),
    ):
        c.accept(
            f"UniformBatchBroken{index}", f"{UNIFORM} uint8 arrays, {what}", batch(alike[:index] + [other] + alike[index + 1 :])
        )

    def spoiled(index: int, sample: Piece) -> bytes:
        return batch(alike[:index] + [sample] + alike[index + 1 :]).data

    long_dtype = array("|u1", [2, 3, 4], raw_dtype=b"<" * (MAX_DTYPE_LEN + 1))
    c.reject("UniformFirstDtypeOverLimit", f"{UNIFORM} arrays, the first's dtype too long", spoiled(0, long_dtype), "limit")
    many_dims = array("|u1", [1] * (MAX_NDIM + 1))
    c.reject(
        "UniformFirstNdimOverLimit", f"{UNIFORM} arrays, the first of {MAX_NDIM + 1} dimensions", spoiled(0, many_dims), "limit"
    )
    c.reject("UniformBatchCut", f"{UNIFORM} alike arrays, the last cut short", batch(alike).data[:-1], "truncated")
    c.reject(
        "UniformDtypeNotUtf8",
        f"{UNIFORM} alike arrays, the tenth's dtype not UTF-8",
        spoiled(9, array("|u1", [2, 3, 4], raw_dtype=b"|u\xff")),
        "invalid-value",
    )
    c.reject(
        "UniformNbytesWrong",
        f"{UNIFORM} alike arrays, the last's nbytes one too many",
        spoiled(UNIFORM - 1, array("|u1", [2, 3, 4], nbytes=25)),
        "invalid-value",
    )
    c.reject(
        "UniformOffsetMisaligned",
        f"{UNIFORM} float32 arrays, the twelfth at offset 2",
        batch([array("<f4", [5], offset=2 if i == 11 else 32 * i) for i in range(UNIFORM)]).data,
        "invalid-value",
    )
    c.reject(
        "UniformChunkExceeded",
        f"{UNIFORM} alike arrays in a chunk of 500 bytes: the last ends at 504",
        batch([array("|u1", [2, 3, 4], offset=32 * i) for i in range(UNIFORM)]).data,
        "invalid-value",
        {"chunk_size": 500},
    )


def nested_group(depth: int) -> Piece:
    """An empty list at level ``depth``."""
    sample = group("LIST", [])
    for _ in range(depth - 1):
        sample = group("LIST", [sample])
    return sample
