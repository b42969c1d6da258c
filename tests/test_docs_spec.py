"""The generated specification states what the readers enforce: every limit of every element (nested ones
included), every named constant with its value, every extension code with its JSON spelling, and the
order of the checks the readers make where two rules could apply."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from inert._canonical import _SPELLINGS
from inert._value_doc import EXT_CODES
from inert._value_types import TYPED_CODES
from inert.spec import FORMATS
from inert.spec._grammar import Array, Bytes, MsgPack, Optional, Record, Recursive, Union, Utf8
from inert.spec._values import EXTENSIONS

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "docs" / "spec"


def _page(fmt: Any) -> str:
    return (SPEC / f"{fmt.module_name}.md").read_text(encoding="utf-8")


def _limited(con: Any, seen: set[int]) -> list[Any]:
    """Every element under ``con`` that carries a limit (a string, a count, a document, a depth)."""
    if id(con) in seen:
        return []
    seen.add(id(con))
    found = [con] if isinstance(con, (Utf8, Bytes, Array, MsgPack, Recursive)) else []
    if isinstance(con, Record):
        children = [sub for _, sub in con.fields]
    elif isinstance(con, Union):
        children = [case for case in con.cases.values() if case is not None]
    elif isinstance(con, (Array, Optional)):
        children = [con.element]
    elif isinstance(con, Recursive):
        children = [con.target()]
    else:
        children = []
    return found + [inner for child in children for inner in _limited(child, seen)]


def _limit_text(con: Any) -> str:
    if isinstance(con, Array):
        return f"count ≤ {con.max_count}"
    if isinstance(con, Recursive):
        return f"depth ≤ {con.max_depth}"
    if isinstance(con, MsgPack):
        return f"length ≤ {con.max_len} bytes, depth ≤ {con.max_depth}"
    return f"length ≤ {con.max_len}"


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_limit_of_every_element_is_in_its_format_table(name: str) -> None:
    fmt = FORMATS[name]
    rows = "\n".join(line for line in _page(fmt).splitlines() if line.startswith("| "))
    rows = re.sub(r" \(2\*\*\d+( - 1)?\)", "", rows)  # the powers of two shown beside the numbers
    tables = [*fmt.versions.values(), *(c for part in fmt.parts.values() for c in part.values())]
    seen: set[int] = set()
    for con in (inner for table in tables for inner in _limited(table, seen)):
        assert _limit_text(con) in rows, f"{name}: {type(con).__name__} limit {_limit_text(con)!r} not in a table"


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_named_constant_is_printed_with_its_value(name: str) -> None:
    fmt = FORMATS[name]
    page = _page(fmt)

    for constant, value in fmt.constants.items():
        assert f"`{constant}` = {value}" in page
    for mention in re.finditer(r"``(MAX_[A-Z_]+)``", page):  # a constant named in prose carries its value
        assert page[mention.end():].startswith(f" (= {fmt.constants[mention.group(1)]}"), mention.group(0)


def test_every_extension_code_has_its_row_and_json_spelling() -> None:
    assert {code for code, *_ in EXTENSIONS} == set(EXT_CODES) | set(TYPED_CODES) == set(range(1, 13))
    page = (SPEC / "value_documents.md").read_text(encoding="utf-8")
    protocol = (ROOT / "inert" / "conformance" / "PROTOCOL.md").read_text(encoding="utf-8")
    for spelling in _SPELLINGS:
        assert f'"{spelling}"' in page, spelling
        assert f'"{spelling}"' in protocol, spelling


def test_every_page_with_a_value_document_links_the_shared_page() -> None:
    for fmt in FORMATS.values():
        has_values = any(rule.id.startswith("value.") for rule in fmt.rules())
        assert ("### Value documents" in _page(fmt)) == has_values, fmt.name


def test_the_record_rules_order_is_stated_where_the_list_alone_does_not_give_it() -> None:
    for name in ("checkpoint-metadata", "dump-manifest"):
        page = _page(FORMATS[name])
        assert "Order of the format's own rules:" in page
        for rule in FORMATS[name].declared:
            assert f"`{rule.id.split('.', 1)[1]}`" in page.split("Order of the format's own rules:")[1], rule.id
