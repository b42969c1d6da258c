"""The human-readable specification, generated from the grammar.

For every format and version: the byte layout of each declared type as a table
(order, offset where it is fixed, width, type, limits, validation rules), a
layout diagram (SVG), the canonical JSON mapping and the error catalogue.
``inert gen`` writes these files and ``inert gen --check`` fails when they are
stale, so the document cannot drift from the grammar.

A grammar element this module does not know may describe itself with a
``describe() -> (type, width, limits)`` method.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from pathlib import Path
from typing import Any

from inert._checks import CHECKPOINT_ITEMSIZES
from inert._errors import ERROR_CLASSES, byte_count
from inert.spec import _rule_expr
from inert.spec._grammar import (
    Array,
    Bool8,
    Bytes,
    Crc32,
    Format,
    MsgPack,
    Optional,
    Padding,
    Record,
    Recursive,
    Rule,
    Scalar,
    Tag,
    Union,
    Utf8,
    Validate,
    min_size,
)
from inert.spec._rules import VALUE_RULES
from inert.spec._values import EXTENSIONS, VALUE_DOCUMENTS

__all__ = ["outputs"]


def _fixed_width(con: Any) -> int | None:
    if isinstance(con, (Scalar, Tag)):
        return int(con.size)
    if isinstance(con, Bool8):
        return 1
    if isinstance(con, Record):
        widths = [_fixed_width(sub) for _, sub in con.fields]
        return None if None in widths else sum(w for w in widths if w is not None)
    return None


def _number(value: int) -> str:
    """An integer limit, with its power of two when it is one (``65536 (2**16)``)."""
    if value >= 1024 and value & (value - 1) == 0:
        return f"{value} (2**{value.bit_length() - 1})"
    if value >= 1023 and value & (value + 1) == 0:
        return f"{value} (2**{value.bit_length()} - 1)"
    return str(value)


def _limits(con: Any) -> str:
    """Every limit of one element, its inner elements' included (an array's element, an optional's value)."""
    if isinstance(con, Bool8):
        return "0 or 1"
    if isinstance(con, Tag):
        return ", ".join(f"{m.value} {m.name}" for m in con.enum_cls)
    if isinstance(con, Utf8):
        return f"length ≤ {_number(con.max_len)} bytes"
    if isinstance(con, Bytes):
        return f"length ≤ {_number(con.max_len)}"
    if isinstance(con, Array):
        smallest = min_size(con.element)
        text = f"count ≤ {_number(con.max_count)}; each element ≥ {byte_count(smallest)}"
        inner = _limits(con.element)
        return f"{text}; each element: {inner}" if inner else text
    if isinstance(con, Optional):
        inner = _limits(con.element)
        return f"flag 0 or 1; the value: {inner}" if inner else "flag 0 or 1"
    if isinstance(con, Recursive):
        return f"nesting depth ≤ {con.max_depth} (`grammar.depth`)"
    if isinstance(con, MsgPack):
        return (f"length ≤ {_number(con.max_len)} bytes, depth ≤ {con.max_depth}; "
                "[value document](value_documents.md)")
    if isinstance(con, Crc32):
        return "CRC-32 of the record's bytes before it (`file.crc32`); in the JSON, ignored by writers"
    if isinstance(con, Padding):
        return f"zero bytes to the next multiple of {con.align} (from the buffer's start); not in the JSON"
    return ""


