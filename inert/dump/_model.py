"""What a dump holds, as the caller sees it: rows, the field schema, the report of a dump."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Row", "FieldSpec", "DumpReport", "DENSE", "NESTED", "VALUE"]

#: Field layouts (``FieldSpec.layout``).
DENSE = "dense"
NESTED = "nested"
VALUE = "value"


@dataclass
class Row:
    """One row: its key, its global index, the fields it produced and its tag.

    A field is a ``torch.Tensor`` (any strided CPU or device tensor; only the
    view's own bytes are written) or a value of Inert's MessagePack subset.
    """

    key: str
    global_index: int
    fields: dict[str, Any] = field(default_factory=dict)
    tag: dict[Any, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FieldSpec:
    """How every row holds one field.

    ``DENSE``: a tensor of ``dtype`` and ``shape`` in every row that has it;
    ``NESTED``: a tensor of ``dtype`` with ``ndim`` dims whose shape differs per
    row; ``VALUE``: a MessagePack value document.
    """

    name: str
    layout: str
    dtype: Any = None
    shape: tuple[int, ...] | None = None
    ndim: int | None = None


@dataclass(frozen=True)
class DumpReport:
    """What :func:`inert.dump.dump` wrote."""

    path: str
    keys: int
    rows_with_data: int
    shards: int
    bytes: int
