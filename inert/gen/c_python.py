"""The CPython accelerator's part of the generated codecs: which formats ``decode`` through C, and the glue.

The accelerator, ``inert._accel`` (``c/python/inert_accel.c``, built by ``setup.py`` from the
generated C readers when a compiler is there), builds from a C reader's visitor events the very
values the Python codec returns.  A codec of a format listed here asks it first, with the buffer,
version and context its Python reader would read; ``None`` back (the C reader refused the input, or
the value holds something the builder does not make) sends the same input through the Python reader,
whose error or value is the answer.  So the two agree on every fault by construction; on values the
tests compare them (tests/test_accel.py).

A format is listed when the builder makes every value of it exactly as its codec does: records,
unions, arrays, text, integers, enums, booleans, optionals and value documents.  Not yet: the formats
whose codecs return ``memoryview`` slices of the input (checkpoint-shard and dump-shard records), and
their parts.
"""

from __future__ import annotations

from inert.spec._grammar import Format

__all__ = ["ACCELERATED", "accelerated", "encoded", "setup_line", "call_lines", "bind_lines", "encode_lines"]

#: The formats whose ``decode`` asks the accelerator first.
ACCELERATED = frozenset({"shm-message", "shm-samples-meta", "shm-descriptor", "checkpoint-metadata", "dump-manifest"})


def accelerated(fmt: Format) -> bool:
    return fmt.name in ACCELERATED


def encoded(fmt: Format) -> bool:
    """Whether the codec's ``encode`` asks the generated C writer first: an accelerated message format with one
    (inert/gen/c_writer.py, WRITTEN; a file format's encode returns its parts, which the C writer does not)."""
    from inert.gen.c_writer import WRITTEN

    return accelerated(fmt) and fmt.magic is None and None in WRITTEN.get(fmt.name, ())


def setup_line(fmt: Format, enum_names: list[str]) -> str:
    """The codec's module-level lines binding its C reader, and its C writer where :func:`encoded` (``None``
    without the extension)."""
    if not accelerated(fmt):
        return ""
    tables = ", ".join(f"{name!r}: _BY_VALUE_{name}" for name in sorted(enum_names))
    writer = "_ACCEL_ENCODE = encoder()\n" if encoded(fmt) else ""
    return f"_ACCEL = accelerator(FORMAT, {{{tables}}})\n{writer}"


def encode_lines(fmt: Format) -> str:
    """The lines at the top of ``encode`` that return the C writer's bytes when it writes the value (where it
    does not, the Python encoder writes it or raises its own error; ``_ACCEL_ENCODE = None`` makes it pure Python)."""
    if not encoded(fmt):
        return ""
    return (
        "    if _ACCEL_ENCODE is not None:\n"
        "        data = _ACCEL_ENCODE(FORMAT, value, version)\n"
        "        if data is not None:\n"
        "            return data\n"
    )


def call_lines(fmt: Format, ctx: str) -> str:
    """The lines at the top of ``decode`` (after ``buf``) that return the accelerator's value when it has one."""
    if not accelerated(fmt):
        return ""
    extra = ", max_size" if fmt.magic is not None else ""
    return (
        "    if _ACCEL is not None:\n"
        f"        value = _ACCEL(buf, version, {ctx}{extra})\n"
        "        if value is not None:\n"
        "            return value\n"
    )


def bind_lines(fmt: Format) -> str:
    """The lines after a message format's ``decode`` that let a call read in C before any Python runs
    (``inert._accelerator.bind_decode``: the codec's own ``decode`` wherever it is pure Python)."""
    if not accelerated(fmt) or fmt.magic is not None:
        return ""
    params = repr(tuple(fmt.params))
    return f"\n\ndecode = bind_decode(decode, globals(), {params})\n"