def _describe(con: Any) -> tuple[str, str, str]:
    """(type, width, limits) of one element, for a table row."""
    width = _fixed_width(con)
    shown = str(width) if width is not None else f"≥ {min_size(con)}"
    limits = _limits(con)
    if isinstance(con, Scalar):
        return con.typename, shown, limits
    if isinstance(con, Bool8):
        return "Bool8", shown, limits
    if isinstance(con, Tag):
        return f"Tag {con.enum_cls.__name__} ({con.scalar.typename})", shown, limits
    if isinstance(con, Utf8):
        return f"Utf8 ({con.prefix.typename} length + UTF-8)", shown, limits
    if isinstance(con, Array):
        inner, _, _ = _describe(con.element)
        return f"Array of {inner} ({con.prefix.typename} count)", shown, limits
    if isinstance(con, Optional):
        inner, _, _ = _describe(con.element)
        return f"Optional {inner} (Bool8 flag)", shown, limits
    if isinstance(con, (Record, Union)):
        return f"[{con.typename}](#{con.typename.lower()})", shown, limits
    if isinstance(con, Recursive):
        return f"[{con.target().typename}](#{con.target().typename.lower()}) (recursive)", shown, limits
    if isinstance(con, MsgPack):
        return (f"MsgPack value document ({con.prefix.typename} byte length, then the document)", shown, limits)
    if isinstance(con, Bytes):
        pad = f", zero padding to a multiple of {con.align}" if con.align > 1 else ""
        return f"Bytes ({con.prefix.typename} length{pad}, then the bytes)", shown, limits
    if isinstance(con, Crc32):
        return "Crc32 (Int32ul)", "4", limits
    if isinstance(con, Padding):
        return "Padding", f"0..{con.align - 1}", limits
    describe = getattr(con, "describe", None)
    if describe is not None:
        return tuple(describe())  # type: ignore[return-value]
    return type(con).__name__, shown, ""


def _named_types(root: Any) -> list[Record | Union]:
    """Every Record and Union reachable from ``root``, in first-seen order."""
    seen: dict[int, Record | Union] = {}

    def visit(con: Any) -> None:
        if isinstance(con, (Record, Union)):
            if id(con) in seen:
                return
            seen[id(con)] = con
            children = [sub for _, sub in con.fields] if isinstance(con, Record) else [
                c for c in con.cases.values() if c is not None
            ]
            for child in children:
                visit(child)
        elif isinstance(con, (Array, Optional)):
            visit(con.element)
        elif isinstance(con, Recursive):
            visit(con.target())
        else:
            for attr in ("element", "subcon"):
                if hasattr(con, attr):
                    visit(getattr(con, attr))

    visit(root)
    return list(seen.values())


def _rule_text(check: Rule | Validate) -> str:
    if isinstance(check, Rule):
        expr = repr(check.expr).replace("this['", "").replace("']", "")
        return f"`{check.field}`: {expr} — else “{check.reason}”"
    doc = " ".join(line.strip() for line in (check.check.__doc__ or check.check.__name__).strip().splitlines())
    return f"{doc} (`{check.check.__name__}`: the format's own [rules](#rules))"


def _record_table(con: Record, lines: list[str]) -> None:
    lines.append("| # | offset | field | type | width | limits |")
    lines.append("|---|---|---|---|---|---|")
    offset: int | None = 0
    for index, (name, sub) in enumerate(con.fields, 1):
        kind, width, limits = _describe(sub)
        shown = str(offset) if offset is not None else "—"
        lines.append(f"| {index} | {shown} | `{name}` | {kind} | {width} | {limits} |")
        fixed = _fixed_width(sub)
        offset = offset + fixed if offset is not None and fixed is not None else None
    if con.checks:
        lines.append("")
        lines.append("Validation, after the fields are read (offset reported: the start of the record):")
        lines.append("")
        lines.extend(f"- {_rule_text(check)}" for check in con.checks)


