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
from kvscope.memtrace.columns import OOM, SnapshotColumns
from kvscope.memtrace.fragmentation import (
    FragSummary,
    Replay,
    SegmentFrag,
    segment_table,
    summarize,
)
from kvscope.memtrace.leaks import LeakCandidate, leak_candidates
from kvscope.memtrace.lifetimes import with_lifetimes
from kvscope.memtrace.oom import OomEvent, count_retries, oom_events
from kvscope.memtrace.sites import SiteStat, site_table, top_sites
from kvscope.memtrace.timeline import levels


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


def _window(t: np.ndarray, since_s: float | None, until_s: float | None) -> tuple[int, int]:
    """Index range of sorted times ``t`` inside ``[since_s, until_s]``."""
    lo = 0 if since_s is None else int(np.searchsorted(t, since_s, side="left"))
    hi = t.size if until_s is None else int(np.searchsorted(t, until_s, side="right"))
    return lo, max(lo, hi)


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
    n = len(cols.trace)
    lv = levels(cols)
    t_s = lv.t_s
    # Entries inside the window, per device (each device's times are in order).
    spans = [(s, *_window(s.t_s, since_s, until_s)) for s in lv.devices]
    windowed = since_s is not None or until_s is not None
    n_win = sum(hi - lo for _s, lo, hi in spans)
    cols = with_lifetimes(cols)
    lt = cols.blocks
    assert lt is not None
    if not windowed:
        allocs, live_end = lt.open_idx, lt.close_idx < 0
    else:
        keep = np.zeros(n, bool)
        for s, lo, hi in spans:
            keep[s.start + lo : s.start + hi] = True
        m = keep[lt.open_idx]
        allocs, live_end = lt.open_idx[m], lt.close_idx[m] < 0
    tr = cols.trace
    table = site_table(cols.frames)
    w_lo = min((float(s.t_s[lo]) for s, lo, hi in spans if hi > lo), default=0.0)
    w_hi = max((float(s.t_s[hi - 1]) for s, lo, hi in spans if hi > lo), default=0.0)
    a_t = t_s[allocs]
    leaks = leak_candidates(cols, table, allocs, live_end, a_t, w_hi - w_lo)
    by_bytes, by_count = top_sites(cols, table, allocs, live_end, top)
    total_span = float(t_s.max()) if n else 0.0
    t_frac = a_t / total_span if total_span > 0 else np.zeros(allocs.size)
    _, cats = categorize(cols, allocs, live_end, t_frac)
    replay = Replay(cols)
    oom_idx = np.flatnonzero(tr.action == OOM)
    if windowed:
        inside = np.zeros(oom_idx.size, bool)
        for s, lo, hi in spans:
            inside |= (oom_idx >= s.start + lo) & (oom_idx < s.start + hi)
        oom_idx = oom_idx[inside]
    ooms = oom_events(cols, replay, oom_idx, t_s[oom_idx], lv.allocated_bytes[oom_idx])
    devices, course = [], []
    for s, lo, hi in spans:
        if hi <= lo:
            continue
        a, r, tt = s.allocated_bytes[lo:hi], s.reserved_bytes[lo:hi], s.t_s[lo:hi]
        k = int(np.argmax(a))
        devices.append(
            DeviceSummary(
                device=s.device,
                entries=hi - lo,
                start_t_s=float(tt[0]),
                end_t_s=float(tt[-1]),
                peak_allocated_bytes=int(a[k]),
                peak_allocated_t_s=float(tt[k]),
                peak_reserved_bytes=int(r.max()),
                end_allocated_bytes=int(a[-1]),
                end_reserved_bytes=int(r[-1]),
                ooms=sum(1 for o in ooms if o.device == s.device),
                alloc_retries=count_retries(cols, s.start + lo, s.start + hi),
            )
        )
        grid = np.linspace(tt[0], tt[-1], max(frag_samples, 1))
        picks = np.unique(np.searchsorted(tt, grid, side="right") - 1)
        picks = picks[picks >= 0]
        for p, fs in zip(
            picks.tolist(), replay.at_many(s.start + lo + picks, s.device), strict=True
        ):
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
        entries_in_window=int(n_win),
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
