"""The optional extras, and the one line that names the missing one.

``import inert`` needs only msgpack; each integration checks for its extra
when it is imported (``extra_error``), and the command line turns a missing
package into ``inert: <command>: ... pip install '<checkout>[<extra>]' ...`` instead
of a traceback (``missing_extra``).  Every such hint comes from ``install_hint``: Inert
is not on the public index yet, so the line says how to install the extra from a
clone of the repository (README.md, "Install").
"""

from __future__ import annotations

__all__ = ["MissingExtraError", "extra_error", "missing_extra", "install_hint", "EXTRA_OF"]

#: The extra that installs each optional top-level package, and what to call the package.
EXTRA_OF = {
    "torch": ("torch", "PyTorch"),
    "numpy": ("torch", "numpy"),
    "safetensors": ("torch", "safetensors"),
    "construct": ("spec", "Construct"),
    "nvidia": ("dali", "NVIDIA DALI"),
    "transfer_queue": ("transferqueue", "TransferQueue"),
    "tensordict": ("transferqueue", "tensordict"),
    "atheris": ("fuzz", "atheris"),
}


def install_hint(extra: str) -> str:
    """The one command that installs ``extra``, as every missing-extra message spells it.

    ``pip install 'inert[x]'`` finds nothing on the public index (Inert is not there yet), so
    the hint names the checkout; a built wheel takes the same ``[x]`` suffix (README.md).
    """
    return f"pip install '<checkout>[{extra}]' (<checkout>: a clone of Inert; it is not on PyPI yet)"


class MissingExtraError(ImportError):
    """An optional package is not installed: the message names the extra that installs it."""


def _line(who: str, package: str, extra: str | None = None) -> str:
    default, name = EXTRA_OF[package]
    return f"{who} needs {name}: {install_hint(extra or default)}"


def extra_error(who: str, exc: ImportError, extra: str | None = None) -> ImportError:
    """What to raise for ``exc`` met importing ``who``: a ``MissingExtraError`` naming the extra (``extra``,
    or the package's own in ``EXTRA_OF``) when an optional package is missing, else ``exc`` itself::

        try:
            import torch  # noqa: F401 - checked first, so that a missing extra says so
        except ImportError as exc:
            raise extra_error("inert.dump", exc) from None
    """
    package = (getattr(exc, "name", None) or "").partition(".")[0]
    if not isinstance(exc, ModuleNotFoundError) or package not in EXTRA_OF:
        return exc  # the package is there but broken: its own error says more
    return MissingExtraError(_line(who, package, extra), name=package)


def missing_extra(exc: BaseException, who: str) -> str | None:
    """The one line for an import failure caused by a missing optional package, or None if it is not one."""
    seen = 0
    while exc is not None and seen < 8:  # the cause chain: inert.torch wraps torch's ModuleNotFoundError
        if isinstance(exc, MissingExtraError):
            return str(exc)
        if isinstance(exc, ModuleNotFoundError) and exc.name and exc.name.partition(".")[0] in EXTRA_OF:
            return _line(who, exc.name.partition(".")[0])
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return None