def _type_section(con: Record | Union, lines: list[str]) -> None:
    lines.append(f"### {con.typename}")
    lines.append("")
    smallest = min_size(con)
    if isinstance(con, Record):
        padded = [name for name, sub in con.fields if isinstance(sub, Padding)]
        keys = "these keys" if not padded else f"these keys but {', '.join(f'`{n}`' for n in padded)} (padding)"
        lines.append(f"A record: the fields in order; JSON: an object with {keys}.  Smallest encoding: "
                     f"{byte_count(smallest)}.")
        lines.append("")
        _record_table(con, lines)
    else:
        enum_cls = con.tag.enum_cls
        lines.append(
            f"A union: a `{con.tag.scalar.typename}` tag `{con.tag_field}` ({enum_cls.__name__}), then the "
            f"fields of the case it selects. JSON: one object holding `{con.tag_field}` (the member name) beside "
            "the case's fields. Any other tag value is rejected (`unknown-tag`).  Smallest encoding: "
            f"{byte_count(smallest)} (the tag and its smallest case).  A case's own rules report the offset of the "
            "byte after the tag."
        )
        lines.append("")
        lines.append("| tag | name | case |")
        lines.append("|---|---|---|")
        for member, case in con.cases.items():
            target = f"[{case.typename}](#{case.typename.lower()})" if case is not None else "no further fields"
            lines.append(f"| {int(member)} | `{member.name}` | {target} |")
    lines.append("")


_JSON_MAPPING = """\
## Canonical JSON mapping

`inert decode` prints, and the conformance corpus records, each decoded value as
canonical JSON: object keys sorted by code point, no insignificant white space, UTF-8
(Python's `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`).
The value is the top-level record of the version's table: a file's header (magic,
`format_version`) is not in it.

| grammar element | JSON |
|---|---|
| Record | object, one key per field (padding fields excepted; a `crc32` field is included as read) |
| Union | object: the tag field (member name, e.g. `"SCHEDULED_TASK"`) beside the selected case's fields |
| Tag | the member name as a string |
| Int* | number, in decimal |
| Float64l | number, as Python's `repr` of the float (`0.5`, `1.0`, `-0.0`, `1e-05`, `1e+16`) |
| Bool8 | `true` / `false` |
| Utf8 | string |
| Array | array |
| Optional | `null` when absent, else the value |
| Bytes | `{"$bytes": "<base64>"}` (standard alphabet, `=` padding) |
| non-finite float | `{"$float": "nan" / "inf" / "-inf"}` |
| MsgPack (a value document) | its value, spelled as [value documents](value_documents.md) says: \
`{"$tuple": [...]}`, `{"$set": [...]}`, `{"$frozenset": [...]}`, `{"$complex": [real, imag]}`, \
`{"$bytearray": "<base64>"}`, `{"$bytesio": "<base64>"}`, `{"$array": {...}}`, `{"$arrayscalar": {...}}`, \
`{"$torch.Size": [...]}`, `{"$torch.dtype": "<name>"}`, `{"$torch.device": [type, index]}`, \
`{"$object": [name, state]}`, and a map with a bin key or a str key starting with `$` as \
`{"$map": [[key, value], ...]}` |

Every value has exactly this one spelling; the record corpora accept a value of every extension
code (the `Value*` vectors; in dump-manifest the `TagValue*` ones, in checkpoint-metadata the
`PlannerValue*` ones).

Writers accept the same JSON back (`inert encode`): a tag by its member name or its integer
value; a given `crc32` is ignored (the writer computes it; the key may be left out); a padding
field needs no key; keys a record does not have are ignored.  A missing field or a value of the
wrong JSON type is `write-type`; the right type breaking a limit or rule (a number out of range,
an unknown tag name, a string over its length) is `write-value`; the first fault in field order
is the one reported.
"""


_RULES_PREAMBLE = """\
## Rules

A reader refuses the input at the first rule it breaks, with the rule's error kind
(the [error catalogue](#error-catalogue)); a valid input breaks none.  *field* is the path
the error names (`[i]` an index, `*` any field of that element); *check* is the rule as an
expression over the record's fields (or the named check of `inert/_checks.py`).  Each rule
is pinned by refusing vectors of the corpus (see [the traceability table](traceability.md)).

A check is an expression of Python syntax with exact integer arithmetic (`inert/spec/_rule_expr.py`
defines the language).  `ARRAY.field` is the field of every record of an array of records;
`ARRAY.union.field` the tag, or a case's field, of every record's union (0, or an empty array,
where the record's case has no such field); `for x in A if C` skips the elements failing `C`;
`zip(A, B)` pairs the elements of two sequences up to the shorter; an index beyond its array
breaks the rule.  A check of two fields (`a` or `b`) is an `and` of two parts, the first checked
over every element before the second.  The `[i]` of the field a fault names are, in order, the
indexes of the first element breaking `all(...)` (its position in the sequence iterated, or the
pair's in `zip`), then of the first breaking an `all(...)` inside it, or of the first repeat of
`distinct(...)`.

"""

