"""The CPython accelerator (``inert._accel``) against the pure-Python codecs: the same values and errors.

The accelerator is built by ``pip install`` (setup.py) or ``python setup.py build_ext --inplace``;
CI builds it (.ci/run), and these tests fail, not skip, without it.  The pure-Python reading of a
codec is the same module with its accelerator unbound (``_ACCEL = None``, what
``INERT_PURE_PYTHON=1`` gives at import).
"""

from __future__ import annotations

import enum
import math
import os
import pickle
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scratch_tree import build_wheel, clean_copy

from inert import _accel  # (fails here, not later, when the extension is not built)
from inert._canonical import to_json
from inert._errors import InertError
from inert.codecs import MODULES
from inert.conformance._corpus import Vector, load_corpus
from inert.gen.c_python import ACCELERATED, bind_lines
from inert.spec import FORMATS

ROOT = Path(__file__).resolve().parent.parent
VECTORS = [v for v in load_corpus(formats=sorted(ACCELERATED)) if v.value is None]


def _codec(fmt: str) -> ModuleType:
    module = __import__(f"inert.codecs.{MODULES[fmt]}", fromlist=["decode"])
    assert module._ACCEL is not None, f"{fmt}: the codec is not bound to the accelerator"
    return module


def _outcome(module: ModuleType, vector: Vector, data: bytes) -> tuple[Any, ...]:
    kwargs = dict(vector.params)
    if not hasattr(module, "MAGIC"):
        kwargs["version"] = vector.version
    try:
        return ("value", module.decode(data, **kwargs))
    except InertError as exc:
        return ("error", type(exc), exc.format, exc.offset, exc.field, str(exc))


def _both(vector: Vector, data: bytes) -> tuple[tuple[Any, ...], tuple[Any, ...], bool]:
    """(accelerated outcome, pure-Python outcome, whether the C reader built the value itself).

    The accelerated outcome is the one of the Python ``decode`` calling the accelerator; a message
    format's ``decode`` bound to read in C first (``bind_decode``) must give that same outcome.
    """
    module = _codec(vector.format)
    accel = module._ACCEL
    answers: list[bool] = []
    bound = _outcome(module, vector, data) if module.decode is not _python_decode(module) else None

    def spy(*args: Any) -> Any:
        value = accel(*args)
        answers.append(value is not None)
        return value

    module._ACCEL = spy
    try:
        fast = _outcome(module, vector, data)
        module._ACCEL = None
        slow = _outcome(module, vector, data)
    finally:
        module._ACCEL = accel
    if bound is not None:
        assert bound[0] == fast[0], f"{vector.test_name}: read in C first {bound[0]}, through Python {fast}"
        if bound[0] == "value":
            same(bound[1], fast[1])
        else:
            assert bound == fast, vector.test_name
    return fast, slow, answers == [True]


def _python_decode(module: ModuleType) -> Any:
    """The codec's Python ``decode`` (under the bound one, if any)."""
    return getattr(module.decode, "__wrapped__", module.decode)


