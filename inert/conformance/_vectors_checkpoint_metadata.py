"""Vectors of ``checkpoint-metadata``: the ``.metadata`` file of a checkpoint (one document and its CRC-32).

A document is declared as a dict in the decoded value's shape (enum members by name or raw code,
bools as ints where a vector needs a bad byte); ``metadata_file`` packs it with ``struct`` and
``msgpack.packb``.  ``document_file_vectors`` holds the rules every single-document file shares
(header, CRC-32, truncation, max_size) and is reused by dump-manifest.
"""

from __future__ import annotations

import copy
import struct
from typing import Any

import msgpack

from ._filelib import DTYPES, PICKLE, SAFETENSORS, TORCH_ZIP, as_json, crc, header
from ._vectorlib import Corpus, Piece, text, u32, u64
from ._vectors_checkpoint_shard import one_reject_per_rule, typed_rejects, value_extensions

MAGIC = b"\x89INRTMD\n"
MAX_FQN_LEN = 1 << 16
MAX_FILE_NAME_LEN = 255
MAX_DCP_VERSION_LEN = 64
MAX_DEPTH = 64
MAX_NDIM = 64
NO_CHECKSUMS = {"verify_checksums": False}
#: Copied from inert/spec/checkpoint_metadata.py on purpose.
LAYOUTS = {"STRIDED": 0, "SPARSE_COO": 1, "SPARSE_CSR": 2, "SPARSE_CSC": 3, "SPARSE_BSR": 4, "SPARSE_BSC": 5, "JAGGED": 6}
MEMORY_FORMATS = {"CONTIGUOUS": 0, "CHANNELS_LAST": 1, "CHANNELS_LAST_3D": 2, "PRESERVE": 3}
#: The chunk columns of a tensor entry, in file order, with their element format.
COLUMNS = (("chunk_offsets", "Q"), ("chunk_sizes", "Q"), ("chunk_files", "I"), ("chunk_byte_offsets", "Q"),
           ("chunk_byte_lengths", "Q"), ("chunk_crcs", "I"))


#: The newest format_version of checkpoint-metadata (a version 1 file's reader refuses the one after).
NEWEST = 2

#: Values in the vectors of many alike entries.
ALIKE = 16


def utf8(value: str | bytes) -> bytes:
    """A string field's bytes: ``str`` is encoded, ``bytes`` (for bad UTF-8 or exact lengths) kept."""
    return text(value.encode("utf-8") if isinstance(value, str) else value)


def optional(data: bytes | None) -> bytes:
    return b"\x00" if data is None else b"\x01" + data


def code(table: dict[str, int], member: str | int) -> bytes:
    return bytes([table[member] if isinstance(member, str) else member])


def column(fmt: str, values: list[int]) -> bytes:
    return u32(len(values)) + struct.pack(f"<{len(values)}{fmt}", *values)


def _storage_meta(meta: dict[str, Any]) -> bytes:
    data = b"".join(optional(None if meta[k] is None else utf8(meta[k])) for k in ("checkpoint_id", "save_id", "load_id"))
    return data + u32(len(meta["modules"])) + b"".join(utf8(m) for m in meta["modules"])


def _tensor_entry(t: dict[str, Any]) -> bytes:
    data = utf8(t["fqn"]) + code({k: v[0] for k, v in DTYPES.items()}, t["dtype"]) + code(LAYOUTS, t["layout"])
    data += code(MEMORY_FORMATS, t["memory_format"]) + bytes([int(t["requires_grad"]), int(t["pin_memory"])])
    data += bytes([len(t["size"])]) + u64(*t["size"])
    data += b"".join(column(fmt, t[name]) for name, fmt in COLUMNS)
    if "strides" in t:  # version 2: the flag, then a u8 count and the values
        data += bytes([int(t["strides_recorded"]), len(t["strides"])]) + u64(*t["strides"])
    return data


def _value_entry(v: dict[str, Any]) -> bytes:
    return utf8(v["fqn"]) + struct.pack("<IQQI", v["file"], v["byte_offset"], v["byte_length"], v["crc"])


def metadata_document(m: dict[str, Any]) -> bytes:
    """The document of ``m``; ``planner_raw``, when present, is the planner data's MessagePack bytes."""
    planner = m["planner_raw"] if "planner_raw" in m else msgpack.packb(m["planner_data"], use_bin_type=True)
    data = optional(None if m["dcp_version"] is None else utf8(m["dcp_version"]))
    data += optional(None if m["storage_meta"] is None else _storage_meta(m["storage_meta"]))
    data += text(planner) + u32(len(m["files"])) + b"".join(utf8(f) for f in m["files"])
    data += u32(len(m["tensors"])) + b"".join(_tensor_entry(t) for t in m["tensors"])
    return data + u32(len(m["values"])) + b"".join(_value_entry(v) for v in m["values"])