_ORDER_FILE = """\
* A file format checks the input's size first (`file.max-size`, before any byte is read),
  then the magic: input whose first 8 bytes are not the magic, and input shorter than 8
  bytes (the empty input and a proper prefix of the magic included), is `foreign-format`,
  never `truncated`; then `format_version` (2 bytes: fewer is `truncated`), then the top level."""

_ORDER_PADDING = """\
* Padding (a `Padding` field, or the padding inside a padded `Bytes` field) is checked whole:
  all its bytes present (`truncated`), then every byte zero (`invalid-value`).  A padded
  `Bytes` field: its length against its limit (`limit`), then its padding so, and only then
  the data against the bytes present (`truncated`)."""

_ORDER_CRC32 = """\
  A `crc32` field is a field: it is
  checked when it is read, so a CRC-32 is checked before the rules of the record it ends
  (a document's cross references included), and after the rules of every record inside that
  record (a tensor or compressed body inside a checkpoint-shard record, a dump row's fields):
  those ran after their own last field, which comes before the CRC-32."""


def _order_section(fmt: Format) -> str:
    """The order of the checks as it applies to this format: a header-less format has no size limit,
    magic or version to check first, a format without padding or CRC-32s no rule for them."""
    ids = {rule.id for rule in fmt.rules()}
    checked = [what for rule, what in (("grammar.utf8", "UTF-8"), ("grammar.tag", "a tag"), ("grammar.bool", "a boolean"))
               if rule in ids]
    if any(i.startswith("value.") for i in ids):
        checked.append("a value document's own rules in\n  the order of [value documents](value_documents.md)")
    parts = ["Order of the checks, when two rules could both apply:\n"]
    if "file.magic" in ids:
        parts.append(_ORDER_FILE)
    else:
        parts.append("* The format has no header: no size limit, magic or `format_version` is checked (the\n"
                     "  version is the one the caller names); the top level is read first.")
    fields = "* The fields are read in byte order, and each field's rules are checked as it is read:\n  "
    if ids & {"grammar.count", "grammar.string-length", "grammar.bytes-length", "grammar.document-length"}:
        fields += ("a length or count first against its limit (`limit`), then against the bytes present\n"
                   "  (`truncated`, each element at least its type's smallest encoding, given in its section or\n"
                   "  the limits column)")
    else:
        fields += "each field against the bytes present (`truncated`)"
    parts.append(fields + (f", then its value ({', '.join(checked)})." if checked else "."))
    if "grammar.padding" in ids:
        parts.append(_ORDER_PADDING)
    parts.append("* A record's own rules (the format's rules at the end of this list, and the rules named in\n"
                 "  its Validation line) run after its last field, before anything after the record is read,\n"
                 "  in the order listed (where one rule covers several fields or elements: in their order);\n"
                 "  they report the offset of the record's first field." + (_ORDER_CRC32 if "file.crc32" in ids else ""))
    return "\n".join(parts) + "\n"


def _rules_section(fmt: Format) -> str:
    lines = [_RULES_PREAMBLE + _order_section(fmt)]
    for number, rule in enumerate(fmt.rules(), 1):
        field = {"*": "any", "": "the whole input"}.get(rule.field, " or ".join(f"`{f}`" for f in rule.field.split("|")))
        lines.append(f"{number}. **`{rule.id}`** ({rule.kind}; field: {field}): {_with_values(fmt, rule.sentence)} "
                     f"*Check:* `{rule.check}`.")
    lines.append("")
    order = _rule_order(fmt)
    if order:
        lines.append(order)
        lines.append("")
    if any(r.id.startswith("value.") for r in fmt.rules()):
        lines.append("### Value documents")
        lines.append("")
        lines.append("The rules `value.*` hold inside every value document (`MsgPack` field).  Their framing, the "
                     "order they are checked in, byte order, depth, the extension codes 1 to 12 with their payloads "
                     "and limits, and the canonical JSON of each value are on one page for every format: "
                     "[value documents](value_documents.md).")
        lines.append("")
    return "\n".join(lines)


