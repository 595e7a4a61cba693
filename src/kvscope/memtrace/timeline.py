"""Allocated and reserved bytes over time, per device, and their downsampling for plots.

Allocated bytes move by ``+size`` at ``alloc`` and ``-size`` at ``free_completed`` (the
memory is reusable only then); reserved bytes move by ``+size`` at ``segment_alloc`` /
``segment_map`` and ``-size`` at ``segment_free`` / ``segment_unmap``. The trace is a ring
buffer that may start after the program did, so the level before its first entry is fixed
from the end state: the snapshot's segments give the final allocated bytes (requested bytes
of active and pending-free blocks) and reserved bytes (sum of ``total_size``), and the series
is shifted so its last point equals them. Trace entries carry the caller's requested size
(``record_trace(TraceEntry::ALLOC, ptr, orig_size, ...)`` and ``block->requested_size`` for
``free_completed`` in ``c10/cuda/CUDACachingAllocator.cpp``), so the end state is read in
requested bytes too. Times are seconds from the first trace entry.
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
    """One device's levels after each of its trace entries ``start .. stop - 1`` (the trace
    is stored device by device, so the arrays are views into :class:`Levels`)."""

    device: int
    start: int
    stop: int
    t_s: F64
    allocated_bytes: I64
    reserved_bytes: I64


@dataclass(frozen=True)
class Levels:
    """Time (s from the first entry) and levels after every trace entry, all devices."""

    t_s: F64
    allocated_bytes: I64
    reserved_bytes: I64
    devices: list[DeviceSeries]


def trace_t0_us(cols: SnapshotColumns) -> int:
    """The time origin: the earliest ``time_us`` in the trace (or 0 without a trace)."""
    t = cols.trace.time_us
    return int(t.min()) if t.size else 0


def device_bounds(cols: SnapshotColumns) -> list[tuple[int, int, int]]:
    """``(device, start, stop)`` of each device's contiguous run of trace entries."""
    dev = cols.trace.device
    if dev.size == 0:
        return []
    cuts = np.flatnonzero(dev[1:] != dev[:-1]) + 1
    starts = np.concatenate([[0], cuts]).tolist()
    stops = np.concatenate([cuts, [dev.size]]).tolist()
    return [(int(dev[a]), int(a), int(b)) for a, b in zip(starts, stops, strict=True)]


def levels(cols: SnapshotColumns) -> Levels:
    """Allocated and reserved bytes after every trace entry, per device."""
    tr, sg = cols.trace, cols.segments
    act = tr.action
    sign = (act == ALLOC).astype(np.int8)
    sign -= act == FREE_DONE
    alloc = tr.size * sign
    sign[:] = np.isin(act, (SEG_ALLOC, SEG_MAP))
    sign -= np.isin(act, (SEG_FREE, SEG_UNMAP))
    res = tr.size * sign
    t = tr.time_us - trace_t0_us(cols)
    t_s = t.astype(np.float64)
    if cols.has_time:
        t_s *= 1e-6
    live_blk = sg.blk_state != INACTIVE
    blk_dev = sg.device[sg.blk_segment] if sg.blk_segment.size else np.zeros(0, np.int64)
    out = []
    for dev, a, b in device_bounds(cols):
        sa, sr = alloc[a:b], res[a:b]
        np.cumsum(sa, out=sa)
        np.cumsum(sr, out=sr)
        # the ring buffer may start late: anchor the last level on the end state
        sa += int(sg.blk_requested[live_blk & (blk_dev == dev)].sum()) - int(sa[-1])
        sr += int(sg.total_size[sg.device == dev].sum()) - int(sr[-1])
        out.append(DeviceSeries(dev, a, b, t_s[a:b], sa, sr))
    return Levels(t_s, alloc, res, out)


def device_series(cols: SnapshotColumns) -> list[DeviceSeries]:
    """One :class:`DeviceSeries` per device (see :func:`levels`)."""
    return levels(cols).devices


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
