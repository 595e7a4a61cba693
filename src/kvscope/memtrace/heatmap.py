"""Data for the segment/block heatmap: block state across the reserved address space.

The end-state segments are laid side by side in address order (the gaps between them are
not memory the allocator owns, so they are left out) and the resulting byte range is cut
into ``rows x cols`` cells of equal size. Each cell gets the fraction of its bytes that are
allocated, pending free, and free. The cost is proportional to blocks + cells, never to
bytes, so a snapshot of any size yields a small matrix a report can draw (the browser
viewer instead draws every block). Cumulative byte counts at block boundaries are
interpolated at the cell edges, which is exact because bytes are uniform inside a block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvscope.errors import KvscopeError
from kvscope.memtrace.columns import ACTIVE, PENDING_FREE, SnapshotColumns

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Heatmap:
    """``allocated[r, c]`` etc. are fractions of cell (r, c); ``cell_bytes`` is its size;
    ``segment_starts`` are the cell-space offsets (bytes) where each segment begins."""

    allocated: F64
    pending_free: F64
    free: F64
    cell_bytes: float
    segment_starts: npt.NDArray[np.int64]


def heatmap(
    cols: SnapshotColumns, rows: int = 64, columns: int = 128, device: int | None = None
) -> Heatmap:
    """Block-state fractions of the end-state reserved memory on a ``rows x columns`` grid."""
    if rows < 1 or columns < 1:
        raise KvscopeError("heatmap rows and columns must be at least 1.")
    sg = cols.segments
    seg_ok = np.ones(sg.address.size, bool) if device is None else sg.device == device
    segs = np.flatnonzero(seg_ok)
    segs = segs[np.lexsort((sg.address[segs], sg.device[segs]))]
    rank = np.full(sg.address.size, -1, np.int64)
    rank[segs] = np.arange(segs.size)
    bm = rank[sg.blk_segment] >= 0 if sg.blk_segment.size else np.zeros(0, bool)
    order = np.flatnonzero(bm)
    order = order[np.lexsort((sg.blk_address[order], rank[sg.blk_segment[order]]))]
    size = sg.blk_size[order].astype(np.float64)
    state = sg.blk_state[order]
    edges = np.concatenate([[0.0], np.cumsum(size)])
    total = float(edges[-1])
    n = rows * columns
    if total <= 0:
        z = np.zeros((rows, columns))
        return Heatmap(z, z.copy(), z.copy(), 0.0, np.zeros(0, np.int64))
    cell_edges = np.linspace(0.0, total, n + 1)

    def frac(mask: npt.NDArray[np.bool_]) -> F64:
        cum = np.concatenate([[0.0], np.cumsum(np.where(mask, size, 0.0))])
        cells = np.diff(np.interp(cell_edges, edges, cum)) / (total / n)
        return np.asarray(cells.reshape(rows, columns), np.float64)

    alloc = frac(state == ACTIVE)
    pend = frac(state == PENDING_FREE)
    seg_starts = np.concatenate([[0], np.cumsum(sg.total_size[segs])[:-1]]).astype(np.int64)
    return Heatmap(alloc, pend, np.clip(1.0 - alloc - pend, 0.0, 1.0), total / n, seg_starts)