def sealed_file(magic: bytes, document: bytes, value: Any) -> Piece:
    """Header, document, CRC-32 of the document; ``value`` gains the CRC-32."""
    checksum = struct.unpack("<I", crc(document))[0]
    return Piece(header(magic) + document + crc(document), {**value, "crc32": checksum} if value is not None else None)


def metadata_file(m: dict[str, Any], version: int = 1) -> Piece:
    """The file of ``m``; ``planner_json``, when present, is the planner data's canonical JSON; version 2's
    tensors carry ``strides_recorded`` and ``strides``."""
    if version >= 2:  # a tensor the vector gives no strides: recorded as none
        m = {**m, "tensors": [t if "strides" in t else strided(t, None) for t in m["tensors"]]}
    document = metadata_document(m)
    value = copy.deepcopy({k: v for k, v in m.items() if k not in ("planner_raw", "planner_json")})
    value["planner_data"] = m["planner_json"] if "planner_json" in m else as_json(m.get("planner_data"))
    for t in value["tensors"]:
        t["requires_grad"], t["pin_memory"] = bool(t["requires_grad"]), bool(t["pin_memory"])
        if "strides_recorded" in t:
            t["strides_recorded"] = bool(t["strides_recorded"])
    piece = sealed_file(MAGIC, document, value)
    return Piece(header(MAGIC, version) + piece.data[len(MAGIC) + 2:], piece.value)


def document_file_vectors(c: Corpus, magic: bytes, rep: Piece, newest: int = 1) -> None:
    """The rules of a file of one sealed document: magic and foreign files, version (0, the one after
    ``newest``, the format registers, and 65535), truncation at every point of ``rep``, trailing bytes, the
    CRC-32 and max_size."""
    c.accept("Representative", "a representative file", rep)
    other = MAGIC if magic != MAGIC else b"\x89INRTSH\n"
    one_off = magic[:6] + bytes([magic[6] ^ 0x20]) + magic[7:]
    for name, what, data in (("Pickle", "a pickle", PICKLE), ("TorchZip", "a torch.save zip archive", TORCH_ZIP),
                             ("Safetensors", "a safetensors file", SAFETENSORS),
                             ("OtherInertFile", "another Inert format's file", other + b"\x01\x00" + bytes(8)),
                             ("MagicOneBitOff", "the magic with one bit flipped", one_off + rep.data[len(magic):])):
        c.reject(f"Foreign{name}", what, data, "foreign-format")
    for version in (0, newest + 1, 0xFFFF):
        c.reject(f"Version{version}", f"format_version {version}", header(magic, version) + rep.data[len(magic) + 2:],
                 "version")
    for cut in range(len(magic)):
        c.reject(f"TruncatedMagic{cut}", f"the first {cut} bytes of the magic: not this format", rep.data[:cut],
                 "foreign-format", rule="file.magic")
    for cut in range(len(magic), len(rep.data)):
        c.reject(f"Truncated{cut:04d}", f"the first {cut} of the {len(rep.data)} bytes of the representative file",
                 rep.data[:cut], "truncated")
    c.reject("TrailingByte", "a byte after the CRC-32", rep.data + b"\x00", "trailing-bytes")
    damaged = rep.data[:-1] + bytes([rep.data[-1] ^ 1])
    c.reject("ChecksumMismatch", "the stored CRC-32 differs in one bit", damaged, "checksum")
    c.accept("ChecksumNotVerified", "a damaged CRC-32 when the caller opts out",
             Piece(damaged, {**rep.value, "crc32": rep.value["crc32"] ^ (1 << 24)}), NO_CHECKSUMS)
    c.reject("MaxSizeExceeded", "a file longer than the caller's max_size", rep.data, "limit", {"max_size": len(rep.data) - 1})
    c.accept("MaxSizeExact", "a file exactly as long as the caller's max_size", rep, {"max_size": len(rep.data)})
    c.accept("MaxSizeAboveFormat", "a caller's max_size (2**40) above the format's own: taken, the lower "
             "applies", rep, {"max_size": 2**40}, rule="file.max-size")
    c.reject("MaxSizeBeforeMagic", "a pickle longer than the caller's max_size: the size is checked before the magic",
             PICKLE, "limit", {"max_size": len(PICKLE) - 1}, rule="file.max-size")


def damaged_crc(piece: Piece) -> bytes:
    """``piece``'s bytes with one bit of its CRC-32 flipped."""
    return piece.data[:-1] + bytes([piece.data[-1] ^ 1])


