"""The tiling check's cost is its grid's cells, not a Python step per run of cells (inert/_records.py)."""

from __future__ import annotations

import time
import types

import pytest

from inert import InertError
from inert._records import check_tiling


def _strips(n: int) -> list[types.SimpleNamespace]:
    """A (2n, 2n) tensor: 2n row strips one row high on the left, n column strips one column wide on the right;
    the right half's columns each cross all 2n row boundaries (2n * n runs of one cell)."""
    chunk = types.SimpleNamespace
    return ([chunk(offsets=(i, 0), sizes=(1, n)) for i in range(2 * n)]
            + [chunk(offsets=(0, n + j), sizes=(2 * n, 1)) for j in range(n)])


def test_thin_columns_across_many_rows_cost_their_cells() -> None:
    pytest.importorskip("numpy")  # torch's readers and verify's usual path; without it a run at a time (documented)
    chunks = _strips(1024)  # 3,072 chunks, 2 million grid cells: about 4 s of CPU a run at a time
    start = time.process_time()
    check_tiling("w", (2048, 2048), chunks)
    assert time.process_time() - start < 1.0  # 0.24 s measured; 4.2 s a run at a time
    chunks[-1] = types.SimpleNamespace(offsets=(0, 2046), sizes=(2048, 1))
    with pytest.raises(InertError, match=r"w\.chunks\[3071\]: the chunk at \(0, 2046\) overlaps another"):
        check_tiling("w", (2048, 2048), chunks)
