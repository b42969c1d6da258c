"""The fuzz harness: instruments Inert's readers, guards time and memory per input, and starts atheris.

A target script calls :func:`instrument` before importing anything from
``inert`` (so libFuzzer sees coverage of the readers), defines
``test_one_input(data)`` with the invariant of :mod:`fuzz.oracle`, and hands it
to :func:`main`.  Whatever escapes ``test_one_input`` is a finding: an
exception outside the error family, a disagreement of the two codecs, or a
:class:`ResourceFinding` from :func:`guarded`.

Declared resource bounds for one read of ``n`` bytes, the bounds every reader and CLI
command promises (docs/readers.md): about 1 s of CPU per MiB, at most 100 bytes of memory
per input byte plus 1 MiB.  The same numbers hold the cost campaign (``fuzz/cost.py``),
which runs the adapters (``load_tensors``, ``inert.dump.load``) and the CLI on inputs
designed for cost:

* CPU time at most ``1 s + n / 1 MiB`` seconds (the constant absorbs a loaded machine);
* peak traced allocation at most ``100 * n + 1 MiB`` (``tracemalloc``; the cost campaign
  also counts growth of the resident set, which sees torch's and mmap's memory).

libFuzzer's own ``-timeout`` (set by ``fuzz/run``) catches a reader that never returns.
"""

from __future__ import annotations

import shlex
import sys
import time
import tracemalloc
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import atheris

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # the checkout, at the end: an installed inert stays first

__all__ = ["ResourceFinding", "time_limit", "memory_limit", "instrument", "guarded", "main"]


class ResourceFinding(AssertionError):
    """One input made a reader exceed its declared time or memory bound."""


def time_limit(size: int) -> float:
    """Seconds of CPU time one decode of ``size`` bytes may take (CPU, not wall-clock, time: a fuzzer
    sharing a loaded machine is descheduled for seconds, but a reader that loops burns CPU)."""
    return 1.0 + size / (1 << 20)


def memory_limit(size: int) -> int:
    """Bytes one decode of ``size`` bytes may allocate at its peak."""
    return 100 * size + (1 << 20)


def instrument(*formats: str, grammar: bool = True) -> None:
    """Import the readers of ``formats`` (default: all) and their helpers with coverage instrumentation.

    ``grammar`` adds the Construct-interpreted grammar (for differential targets).
    Importing only what a target reads keeps its start-up short.
    """
    with atheris.instrument_imports(include=["inert"]):
        import inert._checks  # noqa: F401
        import inert._codec_runtime  # noqa: F401
        import inert.codecs

        if grammar:
            import inert.spec  # noqa: F401
        for name in formats or inert.codecs.MODULES:
            # A part (``checkpoint-shard.record``) is read by its format's module.
            __import__(f"inert.codecs.{inert.codecs.MODULES[name.partition('.')[0]]}")


def guarded(decode: Callable[..., Any], data: bytes, kwargs: Mapping[str, Any] | None = None) -> Any:
    """:func:`fuzz.oracle.outcome` of ``decode(data)``, raising :class:`ResourceFinding` past the bounds."""
    from fuzz.oracle import outcome

    # Traced only around the decode: tracing the fuzzer's own work would slow every input severalfold.
    tracemalloc.start()
    try:
        start = time.thread_time()
        result = outcome(decode, data, kwargs)
        elapsed = time.thread_time() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if elapsed > time_limit(len(data)):
        limit = time_limit(len(data))
        raise ResourceFinding(f"decode of {len(data)} bytes took {elapsed:.3f} s of CPU > {limit:.3f} s: {result}")
    if peak > memory_limit(len(data)):
        raise ResourceFinding(f"decode of {len(data)} bytes allocated {peak} bytes > {memory_limit(len(data))}: {result}")
    return result


def main(test_one_input: Callable[[bytes], None], argv: list[str] | None = None, **setup: Any) -> None:
    """Run libFuzzer on ``test_one_input`` with ``argv`` (libFuzzer flags and corpus directories).

    ``setup`` goes to ``atheris.Setup`` (``custom_mutator=...``).
    """
    # libFuzzer re-runs argv[0] through the shell to minimize a crash: name this interpreter and
    # this script, so that works whatever python3 is on PATH and whether the script is executable.
    me = f"{shlex.quote(sys.executable)} {shlex.quote(str(Path(sys.argv[0]).resolve()))}"
    atheris.Setup([me, *(sys.argv[1:] if argv is None else argv)], test_one_input, **setup)
    atheris.Fuzz()