#: A named constant in prose (``MAX_DEPTH``, with or without quotes) not already followed by its value.
_CONSTANT = re.compile(r"(``|`)?\b([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b(``|`)?(?!`* ?[(=])")


def _rule_order(fmt: Format) -> str:
    """When the format's own rules run, from their declarations: by record, each after the record's last field,
    in the order declared, each step over its field's elements in order."""
    found = _rule_expr.records(fmt)
    lines = []
    for typename, rules in _rule_expr.record_rules(fmt).items():
        last = found[typename].fields[-1][0]
        each = "; ".join(f"`{rule.id.split('.', 1)[1]}` over " + ", then ".join(f"`{step.field}`" for step in steps)
                         for rule, steps in rules)
        lines.append(f"- `{typename}`, after its last field `{last}`: {each}.")
    if not lines:
        return ""
    return ("Order of the format's own rules: from their declarations, each record's rules run after its last "
            "field is read, before anything after the record, in the order declared; a rule over several fields takes "
            "them in turn, and over elements (`[i]`) takes them in order and names the first that breaks it.\n\n"
            + "\n".join(lines))


def _with_values(fmt: Format, text: str) -> str:
    """``text`` with each named constant of the format followed by its value (``MAX_DEPTH`` (= 64))."""
    def named(match: re.Match[str]) -> str:
        value = fmt.constants.get(match.group(2))
        return match.group(0) if value is None else f"{match.group(0)} (= {_number(value)})"

    return _CONSTANT.sub(named, text)


def _error_catalogue() -> str:
    lines = ["## Error catalogue", ""]
    lines.append("Every reader fault raises one of these (all subclasses of `inert.InertError`, a `ValueError`),")
    lines.append("with the message `<format>: offset <N>: <field path>: <reason>`.")
    lines.append("")
    lines.append("| conformance name | class | meaning |")
    lines.append("|---|---|---|")
    for kind, cls in ERROR_CLASSES.items():
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        lines.append(f"| `{kind}` | `{cls.__name__}` | {doc} |")
    lines.append("")
    return "\n".join(lines)


def _short(con: Any) -> str:
    """A type's name for a diagram box (no Markdown)."""
    text = _describe(con)[0]
    if text.startswith("[") or text.startswith("Array of [") or text.startswith("Optional ["):
        text = re.sub(r"\[(\w+)\]\([^)]*\)", r"\1", text)
    return text.split(" (")[0]


