"""The field schema of a dump: inferred from the rows on the way out, enforced on every record on the way in."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from inert.codecs import dump_manifest as manifest_codec
from inert.codecs import dump_shard as shard_codec
from inert.torch._compat import TORCH_DTYPES, dtype_name, torch_dtype

from ._model import DENSE, NESTED, VALUE, FieldSpec, Row

__all__ = ["infer_schema", "schema_entries", "specs_from_manifest", "check_record_field", "record_dtype"]

# Decoded dtype tags to torch dtypes, by member: one dict lookup per tensor on the load path.
_TORCH_OF = {member: TORCH_DTYPES[member.name] for member in shard_codec.DType if member.name in TORCH_DTYPES}


def record_dtype(tag: Any, where: str) -> Any:
    """The torch dtype of a decoded ``DType`` tag (a clear error when this torch lacks it)."""
    dtype = _TORCH_OF.get(tag)
    return dtype if dtype is not None else torch_dtype(tag.name, where)

_LAYOUT_OF = {DENSE: manifest_codec.Layout.DENSE, NESTED: manifest_codec.Layout.NESTED, VALUE: manifest_codec.Layout.VALUE}


def infer_schema(rows: Sequence[Row]) -> list[FieldSpec]:
    """One spec per field name, from the values the rows actually hold.

    A field is ``DENSE`` when every row holds a tensor of one dtype and one
    shape, ``NESTED`` when the shapes differ (same dtype and number of dims),
    ``VALUE`` when no row holds a tensor.  Anything else is a caller mistake.
    """
    seen: dict[str, list[Any]] = {}
    for row in rows:
        for name, value in row.fields.items():
            if not isinstance(name, str):
                raise TypeError(f"row {row.key!r}: field names must be str, got {type(name).__name__}")
            seen.setdefault(name, []).append(value)
    specs = []
    for name, values in seen.items():
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        if not tensors:
            specs.append(FieldSpec(name, VALUE))
            continue
        if len(tensors) != len(values):
            raise TypeError(f"field {name!r}: some rows hold a tensor and others a value; a field holds one or the other")
        dtypes = {t.dtype for t in tensors}
        if len(dtypes) != 1:
            raise TypeError(f"field {name!r}: rows hold tensors of several dtypes {sorted(map(str, dtypes))}; cast them to one")
        dtype = tensors[0].dtype
        dtype_name(dtype, f"field {name!r}")  # the format must carry it
        shapes = {tuple(t.shape) for t in tensors}
        if len(shapes) == 1:
            specs.append(FieldSpec(name, DENSE, dtype=dtype, shape=shapes.pop()))
            continue
        ndims = {len(s) for s in shapes}
        if len(ndims) != 1:
            raise TypeError(f"field {name!r}: rows hold tensors of {sorted(ndims)} dims; a nested field needs one number of dims")
        specs.append(FieldSpec(name, NESTED, dtype=dtype, ndim=ndims.pop()))
    return specs


def schema_entries(specs: Sequence[FieldSpec]) -> list[dict[str, Any]]:
    """The manifest's ``fields`` for ``specs``."""
    entries = []
    for spec in specs:
        layout: dict[str, Any] = {"kind": _LAYOUT_OF[spec.layout]}
        if spec.layout != VALUE:
            layout["dtype"] = dtype_name(spec.dtype, spec.name)
        if spec.layout == DENSE:
            layout["shape"] = list(spec.shape or ())
        elif spec.layout == NESTED:
            layout["ndim"] = spec.ndim
        entries.append({"name": spec.name, "layout": layout})
    return entries


def specs_from_manifest(fields: Sequence[dict[str, Any]]) -> list[FieldSpec]:
    """The caller's view of a decoded manifest's ``fields``."""
    specs = []
    for entry in fields:
        layout = entry["layout"]
        kind = layout["kind"]
        name = entry["name"]
        if kind == manifest_codec.Layout.DENSE:
            specs.append(FieldSpec(name, DENSE, dtype=torch_dtype(layout["dtype"].name, name), shape=tuple(layout["shape"])))
        elif kind == manifest_codec.Layout.NESTED:
            specs.append(FieldSpec(name, NESTED, dtype=torch_dtype(layout["dtype"].name, name), ndim=layout["ndim"]))
        else:
            specs.append(FieldSpec(name, VALUE))
    return specs


def check_record_field(spec: FieldSpec, body: dict[str, Any], nested_shape: list[int] | None) -> tuple[str, str] | None:
    """Where (a path below the field's body) and why a decoded record field disagrees with the schema, or ``None``."""
    is_tensor = body["kind"] == shard_codec.RecordKind.TENSOR
    if spec.layout == VALUE:
        return None if not is_tensor else ("kind", "a tensor where the manifest declares a value")
    if not is_tensor:
        return "kind", f"a value where the manifest declares a {spec.layout} tensor"
    if record_dtype(body["dtype"], spec.name) != spec.dtype:
        return "dtype", f"{body['dtype'].name} where the manifest declares {dtype_name(spec.dtype, spec.name)}"
    expected = list(spec.shape or ()) if spec.layout == DENSE else nested_shape
    if body["shape"] != expected:
        return "shape", f"{body['shape']} where the manifest declares {expected}"
    return None