def tensor(fqn: str, size: list[int], chunks: list[tuple[list[int], list[int]]], first_file: int = 0) -> dict[str, Any]:
    """A float32 strided tensor entry of ``chunks`` (offsets, sizes), chunk i in file ``first_file + i``."""
    return {"fqn": fqn, "dtype": "FLOAT32", "layout": "STRIDED", "memory_format": "CONTIGUOUS",
            "requires_grad": 0, "pin_memory": 0, "size": size,
            "chunk_offsets": [x for offsets, _ in chunks for x in offsets],
            "chunk_sizes": [x for _, sizes in chunks for x in sizes],
            "chunk_files": [first_file + i for i in range(len(chunks))],
            "chunk_byte_offsets": [64] * len(chunks), "chunk_byte_lengths": [128] * len(chunks),
            "chunk_crcs": [0xDEADBEEF] * len(chunks)}


def representative() -> dict[str, Any]:
    """Two ranks' files, a 4x3 weight in two row chunks, a bias, and two optimizer values; every storage
    id and two module names, so that cutting it short reaches every field's length check."""
    return {
        "dcp_version": "1.0.0",
        "storage_meta": {"checkpoint_id": "ckpt", "save_id": "s1", "load_id": "l1", "modules": ["model", "optim"]},
        "planner_data": {"model.weight": ["model", "weight"]},
        "files": ["__0_0.distcp", "__1_0.distcp"],
        "tensors": [tensor("model.weight", [4, 3], [([0, 0], [2, 3]), ([2, 0], [2, 3])]),
                    tensor("model.bias", [3], [([0], [3])], first_file=1)],
        "values": [{"fqn": "optim.step", "file": 0, "byte_offset": 256, "byte_length": 12, "crc": 7},
                   {"fqn": "optim.lr", "file": 1, "byte_offset": 256, "byte_length": 16, "crc": 9}],
    }


def _variant(edit: Any) -> dict[str, Any]:
    m = representative()
    edit(m)
    return m


