"""Vectors of ``dump-manifest``: the ``MANIFEST`` of a row dump (one document and its CRC-32).

A manifest is declared as a dict in the decoded value's shape (enum members by name or raw code;
``tag_raw`` the MessagePack bytes of a tag where a vector needs bad ones); ``manifest_file`` packs it
with ``struct`` and ``msgpack.packb``.  The file rules are checkpoint-metadata's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import msgpack

from ._filelib import DTYPES, as_json, header
from ._vectorlib import Corpus, Piece, text, u32, u64
from ._vectors_checkpoint_metadata import code, column, damaged_crc, document_file_vectors, sealed_file, utf8
from ._vectors_checkpoint_shard import one_reject_per_rule, typed_rejects, value_extensions

MAGIC = b"\x89INRTDM\n"
#: Copied from inert/spec/dump_manifest.py and inert/spec/dump_shard.py on purpose.
KINDS = {"DENSE": 1, "NESTED": 2, "VALUE": 3}
MAX_KEY_LEN = 1 << 16
MAX_TAG_LEN = 1 << 20
MAX_FILE_NAME_LEN = 255
MAX_SHARDS = 1 << 16
MAX_FIELDS = 4096
MAX_NAME_LEN = 1024
MAX_ROWS = 1 << 24
MAX_NDIM = 64
MAX_DEPTH = 64
DTYPE_CODES = {name: tag for name, (tag, _) in DTYPES.items()}


def shape(dims: list[int]) -> bytes:
    return bytes([len(dims)]) + u64(*dims)


def _field(f: dict[str, Any]) -> bytes:
    layout = f["layout"]
    data = utf8(f["name"]) + code(KINDS, layout["kind"])
    if "dtype" in layout:
        data += code(DTYPE_CODES, layout["dtype"])
    if "shape" in layout:
        data += shape(layout["shape"])
    if "ndim" in layout:
        data += bytes([layout["ndim"]])
    return data


def _key(k: dict[str, Any]) -> bytes:
    tag = k["tag_raw"] if "tag_raw" in k else msgpack.packb(k["tag"], use_bin_type=True)
    data = utf8(k["key"]) + u64(k["global_index"]) + column("I", k["fields"])
    return data + u32(len(k["nested_shapes"])) + b"".join(shape(s) for s in k["nested_shapes"]) + text(tag)


def _shard(s: dict[str, Any]) -> bytes:
    return utf8(s["file"]) + u32(s["owner"]) + b"".join(column("Q", s[name]) for name in ("rows", "offsets", "lengths"))


def manifest_document(m: dict[str, Any]) -> bytes:
    data = utf8(m["partition_id"]) + u32(len(m["fields"])) + b"".join(_field(f) for f in m["fields"])
    data += u32(len(m["keys"])) + b"".join(_key(k) for k in m["keys"])
    return data + u32(len(m["shards"])) + b"".join(_shard(s) for s in m["shards"])


def manifest_file(m: dict[str, Any]) -> Piece:
    value = copy.deepcopy(m)
    for k in value["keys"]:  # tag_json, when present: the tag's canonical JSON
        k.pop("tag_raw", None)
        k["tag"] = k.pop("tag_json") if "tag_json" in k else as_json(k["tag"])
    return sealed_file(MAGIC, manifest_document(m), value)


def representative() -> dict[str, Any]:
    """One field of each layout; three rows, one without its value field; two shards, one of two rows."""
    return {
        "partition_id": "train/0",
        "fields": [{"name": "ids", "layout": {"kind": "DENSE", "dtype": "INT64", "shape": [2]}},
                   {"name": "tokens", "layout": {"kind": "NESTED", "dtype": "INT32", "ndim": 1}},
                   {"name": "meta", "layout": {"kind": "VALUE"}}],
        "keys": [{"key": "a", "global_index": 0, "fields": [0, 1, 2], "nested_shapes": [[5]], "tag": {"split": "train"}},
                 {"key": "b", "global_index": 1, "fields": [0, 1], "nested_shapes": [[3]], "tag": None},
                 {"key": "c", "global_index": 9, "fields": [0, 1, 2], "nested_shapes": [[0]], "tag": b"\x01"}],
        "shards": [{"file": "rows-0.ids", "owner": 0, "rows": [0, 2], "offsets": [64, 320], "lengths": [200, 16]},
                   {"file": "rows-1.ids", "owner": 1, "rows": [1], "offsets": [64], "lengths": [100]}],
    }


Edit = Callable[[dict[str, Any]], Any]


def set_in(pick: Callable[[dict[str, Any]], dict[str, Any]], **changes: Any) -> Edit:
    """An edit setting ``changes`` in the part of a manifest that ``pick`` names."""
    return lambda m: pick(m).update(changes)


def layout_of(index: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda m: m["fields"][index]["layout"]


def build() -> Corpus:
    c = Corpus("dump-manifest", 1)
    document_file_vectors(c, MAGIC, manifest_file(representative()))

    def variant(edit: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
        m = representative()
        edit(m)
        return m

    def ok(name: str, what: str, edit: Callable[[dict[str, Any]], Any]) -> None:
        c.accept(name, what, manifest_file(variant(edit)))

    def bad(name: str, what: str, edit: Callable[[dict[str, Any]], Any], kind: str, rule: str | None = None) -> None:
        c.reject(name, what, manifest_file(variant(edit)).data, kind, rule=rule)

    empty: dict[str, Any] = {"partition_id": "", "fields": [], "keys": [], "shards": []}
    c.accept("Empty", "a dump of no rows", manifest_file(empty))
    ok("EmptyShard", "a shard file of no rows", lambda m: m["shards"].append(
        {"file": "rows-2.ids", "owner": 2, "rows": [], "offsets": [], "lengths": []}))
    ok("KeyWithNoFields", "a row that produced no field",
       lambda m: m["keys"][1].update(fields=[], nested_shapes=[]))
    ok("RecordsBackToBack", "a record ending on a multiple of 64, the next right after it",
       lambda m: m["shards"][0].update(lengths=[256, 16]))
    ok("DenseZeroD", "a dense 0-d field, a nested field of 0 dims",
       lambda m: m["fields"][0]["layout"].update(shape=[]) or m["fields"][1]["layout"].update(ndim=0)
       or [k.update(nested_shapes=[[]]) for k in m["keys"]])
    ok("DenseMaxNdim", "a dense field of 64 dims", lambda m: m["fields"][0]["layout"].update(shape=[1] * MAX_NDIM))
    ok("FieldNameAtLimit", "a field name of 1024 bytes", lambda m: m["fields"][2].update(name="n" * MAX_NAME_LEN))
    ok("FileNameAtLimit", "a shard file name of 255 bytes", lambda m: m["shards"][1].update(file="f" * MAX_FILE_NAME_LEN))
    ok("DtypeEvery", "a dense field of every dtype", lambda m: m["fields"].extend(
        {"name": f"d{i}", "layout": {"kind": "DENSE", "dtype": name, "shape": [1]}} for i, name in enumerate(DTYPES)))
    ok("GlobalIndexMax", "a global index of 2**64 - 1", lambda m: m["keys"][0].update(global_index=(1 << 64) - 1))
    nested: Any = []
    for _ in range(MAX_DEPTH - 1):
        nested = [nested]
    ok("TagNestedAtLimit", "a tag nested 64 deep", lambda m: m["keys"][0].update(tag=nested))

    for name, what, document, spelled in value_extensions():
        ok(f"Tag{name}", f"a tag: {what}", set_in(lambda m: m["keys"][1], tag=None,
                                                  tag_raw=msgpack.packb(document, use_bin_type=True), tag_json=spelled))
    typed_tag = msgpack.packb({"arr": msgpack.ExtType(7, bytes([DTYPE_CODES["INT32"], 1]) + u64(1) + bytes(4)),
                               "dev": msgpack.ExtType(11, msgpack.packb(["cpu", None])),
                               "size": msgpack.ExtType(9, msgpack.packb([2]))}, use_bin_type=True)
    ok("TagTypedExtensions", "a tag map of an array, a torch.device and a torch.Size",
       set_in(lambda m: m["keys"][0], tag_raw=typed_tag, tag_json={
           "arr": {"$array": {"data": "AAAAAA==", "dtype": "INT32", "shape": [1]}},
           "dev": {"$torch.device": ["cpu", None]}, "size": {"$torch.Size": [2]}}))

    # Enumerations.
    for raw in (0, 4, 0xFF):
        bad(f"Kind{raw:02X}Unknown", f"field layout kind {raw}", set_in(layout_of(2), kind=raw),
            "unknown-tag")
    for index, what in ((0, "dense"), (1, "nested")):
        for raw in (0, len(DTYPES) + 1, 0xFF):
            bad(f"{what.title()}Dtype{raw:02X}Unknown", f"a {what} field of dtype {raw}",
                set_in(layout_of(index), dtype=raw), "unknown-tag")

    # Strings and tags.
    for name, edit in (("PartitionId", lambda m: m.update(partition_id=b"\xc3\x28")),
                       ("FieldName", lambda m: m["fields"][0].update(name=b"\xff")),
                       ("Key", lambda m: m["keys"][2].update(key=b"\xc3\x28")),
                       ("FileName", lambda m: m["shards"][1].update(file=b"\xff"))):
        bad(f"{name}BadUtf8", f"a {name} that is not UTF-8", edit, "invalid-value")
    bad("TagNestedOverLimit", "a tag nested 65 deep", lambda m: m["keys"][0].update(tag=[nested]), "limit")
    for name, what, document, kind in (
        ("TagExtUnknown", "a tag holding extension code 42", msgpack.packb(msgpack.ExtType(42, b"")), "unknown-tag"),
        ("TagNeverUsed", "a tag of the never-used byte 0xc1", b"\xc1", "invalid-value"),
        ("TagTrailing", "two tag documents where one belongs", b"\x01\x02", "trailing-bytes"),
        ("TagEmpty", "a tag of 0 bytes", b"", "truncated"),
        ("TagCut", "a tag list of 2 with 1 element present", b"\x92\x01", "truncated"),
    ):
        bad(name, what, set_in(lambda m: m["keys"][1], tag_raw=document), kind)
    for name, what, document, kind, rule in one_reject_per_rule():
        bad(f"Tag{name}", f"a tag: {what}", set_in(lambda m: m["keys"][1], tag_raw=document), kind, rule)
    for name, what, value, kind in typed_rejects():
        raw = msgpack.packb(value, use_bin_type=True)
        bad(f"Tag{name}", f"a tag: {what}", set_in(lambda m: m["keys"][1], tag_raw=raw), kind)

    # Limits and counts beyond the input: a document cut after the declared count or length.
    fields_at = text(b"")
    keys_at = fields_at + u32(0)
    key_columns_at = keys_at + u32(1) + text(b"k") + u64(0)
    shards_at = keys_at + u32(0)
    shard_columns_at = shards_at + u32(1) + text(b"f") + u32(0)
    for name, what, prefix, declared, kind in (
        ("PartitionIdAboveLimit", "a partition id of 65537 bytes", b"", MAX_KEY_LEN + 1, "limit"),
        ("PartitionIdBeyondInput", "a partition id of 100 bytes, 40 present", b"", 100, "truncated"),
        ("FieldsCountAboveLimit", "4097 fields", fields_at, MAX_FIELDS + 1, "limit"),
        ("FieldsCountBeyondInput", "1000 fields, 40 bytes present", fields_at, 1000, "truncated"),
        ("FieldNameAboveLimit", "a field name of 1025 bytes", fields_at + u32(1), MAX_NAME_LEN + 1, "limit"),
        ("KeysCountAboveLimit", "2**24 + 1 keys", keys_at, MAX_ROWS + 1, "limit"),
        ("KeysCountBeyondInput", "1000 keys, 40 bytes present", keys_at, 1000, "truncated"),
        ("KeyAboveLimit", "a key of 65537 bytes", keys_at + u32(1), MAX_KEY_LEN + 1, "limit"),
        ("KeyFieldsAboveLimit", "a key of 4097 fields", key_columns_at, MAX_FIELDS + 1, "limit"),
        ("KeyFieldsBeyondInput", "a key of 1000 fields, 40 bytes present", key_columns_at, 1000, "truncated"),
        ("NestedShapesAboveLimit", "a key of 4097 nested shapes", key_columns_at + u32(0), MAX_FIELDS + 1, "limit"),
        ("NestedShapesBeyondInput", "a key of 1000 nested shapes, 40 bytes present", key_columns_at + u32(0), 1000,
         "truncated"),
        ("TagAboveLimit", "a tag of 1 MiB + 1", key_columns_at + u32(0) + u32(0), MAX_TAG_LEN + 1, "limit"),
        ("TagBeyondInput", "a tag of 100 bytes, 40 present", key_columns_at + u32(0) + u32(0), 100, "truncated"),
        ("ShardsCountAboveLimit", "2**16 + 1 shards", shards_at, MAX_SHARDS + 1, "limit"),
        ("ShardsCountBeyondInput", "1000 shards, 40 bytes present", shards_at, 1000, "truncated"),
        ("FileNameAboveLimit", "a shard file name of 256 bytes", shards_at + u32(1), MAX_FILE_NAME_LEN + 1, "limit"),
        ("RowsAboveLimit", "a shard of 2**24 + 1 rows", shard_columns_at, MAX_ROWS + 1, "limit"),
        ("RowsBeyondInput", "a shard of 1000 rows, 40 bytes present", shard_columns_at, 1000, "truncated"),
        ("OffsetsAboveLimit", "a shard of 2**24 + 1 offsets", shard_columns_at + u32(0), MAX_ROWS + 1, "limit"),
        ("OffsetsBeyondInput", "a shard of 1000 offsets, 40 bytes present", shard_columns_at + u32(0), 1000,
         "truncated"),
        ("LengthsAboveLimit", "a shard of 2**24 + 1 lengths", shard_columns_at + u32(0) * 2, MAX_ROWS + 1, "limit"),
        ("LengthsBeyondInput", "a shard of 1000 lengths, 40 bytes present", shard_columns_at + u32(0) * 2, 1000,
         "truncated"),
    ):
        c.reject(name, what, header(MAGIC) + prefix + u32(declared) + bytes(40), kind)
        if kind == "limit":  # the limit itself is no fault: those bytes are missing
            c.reject(name.replace("AboveLimit", "AtLimitBeyondInput"), f"the limit itself ({what}, less one), 40 "
                     "bytes present: cut short, not over the limit", header(MAGIC) + prefix + u32(declared - 1)
                     + bytes(40), "truncated", rule="grammar.truncated")
    # Cuts the representative's truncations cannot make: each count's minimum size is present.
    c.reject("DenseLayoutCut", "one field declared, the file ends after its DENSE kind", header(MAGIC) + fields_at + u32(1)
             + text(b"") + bytes([KINDS["DENSE"]]), "truncated")
    c.reject("SecondNestedShapeCut", "two nested shapes declared, the first takes every byte present",
             header(MAGIC) + key_columns_at + u32(0) + u32(2) + shape([7]), "truncated")
    bad("DenseNdimAboveLimit", "a dense field of 65 dims", lambda m: m["fields"][0]["layout"].update(shape=[1] * 65),
        "limit")
    def deep_nested(m: dict[str, Any]) -> None:
        m["fields"][1]["layout"].update(ndim=64)
        for key in m["keys"]:
            key["nested_shapes"] = [[*shape, *[1] * 63] for shape in key["nested_shapes"]]

    ok("NestedShapeNdimAtLimit", "a nested field of 64 dims, each row's shape of 64 dims", deep_nested)
    bad("NestedShapeNdimAboveLimit", "a nested shape of 65 dims",
        lambda m: m["keys"][0].update(nested_shapes=[[1] * 65]), "limit")

    # Cross-field rules (check_dump_manifest).
    for name, what, edit in (
        ("DenseDimensionHuge", "a dense field with a dim of 2**63", lambda m: m["fields"][0]["layout"].update(
            shape=[1 << 63])),
        ("NestedDimensionHuge", "a nested shape with a dim of 2**63", lambda m: m["keys"][0].update(
            nested_shapes=[[1 << 63]])),
    ):
        bad(name, what, edit, "invalid-value", "dump-manifest.dimension")
    ok("NestedDimensionLargest", "a nested shape with a dim of 2**63 - 1, the largest torch holds",
       lambda m: m["keys"][0].update(nested_shapes=[[(1 << 63) - 1]]))
    c.reject("ChecksumBeforeCrossReference", "two rows keyed a and a damaged CRC-32: the CRC-32 is checked before "
             "the cross references", damaged_crc(manifest_file(variant(lambda m: m["keys"][2].update(key="a")))),
             "checksum", rule="file.crc32")
    for name, what, edit in (
        ("DuplicateFieldName", "two fields named ids", lambda m: m["fields"][2].update(name="ids")),
        ("DuplicateKey", "two rows keyed a", lambda m: m["keys"][2].update(key="a")),
        ("DuplicateFile", "two shards in one file", lambda m: m["shards"][1].update(file="rows-0.ids")),
        ("FieldIndexRepeated", "a row listing field 0 twice", lambda m: m["keys"][1].update(fields=[0, 0, 1])),
        ("FieldIndexDescending", "a row listing fields 1, 0",
         lambda m: m["keys"][1].update(fields=[1, 0])),
        ("FieldIndexOutOfRange", "a row listing field 3 of 3", lambda m: m["keys"][0].update(fields=[0, 1, 3])),
        ("NestedShapeMissing", "a nested field without its shape", lambda m: m["keys"][0].update(nested_shapes=[])),
        ("NestedShapeExtra", "two shapes for one nested field",
         lambda m: m["keys"][0].update(nested_shapes=[[5], [6]])),
        ("NestedShapeNdimMismatch", "a 2-d shape for a 1-d nested field",
         lambda m: m["keys"][0].update(nested_shapes=[[5, 1]])),
        ("ShapesWithoutNestedField", "a shape on a row without the nested field",
         lambda m: m["keys"][1].update(fields=[0])),
        ("RowInNoShard", "row 1 in no shard", lambda m: m["shards"].pop()),
        ("RowOutOfRange", "row 3 of 3 keys", lambda m: m["shards"][1].update(rows=[3])),
        ("RowsWithNoKeys", "a shard row when there are no keys", lambda m: m.update(keys=[])),
        ("OffsetsShort", "two rows, one offset", lambda m: m["shards"][0].update(offsets=[64])),
        ("LengthsShort", "two rows, one length", lambda m: m["shards"][0].update(lengths=[200])),
        ("FirstRecordInHeader", "a record at offset 0, inside the file header",
         lambda m: m["shards"][1].update(offsets=[0])),
        ("RecordUnaligned", "a record at 65, not a multiple of 64", lambda m: m["shards"][1].update(offsets=[65])),
        ("RecordGap", "a record at 128 where the first belongs at 64", lambda m: m["shards"][1].update(offsets=[128])),
        ("RecordsOverlap", "a second record starting inside the first",
         lambda m: m["shards"][0].update(offsets=[64, 256])),
        ("RecordsOutOfOrder", "a second record before the first", lambda m: m["shards"][0].update(offsets=[320, 64])),
        ("RecordTooShort", "a record of 15 bytes", lambda m: m["shards"][1].update(lengths=[15])),
    ):
        bad(name, what, edit, "invalid-value")
    # Two neighbouring rules broken at once: the one listed first decides.
    def both(*edits: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        return lambda m: [edit(m) for edit in edits]

    huge_dim = set_in(lambda m: m["fields"][0]["layout"], shape=[1 << 63])
    for name, what, edit, rule in (
        ("FieldNameBeforeDimension", "two fields named ids, and a dense dim of 2**63",
         both(set_in(lambda m: m["fields"][2], name="ids"), huge_dim), "dump-manifest.field-name-unique"),
        ("DimensionBeforeKey", "a nested dim of 2**63, and two rows keyed a",
         both(set_in(lambda m: m["keys"][0], nested_shapes=[[1 << 63]]), set_in(lambda m: m["keys"][2], key="a")),
         "dump-manifest.dimension"),
        ("NestedShapesBeforeFileName", "a nested field without its shape, and the shard file name a/b",
         both(set_in(lambda m: m["keys"][0], nested_shapes=[]), set_in(lambda m: m["shards"][1], file="a/b")),
         "dump-manifest.nested-shapes"),
        ("NestedShapeNdimBeforeFileName", "a 2-d shape for a 1-d nested field, and the shard file name a/b",
         both(set_in(lambda m: m["keys"][0], nested_shapes=[[5, 1]]), set_in(lambda m: m["shards"][1], file="a/b")),
         "dump-manifest.nested-shapes"),
        ("FileNameBeforeFileUnique", "two shards in the file a/b", both(set_in(lambda m: m["shards"][0], file="a/b"),
         set_in(lambda m: m["shards"][1], file="a/b")), "dump-manifest.shard-file-name"),
        ("ColumnsBeforeRowIndex", "two rows and one offset, and row 3 of 3 keys",
         both(set_in(lambda m: m["shards"][0], offsets=[64]), set_in(lambda m: m["shards"][1], rows=[3])),
         "dump-manifest.shard-columns"),
        ("RowIndexBeforeRowOnce", "row 0 twice, and row 3 of 3 keys",
         both(set_in(lambda m: m["shards"][0], rows=[0, 0]), set_in(lambda m: m["shards"][1], rows=[3])),
         "dump-manifest.row-index"),
        ("PlacementBeforeLength", "a record at 128 where it belongs at 64, of 15 bytes",
         set_in(lambda m: m["shards"][1], offsets=[128], lengths=[15]), "dump-manifest.record-placement"),
        ("LengthBeforeRowPlaced", "a record of 15 bytes, and a row in no shard",
         set_in(lambda m: m["shards"][0], rows=[0], offsets=[64], lengths=[15]), "dump-manifest.record-length"),
    ):
        bad(name, f"{what}: the rule listed first decides", edit, "invalid-value", rule)

    # Rules of one kind (invalid-value) the same edit could break: each vector names the one that decides.
    bad("RowInTwoShards", "row 0 in both shards",
        lambda m: m["shards"][1].update(rows=[1, 0], offsets=[64, 192], lengths=[100, 16]), "invalid-value",
        "dump-manifest.row-once")
    bad("RowTwiceInOneShard", "row 0 twice in one shard, every key counted: the rows of one shard are checked "
        "against each other", lambda m: m["shards"][0].update(rows=[0, 0]), "invalid-value", "dump-manifest.row-once")
    for label, name in (("Manifest", "MANIFEST"), ("Slash", "a/b"), ("Backslash", "a\\b"), ("DotDot", ".."),
                        ("Dot", "."), ("Empty", ""), ("Hidden", ".x"), ("Space", "a b"), ("Nul", "a\x00")):
        bad(f"FileName{label}", f"the shard file name {name!r}", set_in(lambda m: m["shards"][1], file=name),
            "invalid-value")

    c.refuse_write("FileNameAboveLimit", "a shard file name of 128 characters in 256 bytes (the limit is 255 bytes)",
                   {**empty, "shards": [{"file": "\u00e9" * 128, "owner": 0, "rows": [], "offsets": [], "lengths": []}]},
                   "write-value")
    c.refuse_write("UnknownKind", "a field of layout kind SPARSE",
                   {**empty, "fields": [{"name": "x", "layout": {"kind": "SPARSE"}}]}, "write-value")
    c.refuse_write("GlobalIndexNegative", "a global index of -1",
                   {**empty, "keys": [{"key": "k", "global_index": -1, "fields": [], "nested_shapes": [], "tag": None}]},
                   "write-value")
    return c