def same(a: Any, b: Any, path: str = "") -> None:
    """``a`` and ``b`` equal with the same types throughout, dict keys in the same order, NaN equal to NaN."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for key in a:
            same(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: {len(a)} != {len(b)} items"
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{path}[{k}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    elif isinstance(a, complex):
        same(a.real, b.real, path + ".real")
        same(a.imag, b.imag, path + ".imag")
    elif isinstance(a, (type(None), bool, int, float, str, bytes, bytearray, memoryview, enum.Enum)):
        assert a == b, f"{path}: {a!r} != {b!r}"
    else:  # a typed value (BytesIO, numpy, torch): by its canonical spelling
        assert to_json(a) == to_json(b), f"{path}: {a!r} != {b!r}"


def _agree(vector: Vector, data: bytes) -> bool:
    fast, slow, built = _both(vector, data)
    assert fast[0] == slow[0], f"{vector.test_name}: accelerated {fast[0]}, pure Python {slow}"
    if fast[0] == "value":
        same(fast[1], slow[1])
    else:
        assert fast == slow, vector.test_name
    return built


#: The canonical JSON spellings of the typed value-document extensions (inert/_canonical.py).
_TYPED = ("bytesio", "array", "arrayscalar", "torch.", "object")


def test_the_accelerated_formats_are_bound() -> None:
    for fmt in ACCELERATED:
        _codec(fmt)


@pytest.mark.parametrize("fmt", sorted(ACCELERATED))
def test_accelerated_and_pure_python_agree_on_every_corpus_vector(fmt: str) -> None:
    vectors = [v for v in VECTORS if v.format == fmt]
    accepted = built = typed = 0
    for vector in vectors:
        if _agree(vector, vector.data):
            built += 1
        slow = _both(vector, vector.data)[1]
        accepted += slow[0] == "value"
        typed += slow[0] == "value" and any(f'"${name}' in to_json(slow[1]) for name in _TYPED)
    assert vectors and accepted
    # The C reader builds every value itself (not the fallback) but those with typed extensions in a
    # value document (codes 6-12), which the Python reader builds.
    assert built == accepted - typed, f"{fmt}: the accelerator built {built} of {accepted} accepted values ({typed} typed)"


@pytest.mark.parametrize("fmt", sorted(f for f in ACCELERATED if bind_lines(FORMATS[f])))
def test_a_message_codecs_decode_reads_in_c_before_any_python(fmt: str) -> None:
    module = _codec(fmt)
    assert module.decode is not _python_decode(module) and module.decode.__name__ == "decode"
    assert module.decode.__doc__ == _python_decode(module).__doc__
    assert pickle.loads(pickle.dumps(module.decode)) is module.decode  # by name, as a function pickles
    calls: list[tuple[Any, ...]] = []

    def python(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return _python_decode(module)(*args, **kwargs)

    no_ctx = dict.fromkeys(FORMATS[fmt].params) if FORMATS[fmt].params else module._NO_CTX
    decode = _accel.Bound(python, module._ACCEL, vars(module), module.LATEST, tuple(FORMATS[fmt].params), no_ctx)
    vectors = [v for v in VECTORS if v.format == fmt]
    good = next(v for v in vectors if _outcome(module, v, v.data)[0] == "value" and not v.params and v.version == module.LATEST)
    bad = next(v for v in vectors if _outcome(module, v, v.data)[0] == "error")
    same(decode(good.data), module.decode(good.data))
    same(decode(good.data, version=module.LATEST), module.decode(good.data))
    assert calls == []  # read in C, no Python frame
    same(decode(bytearray(good.data)), module.decode(good.data))  # another buffer: Python copies it first
    with pytest.raises(InertError) as err:
        decode(bad.data, version=bad.version, **dict(bad.params))  # the C reader refuses: Python raises the error
    assert str(err.value) == _outcome(module, bad, bad.data)[-1]
    with pytest.raises(TypeError, match="unexpected keyword argument 'verion'"):
        decode(good.data, verion=1)
    assert len(calls) == 3
    accel, module._ACCEL = module._ACCEL, None  # unbound: the Python function reads, in pure Python
    try:
        same(decode(good.data), module.decode(good.data))
    finally:
        module._ACCEL = accel
    assert len(calls) == 4


def test_inputs_other_than_bytes_are_copied_and_read_alike() -> None:
    for vector in VECTORS[:200]:
        for data in (bytearray(vector.data), memoryview(vector.data)):
            _agree(vector, data)  # type: ignore[arg-type]


def _mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    out = bytearray(data)
    for kind, where, byte in edits:
        if not out:
            break
        at = where % len(out)
        if kind == 0:
            out[at] = byte
        elif kind == 1:
            out[at] ^= 1 << (byte % 8)
        elif kind == 2:
            del out[at:]
        else:
            out.insert(at, byte)
    return bytes(out)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(VECTORS),
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_accelerated_and_pure_python_agree_on_damaged_corpus_inputs(vector: Vector, edits: list[tuple[int, int, int]]) -> None:
    _agree(vector, _mutate(vector.data, edits))


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("INERT_PURE_PYTHON", "INERT_ACCEL")} | env
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)


def test_inert_pure_python_keeps_the_codecs_in_python() -> None:
    code = (
        "from inert.codecs import shm_message as m, checkpoint_metadata as c\n"
        "print(m._ACCEL is None, c._ACCEL is None)\n"
        "v = {'type': 2, 'worker_id': 1, 'context_i': 0, 'scheduled_i': 3, 'minibatch_i': 4, 'meta': None,"
        " 'exception': {'kind': 0}, 'traceback': None}\n"
        "print(m.decode(m.encode(v))['scheduled_i'])\n"
    )
    assert _run(code, INERT_PURE_PYTHON="1").stdout.split() == ["True", "True", "3"]
    assert _run(code).stdout.split() == ["False", "False", "3"]
    assert _run(code, INERT_PURE_PYTHON="0").stdout.split() == ["False", "False", "3"]


@pytest.mark.parametrize("cc", ["false", ""])
def test_a_clean_copy_installs_with_or_without_a_compiler(tmp_path: Path, cc: str, request: pytest.FixtureRequest) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "INERT_PURE_PYTHON", "INERT_ACCEL")}
    if cc:
        env["CC"] = cc  # no compiler: every compile fails
        wheel = build_wheel(clean_copy(tmp_path / "src"), tmp_path / "wheels", env)
    else:
        wheel = request.getfixturevalue("built_wheel")  # with the compiler: the run's one wheel (tests/conftest.py)
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("inert/_accel.") and n.endswith(".so") for n in names) == (not cc), names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True, capture_output=True, env=env, timeout=300,
    )
    code = (
        "import inert.codecs.shm_samples_meta as m\n"
        f"assert m.__file__.startswith({str(target)!r}), m.__file__\n"
        "v = {'samples': [{'kind': 0, 'offset': 0, 'nbytes': 12, 'dtype': '<f4', 'shape': [3]}]}\n"
        "print(m._ACCEL is not None, m.decode(m.encode(v))['samples'][0]['shape'])\n"
    )
    # -S: no site-packages .pth files, so this checkout's editable install cannot lend its own
    # extension; msgpack's directory is on the path for msgpack alone.
    path = os.pathsep.join([str(target), str(Path(msgpack.__file__).parent.parent)])
    run = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=120,
        env=env | {"PYTHONPATH": path}, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == [str(not cc), "[3]"]


_SANITIZED_RUN = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("inert._accel", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules["inert._accel"] = module  # the codecs bind this build
import pytest
selected = "corpus or other_than_bytes or damaged or accept_vector or random_values or refuse"
sys.exit(pytest.main([*sys.argv[2:], "-q", "-x", "-p", "no:cacheprovider", "-k", selected]))
"""