def build(version: int = 1) -> Corpus:
    """Version 1's vectors; with ``version=2``, the same in version 2 files (every tensor without strides)."""
    c = Corpus("checkpoint-metadata", version)
    rep = metadata_file(representative(), version)
    document_file_vectors(c, MAGIC, rep, newest=NEWEST)

    def ok(name: str, what: str, edit: Any) -> None:
        c.accept(name, what, metadata_file(_variant(edit), version))

    def bad(name: str, what: str, edit: Any, kind: str, rule: str | None = None) -> None:
        c.reject(name, what, metadata_file(_variant(edit), version).data, kind, rule=rule)

    empty: dict[str, Any] = {"dcp_version": None, "storage_meta": None, "planner_data": None,
                             "files": [], "tensors": [], "values": []}
    c.accept("Empty", "no dcp_version, no storage_meta, nil planner data, nothing stored", metadata_file(empty, version))
    ok("NoIds", "no storage id, no module",
       lambda m: m["storage_meta"].update(checkpoint_id=None, save_id=None, load_id=None, modules=[]))
    ok("EveryLayoutAndFormat", "a tensor of each layout, memory format and flag",
       lambda m: m["tensors"].extend(
           {**tensor(f"t{i}", [1], [([0], [1])]), "layout": layout, "memory_format": list(MEMORY_FORMATS)[i % 4],
            "requires_grad": i % 2, "pin_memory": 1 - i % 2, "dtype": list(DTYPES)[i]}
           for i, layout in enumerate(LAYOUTS)))
    ok("NoChunks", "a tensor with no chunks", lambda m: m["tensors"].append(tensor("empty", [0, 5], [])))
    ok("ZeroD", "a 0-d tensor: chunks of 0 values each", lambda m: m["tensors"].append(tensor("scalar", [], [([], [])])))
    ok("ChunksOverlap", "two chunks of one tensor overlapping, not covering it: not checked",
       lambda m: m["tensors"].append(tensor("overlap", [8], [([0], [3]), ([1], [3])])))
    ok("ChunkAtEdge", "a chunk ending exactly at its tensor's size",
       lambda m: m["tensors"].append(tensor("edge", [5], [([4], [1])])))
    ok("FileNameAtLimit", "a file name of 255 bytes", lambda m: m["files"].append("f" * MAX_FILE_NAME_LEN))
    ok("DcpVersionAtLimit", "a dcp_version of 64 bytes", lambda m: m.update(dcp_version="9" * MAX_DCP_VERSION_LEN))
    ok("FqnAtLimit", "an fqn of 65536 bytes", lambda m: m["values"].__setitem__(0, {**m["values"][0], "fqn": "v" * MAX_FQN_LEN}))
    nested: Any = []
    for _ in range(MAX_DEPTH - 1):
        nested = [nested]
    ok("PlannerNestedAtLimit", "planner data nested 64 deep", lambda m: m.update(planner_data=nested))

    # Enumerations and bools.
    for field, limit in (("dtype", len(DTYPES) + 1), ("layout", len(LAYOUTS)), ("memory_format", len(MEMORY_FORMATS))):
        for raw in (limit, 0xFF) + ((0,) if field == "dtype" else ()):
            bad(f"{field.title().replace('_', '')}{raw:02X}Unknown", f"{field} {raw}",
                lambda m, f=field, r=raw: m["tensors"][0].update({f: r}), "unknown-tag")
    for field in ("requires_grad", "pin_memory"):
        bad(f"{field.title().replace('_', '')}Byte02", f"{field} holding the byte 2",
            lambda m, f=field: m["tensors"][1].update({f: 2}), "invalid-value")
    for name, what, flags in (("DcpVersionFlagByte", "a dcp_version presence flag 2", b"\x02"),
                              ("StorageMetaFlagByte", "a storage_meta presence flag 0xff", b"\x00\xff")):
        c.reject(name, what, header(MAGIC, version) + flags + bytes(32), "invalid-value")

    # Limits.
    bad("DcpVersionAboveLimit", "a dcp_version of 65 bytes", lambda m: m.update(dcp_version="9" * 65), "limit")
    bad("FileNameAboveLimit", "a file name of 256 bytes", lambda m: m["files"].append("f" * 256), "limit")
    bad("FqnAboveLimit", "an fqn of 65537 bytes",
        lambda m: m["values"].__setitem__(0, {**m["values"][0], "fqn": "v" * (MAX_FQN_LEN + 1)}), "limit")
    bad("ModuleAboveLimit", "a module name of 65537 bytes", lambda m: m["storage_meta"].update(modules=["m" * 65537]),
        "limit")
    ok("NdimAtLimit", "a tensor of 64 dims", lambda m: m["tensors"].append(tensor("deep", [1] * 64, [])))
    bad("NdimAboveLimit", "a tensor of 65 dims", lambda m: m["tensors"][1].update(size=[1] * 65, chunk_offsets=[],
                                                                                  chunk_sizes=[]), "limit")
    bad("PlannerNestedOverLimit", "planner data nested 65 deep", lambda m: m.update(planner_data=[nested]), "limit")
    for name, what, document, spelled in value_extensions():
        ok(f"Planner{name}", f"planner data: {what}", lambda m, d=document, j=spelled: m.update(
            planner_raw=msgpack.packb(d, use_bin_type=True), planner_json=j))
    c.reject("ChecksumBeforeCrossReference", "a file listed twice and a damaged CRC-32: the CRC-32 is checked "
             "before the document's own rules", damaged_crc(metadata_file(_variant(lambda m: m["files"].append(
                 m["files"][0])), version)), "checksum", rule="file.crc32")
    beyond = metadata_file(_variant(lambda m: m["tensors"][1].update(chunk_sizes=[4])), version)
    c.reject("EntryRuleBeforeChecksum", "a chunk ending past its tensor's size and a damaged CRC-32: a tensor entry's "
             "rules run after its last field, before the document's CRC-32", damaged_crc(beyond), "invalid-value",
             rule="checkpoint-metadata.chunk-inside")
    c.reject("EntryRuleBeforeLaterCut", "a chunk ending past its tensor's size, then the file cut short: the entry's "
             "rules run before anything after it is read", beyond.data[:-1], "invalid-value",
             rule="checkpoint-metadata.chunk-inside")
    bad("PlannerExtUnknown", "planner data holding extension code 42",
        lambda m: m.update(planner_raw=msgpack.packb(msgpack.ExtType(42, b""))), "unknown-tag")
    bad("PlannerNeverUsed", "planner data of the never-used byte 0xc1", lambda m: m.update(planner_raw=b"\xc1"),
        "invalid-value")
    bad("PlannerTrailing", "two planner documents where one belongs", lambda m: m.update(planner_raw=b"\x01\x02"),
        "trailing-bytes")
    bad("PlannerEmpty", "planner data of 0 bytes", lambda m: m.update(planner_raw=b""), "truncated")
    for name, what, document, kind, rule in one_reject_per_rule():
        bad(f"Planner{name}", f"planner data: {what}", lambda m, d=document: m.update(planner_raw=d), kind, rule)
    for name, what, value, kind in typed_rejects():
        raw = msgpack.packb(value, use_bin_type=True)
        bad(f"Planner{name}", f"planner data: {what}", lambda m, d=raw: m.update(planner_raw=d), kind)
    bad("FqnBadUtf8", "an fqn that is not UTF-8", lambda m: m["tensors"][0].update(fqn=b"\xc3\x28"), "invalid-value")
    bad("ValueFqnBadUtf8", "a value fqn that is not UTF-8", lambda m: m["values"][0].update(fqn=b"\xc3\x28"),
        "invalid-value")
    bad("FileNameBadUtf8", "a file name that is not UTF-8", lambda m: m["files"].append(b"\xff"), "invalid-value")
    before_tensors = metadata_document(empty)[:-8]  # up to the tensors count of an empty document
    head = header(MAGIC, version) + b"\x00\x00" + text(b"\xc0")
    for name, what, tail, kind in (
        ("PlannerAboveLimit", "planner data of 64 MiB + 1 declared", None, "limit"),
        ("FilesCountAboveLimit", "2**20 + 1 files declared", u32((1 << 20) + 1), "limit"),
        ("FilesCountBeyondInput", "1000 files declared, none present", u32(1000), "truncated"),
        ("TensorsCountAboveLimit", "2**22 + 1 tensors declared", u32(0) + u32((1 << 22) + 1), "limit"),
        ("TensorsCountBeyondInput", "1000 tensors declared, none present", u32(0) + u32(1000), "truncated"),
        ("ValuesCountAboveLimit", "2**22 + 1 values declared", u32(0) * 2 + u32((1 << 22) + 1), "limit"),
        ("ValuesCountBeyondInput", "1000 values declared, none present", u32(0) * 2 + u32(1000), "truncated"),
    ):
        data = header(MAGIC, version) + b"\x00\x00" + u32((64 << 20) + 1) if tail is None else head + tail
        c.reject(name, what, data, kind)
        if kind == "limit":  # the limit itself is no fault: those bytes are missing
            at_limit = data[:-4] + u32(struct.unpack("<I", data[-4:])[0] - 1)
            c.reject(name.replace("AboveLimit", "AtLimitBeyondInput"), f"the limit itself ({what}, less one), "
                     "none present: cut short, not over the limit", at_limit, "truncated", rule="grammar.truncated")
    for i, field in enumerate(("checkpoint_id", "save_id", "load_id")):
        label = field.title().replace("_", "")
        at = header(MAGIC, version) + b"\x00\x01" + b"\x00" * i
        c.reject(f"{label}FlagByte", f"a {field} presence flag 2", at + b"\x02" + bytes(32), "invalid-value")
        c.reject(f"{label}AboveLimit", f"a {field} of 65537 bytes declared", at + b"\x01" + u32(MAX_FQN_LEN + 1) + bytes(32),
                 "limit")
        c.reject(f"{label}AtLimitBeyondInput", f"a {field} of 65536 bytes declared, 32 present", at + b"\x01"
                 + u32(MAX_FQN_LEN) + bytes(32), "truncated", rule="grammar.truncated")
        c.reject(f"{label}BadUtf8", f"a {field} that is not UTF-8", at + b"\x01" + text(b"\xc3\x28") + bytes(32),
                 "invalid-value")
    c.reject("DcpVersionBadUtf8", "a dcp_version that is not UTF-8", header(MAGIC, version) + b"\x01" + text(b"\xff") + bytes(32),
             "invalid-value")
    bad("ModuleBadUtf8", "a module name that is not UTF-8", lambda m: m["storage_meta"].update(modules=[b"\xff"]),
        "invalid-value")
    tensors_at = before_tensors + u32(1)
    c.reject("TensorFqnAboveLimit", "a tensor fqn of 65537 bytes declared",
             header(MAGIC, version) + tensors_at + u32(MAX_FQN_LEN + 1) + bytes(40), "limit")
    values_at = before_tensors + u32(0)
    c.reject("ValueFqnBeyondInput", "a value fqn of 30 bytes declared, the entry's 28 bytes present",
             header(MAGIC, version) + values_at + u32(1) + u32(30) + bytes(24), "truncated")
    c.reject("SecondValueCut", "two values declared, the first takes every byte present",
             header(MAGIC, version) + values_at + u32(2) + _value_entry({"fqn": "v" * 40, "file": 0, "byte_offset": 0,
                                                                "byte_length": 0, "crc": 0}), "truncated")
    c.reject("ModulesCountAboveLimit", "2**22 + 1 module names declared",
             header(MAGIC, version) + b"\x00\x01\x00\x00\x00" + u32((1 << 22) + 1), "limit")
    c.reject("ModuleAtLimitBeyondInput", "a module name of 65536 bytes declared, 40 present",
             header(MAGIC, version) + b"\x00\x01\x00\x00\x00" + u32(1) + u32(MAX_FQN_LEN) + bytes(40), "truncated",
             rule="grammar.truncated")
    c.reject("ModulesCountAtLimitBeyondInput", "2**22 module names declared, none present",
             header(MAGIC, version) + b"\x00\x01\x00\x00\x00" + u32(1 << 22), "truncated", rule="grammar.truncated")
    c.reject("TensorFqnAtLimitBeyondInput", "a tensor fqn of 65536 bytes declared, 40 present",
             header(MAGIC, version) + before_tensors + u32(1) + u32(MAX_FQN_LEN) + bytes(40), "truncated",
             rule="grammar.truncated")
    entry = utf8("t") + bytes([12, 0, 0, 0, 0, 1]) + u64(4)
    for i, (name, _) in enumerate(COLUMNS):
        label = name.title().replace("_", "")
        before = b"".join(u32(0) for _ in range(i))
        doc = before_tensors + u32(1) + entry + before
        c.reject(f"{label}CountAboveLimit", f"{name} of 2**26 + 1 values declared",
                 header(MAGIC, version) + doc + u32((1 << 26) + 1) + bytes(40), "limit")
        c.reject(f"{label}CountAtLimitBeyondInput", f"{name} of 2**26 values declared, 40 bytes present",
                 header(MAGIC, version) + doc + u32(1 << 26) + bytes(40), "truncated", rule="grammar.truncated")
        c.reject(f"{label}CountBeyondInput", f"{name} of 1000 values declared, 40 bytes present",
                 header(MAGIC, version) + doc + u32(1000) + bytes(40), "truncated")

    # Cross-field rules (check_tensor_entry, check_metadata).
    for name, _ in COLUMNS:
        label = name.title().replace("_", "")
        bad(f"{label}OneShort", f"{name} one value shorter than the other columns allow",
            lambda m, n=name: m["tensors"][0].update({n: m["tensors"][0][n][:-1]}), "invalid-value")
    bad("ChunkBeyondSize", "a chunk ending one past its tensor's size",
        lambda m: m["tensors"][1].update(chunk_sizes=[4]), "invalid-value")
    bad("ChunkOffsetBeyondSize", "a chunk starting past its tensor's last row",
        lambda m: m["tensors"][0]["chunk_offsets"].__setitem__(2, 4), "invalid-value")
    bad("SizeDimensionHuge", "a tensor whose size has a dim of 2**63 (and one of 0), which torch cannot hold",
        lambda m: m["tensors"][0].update(size=[0, 1 << 63]), "invalid-value", "checkpoint-metadata.size-dimension")
    bad("SizeProductOverflow", "a tensor of 2**32 x 2**32 elements",
        lambda m: m["tensors"][0].update(size=[1 << 32, 1 << 32]), "invalid-value")
    bad("ChunkEndOverflow", "a chunk whose offset plus size passes 2**64",
        lambda m: m["tensors"][1].update(chunk_offsets=[(1 << 64) - 1], chunk_sizes=[2]), "invalid-value")
    bad("DuplicateTensorFqn", "two tensors of one fqn", lambda m: m["tensors"][1].update(fqn="model.weight"),
        "invalid-value")
    bad("DuplicateValueFqn", "a value of a tensor's fqn", lambda m: m["values"][0].update(fqn="model.bias"),
        "invalid-value")
    bad("ChunkFileOutOfRange", "a chunk in file 2 of 2", lambda m: m["tensors"][1].update(chunk_files=[2]),
        "invalid-value")
    bad("ValueFileOutOfRange", "a value in file 2 of 2", lambda m: m["values"][0].update(file=2), "invalid-value")
    bad("ChunkFileNoFiles", "a chunk when no file is listed", lambda m: m.update(files=[]), "invalid-value")
    for label, name in (("Slash", "a/b"), ("Backslash", "a\\b"), ("DotDot", ".."), ("Dot", "."), ("Empty", ""),
                        ("Hidden", ".x"), ("Parent", "../x"), ("Space", "a b"), ("NonAscii", "\u00e9"),
                        ("Nul", "a\x00"), ("Newline", "a\n")):
        bad(f"FileName{label}", f"the file name {name!r}", lambda m, n=name: m["files"].append(n), "invalid-value")
    ok("FileNameDotsInside", "a file name with dots and dashes inside", lambda m: m["files"].append("a..b-c_d.e"))
    # Two neighbouring rules broken at once: the one listed first decides.
    def both(*edits: Any) -> Any:
        return lambda m: [edit(m) for edit in edits]

    for name, what, edit, rule in (
        ("SizeDimensionBeforeColumns", "a dim of 2**63, and one chunk byte offset short",
         lambda m: m["tensors"][0].update(size=[4, 1 << 63], chunk_byte_offsets=m["tensors"][0]["chunk_byte_offsets"][:-1]),
         "checkpoint-metadata.size-dimension"),
        ("ColumnsBeforeSizeOverflow", "one chunk size short, and 2**32 x 2**32 elements",
         lambda m: m["tensors"][0].update(size=[1 << 32, 1 << 32], chunk_sizes=m["tensors"][0]["chunk_sizes"][:-1]),
         "checkpoint-metadata.chunk-columns"),
        ("FileNameBeforeFileUnique", "the file name a/b listed twice", lambda m: m["files"].extend(["a/b", "a/b"]),
         "checkpoint-metadata.file-name"),
        ("FileUniqueBeforeFqnUnique", "a file listed twice, and two tensors of one fqn",
         both(lambda m: m["files"].append(m["files"][0]), lambda m: m["tensors"][1].update(fqn="model.weight")),
         "checkpoint-metadata.file-unique"),
        ("FqnUniqueBeforeFileIndex", "a value of a tensor's fqn, and a chunk in file 2 of 2",
         both(lambda m: m["values"][0].update(fqn="model.bias"), lambda m: m["tensors"][1].update(chunk_files=[2])),
         "checkpoint-metadata.fqn-unique"),
    ):
        bad(name, f"{what}: the rule listed first decides", edit, "invalid-value", rule)
    bad("FileNameTwice", "one data file listed twice", lambda m: m["files"].append("__0_0.distcp"), "invalid-value",
        "checkpoint-metadata.file-unique")
    ok("FqnEmpty", "a value whose fqn is the empty string (a state dict key like any other)",
       lambda m: m["values"][0].update(fqn=""))
    ok("ChunkZeroSize", "a 0x3 tensor of one zero-size chunk, and a zero-size chunk at the end of a tensor",
       lambda m: m["tensors"].extend([tensor("model.empty", [0, 3], [([0, 0], [0, 3])]),
                                      tensor("model.tail", [4, 3], [([0, 0], [4, 3]), ([4, 0], [0, 3])])]))

    # Many values with fqns of one length (optimizer states, say): each entry is still checked on its own.
    def alike(count: int, length: int = 9) -> list[dict[str, Any]]:
        return [{"fqn": f"optim.{i:0{length - 6}d}", "file": i % 2, "byte_offset": 256 * i, "byte_length": 16, "crc": i}
                for i in range(count)]

    ok("ValuesAlike", f"{ALIKE} values with fqns of one length", lambda m: m.update(values=alike(ALIKE)))
    ok("ValuesAlikeButOne", f"{ALIKE} values with fqns of one length but the fifth",
       lambda m: m.update(values=alike(ALIKE)[:4] + alike(5, 12)[4:] + alike(ALIKE)[5:]))
    bad("ValuesAlikeBadUtf8", f"{ALIKE} values with fqns of one length, the seventh not UTF-8",
        lambda m: m.update(values=alike(ALIKE)) or m["values"][6].update(fqn=b"optim.0\xc3\x28"), "invalid-value")
    bad("ValuesAlikeFirstAboveLimit", f"{ALIKE} values, the first's fqn of 65537 bytes",
        lambda m: m.update(values=[{**alike(1)[0], "fqn": "v" * (MAX_FQN_LEN + 1)}] + alike(ALIKE)[1:]), "limit")
    c.reject("ValuesAlikeCut", f"{ALIKE} values of one layout declared, the last cut short",
             header(MAGIC, version) + values_at + u32(ALIKE) + b"".join(_value_entry(v) for v in alike(ALIKE))[:-1], "truncated")

    # A string's length is its UTF-8 bytes: each of these is under its limit in characters.
    whole = representative() if version == 1 else representative_v2()
    c.refuse_write("DcpVersionAboveLimit", "a dcp_version of 33 characters in 66 bytes (the limit is 64 bytes)",
                   {**whole, "dcp_version": "\u00e9" * 33}, "write-value")
    c.refuse_write("FileNameAboveLimit", "a file name of 128 characters in 256 bytes (the limit is 255 bytes)",
                   {**whole, "files": [*whole["files"], "\u00e9" * 128]}, "write-value")
    c.refuse_write("UnknownLayout", "layout TILED",
                   {**representative(), "tensors": [{**tensor("t", [1], []), "layout": "TILED",
                                                     "requires_grad": False, "pin_memory": False,
                                                     **({"strides_recorded": False, "strides": []} if version >= 2 else {})}],
                    "planner_data": None}, "write-value")
    return c


