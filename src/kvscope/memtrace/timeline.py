"""Allocated and reserved bytes over time, per device, and their downsampling for plots.

Allocated bytes move by ``+size`` at ``alloc`` and ``-size`` at ``free_completed`` (the
memory is reusable only then); reserved bytes move by ``+size`` at ``segment_alloc`` /
``segment_map`` and ``-size`` at ``segment_free`` / ``segment_unmap``. The trace is a ring
buffer that may start after the program did, so the level before its first entry is fixed
from the end state: the snapshot's segments give the final allocated bytes (requested bytes
of active and pending-free blocks) and reserved bytes (sum of ``total_size``), and the series
is shifted so its last point equals them. Times are seconds from the first trace entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvscope.memtrace.columns import (
    ALLOC,
    FREE_DONE,
    INACTIVE,
    SEG_ALLOC,
    SEG_FREE,
    SEG_MAP,
    SEG_UNMAP,
    SnapshotColumns,
)

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class DeviceSeries:
    """One device's levels after each of its trace entries (``entry`` indexes the trace)."""

    device: int
    entry: I64
    t_s: F64
    allocated_bytes: I64
    reserved_bytes: I64


def trace_t0_us(cols: SnapshotColumns) -> int:
    """The time origin: the earliest ``time_us`` in the trace (or 0 without a trace)."""
    t = cols.trace.time_us
    return int(t.min()) if t.size else 0


def device_series(cols: SnapshotColumns) -> list[DeviceSeries]:
    """Allocated and reserved bytes after every trace entry, one series per device."""
    tr, sg = cols.trace, cols.segments
    t0 = trace_t0_us(cols)
    scale = 1e-6 if cols.has_time else 1.0
    d_alloc = np.where(tr.action == ALLOC, tr.size, 0) - np.where(
        tr.action == FREE_DONE, tr.size, 0
    )
    grow = np.isin(tr.action, (SEG_ALLOC, SEG_MAP))
    shrink = np.isin(tr.action, (SEG_FREE, SEG_UNMAP))
    d_res = np.where(grow, tr.size, 0) - np.where(shrink, tr.size, 0)
    live_blk = sg.blk_state != INACTIVE
    blk_dev = sg.device[sg.blk_segment] if sg.blk_segment.size else np.zeros(0, np.int64)
    out = []
    for dev in np.unique(tr.device).tolist():
        idx = np.flatnonzero(tr.device == dev)
        a = np.cumsum(d_alloc[idx])
        r = np.cumsum(d_res[idx])
        end_a = int(sg.blk_requested[live_blk & (blk_dev == dev)].sum())
        end_r = int(sg.total_size[sg.device == dev].sum())
        a += end_a - int(a[-1])
        r += end_r - int(r[-1])
        t = (tr.time_us[idx] - t0).astype(np.float64) * scale
        out.append(DeviceSeries(int(dev), idx.astype(np.int64), t, a, r))
    return out


@dataclass(frozen=True)
class Downsampled:
    """A series reduced to at most ``n`` buckets of equal time; each keeps its maximum, so
    peaks survive (a plot of millions of points is unreadable and slow)."""

    t_s: F64
    allocated_bytes: I64
    reserved_bytes: I64


def downsample(s: DeviceSeries, max_points: int = 2000) -> Downsampled:
    """Bucket ``s`` by time into at most ``max_points`` bins keeping each bin's maximum."""
    n = s.t_s.size
    if n <= max_points:
        return Downsampled(s.t_s.copy(), s.allocated_bytes.copy(), s.reserved_bytes.copy())
    edges = np.linspace(s.t_s[0], s.t_s[-1], max_points + 1)
    starts = np.unique(np.searchsorted(s.t_s, edges[:-1], side="left"))
    starts = starts[starts < n]
    return Downsampled(
        s.t_s[starts],
        np.maximum.reduceat(s.allocated_bytes, starts),
        np.maximum.reduceat(s.reserved_bytes, starts),
    )


def window_mask(
    s: DeviceSeries, since_s: float | None, until_s: float | None
) -> npt.NDArray[np.bool_]:
    """Entries of ``s`` inside ``[since_s, until_s]`` (either bound may be open)."""
    m = np.ones(s.t_s.size, bool)
    if since_s is not None:
        m &= s.t_s >= since_s
    if until_s is not None:
        m &= s.t_s <= until_s
    return m
