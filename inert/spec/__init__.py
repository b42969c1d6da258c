"""The normative grammar of Inert's formats (installed as ``inert.spec``).

Each module declares one format and every version of it with the vocabulary in
:mod:`inert.spec._grammar`.  ``FORMATS`` is the registry the generator, the CLI
and the conformance runner read.  Needs the ``spec`` extra (Construct).
"""

from __future__ import annotations

try:
    import construct  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    # The same wording as inert._extras.install_hint (inert/spec/ does not import the runtime for it).
    raise ImportError(
        "inert.spec needs Construct: pip install '<checkout>[spec]' (<checkout>: a clone of Inert; it is not on PyPI yet)"
    ) from exc

from . import checkpoint_metadata, checkpoint_shard, dump_manifest, dump_shard, shm_descriptor, shm_message, shm_samples_meta
from ._grammar import Format
from ._rule_expr import attach

_MODULES = (checkpoint_metadata, checkpoint_shard, dump_manifest, dump_shard, shm_message, shm_samples_meta, shm_descriptor)
for _module in _MODULES:
    _module.FORMAT.declared = tuple(getattr(_module, "RULES", ()))
    _module.FORMAT.constants = {
        name: value for name, value in vars(_module).items() if name.isupper() and type(value) is int
    }
for _module in _MODULES:  # after every format's rules: dump-shard's records are checkpoint-shard's
    attach(_module.FORMAT)

#: Every format, by name, in the order the documentation lists them.
FORMATS: dict[str, Format] = {module.FORMAT.name: module.FORMAT for module in _MODULES}

__all__ = ["FORMATS", "Format"]