def strided(t: dict[str, Any], strides: list[int] | None) -> dict[str, Any]:
    """Version 2's entry of ``t``: ``strides`` recorded, or (None) not."""
    return {**t, "strides_recorded": int(strides is not None), "strides": strides or []}


def representative_v2() -> dict[str, Any]:
    """The representative document with the strides torch 2.15 records: (3, 1) for the weight, (1,) for the bias."""
    m = representative()
    m["tensors"] = [strided(m["tensors"][0], [3, 1]), strided(m["tensors"][1], [1])]
    return m


def build_v2() -> Corpus:
    """Version 2: each tensor entry adds strides_recorded and strides (rules strides-ndim, stride-range)."""
    c = build(2)
    rep = metadata_file(representative_v2(), 2)
    c.accept("StridesRecorded", "the representative file, every tensor's strides recorded", rep)
    start = len(metadata_file(representative(), 2).data) - 4 - 8 - 2 * 28  # before the values: the strides inside
    for cut in range(start - 40, len(rep.data) - 60):
        c.reject(f"StridesTruncated{cut:04d}", f"the first {cut} of the {len(rep.data)} bytes of StridesRecorded",
                 rep.data[:cut], "truncated")

    def variant(edit: Any) -> dict[str, Any]:
        m = representative_v2()
        edit(m)
        return m

    def ok(name: str, what: str, edit: Any) -> None:
        c.accept(name, what, metadata_file(variant(edit), 2))

    def bad(name: str, what: str, edit: Any, kind: str, rule: str | None = None) -> None:
        c.reject(name, what, metadata_file(variant(edit), 2).data, kind, rule=rule)

    def strides_of(index: int, strides: list[int] | None, recorded: int | None = None) -> Any:
        def edit(m: dict[str, Any]) -> None:
            m["tensors"][index] = strided(m["tensors"][index], strides)
            if recorded is not None:
                m["tensors"][index]["strides_recorded"] = recorded
        return edit

    ok("NotRecorded", "no tensor's strides recorded (a release without strides wrote version 2)",
       lambda m: [strides_of(i, None)(m) for i in range(2)])
    ok("Transposed", "a transposed weight's strides (1, 4)", strides_of(0, [1, 4]))
    ok("StrideZero", "an expanded tensor's strides (0, 1)", strides_of(0, [0, 1]))
    ok("StrideAtLimit", "a stride of 2**63 - 1", strides_of(1, [(1 << 63) - 1]))
    ok("ZeroDRecorded", "a 0-d tensor whose strides are recorded: none",
       lambda m: m["tensors"].append(strided(tensor("scalar", [], [([], [])]), [])))
    ok("ZeroDNotRecorded", "a 0-d tensor whose strides are not recorded",
       lambda m: m["tensors"].append(strided(tensor("scalar", [], [([], [])]), None)))
    ok("MaxNdim", "a tensor of 64 dims and its 64 strides",
       lambda m: m["tensors"].append(strided(tensor("deep", [1] * MAX_NDIM, []), [1] * MAX_NDIM)))
    bad("StridesOneShort", "one stride for a 2-d tensor", strides_of(0, [1]), "invalid-value",
        "checkpoint-metadata.strides-ndim")
    bad("StridesOneLong", "three strides for a 2-d tensor", strides_of(0, [3, 1, 1]), "invalid-value",
        "checkpoint-metadata.strides-ndim")
    bad("StridesNotRecordedGiven", "strides not recorded, yet two given", strides_of(0, [3, 1], recorded=0),
        "invalid-value", "checkpoint-metadata.strides-ndim")
    bad("StridesRecordedNone", "strides recorded for a 1-d tensor, none given", strides_of(1, [], recorded=1),
        "invalid-value", "checkpoint-metadata.strides-ndim")
    bad("StridesNdimBeforeRange", "one stride of 2**63 for a 2-d tensor: the rule listed first decides",
        strides_of(0, [1 << 63]), "invalid-value", "checkpoint-metadata.strides-ndim")
    bad("StrideHuge", "a stride of 2**63, which torch cannot hold", strides_of(0, [3, 1 << 63]), "invalid-value",
        "checkpoint-metadata.stride-range")
    bad("StrideMax", "a stride of 2**64 - 1 (a negative stride read unsigned)", strides_of(1, [(1 << 64) - 1]),
        "invalid-value", "checkpoint-metadata.stride-range")
    bad("StridesRecordedByte02", "strides_recorded holding the byte 2", strides_of(1, [1], recorded=2),
        "invalid-value")
    bad("StridesAboveLimit", "65 strides declared (the ndim limit)", strides_of(1, [1] * (MAX_NDIM + 1)), "limit")
    bad("StridesBeforeChunks", "a chunk beyond its tensor and a bad stride count: chunk-inside runs first",
        lambda m: strides_of(1, [])(m) or m["tensors"][1].update(chunk_sizes=[4]), "invalid-value",
        "checkpoint-metadata.chunk-inside")
    c.refuse_write("StridesOneShort", "one stride for a 2-d tensor",
                   {**metadata_file(variant(strides_of(0, [1])), 2).value}, "write-value")
    return c