def test_the_accelerator_agrees_under_address_and_undefined_behaviour_sanitizers(tmp_path: Path) -> None:
    """The comparisons above, and the C writers' (tests/test_c_writers.py), again with the extension built with
    ASan and UBSan (every fault fatal)."""
    compiler = shutil.which("gcc")
    assert compiler, "the accelerator's tests need gcc"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    built = tmp_path / f"_accel{suffix}"
    sources = [str(p) for p in sorted((ROOT / "c").glob("inert_*.c"))] + [str(ROOT / "c" / "python" / "inert_accel.c")]
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
         f"-I{ROOT / 'c'}", f"-I{sysconfig.get_paths()['include']}", "-o", str(built), *sources],
        check=True, timeout=600,
    )
    runtimes = [subprocess.run([compiler, f"-print-file-name={lib}"], capture_output=True, text=True, check=True).stdout.strip()
                for lib in ("libasan.so", "libubsan.so")]
    script = tmp_path / "run.py"
    script.write_text(_SANITIZED_RUN)
    env = {k: v for k, v in os.environ.items() if k != "INERT_PURE_PYTHON"}
    env |= {"LD_PRELOAD": " ".join(runtimes), "ASAN_OPTIONS": "detect_leaks=0", "UBSAN_OPTIONS": "print_stacktrace=1"}
    writers = str(Path(__file__).with_name("test_c_writers.py"))  # the generated C writers too
    run = subprocess.run([sys.executable, str(script), str(built), __file__, writers], capture_output=True, text=True,
                         env=env, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "failed" not in run.stdout, run.stdout[-2000:]


# The grammar hash: a build is bound only when it was made from the C the codecs were generated with.


def test_the_built_accelerator_carries_the_codecs_grammar_hash() -> None:
    from inert import codecs
    from inert.gen import grammar_hash

    assert _accel.GRAMMAR_HASH == codecs.GRAMMAR_HASH == grammar_hash.grammar_hash()
    assert f'"{codecs.GRAMMAR_HASH}"' in (ROOT / "c" / grammar_hash.HEADER).read_text()


def test_a_build_of_another_grammar_is_refused_and_explained_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from inert import _accelerator, codecs

    monkeypatch.setattr(codecs, "GRAMMAR_HASH", "0123456789abcdef")
    monkeypatch.setattr(_accelerator, "_said", set())
    monkeypatch.delenv("INERT_PURE_PYTHON", raising=False)
    monkeypatch.delenv(_accelerator.ACCEL_ENV, raising=False)
    with pytest.warns(_accelerator.AcceleratorWarning) as caught:
        assert _accelerator.accelerator("shm-message", {}) is None
        assert _accelerator.accelerator("shm-descriptor", {}) is None  # said once, not once per codec
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "0123456789abcdef" in message and _accel.GRAMMAR_HASH in message and "pip install -e ." in message
    monkeypatch.setenv(_accelerator.ACCEL_ENV, "require")
    with pytest.raises(_accelerator.AcceleratorError, match="INERT_ACCEL=require.*0123456789abcdef.*pip install -e"):
        _accelerator.accelerator("shm-message", {})
    monkeypatch.setenv(_accelerator.ACCEL_ENV, "sometimes")
    with pytest.raises(_accelerator.AcceleratorError, match="'sometimes'"):
        _accelerator.accelerator("shm-message", {})


_STALE_RUN = """
import importlib.util, sys, warnings
spec = importlib.util.spec_from_file_location("inert._accel", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules["inert._accel"] = module  # the build the codecs find
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from inert.codecs import shm_message, shm_samples_meta, shm_descriptor, checkpoint_metadata, dump_manifest
print(module.GRAMMAR_HASH, len(caught), shm_message._ACCEL is None, checkpoint_metadata._ACCEL is None)
print(caught[0].message if caught else "")
v = {'samples': [{'kind': 0, 'offset': 0, 'nbytes': 12, 'dtype': '<f4', 'shape': [3]}]}
print(shm_samples_meta.decode(shm_samples_meta.encode(v))['samples'][0]['shape'])
"""


def test_a_real_stale_build_leaves_the_codecs_in_pure_python_and_require_refuses_it(tmp_path: Path) -> None:
    """The extension compiled from c/ as it stood under another grammar hash: the codecs do not bind it, say
    so once, and read in pure Python; ``INERT_ACCEL=require`` makes the import an error naming both hashes."""
    from inert import codecs
    from inert.gen import grammar_hash

    compiler = shutil.which("gcc")
    assert compiler, "the accelerator's tests need gcc"
    c_dir = tmp_path / "c"
    shutil.copytree(ROOT / "c", c_dir, ignore=shutil.ignore_patterns("*.o", "*.so"))
    header = c_dir / grammar_hash.HEADER
    header.write_text(header.read_text().replace(codecs.GRAMMAR_HASH, "feedfacefeedface"))
    built = tmp_path / f"_accel{sysconfig.get_config_var('EXT_SUFFIX')}"
    sources = [str(p) for p in sorted(c_dir.glob("inert_*.c"))] + [str(c_dir / "python" / "inert_accel.c")]
    subprocess.run([compiler, "-shared", "-fPIC", "-O0", f"-I{c_dir}", f"-I{sysconfig.get_paths()['include']}",
                    "-o", str(built), *sources], check=True, timeout=600)
    script = tmp_path / "run.py"
    script.write_text(_STALE_RUN)
    env = {k: v for k, v in os.environ.items() if k not in ("INERT_PURE_PYTHON", "INERT_ACCEL")}
    run = subprocess.run([sys.executable, str(script), str(built)], capture_output=True, text=True, env=env,
                         timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    first, message, shape = run.stdout.splitlines()
    assert first.split() == ["feedfacefeedface", "1", "True", "True"]
    assert "feedfacefeedface" in message and codecs.GRAMMAR_HASH in message and "`pip install -e .`" in message
    assert shape == "[3]"
    run = subprocess.run([sys.executable, str(script), str(built)], capture_output=True, text=True,
                         env=env | {"INERT_ACCEL": "require"}, timeout=120, cwd=tmp_path)
    assert run.returncode == 1 and not run.stdout
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("inert._accelerator.AcceleratorError: INERT_ACCEL=require"), last
    assert "feedfacefeedface" in last and codecs.GRAMMAR_HASH in last


def test_inert_accel_require_refuses_a_missing_build_and_yields_to_inert_pure_python() -> None:
    code = (
        "import sys\nsys.modules['inert._accel'] = None  # no build: its import fails\n"
        "from inert.codecs import shm_message\nprint(shm_message._ACCEL is None)\n"
    )
    assert _run(code).stdout.split() == ["True"]  # missing, not required: pure Python, silently
    run = _run(code, INERT_ACCEL="require")
    assert run.returncode == 1
    assert "AcceleratorError: INERT_ACCEL=require, and the accelerator inert._accel is not built" in run.stderr
    assert _run(code, INERT_ACCEL="require", INERT_PURE_PYTHON="1").stdout.split() == ["True"]  # asked for, no fallback
    bound = _run("from inert.codecs import shm_message\nprint(shm_message._ACCEL is None)", INERT_ACCEL="require")
    assert bound.stdout.split() == ["False"]  # this checkout's own build binds
