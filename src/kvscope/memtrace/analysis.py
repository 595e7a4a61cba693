"""One call that answers the questions of issue 9 about a snapshot: :func:`analyze`.

It combines the timeline (:mod:`.timeline`), fragmentation at the end and over time
(:mod:`.fragmentation`), OOM events and retries (:mod:`.oom`), leak candidates
(:mod:`.leaks`), top allocation sites (:mod:`.sites`) and the category guess
(:mod:`.categories`) into a frozen :class:`MemtraceReport`. ``since_s`` / ``until_s`` select a
window in seconds from the first trace entry (entry numbers for snapshots without
``time_us``); the end-state figures (segments, fragmentation at the end) always describe the
moment the snapshot was taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvscope.errors import KvscopeError
from kvscope.memtrace.categories import CategoryStat, categorize
from kvscope.memtrace.columns import ALLOC, SnapshotColumns
from kvscope.memtrace.fragmentation import (
    FragSummary,
    Replay,
    SegmentFrag,
    segment_table,
    summarize,
)
from kvscope.memtrace.leaks import LeakCandidate, leak_candidates
from kvscope.memtrace.lifetimes import block_lifetimes
from kvscope.memtrace.oom import OomEvent, count_retries, oom_events
from kvscope.memtrace.sites import SiteStat, site_table, top_sites
from kvscope.memtrace.timeline import DeviceSeries, device_series


@dataclass(frozen=True)
class DeviceSummary:
    """One device inside the window. Bytes; seconds from the first trace entry."""

    device: int
    entries: int
    start_t_s: float
    end_t_s: float
    peak_allocated_bytes: int
    peak_allocated_t_s: float
    peak_reserved_bytes: int
    end_allocated_bytes: int
    end_reserved_bytes: int
    ooms: int
    alloc_retries: int


@dataclass(frozen=True)
class FragPoint:
    """Fragmentation estimate at one moment (see :class:`.fragmentation.Replay`)."""

    t_s: float
    device: int
    reserved_bytes: int
    free_bytes: int
    largest_free_bytes: int
    external_frag: float


@dataclass(frozen=True)
class MemtraceReport:
    """Everything :func:`analyze` found. Field names carry their units."""

    source: str
    has_time: bool
    since_s: float | None
    until_s: float | None
    trace_entries: int
    entries_in_window: int
    devices: list[DeviceSummary]
    fragmentation: list[FragSummary]
    segments: list[SegmentFrag]
    fragmentation_course: list[FragPoint]
    ooms: list[OomEvent]
    leaks: list[LeakCandidate]
    top_sites_by_bytes: list[SiteStat]
    top_sites_by_count: list[SiteStat]
    categories: list[CategoryStat]
    unknown_actions: dict[str, int] = field(default_factory=dict)
    allocator_settings: dict[str, Any] = field(default_factory=dict)

    def headline(self) -> dict[str, Any]:
        """The headline figures for ``summary.json``."""
        overall = self.fragmentation[0] if self.fragmentation else None
        return {
            "peak_allocated_bytes": max((d.peak_allocated_bytes for d in self.devices), default=0),
            "peak_reserved_bytes": max((d.peak_reserved_bytes for d in self.devices), default=0),
            "end_reserved_bytes": overall.reserved_bytes if overall else 0,
            "end_free_in_reserved_bytes": overall.free_bytes if overall else 0,
            "end_largest_free_bytes": overall.largest_free_bytes if overall else 0,
            "end_external_frag": overall.external_frag if overall else 0.0,
            "end_internal_waste_bytes": overall.internal_waste_bytes if overall else 0,
            "ooms": len(self.ooms),
            "alloc_retries": sum(d.alloc_retries for d in self.devices),
            "leak_candidates": len(self.leaks),
            "top_leak_mb_per_min": self.leaks[0].slope_mb_per_min if self.leaks else 0.0,
        }


def _per_entry(n: int, series: list[DeviceSeries]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = np.zeros(n)
    a = np.zeros(n, np.int64)
    r = np.zeros(n, np.int64)
    for s in series:
        t[s.entry], a[s.entry], r[s.entry] = s.t_s, s.allocated_bytes, s.reserved_bytes
    return t, a, r


def analyze(
    cols: SnapshotColumns,
    since_s: float | None = None,
    until_s: float | None = None,
    top: int = 10,
    frag_samples: int = 100,
    source: str = "",
) -> MemtraceReport:
    """Analyse a snapshot in columns; see the module docstring."""
    if since_s is not None and until_s is not None and until_s < since_s:
        raise KvscopeError(f"--until ({until_s}) is before --since ({since_s}).")
    tr = cols.trace
    n = len(tr)
    series = device_series(cols)
    t_s, alloc_at, _res_at = _per_entry(n, series)
    win = np.ones(n, bool)
    if since_s is not None:
        win &= t_s >= since_s
    if until_s is not None:
        win &= t_s <= until_s
    in_win = np.flatnonzero(win)
    lt = block_lifetimes(tr)
    close_of = np.full(n, -2, np.int64)
    close_of[lt.open_idx] = lt.close_idx
    allocs = np.flatnonzero((tr.action == ALLOC) & win)
    live_end = close_of[allocs] == -1
    table = site_table(cols.frames)
    w_lo = float(t_s[in_win].min()) if in_win.size else 0.0
    w_hi = float(t_s[in_win].max()) if in_win.size else 0.0
    leaks = leak_candidates(cols, table, allocs, live_end, t_s[allocs], w_hi - w_lo)
    by_bytes, by_count = top_sites(cols, table, allocs, live_end, top)
    total_span = float(t_s.max()) if n else 0.0
    t_frac = t_s[allocs] / total_span if total_span > 0 else np.zeros(allocs.size)
    _, cats = categorize(cols, allocs, live_end, t_frac)
    replay = Replay(cols)
    ooms = oom_events(cols, replay, in_win, t_s[in_win], alloc_at[in_win])
    devices, course = [], []
    for s in series:
        m = win[s.entry]
        if not m.any():
            continue
        e = s.entry[m]
        a, r, tt = s.allocated_bytes[m], s.reserved_bytes[m], s.t_s[m]
        k = int(np.argmax(a))
        devices.append(
            DeviceSummary(
                device=s.device,
                entries=int(e.size),
                start_t_s=float(tt[0]),
                end_t_s=float(tt[-1]),
                peak_allocated_bytes=int(a[k]),
                peak_allocated_t_s=float(tt[k]),
                peak_reserved_bytes=int(r.max()),
                end_allocated_bytes=int(a[-1]),
                end_reserved_bytes=int(r[-1]),
                ooms=sum(1 for o in ooms if o.device == s.device),
                alloc_retries=count_retries(cols, e),
            )
        )
        picks = np.unique(
            np.searchsorted(tt, np.linspace(tt[0], tt[-1], max(frag_samples, 1)), side="right") - 1
        )
        for p in picks[picks >= 0].tolist():
            fs = replay.at(int(e[p]), s.device)
            course.append(
                FragPoint(
                    float(tt[p]),
                    s.device,
                    fs.reserved_bytes,
                    fs.free_bytes,
                    fs.largest_free_bytes,
                    fs.external_frag,
                )
            )
    rows = segment_table(cols)
    return MemtraceReport(
        source=source,
        has_time=cols.has_time,
        since_s=since_s,
        until_s=until_s,
        trace_entries=n,
        entries_in_window=int(in_win.size),
        devices=devices,
        fragmentation=summarize(cols, rows),
        segments=rows,
        fragmentation_course=course,
        ooms=ooms,
        leaks=leaks,
        top_sites_by_bytes=by_bytes,
        top_sites_by_count=by_count,
        categories=cats,
        unknown_actions=dict(cols.unknown_actions),
        allocator_settings=dict(cols.allocator_settings),
    )
