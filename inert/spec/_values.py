"""Value documents: the normative text of the MessagePack subset every ``MsgPack`` field holds.

The rules themselves are ``VALUE_RULES`` of :mod:`inert.spec._rules` (numbered on each format's page);
this module holds what a reader needs beyond them, rendered once into docs/spec/value_documents.md
and linked from every page with a value document: the framing, the order of the checks, byte
order, the extension codes with their payloads, limits and canonical JSON spellings.  The reader
and writer are :mod:`inert._value_doc` and :mod:`inert._value_types`; the JSON mapping is
:mod:`inert._canonical`.
"""

from __future__ import annotations

__all__ = ["EXTENSIONS", "VALUE_DOCUMENTS"]


#: What a typed extension holding a value document refuses, beyond its own shape.
_DOCUMENT_FAULTS = ("an empty payload `truncated`, a well-formed document of another shape `invalid-value`, a fault "
                    "inside the document its own kind (an unknown extension inside is `unknown-tag`)")

#: Every extension code: (code, Python type, payload layout and its rules in check order, canonical JSON).
EXTENSIONS: tuple[tuple[int, str, str, str], ...] = (
    (1, "tuple", "one MessagePack array (fixarray, array16 or array32, shortest form) of the items, nothing after "
     "it; an empty payload is `truncated`, a payload starting with anything but an array is `invalid-value` "
     "(`value.ext-array`), bytes after the array `trailing-bytes`", '`{"$tuple": [...]}`'),
    (2, "complex", "exactly 16 bytes: the real then the imaginary part, each a float64 **little-endian**; a NaN "
     "part is the bytes `00 00 00 00 00 00 f8 7f` only", '`{"$complex": [real, imag]}` (each part a number or '
     'a `$float`)'),
    (3, "bytearray", "the raw bytes (any length, 0 included)", '`{"$bytearray": "<base64>"}`'),
    (4, "set", "as a tuple's; the members are str or bin, strictly increasing (`value.key-type`, "
     "`value.key-order`)", '`{"$set": [...]}`, members ordered by their canonical JSON text'),
    (5, "frozenset", "as a set's", '`{"$frozenset": [...]}`, members ordered by their canonical JSON text'),
    (6, "io.BytesIO", "the raw bytes (any length, 0 included)", '`{"$bytesio": "<base64>"}`'),
    (7, "numpy array", "`dtype` (Int8ul), `ndim` (Int8ul), `ndim` dims (Int64ul each), then the elements, "
     "little-endian, C order.  Checks in order: fewer than 2 bytes `truncated`; dtype not a DType value "
     "`unknown-tag`; BFLOAT16 or a FLOAT8 type (numpy has none) `invalid-value`; ndim above 64 `limit`; "
     "fewer than 2 + 8 * ndim bytes `truncated`; element bytes other than prod(dims) * itemsize "
     "`invalid-value`; a BOOL byte other than 0 and 1 `invalid-value`",
     '`{"$array": {"data": "<base64>", "dtype": "<DType name>", "shape": [...]}}`'),
    (8, "numpy scalar", "`dtype` (Int8ul) then exactly itemsize bytes.  Checks in order: empty `truncated`; "
     "dtype not a DType value `unknown-tag`; BFLOAT16 or a FLOAT8 type `invalid-value`; other than itemsize "
     "bytes `invalid-value`; a BOOL byte other than 0 and 1 `invalid-value`",
     '`{"$arrayscalar": {"data": "<base64>", "dtype": "<DType name>"}}`'),
    (9, "torch.Size", "a value document (the whole payload; canonical, its depth as the Depth section says) holding an "
     "array of at most 64 ints, each 0 to 2**63-1; " + _DOCUMENT_FAULTS, '`{"$torch.Size": [...]}`'),
    (10, "torch.dtype", "exactly 1 byte (else `invalid-value`, an empty payload included: it is one "
     "field of 1 byte, not a document or a header to cut short), a DType value 1 to 20, every one allowed "
     "(BFLOAT16 and the FLOAT8 types included; else `unknown-tag`)", '`{"$torch.dtype": "<DType name>"}`'),
    (11, "torch.device", "a value document holding the array `[type, index]`: `type` a str matching "
     "`[a-z][a-z0-9_]{0,31}`, `index` nil or an int 0 to 2**31-1; " + _DOCUMENT_FAULTS,
     '`{"$torch.device": [type, index]}` (`index` may be `null`)'),
    (12, "registered object", "a value document holding the array `[name, state]`: `name` a str of 1 to 256 "
     "UTF-8 bytes, `state` any value of the subset; " + _DOCUMENT_FAULTS + ".  The name is a key into "
     "the reading program's own registry: nothing is imported", '`{"$object": [name, state]}`'),
)

