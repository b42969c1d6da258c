"""The rules a reader enforces, declared as data.

Every refusal of every reader is one of these rules: an identifier, one normative
sentence, the error kind (its conformance name) and the field it names, and its
implementation: an expression over the record's fields where one says it, or the
name of a check in :mod:`inert._checks`.  ``reason`` is the pattern of the reason
Inert's readers give when the rule is broken: the conformance tests trace every
refusal of the corpus to exactly one rule by it (kind, field and reason), and
require a refusing vector for every rule.

The spec pages (docs/spec/) number these rules per format; a generator for
another language reads them from here (``inert.spec.FORMATS[name].rules()``).

The rules of the grammar's elements (:data:`ELEMENT_RULES`) hold for every format
that uses the element; :data:`VALUE_RULES` (the canonical MessagePack form) for
every format with a value document; a format module declares its own in ``RULES``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SpecRule", "ELEMENT_RULES", "FILE_RULES", "VALUE_RULES", "FILE_NAME_SENTENCE"]

#: The grammar of a plain file name inside a checkpoint or dump directory (``inert._checks._FILE_NAME_RE``).
FILE_NAME_SENTENCE = (
    "1 to 255 characters of `A-Z a-z 0-9 _ . -` (ASCII), the first not `.` or `-`: no separator, no hidden "
    "name, no `.` or `..`, no space, newline or non-ASCII character (`a..b` is a plain name)"
)


@dataclass(frozen=True)
class SpecRule:
    """One rule: ``id`` (``<scope>.<name>``), ``sentence``, ``kind``, ``field`` (a path, ``[i]`` for any
    index, alternatives joined by ``|``, ``""`` for the whole input, ``*`` for every field of the element),
    ``check`` (an expression in Python syntax over the record's fields, or ``check:<name>`` of
    :mod:`inert._checks`), ``reason`` (a regular expression matching the reason the readers give) and
    ``on``: the typename of the record the rule is checked on (``|`` between several), after its fields, in declaration order;
    ``message``: for a rule with ``on``, the reason a reader gives, one template per step (or one for all): text
    with ``{E}`` (or ``{E!r}``, ``{E:spec}``) where ``E`` is an expression of the rule language over the record, ``i``, ``j``
    and ``k`` naming the indexes of the fault (the failing elements of the step's ``all`` and ``distinct``,
    outermost first) — it must match ``reason``; without one, the reason is the sentence.
    A rule with ``on`` states its check in the rule language of :mod:`inert.spec._rule_expr`, which the
    generators compile (a test evaluates it beside the Python readers' own checks over the corpus);
    a rule without is enforced by the element readers of every target (the grammar's elements, the
    file header and checksum, the value documents)."""

    id: str
    sentence: str
    kind: str
    field: str
    check: str
    reason: str
    on: str = ""
    message: str | tuple[str, ...] = ""

    def matches(self, kind: str, field: str, reason: str) -> bool:
        """Whether a refusal (error kind, field path, reason) is this rule's."""
        if kind != self.kind or not re.search(self.reason, reason):
            return False
        if self.field in ("*", ""):
            return self.field == "*" or field == ""
        for path in self.field.split("|"):
            pattern = re.escape(path).replace(r"\[i\]", r"\[\d+\]")
            if re.search(rf"(^|\.){pattern}$", field):
                return True
        return False


_N = r"\d+"

#: Rules of the grammar's elements, by the element that carries them (the spec page lists those of the
#: elements its format uses).
ELEMENT_RULES: dict[str, tuple[SpecRule, ...]] = {
    "any": (
        SpecRule("grammar.truncated", "A field that the input ends before, and a count or length whose elements "
                 "or bytes the remaining input cannot hold (each element at least its smallest encoding), is "
                 "refused.  The offset is where the field starts, or for a count the count's own offset, or for "
                 "the bytes after a length (a string's, a byte string's, a document's) the first of those bytes, "
                 "after the length and any padding.", "truncated", "*", "count * min_size(element) "
                 "<= remaining", rf"^({_N} bytes? needed, {_N} present|{_N} elements need at least|"
                 rf"{_N} bytes? of padding needed)"),
        SpecRule("grammar.trailing-bytes", "Nothing may follow the top-level value.", "trailing-bytes", "",
                 "remaining == 0", r"bytes? after the end of the value$"),
    ),
    "Utf8": (
        SpecRule("grammar.string-length", "A string's byte length is at most its field's max_len (the limits "
                 "column); the length is checked before the bytes are read.", "limit", "*", "length <= max_len",
                 r"^string length \d+ exceeds max_len"),
        SpecRule("grammar.utf8", "A string is valid UTF-8 as RFC 3629 defines it: no surrogate (U+D800 to U+DFFF), "
                 "no overlong form, nothing above U+10FFFF (refused, never replaced).", "invalid-value", "*",
                 "valid_utf8(bytes)", r"^invalid UTF-8$"),
    ),
    "Array": (
        SpecRule("grammar.count", "A count is at most its field's max_count (the limits column), checked "
                 "before the remaining bytes.", "limit", "*", "count <= max_count", r"^count \d+ exceeds max_count"),
    ),
    "Bytes": (
        SpecRule("grammar.bytes-length", "A byte string's length is at most its field's max_len.", "limit", "*",
                 "length <= max_len", r"^length \d+ exceeds max_len"),
    ),
    "Bool8": (
        SpecRule("grammar.bool", "A boolean (and an optional's presence flag) is the byte 0 or 1.",
                 "invalid-value", "*", "byte in (0, 1)", r"^boolean byte is \d+, not 0 or 1"),
    ),
    "Tag": (
        SpecRule("grammar.tag", "A tag is one of its enumeration's values (the limits column lists them).",
                 "unknown-tag", "*", "value in enum", r"^unknown [A-Z]\w* \d+$"),
    ),
    "Padding": (
        SpecRule("grammar.padding", "Every padding byte is zero.", "invalid-value", "*", "byte == 0",
                 r"^padding byte is \d+, not 0"),
    ),
    "Recursive": (
        SpecRule("grammar.depth", "A recursive element nests at most its max_depth levels (the outermost is "
                 "level 1), checked where the element starts, before its first byte (its tag) is read.", "limit",
                 "*", "depth <= max_depth", r"^nesting exceeds max_depth"),
    ),
    "MsgPack": (
        SpecRule("grammar.document-length", "A value document's byte length is at most its field's max_len, "
                 "checked before the document's bytes (so a length over the limit is a limit even when the "
                 "input is also cut short).", "limit", "*", "length <= max_len",
                 r"^document length \d+ exceeds max_len"),
    ),
}

#: Rules of a file format's header, checksum and size.
FILE_RULES: tuple[SpecRule, ...] = (
    SpecRule("file.magic", "A file starts with its format's 8-byte magic; anything else is not this format "
             "(the message says what it looks like).", "foreign-format", "magic", "data[:8] == MAGIC",
             r"^not a [a-z-]+ file"),
    SpecRule("file.version", "The format_version after the magic is one this reader knows.", "version",
             "format_version", "format_version in versions", r"is not supported \(this reader knows"),
    SpecRule("file.max-size", "The whole input is at most the format's max_size (or a lower limit the caller "
             "sets: a caller's max_size above the format's is taken and changes nothing, `MaxSizeAboveFormat`), "
             "checked before anything is read.", "limit", "", "len(data) <= max_size",
             r"^input of \d+ bytes? exceeds max_size"),
    SpecRule("file.crc32", "A Crc32 field holds the CRC-32 (ISO-HDLC: polynomial 0x04C11DB7 reflected, initial "
             "and final XOR 0xFFFFFFFF, as zlib.crc32) of every byte of its record before it, from the record's "
             "first byte (for a file's document: the byte after format_version); checked unless the caller "
             "passes verify_checksums=false.", "checksum", "crc32", "crc32(record[:crc_offset]) == crc32",
             r"^stored CRC-32"),
)


def _value(id_: str, sentence: str, kind: str, reason: str) -> SpecRule:
    return SpecRule(f"value.{id_}", sentence, kind, "*", "check:value_document", reason)


#: The canonical form of value documents (MessagePack), checked in byte order: the first fault is refused.
VALUE_RULES: tuple[SpecRule, ...] = (
    _value("one-document", "The document holds exactly one MessagePack value; bytes after it are refused, and "
           "so are bytes after the array in the payload of a tuple, set or frozenset.", "trailing-bytes",
           r"bytes? after the (end of the value document|array of an extension payload)"),
    _value("truncated", "A value, length or count that the remaining bytes of the document (or of the "
           "extension payload it is in) cannot hold is refused; a count needs at least one byte per element, "
           "two per map pair.", "truncated", r"^value document cut short"),
    _value("never-used", "The byte 0xc1 is refused.", "invalid-value", r"0xc1 is never used"),
    _value("float64", "Floats are float64 (0xcb); float32 (0xca) is refused.", "invalid-value", r"^float32"),
    _value("nan", "A NaN is stored as the float64 7ff8000000000000 only: the bytes cb 7f f8 00 00 00 00 00 00 as "
           "MessagePack stores it (big-endian); in each part of a complex (little-endian) the bytes "
           "00 00 00 00 00 00 f8 7f.",
           "invalid-value", r"^NaN stored as"),
    _value("shortest-int", "An integer takes its shortest encoding: 0..127 a positive fixint, -32..-1 a negative "
           "fixint, else uint8/16/32/64 for a non-negative value and int8/16/32/64 for a negative one, the "
           "narrowest that holds it.", "invalid-value", r"^the integer -?\d+ in a longer form"),
    _value("shortest-length", "A length or count takes its shortest form: fixstr, fixarray, fixmap when it "
           "fits, else the 8-bit form (str8, bin8, ext8), else 16-bit, else 32-bit; an ext of 1, 2, 4, 8 or 16 "
           "bytes is a fixext (array16 and map16 start at 16, str8 at 32; bin8 and ext8 at 0).",
           "invalid-value", r"^an? (str|bin|ext|count) of \d+( bytes?)? in a longer form"),
    _value("utf8", "A str holds valid UTF-8.", "invalid-value", r"^invalid UTF-8 in a str"),
    _value("key-type", "A map key, and a set or frozenset member, is a str or a bin (Python's hashes of other "
           "types are not randomized: a reader building dicts of them could be made to take quadratic time).",
           "invalid-value", r"keys and set members are str or bin"),
    _value("key-order", "The keys of a map, and the members of a set or frozenset, are strictly increasing: "
           "every str before every bin, strs by their UTF-8 bytes, bins by their bytes, each compared as "
           "unsigned bytes, a prefix first (so no key appears twice and each map has one encoding).",
           "invalid-value", r"(repeats|is out of order): keys are strictly increasing"),
    _value("ext-code", "An extension code other than 1 tuple, 2 complex, 3 bytearray, 4 set, 5 frozenset and the "
           "typed codes 6 to 12 (MessagePack's timestamp -1 included) is refused.", "unknown-tag",
           r"^unknown extension code"),
    _value("ext-array", "The payload of a tuple, set or frozenset is one array.", "invalid-value",
           r"^(tuple|set|frozenset) extension does not hold an array"),
    _value("complex-size", "The payload of a complex is 16 bytes: the real then the imaginary part, each a "
           "float64 little-endian.", "invalid-value", r"^complex extension holds"),
    _value("typed-array", "An array extension (7) holds a dtype numpy has (not BFLOAT16 nor the FLOAT8 types), "
           "ndim, ndim dims and exactly prod(dims) * itemsize bytes; BOOL elements are 0 or 1.", "invalid-value",
           r"^array extension: "),
    _value("typed-array-truncated", "An array (7) or array scalar (8) extension whose payload ends before its header "
           "or dims is refused.", "truncated", r"^array( scalar)? extension: "),
    _value("typed-array-ndim", "An array extension has at most 64 dims.", "limit", r"^array extension: "),
    _value("typed-dtype-code", "The dtype code of an array, array scalar or torch.dtype extension is a DType value, "
           "1 to 20 (a torch.dtype may be any of them; an array's or array scalar's must then be one numpy has: "
           "`value.typed-array`, `value.typed-array-scalar`).", "unknown-tag", r"^(array|array scalar|torch\.dtype) extension: "),
    _value("typed-array-scalar", "An array scalar extension (8) holds a dtype then exactly its itemsize bytes; a BOOL "
           "scalar's byte is 0 or 1.",
           "invalid-value", r"^array scalar extension: "),
    _value("typed-size", "A torch.Size extension (9) holds a document of an array of at most 64 ints 0..2**63-1.",
           "invalid-value", r"^torch\.Size extension: "),
    _value("typed-dtype", "A torch.dtype extension (10) holds exactly one byte (an empty one breaks this "
           "rule, not grammar.truncated).", "invalid-value", r"^torch\.dtype extension: "),
    _value("typed-device", "A torch.device extension (11) holds a document [type, index]: type matches "
           "[a-z][a-z0-9_]{0,31}, index nil or an int 0..2**31-1.", "invalid-value", r"^torch\.device extension: "),
    _value("typed-object", "A registered object extension (12) holds a document [name, state]: a name of 1 to 256 "
           "bytes, a state of the subset (read against the program's own registry; nothing is imported).",
           "invalid-value", r"^registered object extension: "),
    _value("depth", "Containers nest at most the field's max_depth: a container at the top is at depth 1, each "
           "array, map, tuple, set or frozenset inside one adds 1 (a tuple, set or frozenset and the array of its "
           "payload are one level), and a torch.Size, torch.device or registered object extension (9, 11, 12) "
           "adds 1 for the document it holds; nothing else counts (nil, booleans, ints, floats, str, bin, complex, "
           "bytearray, BytesIO, array, array scalar, torch.dtype).",
           "limit", r"^nesting exceeds max_depth"),
)