def _svg(fmt: Format, version: int, root: Record | Union) -> str:
    """A layout diagram: one row per declared type, one box per field in byte order.

    Solid boxes are fixed-width (width in bytes shown); dashed boxes vary in length.
    A union row shows its tag, then the cases it may select (one of them follows).
    """
    char, height, gap, left = 6.8, 34, 22, 170
    y, parts, widest = 10, [], 0.0
    for con in _named_types(root):
        parts.append(f'<text x="8" y="{y + 21}" class="t">{html.escape(con.typename)}</text>')
        x = float(left)
        cells: list[tuple[str, str, bool]] = []
        if isinstance(con, Union):
            cells.append((f"{con.tag_field} ({con.tag.size} B)", f"tag {con.tag.enum_cls.__name__}", True))
        else:
            for name, sub in con.fields:
                width = _fixed_width(sub)
                label = f"{name} ({width} B)" if width is not None else name
                cells.append((label, _short(sub), width is not None))
        for label, kind, fixed in cells:
            w = max(len(label), len(kind)) * char + 12
            dash = "" if fixed else ' stroke-dasharray="4 3"'
            parts.append(f'<rect x="{x:.0f}" y="{y}" width="{w:.0f}" height="{height}"{dash}/>')
            parts.append(f'<text x="{x + 6:.0f}" y="{y + 14}">{html.escape(label)}</text>')
            parts.append(f'<text x="{x + 6:.0f}" y="{y + 28}" class="k">{html.escape(kind)}</text>')
            x += w + 4
        if isinstance(con, Union):
            parts.append(f'<text x="{x + 4:.0f}" y="{y + 21}" class="k">then one of:</text>')
            x += 90
            for member, case in con.cases.items():
                label = f"{int(member)} {member.name}"
                kind = case.typename if case is not None else "(nothing)"
                w = max(len(label), len(kind)) * char + 12
                parts.append(f'<rect x="{x:.0f}" y="{y}" width="{w:.0f}" height="{height}" class="c"/>')
                parts.append(f'<text x="{x + 6:.0f}" y="{y + 14}">{html.escape(label)}</text>')
                parts.append(f'<text x="{x + 6:.0f}" y="{y + 28}" class="k">{html.escape(kind)}</text>')
                x += w + 4
        widest = max(widest, x)
        y += height + gap
    width = int(widest) + 10
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" viewBox="0 0 {width} {y}" '
        f'font-family="monospace" font-size="11">\n'
        f"<title>{html.escape(fmt.name)} v{version} layout (generated by inert gen)</title>\n"
        "<style>rect{fill:#f4f6fa;stroke:#345} rect.c{fill:#fbf7ee;stroke:#a83} .t{font-weight:bold} .k{fill:#556}</style>\n"
        + "\n".join(parts)
        + "\n</svg>\n"
    )


def _format_doc(fmt: Format) -> dict[str, str]:
    files: dict[str, str] = {}
    lines = [
        f"# Format `{fmt.name}`",
        "",
        "<!-- Generated by `inert gen` from the grammar in spec/. Do not edit. -->",
        "",
        _with_values(fmt, fmt.doc.strip()),
        "",
        f"Versions: {', '.join(str(v) for v in sorted(fmt.versions))} (writers write {fmt.latest}).",
        "",
        *_general(fmt),
    ]
    if fmt.params:
        lines.append(f"Reader parameters (known to the caller, not in the bytes): {', '.join(f'`{p}`' for p in fmt.params)}.")
        lines.append("")
    for version, root in sorted(fmt.versions.items()):
        svg_name = f"{fmt.module_name}-v{version}.svg"
        files[svg_name] = _svg(fmt, version, root)
        lines.append(f"## Version {version}")
        lines.append("")
        lines.append(f"The top level is [{root.typename}](#{root.typename.lower()}); nothing may follow it "
                     "(`trailing-bytes`).")
        lines.append("")
        lines.append(f"![{fmt.name} v{version} layout]({svg_name})")
        lines.append("")
        for con in _named_types(root):
            _type_section(con, lines)
    lines.append(_rules_section(fmt))
    lines.append(_JSON_MAPPING)
    lines.append(_error_catalogue())
    files[f"{fmt.module_name}.md"] = _with_values(fmt, "\n".join(lines))
    return files


