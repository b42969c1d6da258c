"""What every emitter of the generator shares: indented lines and fresh temporary names."""

from __future__ import annotations

from typing import Any


class LineEmitter:
    """Collects the lines of one generated function for ``mod``, the module being written."""

    def __init__(self, mod: Any) -> None:
        self.mod = mod
        self.lines: list[str] = []
        self.tmp = 0

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def fresh(self, hint: str) -> str:
        """A name no other temporary of this function has."""
        self.tmp += 1
        return f"{hint}{self.tmp}"
