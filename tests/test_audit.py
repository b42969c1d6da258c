"""The no-execution guard works, and no Inert reader loads or runs code, whatever the bytes."""

from __future__ import annotations

import collections
import marshal
import pickle
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fuzz.registry import FORMATS, FormatUnderTest, codec, spec
from inert import InertError, _audit
from inert._audit import ExecutionDuringRead, no_execution
from inert._interpret import interpret_decode

# A pickle that names a global: unpickling it raises pickle.find_class.
GLOBAL_PICKLE = pickle.dumps(collections.OrderedDict(a=1))
FOREIGN = [GLOBAL_PICKLE, pickle.dumps([1, "x"]), b"PK\x03\x04" + bytes(60), marshal.dumps(compile("1", "<x>", "eval"))]


def test_catches_a_pickle_that_loads_a_global() -> None:
    with pytest.raises(ExecutionDuringRead, match=r"pickle\.find_class\(collections\.OrderedDict\)"):
        with no_execution():
            pickle.loads(GLOBAL_PICKLE)


@pytest.mark.parametrize(
    ("action", "event"),
    [
        (lambda: compile("1 + 1", "<payload>", "eval"), "compile(<payload>)"),
        (lambda: exec("x = 1", {}), "exec("),
        (lambda: marshal.loads(marshal.dumps(1)), "marshal.loads"),
    ],
)
def test_catches_compile_exec_and_marshal(action: object, event: str) -> None:
    with pytest.raises(ExecutionDuringRead) as caught:
        with no_execution() as recorded:
            action()  # type: ignore[operator]
    assert any(e.startswith(event) for e in recorded)
    assert caught.value.events == recorded


def test_silent_outside_and_on_other_threads() -> None:
    assert pickle.loads(GLOBAL_PICKLE) == {"a": 1}  # no block: nothing raised
    with no_execution() as recorded:
        pickle.loads(pickle.dumps([1, 2]))  # no global referenced
        worker = threading.Thread(target=pickle.loads, args=(GLOBAL_PICKLE,))
        worker.start()
        worker.join()
    assert recorded == []


def test_error_inside_the_block_keeps_the_guard_verdict() -> None:
    with pytest.raises(ExecutionDuringRead) as caught:
        with no_execution():
            pickle.loads(GLOBAL_PICKLE)
            raise InertError("x", 0, "", "after the fact")
    assert isinstance(caught.value.__context__, InertError)


def _pickle_reader(data: bytes) -> object:
    return pickle.loads(data)


def test_watched_readers_log_events_wherever_they_run() -> None:
    _audit.watch_readers(_pickle_reader)
    pickle.loads(GLOBAL_PICKLE)
    assert _audit.take_reader_events() == []
    worker = threading.Thread(target=_pickle_reader, args=(GLOBAL_PICKLE,))
    worker.start()
    worker.join()
    (event,) = _audit.take_reader_events()  # taken, so this test itself passes
    assert event.startswith("pickle.find_class(collections.OrderedDict) inside _pickle_reader")
    with pytest.raises(TypeError, match="Python functions"):
        _audit.watch_readers(len)


def test_the_suite_fails_a_test_whose_reader_runs_code(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent(
            """
            import collections, pickle
            from inert import _audit

            def reader(data):
                return pickle.loads(data)

            _audit.watch_readers(reader)
            PAYLOAD = pickle.dumps(collections.OrderedDict())

            def test_reader_runs_code():
                reader(PAYLOAD)

            def test_unpickling_outside_a_reader():
                pickle.loads(PAYLOAD)
            """
        )
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert "1 failed, 1 passed" in run.stdout, run.stdout + run.stderr
    assert "FAILED test_inner.py::test_reader_runs_code" in run.stdout
    assert "a reader loaded or ran code: pickle.find_class(collections.OrderedDict) inside reader" in run.stdout


def _hostile_inputs(entry: FormatUnderTest) -> Iterator[bytes]:
    """Valid encodings, every prefix of them, each byte flipped, and files of other kinds."""
    yield from FOREIGN
    yield b""
    for value in entry.examples:
        data = codec(entry).encode(value)
        yield data
        for cut in range(len(data)):
            yield data[:cut]
        for at in range(len(data)):
            for flip in (0x01, 0x80, 0xFF):
                yield data[:at] + bytes([data[at] ^ flip]) + data[at + 1 :]


@pytest.mark.parametrize("entry", [pytest.param(e, id=name) for name, e in FORMATS.items()])
def test_readers_run_no_code_on_hostile_input(entry: FormatUnderTest) -> None:
    decoders = (codec(entry).decode, lambda data, **kw: interpret_decode(spec(entry), data, **kw))
    results = collections.Counter[str]()
    for data in _hostile_inputs(entry):
        for kwargs in entry.decode_kwargs:
            for decode in decoders:
                with no_execution():
                    try:
                        decode(data, **kwargs)
                    except InertError as exc:
                        results[type(exc).__name__] += 1
                    else:
                        results["value"] += 1
    assert results["value"] and len(results) >= 4, results  # the inputs reach well past the first field


FRESH_PROCESS = """
import importlib
from inert import InertError
from inert._audit import no_execution
from inert.codecs import MODULES
from inert.conformance._corpus import load_corpus
from inert.spec import FORMATS
from inert._interpret import interpret_decode

def readers(name):
    base, _, part = name.partition(".")
    module = importlib.import_module("inert.codecs." + MODULES[base])
    generated = getattr(module, "decode_" + part) if part else module.decode
    kwargs = {"part": part} if part else {}
    return generated, lambda d, **kw: interpret_decode(FORMATS[base], d, **kwargs, **kw)

vectors = [v for v in load_corpus() if v.value is None and v.format.partition(".")[0] in MODULES]
by_format = {name: readers(name) for name in {v.format for v in vectors}}  # imports happen here, not below
read = 0
with no_execution():  # first calls included: no lazy import, no compile on any read path
    for vector in vectors:
        for decode in by_format[vector.format]:
            try:
                decode(vector.data, **vector.params)
            except InertError:
                pass
            read += 1
print(read, sorted({v.format for v in vectors}))
"""


def test_conformance_corpus_reads_run_no_code_in_a_fresh_process() -> None:
    run = subprocess.run([sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    count, formats = run.stdout.split(" ", 1)
    missing = {name for name in FORMATS if f"'{name}'" not in formats}
    # Every format and part has conformance vectors, and all of them were read under the guard.
    assert missing == set(), run.stdout
    assert int(count) > 1000, run.stdout