def _general(fmt: Format) -> list[str]:
    """What holds for the whole format: byte order, the header, the size limit, the parts, the constants."""
    has_values = any(r.id.startswith("value.") for r in fmt.rules())
    lines = ["Every number of the grammar's fields (the tables below) is little-endian"
             + (" (inside a value document, MessagePack's own numbers are big-endian: see "
                "[value documents](value_documents.md))." if has_values else ".")]
    if fmt.magic is not None:
        magic = " ".join(f"{b:02x}" for b in fmt.magic)
        lines.append(
            f"A file starts with the header: the 8-byte magic `{magic}`, then `format_version` (Int16ul); "
            "the version's top-level record follows.  The header is not part of the decoded value: the JSON "
            f"of a file is its top-level record only.  max_size: {_number(fmt.size_limit)} bytes "
            f"({'the format' if fmt.max_size is not None else 'no limit of the format beyond it'}; a caller "
            "may pass a lower `max_size`), an input of exactly max_size bytes is accepted.")
    else:
        lines.append("The input has no header and no size limit of its own: the decoded value is the "
                     "top-level record, and nothing may follow it.")
    lines.append("In the tables, *offset* counts from the record's first byte (\u2014 where it varies), *width* is "
                 "the field's bytes (\u2265: its smallest encoding), *limits* every limit of the field and of the "
                 "elements inside it.  An error's offset counts from the input's first byte.")
    for part, versions in fmt.parts.items():
        names = ", ".join(f"v{v}: [{c.typename}](#{c.typename.lower()})" for v, c in sorted(versions.items()))
        lines.append(
            f"Part `{part}` (conformance format `{fmt.name}.{part}`; {names}) is read on its own: no header, "
            "no max_size, nothing after it, and its padding and offsets counted from its own first byte.")
    if fmt.constants:
        named = ", ".join(f"`{name}` = {_number(value)}" for name, value in sorted(fmt.constants.items()))
        lines.append(f"Named constants: {named}.")
    return [line for text in lines for line in (text, "")]


def _traceability(formats: dict[str, Format]) -> str:
    """Rule to vectors, for every format: what pins each rule of the spec."""
    from inert.conformance._trace import trace_corpus

    trace = trace_corpus(formats=formats)
    lines = [
        "# Traceability: rules to vectors",
        "",
        "<!-- Generated by `inert gen` from the grammar in inert/spec/ and the corpus in inert/conformance/. Do not edit. -->",
        "",
        "For every format, every rule its readers enforce (numbered as on the format's page) and the",
        "vectors that pin it: the refusing vectors are those whose refusal by Inert's generated readers",
        "is this rule (by error kind, field and reason; every refusal of the corpus is exactly one rule,",
        "and every rule has one, or `tests/test_rules.py` fails), the accepting ones those that name the",
        "rule (the boundary a refusal sits next to).  A vector `Name` of folder `<format>/v<N>` is the",
        "file `inert/conformance/corpus/<format>/v<N>/Name.json`.",
        "",
    ]
    if trace.untraced:
        lines.append(f"**{len(trace.untraced)} refusals are traced to no single rule** (see `tests/test_rules.py`).")
        lines.append("")
    for fmt in formats.values():
        lines.append(f"## `{fmt.name}`")
        lines.append("")
        lines.append("| # | rule | kind | refusing vectors | accepting vectors |")
        lines.append("|---|---|---|---|---|")
        for number, rule in enumerate(fmt.rules(), 1):
            rejects = trace.rejects.get((fmt.name, rule.id), [])
            accepts = trace.accepts.get((fmt.name, rule.id), [])
            lines.append(f"| {number} | `{rule.id}` | {rule.kind} | {_vector_list(rejects)} | {_vector_list(accepts)} |")
        lines.append("")
    return "\n".join(lines)


def _vector_list(names: list[str], shown: int = 4) -> str:
    if not names:
        return "—"
    short = [name.removeprefix("Required.") for name in names]
    text = ", ".join(f"`{name}`" for name in short[:shown])
    return f"{len(names)}: {text}" + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _counts(formats: dict[str, Format]) -> dict[str, tuple[int, int, int, int]]:
    """(rules, accepting, refusing, write) vector counts of each format, parts included."""
    from inert.conformance._corpus import load_corpus
    from inert.conformance._rule_match import base_format

    counts = {name: [len(fmt.rules()), 0, 0, 0] for name, fmt in formats.items()}
    for vector in load_corpus():
        row = counts[base_format(vector.format)]
        row[3 if vector.value is not None else 1 if vector.accepted is not None else 2] += 1
    return {name: (a, b, c, d) for name, (a, b, c, d) in counts.items()}


