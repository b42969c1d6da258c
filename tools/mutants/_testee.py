"""The ``inert-generated`` testee over one mutated codec module: ``_testee.py <module name> <mutated file>``."""

from __future__ import annotations

import importlib.util
import os
import sys


def main() -> None:
    name, path = sys.argv[1], sys.argv[2]
    os.environ["INERT_PURE_PYTHON"] = "1"  # the mutated Python reader, never the accelerator
    import inert.codecs  # noqa: F401  (the package first, then its mutated module in place of the real one)

    spec = importlib.util.spec_from_file_location(f"inert.codecs.{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    setattr(sys.modules["inert.codecs"], name, module)

    from inert.conformance.testees import inert_generated
    from inert.conformance.testees._serve import serve

    serve((inert_generated.decode, inert_generated.encode))


if __name__ == "__main__":
    main()
