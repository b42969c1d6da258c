"""The generated C readers (c/): built with the sanitizers, run over the whole corpus, compared with Python.

The testee (c/testee.c) knows no format: it dispatches through the generated registry and prints
what the generated readers report.  Besides the conformance run, every decode vector is sent to
it and to the generated Python codec, and the two must agree on the error's kind, offset and field
path, not only on the kind the protocol compares.
"""

from __future__ import annotations

import importlib
import os
import random
import re
import shlex
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from dump_manifests import faulty_manifest

from inert._errors import InertError
from inert.conformance._corpus import load_corpus
from inert.conformance._protocol import Request
from inert.conformance._testee import Testee as CTestee
from inert.conformance.testees import inert_generated
from inert.gen import c as _generate_c

ROOT = Path(__file__).resolve().parent.parent
C_DIR = ROOT / "c"
SANITIZE = "-fsanitize=address,undefined -fno-sanitize-recover=all"
_MESSAGE = re.compile(r"(?P<format>[^:]+): offset (?P<offset>-?\d+): (?P<field>.*?): ")


@pytest.fixture(scope="module")
def testee(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The C testee, built from the generated sources with -Werror and AddressSanitizer/UBSan."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "the C readers need a C compiler"
    build = tmp_path_factory.mktemp("c-build")
    subprocess.run(
        ["make", "-s", "-C", str(C_DIR), f"BUILD={build}", f"CC={compiler}", f"SANITIZE={SANITIZE}", f"{build}/testee"],
        check=True,
        timeout=300,
    )
    return str(build / "testee")


@pytest.mark.parametrize("name", ["gcc", "clang"])
def test_the_c_sources_build_as_c99_without_warnings(tmp_path: Path, name: str) -> None:
    compiler = shutil.which(name)
    if compiler is None and name == "clang" and not os.environ.get("CI"):
        pytest.skip("clang is not installed (CI installs it: .ci/run)")
    assert compiler, f"{name} is needed"
    sources = [str(p) for p in sorted(C_DIR.glob("*.c"))]
    flags = ["-std=c99", "-pedantic", "-Wall", "-Wextra", "-Wshadow", "-Wconversion", "-Werror", "-c"]
    for source in sources:
        extra = [] if Path(source).name.startswith("inert_") else ["-Wno-conversion"]  # the testee, bench, fuzz: tools
        if Path(source).name.startswith("fuzz_"):  # a libFuzzer target names its format when built
            extra.append('-DINERT_FUZZ_FORMAT="shm-message"')
        out = str(tmp_path / (Path(source).stem + ".o"))
        subprocess.run([compiler, *flags, *extra, "-o", out, source], check=True, timeout=120)


def _with_rule_ids(testee: str) -> list[str]:
    """The C testee behind the adapter that names each refusal's rule from its message."""
    return [sys.executable, "-m", "inert.conformance.testees.rule_ids", testee]


def test_the_c_testee_passes_the_whole_corpus_with_no_failure_list(testee: str) -> None:
    """Run through the rule-id adapter: the refusals are judged by their rule, not only their kind."""
    assert not (ROOT / "inert" / "conformance" / "failure_lists" / "inert_c.txt").exists()
    result = subprocess.run(
        # The adapter is a Python process that loads the spec on its first refusal: seconds on a loaded machine.
        [sys.executable, "-m", "inert", "conformance", "run", "--timeout", "60", "--testee",
         shlex.join(_with_rule_ids(testee))],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"^\d+ passed, 0 failed$", result.stdout, re.M), result.stdout[-2000:]
    # Only encoding a format without a C writer is unsupported: every decode test ran, and every encode test of
    # the formats with a C writer (shm-message, shm-samples-meta, checkpoint-shard files and records).
    from inert.gen.c_writer import WRITTEN

    written = {fmt if part is None else f"{fmt}.{part}" for fmt, parts in WRITTEN.items() for part in parts}
    summary = result.stdout.strip().splitlines()
    unsupported = int(re.search(r"^(\d+) unsupported, ", result.stdout, re.M).group(1))  # type: ignore[union-attr]
    vectors = [v for v in load_corpus() if v.format not in written]
    checked = [v for v in vectors if v.params.get("verify_checksums") is not False]
    encodes = sum(v.value is not None for v in vectors) + sum(v.accepted is not None for v in checked)
    assert unsupported == encodes, summary[-3:]


#: Rules whose refusals the C readers word otherwise than the spec's reason pattern (the value-document
#: rules and file.version): their vectors are judged by kind alone.  Exact: a rule that becomes nameable
#: must leave this set.
C_REFUSALS_WITHOUT_RULE_ID = {
    "file.version", "value.complex-size", "value.key-order", "value.nan", "value.shortest-int",
    "value.shortest-length",
}


def test_the_c_testees_refusals_name_the_vectors_rules(testee: str) -> None:
    unnamed: set[str] = set()
    named = 0
    with CTestee(_with_rule_ids(testee), timeout=60) as c_reader:
        for vector in load_corpus():
            if vector.value is not None or vector.accepted is not None or vector.rule is None:
                continue
            response = c_reader.ask(Request("decode", vector.format, vector.version, vector.data, vector.params))
            if response.result != "reject":
                continue  # an "either" vector
            if response.rule:
                assert response.rule == vector.rule, (vector.test_name, response.describe())
                named += 1
            else:
                unnamed.add(vector.rule)
    assert unnamed == C_REFUSALS_WITHOUT_RULE_ID
    assert named > 3000, named


def test_the_c_testee_reads_every_format_part_and_version_of_the_grammar(testee: str) -> None:
    """Hidden vectors of any format reach a generated reader: the testee answers a decode of every format, part
    and version the grammar declares (an empty input: refused, never unsupported), as the Python reader does."""
    from inert.spec import FORMATS

    asked = 0
    with CTestee([testee], timeout=30) as c_reader:
        for fmt in FORMATS.values():
            for part, versions in [(None, fmt.versions), *fmt.parts.items()]:
                name = fmt.name if part is None else f"{fmt.name}.{part}"
                for version in versions:
                    response = c_reader.ask(Request("decode", name, version, b"", {}))
                    expected = _python_outcome(name, version, b"", {})
                    assert response.result == "reject" and expected is not None, (name, version, response.describe())
                    assert response.kind == expected[0], (name, version, response.describe(), expected)
                    asked += 1
    assert asked >= 13, asked


def _python_outcome(fmt: str, version: int, data: bytes, params: dict[str, object]) -> tuple[str, int, str] | None:
    try:
        inert_generated.decode(fmt, version, data, dict(params))
    except InertError as exc:
        return exc.kind, exc.offset, exc.field
    return None


def test_c_and_python_readers_agree_on_kind_offset_and_field(testee: str) -> None:
    compared = 0
    with CTestee([testee], timeout=30) as c_reader:
        for vector in load_corpus():
            if vector.value is not None:
                continue
            response = c_reader.ask(Request("decode", vector.format, vector.version, vector.data, vector.params))
            expected = _python_outcome(vector.format, vector.version, vector.data, vector.params)
            if expected is None:
                assert response.result == "accept", (vector.test_name, response.message)
                continue
            assert response.result == "reject", (vector.test_name, expected)
            match = _MESSAGE.match(response.message)
            assert match, response.message
            got = (response.kind, int(match["offset"]), match["field"].replace("<root>", ""))
            assert got == expected, f"{vector.test_name}: C {response.message!r}, Python {expected}"
            compared += 1
    assert compared > 1000


def test_generated_c_sources_name_their_spec_and_hash() -> None:
    for path, text in _generate_c.outputs().items():
        assert text.startswith("/* Generated by `inert gen` from "), path
        assert path.read_text() == text, f"{path.name} is stale: run `inert gen`"


def test_the_c_readers_check_every_rule() -> None:
    assert _generate_c.missing_rules() == {}
    for path in C_DIR.glob("inert_*.c"):
        assert "inert_held_rule" not in path.read_text(), path.name


# -- differential: damaged corpus inputs, the C reader against the interpreted grammar --


def _mutants(data: bytes, rng: random.Random, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        buf = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            choice = rng.randrange(5)
            at = rng.randrange(len(buf) + 1)
            if choice == 0 and buf:
                buf[min(at, len(buf) - 1)] ^= 1 << rng.randrange(8)
            elif choice == 1:
                del buf[at:]
            elif choice == 2:
                buf[at:at] = bytes([rng.choice((0, 1, 0x7F, 0x80, 0xC1, 0xD4, 0xFF, rng.randrange(256)))])
            elif choice == 3 and buf:
                buf[min(at, len(buf) - 1)] = rng.choice((0, 0xFF, 0x90, 0x80, 0xDD, 0xC7))
            else:
                buf[at:at] = buf[at : at + rng.randint(1, 16)]
        out.append(bytes(buf))
    return out


def test_c_reader_agrees_with_the_grammar_on_damaged_inputs(testee: str) -> None:
    """Kind, offset and field path of every refusal, and the value of every acceptance, for 9,000 damaged
    copies of corpus inputs (seed 20: the same inputs every run).  A longer run with other inputs:
    ``INERT_C_DIFF_SEED=7 INERT_C_DIFF_VECTORS=100000 pytest tests/test_c_readers.py -k damaged``."""
    from inert._canonical import to_json
    from inert.conformance.testees import inert_construct

    rng = random.Random(int(os.environ.get("INERT_C_DIFF_SEED", "20")))
    vectors = [v for v in load_corpus() if v.value is None and len(v.data) <= 1 << 16]
    picked = [rng.choice(vectors) for _ in range(int(os.environ.get("INERT_C_DIFF_VECTORS", "1500")))]
    rejected = accepted = 0
    with CTestee([testee], timeout=30) as c_reader:
        for vector in picked:
            for data in _mutants(vector.data, rng, 6):
                response = c_reader.ask(Request("decode", vector.format, vector.version, data, vector.params))
                try:
                    value = inert_construct.decode(vector.format, vector.version, data, dict(vector.params))
                except InertError as exc:
                    assert response.result == "reject", (vector.test_name, data.hex(), str(exc))
                    match = _MESSAGE.match(response.message)
                    assert match, response.message
                    got = (response.kind, int(match["offset"]), match["field"].replace("<root>", ""))
                    where = f"{vector.test_name} {data.hex()}"
                    assert got == (exc.kind, exc.offset, exc.field), f"{where}: C {response.message!r}, Python {exc}"
                    rejected += 1
                    continue
                assert response.result == "accept", (vector.test_name, data.hex(), response.message)
                assert response.payload.decode() == to_json(value), (vector.test_name, data.hex())
                accepted += 1
    assert rejected > 1000 and accepted > 30, (rejected, accepted)


def test_c_reader_names_the_fault_python_names_when_manifests_break_several_rules(testee: str) -> None:
    """2,000 dump manifests breaking several cross-reference rules at once: the C reader (the rules' expressions
    compiled) and the Python reader (inert/_checks.py) name the same first fault."""
    rng = random.Random(int(os.environ.get("INERT_C_DIFF_SEED", "20")))
    fields: set[str] = set()
    with CTestee([testee], timeout=30) as c_reader:
        for _ in range(2000):
            data = faulty_manifest(rng)
            response = c_reader.ask(Request("decode", "dump-manifest", 1, data, {}))
            expected = _python_outcome("dump-manifest", 1, data, {})
            if expected is None:
                assert response.result == "accept", (data.hex(), response.message)
                continue
            match = _MESSAGE.match(response.message)
            assert match, (data.hex(), response.message)
            got = (response.kind, int(match["offset"]), match["field"].replace("<root>", ""))
            assert got == expected, f"{data.hex()}: C {response.message!r}, Python {expected}"
            fields.add(re.sub(r"\d+", "N", expected[2]))
    assert {"keys[N].nested_shapes", "keys[N].nested_shapes[N]", "keys[N].nested_shapes[N][N]",
            "fields[N].layout.shape[N]"} <= fields, fields


def _document(rng: random.Random, depth: int = 0) -> bytes:
    """A random MessagePack document leaning on the subset's edges: nesting, extension codes, timestamps,
    unhashable keys and set members, float32, counts beyond the bytes, 0xc1."""
    pick = rng.randrange(24 if depth < 70 else 8)
    if pick == 0:
        return bytes([rng.randrange(0x80)])
    if pick == 1:
        return bytes([rng.choice((0xC0, 0xC2, 0xC3, 0xC1))])
    if pick == 2:
        return b"\xcb" + struct.pack(">d", rng.choice((0.5, -0.0, 1e16, 1e-5, 123.456, float("nan"), float("inf"))))
    if pick == 3:
        return b"\xca" + struct.pack(">f", rng.choice((0.1, 3.5, -2.0)))
    if pick == 4:
        return rng.choice((b"\xcf" + b"\xff" * 8, b"\xd3\x80" + bytes(7), b"\xe0", b"\xd0\x80"))
    if pick == 5:
        text = rng.choice((b"a", b"$k", b"\xc3\xa9", b"\xed\xa0\x80", b"", b"zz"))
        return bytes([0xA0 | len(text)]) + text
    if pick == 6:
        return b"\xc4\x02ab"
    if pick == 7:
        return rng.choice((b"\xd6\xff\x00\x00\x00\x01", b"\xd5\xff\x00\x00", b"\xd4\x20\x00", b"\xd4\x03\x01",
                           b"\xd8\x02" + bytes(16), b"\xd4\x02\x00", b"\x91"))
    if pick < 14:
        items = [_document(rng, depth + 1) for _ in range(rng.randrange(4))]
        count = len(items) + (1 if rng.random() < 0.05 else 0)
        return bytes([0x90 | count]) + b"".join(items)
    if pick < 19:
        pairs = [(_document(rng, depth + 1), _document(rng, depth + 1)) for _ in range(rng.randrange(3))]
        return bytes([0x80 | len(pairs)]) + b"".join(k + v for k, v in pairs)
    if pick == 23:
        return _typed(rng, depth)
    # a tuple, set or frozenset: a payload of one array (usually)
    payload = _document(rng, depth + 1) if rng.random() < 0.1 else bytes([0x90 | 2]) + _document(rng, depth + 1) * 2
    if rng.random() < 0.05:
        payload += b"\xc0"
    return b"\xc7" + bytes([len(payload) & 0xFF, rng.choice((1, 4, 5))]) + payload if len(payload) < 256 else b"\xc0"


def _typed(rng: random.Random, depth: int) -> bytes:
    """A typed extension (codes 6-12, inert/_value_types.py), well formed or near it."""
    code = rng.randrange(6, 13)
    dtype = rng.choice((1, 2, 9, 11, 12, 15, 16, 20, 21, 0))
    if code == 7:
        dims = [rng.choice((0, 1, 2, 3, 1 << 40)) for _ in range(rng.choice((0, 1, 2, 65)))]
        size = {1: 1, 2: 1, 9: 8, 12: 4, 15: 16}.get(dtype, 1)
        for dim in dims:
            size *= dim
        data = bytes(rng.choice((0, 1, 2)) for _ in range(min(size, 64) + rng.choice((0, 0, 1, -1))))
        payload = bytes([dtype, len(dims)]) + b"".join(struct.pack("<Q", d) for d in dims) + data
    elif code == 8:
        payload = bytes([dtype]) + bytes(rng.choice((0, 1, 2)) for _ in range(rng.choice((0, 1, 2, 4, 8, 16))))
    elif code == 10:
        payload = bytes([dtype]) * rng.choice((1, 1, 0, 2))
    elif code == 6:
        payload = b"ab"
    else:
        inner = rng.choice((
            b"\x92\xa4cuda\x00", b"\x92\xa4cuda\xc0", b"\x92\xa4Cuda\x00", b"\x92\xa3cpu\xce\x80\x00\x00\x00",
            b"\x93\x01\x02\x03", b"\x91\xcf\x80" + bytes(7), b"\x91\xff", b"\x92\xa1a\xc0", b"\x92\xa0\xc0",
            b"\x90", b"\x92\xc3\x01", _document(rng, depth + 1), b"\x92\xa1o" + _document(rng, depth + 1),
        ))
        payload = inner
    if len(payload) in (1, 2, 4, 8, 16):
        return bytes([0xD4 + (1, 2, 4, 8, 16).index(len(payload)), code]) + payload
    if len(payload) < 256:
        return b"\xc7" + bytes([len(payload), code]) + payload
    return b"\xc0"


def _tuples(levels: int) -> bytes:
    doc = b"\xc0"
    for _ in range(levels):
        payload = b"\x91" + doc
        head = b"\xc7" + bytes([len(payload)]) if len(payload) < 256 else b"\xc8" + struct.pack(">H", len(payload))
        doc = head + b"\x01" + payload
    return doc


_TS, _DEEP = b"\xd6\xff\x00\x00\x00\x00", b"\x91" * 70 + b"\xc0"
#: Documents at the edges of the nesting rules and of the order in which the Python reader checks.
EDGE_DOCUMENTS = [
    b"\x91" * 64 + b"\xc0", b"\x91" * 65 + b"\xc0", b"\x91" * 65, b"\x91" * 1024, b"\x91" * 1025, b"\x81" * 1025,
    b"\x92" + _TS + _DEEP, b"\x92" + _DEEP + _TS, b"\x82\x01" + _DEEP + _TS + b"\x02",
    b"\x82" + _TS + b"\x01\x02" + _DEEP, b"\x81" + _DEEP + b"\x01", _tuples(64), _tuples(65),
    b"\xc7\x03\x04\x92\x01\x01", b"\xd7\xff" + b"\xff" * 4 + bytes(4), b"\xc7\x0c\xff" + b"\xff" * 4 + bytes(8),
    b"\x92" + _DEEP + b"\xc1", b"\x82\x91\xc0" + _TS + b"\x01\x02", b"\x92\xd4\x20\x00\xc1", b"\xdd\xff\xff\xff\xff", b"\x95\x01",
]


def _agree(c_reader: CTestee, doc: bytes) -> None:
    from inert._canonical import to_json
    from inert.codecs import checkpoint_shard

    body = b"\x02" + struct.pack("<I", len(doc)) + doc
    data = body + struct.pack("<I", zlib.crc32(body))
    response = c_reader.ask(Request("decode", "checkpoint-shard.record", 1, data, {}))
    try:
        value = checkpoint_shard.decode_record(data)
    except InertError as exc:
        match = _MESSAGE.match(response.message)
        got = (response.kind, int(match["offset"]), match["field"]) if match else response.describe()
        assert got == (exc.kind, exc.offset, exc.field), f"{doc.hex()}: C {response.describe()}, Python {exc}"
        return
    assert response.result == "accept", (doc.hex(), response.message)
    assert response.payload.decode() == to_json(value), doc.hex()


def test_c_value_documents_agree_with_python(testee: str) -> None:
    """The edge documents and 20,000 random value documents in checkpoint-shard records: the C subset
    reader against inert._codec_runtime.unpack_value (kind, offset and field path, or the value)."""
    rng = random.Random(int(os.environ.get("INERT_C_DIFF_SEED", "20")))
    with CTestee([testee], timeout=30) as c_reader:
        for doc in EDGE_DOCUMENTS:
            _agree(c_reader, doc)
        for _ in range(int(os.environ.get("INERT_C_DIFF_DOCUMENTS", "20000"))):
            doc = _document(rng)
            _agree(c_reader, doc[: rng.randrange(len(doc) + 1)] if rng.random() < 0.1 else doc)


def test_the_c_example_reads_a_samples_meta_and_refuses_a_cut_one(tmp_path: Path) -> None:
    from inert.codecs import shm_samples_meta

    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler
    binary = tmp_path / "samples_meta"
    readers = [C_DIR / name for name in ("inert_runtime.c", "inert_msgpack.c", "inert_shm_samples_meta.c")]
    flags = ["-std=c99", "-Wall", "-Wextra", "-Werror", *SANITIZE.split(), f"-I{C_DIR}"]
    source = ROOT / "examples" / "c_samples_meta.c"
    subprocess.run([compiler, *flags, "-o", str(binary), str(source), *map(str, readers)], check=True, timeout=120)
    arrays = [{"kind": "ARRAY", "offset": 0, "nbytes": 24, "dtype": "<f4", "shape": [2, 3]},
              {"kind": "TUPLE", "items": [{"kind": "ARRAY", "offset": 64, "nbytes": 8, "dtype": "|u1", "shape": [8]}]}]
    data = shm_samples_meta.encode({"samples": arrays})
    meta = tmp_path / "meta.bin"
    meta.write_bytes(data)
    run = subprocess.run([str(binary), str(meta), "72"], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout) == (0, "0 24 <f4 (2, 3)\n64 8 |u1 (8,)\n"), run.stderr
    meta.write_bytes(data[:-1])
    run = subprocess.run([str(binary), str(meta), "72"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stdout == ""
    # the shape's count, 4 bytes before its one dim, promises more than the bytes left
    assert run.stderr.startswith(f"shm-samples-meta: offset {len(data) - 12}: samples[1].items[0].shape: "), run.stderr


def test_the_c_testee_spells_floats_as_python_does(testee: str) -> None:
    """The canonical JSON of a float is Python's repr: the fewest digits that read back, the nearest of
    them (at a power of two the correctly rounded string may not read back; its neighbour does)."""
    rng = random.Random(3)
    values = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(2000)]
    values += [sign * 2.0**e for e in range(-1074, 1024) for sign in (1, -1)]
    values += [0.0, -0.0, 5e-324, 1e16, 1e15, 0.0001, 0.00001, 9999999999999998.0, 1.7976931348623157e308]
    with CTestee([testee], timeout=30) as c_reader:
        for value in values:
            if value != value or value in (float("inf"), float("-inf")):
                continue
            doc = b"\xcb" + struct.pack(">d", value)
            body = b"\x02" + struct.pack("<I", len(doc)) + doc
            data = body + struct.pack("<I", zlib.crc32(body))
            response = c_reader.ask(Request("decode", "checkpoint-shard.record", 1, data, {}))
            assert response.payload.decode().split('"value":')[1].split("}")[0] == repr(value)


def test_the_c_writer_sizes_nested_extensions_once_per_level(testee: str) -> None:
    """Each extension's header needs its payload's length, counted by walking the payload: once the walk of
    each level walked its payload again for each level around it (2**depth: 22 levels took 2 s).  Tuples
    nested 64 deep and registered objects nested 32 deep (each an extension and its [name, state] list), the
    most a record's value takes, are written within the testee's timeout, as the Python writer writes them."""
    from inert._canonical import to_json
    from inert._value_types import ObjectValue
    from inert.codecs import checkpoint_shard

    tuples: object = ()
    for _ in range(63):
        tuples = (tuples,)
    objects: object = None
    for _ in range(32):
        objects = ObjectValue("o", objects)
    with CTestee([testee], timeout=10) as c_writer:
        for value in (tuples, objects):
            record = {"body": {"kind": "VALUE", "value": value}, "crc32": 0}
            response = c_writer.ask(Request("encode", "checkpoint-shard.record", 1, to_json(record).encode(), {}))
            assert response.result == "accept", response.describe()
            assert response.payload == checkpoint_shard.encode_record(record, version=1)


_SHM_MESSAGE = bytes.fromhex("01" + "00" * 32 + "0100")  # a SCHEDULED_TASK, BATCH of no argument
_UNSUPPORTED = (
    # A version the format does not have (a header-less format's, named by the request): no testee's (PROTOCOL.md).
    Request("decode", "shm-message", 2, _SHM_MESSAGE, {}),
    Request("encode", "shm-message", 2, b"{}", {}),
    Request("decode", "checkpoint-metadata", 3, b"", {}),
    Request("encode", "checkpoint-metadata", 3, b"{}", {}),
    # A parameter the format or part does not take.
    Request("decode", "shm-message", 1, _SHM_MESSAGE, {"max_size": 64}),
    Request("decode", "shm-message", 1, _SHM_MESSAGE, {"no_such_parameter": 1}),
    Request("decode", "checkpoint-metadata", 1, b"", {"chunk_size": 8}),
    Request("decode", "checkpoint-shard.record", 1, b"", {"max_size": 64}),
)


@pytest.mark.parametrize("which", ["c", "inert-generated", "inert-construct"])
def test_what_a_format_does_not_have_is_unsupported_by_every_testee(testee: str, which: str) -> None:
    argv = [testee] if which == "c" else [sys.executable, "-m", "inert.conformance.testees." + which.replace("-", "_")]
    with CTestee(argv, timeout=30) as t:
        assert t.ask(Request("decode", "shm-message", 1, _SHM_MESSAGE, {})).result == "accept"
        for request in _UNSUPPORTED:
            response = t.ask(request)
            assert response.result == "unsupported", (request.header(), response.describe())


def _accepted_whole_files() -> list[tuple[str, int, bytes]]:
    """The smallest accepted vector of each file format (one with a header, which takes max_size)."""
    from inert.codecs import MODULES

    files = {name for name, module in MODULES.items() if hasattr(importlib.import_module(f"inert.codecs.{module}"), "MAGIC")}
    picks: dict[str, tuple[str, int, bytes]] = {}
    for v in load_corpus():
        if v.accepted and not v.params and v.format in files:
            if v.format not in picks or len(v.data) < len(picks[v.format][2]):
                picks[v.format] = (v.format, v.version, v.data)
    return sorted(picks.values())


@pytest.mark.parametrize("which", ["c", "inert-generated", "inert-construct"])
def test_max_size_below_zero_or_above_64_bits_is_answered_by_every_testee(testee: str, which: str) -> None:
    """max_size is any integer (PROTOCOL.md): below 0 it admits no input (file.max-size), at 2**64 and above it is
    above the format's limit and changes nothing; no testee may take either for a malformed request."""
    argv = [testee] if which == "c" else [sys.executable, "-m", "inert.conformance.testees." + which.replace("-", "_")]
    files = _accepted_whole_files()
    assert files
    with CTestee(argv, timeout=30) as t:
        for fmt, version, data in files:
            plain = t.ask(Request("decode", fmt, version, data, {}))
            assert plain.result == "accept", plain.describe()
            for max_size in (-1, -(2**70)):
                for payload in (data, b""):
                    refused = t.ask(Request("decode", fmt, version, payload, {"max_size": max_size}))
                    assert (refused.result, refused.kind) == ("reject", "limit"), (fmt, max_size, refused.describe())
                    assert re.search(r": input of \d+ bytes? exceeds max_size\(", refused.message or ""), refused.message
            for max_size in (2**64 - 1, 2**64, 10**30):
                taken = t.ask(Request("decode", fmt, version, data, {"max_size": max_size}))
                assert (taken.result, taken.payload) == ("accept", plain.payload), (fmt, max_size, taken.describe())
