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

from inert._errors import ERROR_CLASSES
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


def _describe(con: Any) -> tuple[str, str, str]:
    """(type, width, limits) of one element, for a table row."""
    width = _fixed_width(con)
    shown = str(width) if width is not None else f"≥ {min_size(con)}"
    if isinstance(con, Scalar):
        return con.typename, shown, ""
    if isinstance(con, Bool8):
        return "Bool8", shown, "0 or 1"
    if isinstance(con, Tag):
        members = ", ".join(f"{m.value} {m.name}" for m in con.enum_cls)
        return f"Tag {con.enum_cls.__name__} ({con.scalar.typename})", shown, members
    if isinstance(con, Utf8):
        return f"Utf8 ({con.prefix.typename} length + UTF-8)", shown, f"length ≤ {con.max_len}"
    if isinstance(con, Array):
        inner, _, _ = _describe(con.element)
        return f"Array of {inner} ({con.prefix.typename} count)", shown, f"count ≤ {con.max_count}"
    if isinstance(con, Optional):
        inner, _, _ = _describe(con.element)
        return f"Optional {inner} (Bool8 flag)", shown, ""
    if isinstance(con, (Record, Union)):
        return f"[{con.typename}](#{con.typename.lower()})", shown, ""
    if isinstance(con, Recursive):
        return f"[{con.target().typename}](#{con.target().typename.lower()}) (recursive)", shown, f"depth ≤ {con.max_depth}"
    if isinstance(con, MsgPack):
        return (f"MsgPack value document ({con.prefix.typename} byte length, then the document)", shown,
                f"length ≤ {con.max_len}, depth ≤ {con.max_depth}; [value documents](#value-documents)")
    if isinstance(con, Bytes):
        pad = f", zero padding to a multiple of {con.align}" if con.align > 1 else ""
        return f"Bytes ({con.prefix.typename} length{pad}, then the bytes)", shown, f"length ≤ {con.max_len}"
    if isinstance(con, Crc32):
        return "Crc32 (Int32ul)", "4", "CRC-32 of the record's bytes before it (`file.crc32`)"
    if isinstance(con, Padding):
        return "Padding", f"0..{con.align - 1}", f"zero bytes to the next multiple of {con.align} (from the buffer's start)"
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
    if isinstance(con, Record):
        lines.append("A record: the fields in order; JSON: an object with these keys.")
        lines.append("")
        _record_table(con, lines)
    else:
        enum_cls = con.tag.enum_cls
        lines.append(
            f"A union: a `{con.tag.scalar.typename}` tag `{con.tag_field}` ({enum_cls.__name__}), then the "
            f"fields of the case it selects. JSON: one object holding `{con.tag_field}` (the member name) beside "
            "the case's fields. Any other tag value is rejected (`unknown-tag`)."
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
canonical JSON: object keys sorted, no insignificant white space, UTF-8.

| grammar element | JSON |
|---|---|
| Record | object, one key per field |
| Union | object: the tag field (member name, e.g. `"SCHEDULED_TASK"`) beside the selected case's fields |
| Tag | the member name as a string |
| Int*/Float64l | number |
| Bool8 | `true` / `false` |
| Utf8 | string |
| Array | array |
| Optional | `null` when absent, else the value |
| bytes (where a format carries them) | `{"$bytes": "<base64>"}` |
| non-finite float | `{"$float": "nan" / "inf" / "-inf"}` |
| tuple, set, frozenset (value documents) | `{"$tuple": [...]}`, `{"$set": [...]}`, `{"$frozenset": [...]}` |
| complex, bytearray (value documents) | `{"$complex": [real, imag]}`, `{"$bytearray": "<base64>"}` |
| map with a bin key, or a str key starting with `$` | `{"$map": [[key, value], ...]}` (a bin key as `{"$bytes": ...}`) |

A set's members and a `$map`'s pairs are ordered by their canonical JSON text.  Every extension
value and every map has exactly this one spelling; the corpus accepts one of each
(`ValueTuple`, `ValueComplex`, `ValueBytearray`, `ValueSet`, `ValueFrozenset`, `ValueMapBytesKey`,
`ValueMapDollarKey` in the record corpora).

Writers accept the same JSON back (`inert encode`): tags by name or value.
"""


_RULES_PREAMBLE = """\
## Rules

A reader refuses the input at the first rule it breaks, with the rule's error kind
(the [error catalogue](#error-catalogue)); a valid input breaks none.  Order: the
fields are read in byte order, and each field's rules are checked as it is read: a
length or count first against its limit (`limit`), then against the bytes present
(`truncated`), then its value (UTF-8, a tag, a boolean, padding, a value document's
own rules in byte order); a record's own rules (the format's rules at the end of this
list) after its last field, in the order listed; a file's CRC-32 after the document
it covers.  *field* is the path the error names (`[i]` an index, `*` any field of
that element); *check* is the rule as an expression over the record's fields (or the
named check of `inert/_checks.py`).  Each rule is pinned by refusing vectors of the
corpus (see [the traceability table](traceability.md)).
"""

_VALUE_DOCUMENTS = """\
### Value documents

A `MsgPack` field holds one MessagePack document of Inert's value subset, in its
one canonical encoding (rules `value.*` above; a writer writes exactly this form):
nil, false, true; integers from -2<sup>63</sup> to 2<sup>64</sup>-1 in their shortest
encoding; float64 (one NaN, `7ff8000000000000`); str (UTF-8), bin, array and map with
every length in its shortest form; map keys and set members str or bin only, strictly
increasing (every str before every bin, each by its bytes); and these extensions in
their shortest ext form: 1 tuple, 4 set, 5 frozenset (the payload is one array of the
members), 2 complex (two float64 little-endian: real, imaginary), 3 bytearray (the
raw bytes).  Depth: a container at the top is at depth 1; every array, map, tuple,
set or frozenset inside one adds 1.  Decoding a valid document costs time and memory
linear in its size (a reader need hash nothing the input chose: keys are str or bin,
and duplicates show as a key not above the one before it).
"""


def _rules_section(fmt: Format) -> str:
    lines = [_RULES_PREAMBLE]
    for number, rule in enumerate(fmt.rules(), 1):
        field = {"*": "any", "": "the whole input"}.get(rule.field, " or ".join(f"`{f}`" for f in rule.field.split("|")))
        lines.append(f"{number}. **`{rule.id}`** ({rule.kind}; field: {field}): {rule.sentence} "
                     f"*Check:* `{rule.check}`.")
    lines.append("")
    if any(r.id.startswith("value.") for r in fmt.rules()):
        lines.append(_VALUE_DOCUMENTS)
    return "\n".join(lines)


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
        fmt.doc.strip(),
        "",
        f"Versions: {', '.join(str(v) for v in sorted(fmt.versions))} (writers write {fmt.latest}). "
        "All numbers are little-endian.",
        "",
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
    files[f"{fmt.module_name}.md"] = "\n".join(lines)
    return files


def _traceability(formats: dict[str, Format]) -> str:
    """Rule to vectors, for every format: what pins each rule of the spec."""
    from inert.conformance._trace import trace_corpus

    trace = trace_corpus(formats=formats)
    lines = [
        "# Traceability: rules to vectors",
        "",
        "<!-- Generated by `inert gen` from the grammar in spec/ and the corpus in conformance/. Do not edit. -->",
        "",
        "For every format, every rule its readers enforce (numbered as on the format's page) and the",
        "vectors that pin it: the refusing vectors are those whose refusal by Inert's generated readers",
        "is this rule (by error kind, field and reason; every refusal of the corpus is exactly one rule,",
        "and every rule has one, or `tests/test_rules.py` fails), the accepting ones those that name the",
        "rule (the boundary a refusal sits next to).  A vector `Name` of folder `<format>/v<N>` is the",
        "file `conformance/corpus/<format>/v<N>/Name.json`.",
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
    from inert.conformance._trace import base_format

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
        "The normative source is the Construct grammar in `spec/`; these pages are generated from it.",
        "See also [the compatibility policy](../compatibility.md), [adding a format version](../versioning.md),",
        "and [the conformance testee protocol](../../conformance/PROTOCOL.md) with [the implementers' guide](../conformance.md).",
        "",
        "Every rule a reader enforces is numbered on its format's page; [traceability.md](traceability.md)",
        "gives the vectors that pin each one, and [rules.json](rules.json) the same rules as data.",
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


def outputs(formats: dict[str, Format], docs_dir: Path) -> dict[Path, str]:
    """Every generated documentation file, with its text."""
    files = {
        docs_dir / "README.md": _index(formats),
        docs_dir / "traceability.md": _traceability(formats),
        docs_dir / "rules.json": _rules_json(formats),
    }
    for fmt in formats.values():
        for name, text in _format_doc(fmt).items():
            files[docs_dir / name] = text
    return files