#: The page's text (Markdown), before the extension table.
VALUE_DOCUMENTS = """\
A `MsgPack` field of a format holds one **value document**: one MessagePack value of Inert's value
subset, in its one canonical encoding.  The rules `value.*` (numbered on each format's page, listed
below by identifier) say what a reader refuses; this page says how the document is framed, in which
order the rules are checked, and how a decoded value is spelled in canonical JSON.

## Framing

The field is its byte length (the field's prefix, little-endian like every field of the grammar; the
format's table gives its width), then the document: exactly that many bytes.  The length is checked
against the field's max_len first (`grammar.document-length`: a length over the limit is `limit` even
when the input is also cut short), then against the bytes present (`grammar.truncated`).  The document
holds exactly one value (`value.one-document`); an empty document is `truncated`.

Every fault inside a document is reported at the offset of the document's first byte (the byte after
its length), with the field's path; the reason ends with `(at byte N of the document)`.

## Byte order

MessagePack's own numbers (lengths, counts, integers, float64, an ext's code) are **big-endian**, as
MessagePack defines them: the float64 NaN is the bytes `cb 7f f8 00 00 00 00 00 00`.  The payloads
Inert defines inside extensions are **little-endian**: the two parts of a complex (a NaN part is the
bytes `00 00 00 00 00 00 f8 7f`), and the dims and elements of an array or array scalar.

## The subset

nil, false, true; integers from -2<sup>63</sup> to 2<sup>64</sup>-1 (a non-negative one always in
the unsigned family, a negative one in the signed family, each in its shortest form); float64 only
(float32 is refused); str (UTF-8), bin, array, map; the extension codes 1 to 12 below.  Map keys and
set members are str or bin only, strictly increasing.  Every length and count takes its shortest form.

## Order of the checks

A reader checks a document in two passes and refuses the first fault it finds:

1. **The canonical form, in byte order.**  One walk over the document's bytes (and the payloads of
   tuples, sets and frozensets, which are part of it) checks every rule but the payload rules of the
   extensions 6 to 12.  For each value, by its first byte:
   * `0xc1`: `value.never-used`; `0xca` (float32): `value.float64`;
   * an int: its bytes present (`value.truncated`), then its shortest form (`value.shortest-int`);
   * a float64: its 8 bytes present, then its NaN (`value.nan`);
   * a str or bin: its length bytes present, then the length's shortest form
     (`value.shortest-length`), then the bytes present, then (a str) UTF-8 (`value.utf8`);
   * an array or map: its count bytes present, then the count's shortest form, then the depth
     (`value.depth`, empty containers included), then the count against the bytes left (one byte per
     element, two per pair: `value.truncated`), then its items;
   * a map key or set member: its type from its first byte (`value.key-type`), then its own checks
     (as a str or bin), then its order against the key before it (`value.key-order`);
   * an ext: its length bytes present, then the length's shortest form, then its code byte present,
     then the code (`value.ext-code`), then the payload present; then a complex's size
     (`value.complex-size`) and NaNs, or a tuple's, set's or frozenset's array (`value.ext-array`,
     its count's form, the depth, the count against the payload's bytes, its items, nothing after
     it: `value.one-document`); the payloads of 3 and 6 to 12 are skipped in this pass;
   * after the top value: nothing left (`value.one-document`).
2. **The payloads of the extensions 6 to 12, in document order** (depth first, in byte order), each
   by the checks of its row below.  A document that breaks a rule of pass 1 anywhere is refused for
   that fault, even when an extension payload before it is also broken.

## Depth

What counts as a level is the rule `value.depth` (below).  The limit is the field's max_depth (the
format's table); a container that would exceed it is `limit`, checked when its header is read.

The document inside a torch.Size, torch.device or registered object extension (9, 11, 12) is checked
as a document of its own (pass 1 on its bytes, then its own extensions) whose depth continues from
the extension's: with d containers around the extension (d = 0 at the top), the extension is at
depth d + 1 and its document may nest max_depth - d - 1 levels (a torch.Size in lists 62 deep: its
array is at depth 64, the limit of a 64-deep field).  An extension with d >= max_depth - 1 has no
level left for its document: it is `limit` (`value.depth`), a fault of pass 2 found when its payload's
turn comes, before any byte of the payload is looked at, so an empty payload (else `truncated`), a
payload breaking a rule of pass 1 or a document its row refuses are all `limit` there.

## Canonical JSON of a value

A decoded value is spelled so (the same in `inert/conformance/PROTOCOL.md`; the conformance corpus
compares the text byte for byte):

* nil `null`, booleans `true`/`false`, ints in decimal;
* a finite float64 as Python's `repr`: the shortest digits that read back to the same float, with a
  `.0` when integral (`1.0`, `-0.0`, `0.5`), in exponent form when the decimal exponent is below -4
  or at least 16 (`1e-05`, `1e+16`, `1.5e+300`: a sign and at least two digits); NaN and the
  infinities `{"$float": "nan" | "inf" | "-inf"}`;
* a str a JSON string; a bin `{"$bytes": "<base64>"}`;
* an array a JSON array;
* a map whose keys are all str not starting with `$` a JSON object (keys sorted by code point); any
  other map (a bin key, or a str key starting with `$`) `{"$map": [[key, value], ...]}`, the pairs
  ordered by the canonical JSON text of each `[key, value]` pair, compared by code point;
* the extensions as the last column of the table below; set and frozenset members are ordered by
  their canonical JSON text, compared by code point.

Base64 is the standard alphabet with `=` padding (RFC 4648, section 4), never URL-safe, no line breaks;
inside `$array` and `$arrayscalar`, `data` is such a string itself (not a `$bytes` object).  A JSON
object with one key that is one of these `$` spellings is that value, never a map: a writer given one
builds the value it names.
"""
