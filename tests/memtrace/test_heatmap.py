"""The segment/block heatmap of the fragmentation scenario, cell by cell."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvscope.errors import KvscopeError
from kvscope.memtrace.heatmap import heatmap
from kvscope.memtrace.load import load_snapshot


def test_fragmentation_pattern(snaps: dict[str, Path]) -> None:
    cols, _ = load_snapshot(snaps["fragmentation"])
    hm = heatmap(cols, rows=1, columns=40)  # 40 MiB reserved -> 1 MiB per cell
    assert hm.cell_bytes == 1 << 20
    seg1 = [0, 0, 1, 1] * 5  # 2 MiB blocks, the even ones freed
    seg2 = [1] * 5 + [0] * 10 + [1] * 5  # 5 MiB used, 10 MiB hole, 5 MiB used
    np.testing.assert_allclose(hm.allocated[0], seg1 + seg2)
    np.testing.assert_allclose(hm.free[0], 1 - np.array(seg1 + seg2))
    assert hm.segment_starts.tolist() == [0, 20 << 20]


def test_coarse_cells_average(snaps: dict[str, Path]) -> None:
    cols, _ = load_snapshot(snaps["fragmentation"])
    hm = heatmap(cols, rows=2, columns=1)  # one cell per segment
    np.testing.assert_allclose(hm.allocated[:, 0], [0.5, 0.5])


def test_rejects_empty_grid(snaps: dict[str, Path]) -> None:
    with pytest.raises(KvscopeError):
        heatmap(load_snapshot(snaps["oom"])[0], rows=0)