def _rules_json(formats: dict[str, Format]) -> str:
    """Every format's rules, in page order, as data for generators in other languages."""
    data = {
        fmt.name: [dataclasses.asdict(rule) | {"number": number} for number, rule in enumerate(fmt.rules(), 1)]
        for fmt in formats.values()
    }
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def _index(formats: dict[str, Format]) -> str:
    counts = _counts(formats)
    total = sum(b + c + d for _, b, c, d in counts.values())
    lines = [
        "# Inert format specification",
        "",
        "<!-- Generated by `inert gen` from the grammar in spec/. Do not edit. -->",
        "",
        "The normative source is the Construct grammar in `inert/spec/`; these pages are generated from it.",
        "See also [the compatibility policy](../compatibility.md), [adding a format version](../versioning.md),",
        "and [the conformance testee protocol](../../inert/conformance/PROTOCOL.md)",
        "with [the implementers' guide](../conformance.md).",
        "",
        "Every rule a reader enforces is numbered on its format's page; [traceability.md](traceability.md)",
        "gives the vectors that pin each one, and [rules.json](rules.json) the same rules as data.",
        "[value_documents.md](value_documents.md) holds what every format with a value document shares: the",
        "MessagePack subset, its check order, the extension codes 1 to 12 and their canonical JSON.",
        "",
        "| format | versions | page | rules | vectors: accept | refuse | writers refuse |",
        "|---|---|---|---|---|---|---|",
    ]
    for fmt in formats.values():
        versions = ", ".join(str(v) for v in sorted(fmt.versions))
        rules, accepts, rejects, writes = counts[fmt.name]
        lines.append(f"| `{fmt.name}` | {versions} | [{fmt.module_name}.md]({fmt.module_name}.md) | {rules} | "
                     f"{accepts} | {rejects} | {writes} |")
    lines.append("")
    lines.append(f"The corpus holds {total} vector files (a vector of a part, e.g. `checkpoint-shard.record`, "
                 "counts for its format).")
    lines.append("")
    return "\n".join(lines)


def _value_documents() -> str:
    """The one page on value documents every format with a ``MsgPack`` field links to."""
    lines = [
        "# Value documents",
        "",
        "<!-- Generated by `inert gen` from inert/spec/_values.py and the rules in inert/spec/. Do not edit. -->",
        "",
        VALUE_DOCUMENTS,
        "## Extension codes",
        "",
        "An extension is MessagePack's ext family (fixext 1/2/4/8/16 when the payload has that many bytes, "
        "else ext8, ext16, ext32 in their shortest form), its code a signed byte.  Any code not in this table "
        "(MessagePack's timestamp -1 included) is `unknown-tag` (`value.ext-code`).  None of them is a map key "
        "or a set member (`value.key-type`).",
        "",
        "| code | value | payload, its limits and its checks in order | canonical JSON |",
        "|---|---|---|---|",
        *(f"| {code} | {name} | {payload} | {spelled} |" for code, name, payload, spelled in EXTENSIONS),
        "",
        "DType values and itemsizes (an array's, array scalar's and torch.dtype's code; numpy has all but "
        "BFLOAT16 and the FLOAT8 types):",
        "",
        "| code | name | itemsize |",
        "|---|---|---|",
        *(f"| {index} | {name} | {CHECKPOINT_ITEMSIZES[name]} |" for index, name in enumerate(CHECKPOINT_ITEMSIZES, 1)),
        "",
        "## The rules",
        "",
        "Each format's page numbers these among its rules; here by identifier, in the order of that list.",
        "",
        *(f"- **`{rule.id}`** ({rule.kind}): {rule.sentence}" for rule in VALUE_RULES),
        "",
    ]
    return "\n".join(lines)


def outputs(formats: dict[str, Format], docs_dir: Path) -> dict[Path, str]:
    """Every generated documentation file, with its text."""
    files = {
        docs_dir / "README.md": _index(formats),
        docs_dir / "value_documents.md": _value_documents(),
        docs_dir / "traceability.md": _traceability(formats),
        docs_dir / "rules.json": _rules_json(formats),
    }
    for fmt in formats.values():
        for name, text in _format_doc(fmt).items():
            files[docs_dir / name] = text
    return files
