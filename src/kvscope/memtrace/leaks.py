"""Leak candidates: sites that keep allocating memory that is never freed.

A site is a candidate when, inside the analysed window, at least ``min_count`` of its
allocations are still live at the end of the trace and those allocations are spread over at
least ``min_span_frac`` (a quarter) of the window (memory loaded once at start-up, such as
weights or a KV-cache pool, is live at the end too, but all of it is allocated in a short
burst). The
growth rate is the least-squares slope of the site's cumulative live bytes against time,
in MB/min with MB = 10^6 bytes (the unit leak rates of tensor-parallel communication
buffers are usually quoted in: tens of MB/min). ``r2`` says how straight the growth is.
Without ``time_us`` (old snapshots) the slope is per 1000 trace entries instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvscope.memtrace.columns import SnapshotColumns
from kvscope.memtrace.sites import SiteTable, sites_of

MB = 1_000_000


@dataclass(frozen=True)
class LeakCandidate:
    """A site whose never-freed allocations grow over the window."""

    site: str
    live_count: int
    live_bytes: int
    slope_mb_per_min: float
    r2: float
    first_t_s: float
    last_t_s: float


def leak_candidates(
    cols: SnapshotColumns,
    table: SiteTable,
    entries: npt.NDArray[np.int64],
    live_at_end: npt.NDArray[np.bool_],
    t_s: npt.NDArray[np.float64],
    window_s: float,
    min_count: int = 4,
    min_span_frac: float = 0.25,
) -> list[LeakCandidate]:
    """Leak candidates among the ``alloc`` entries ``entries`` (times ``t_s``, seconds from
    the trace start, or entry numbers without ``time_us``), largest slope first."""
    tr = cols.trace
    live = entries[live_at_end]
    lt = t_s[live_at_end]
    site = sites_of(tr.stack[live], table)
    out = []
    per_min = 60.0 if cols.has_time else 1000.0
    for s in np.unique(site[site >= 0]).tolist():
        m = site == s
        t = lt[m]
        if t.size < min_count or window_s <= 0 or (t[-1] - t[0]) < min_span_frac * window_s:
            continue
        y = np.cumsum(tr.size[live[m]]).astype(np.float64)
        slope, intercept = np.polyfit(t, y, 1)
        fit = slope * t + intercept
        ss_tot = float(((y - y.mean()) ** 2).sum())
        r2 = 1.0 - float(((y - fit) ** 2).sum()) / ss_tot if ss_tot > 0 else 1.0
        if slope <= 0:
            continue
        out.append(
            LeakCandidate(
                site=table.labels[s],
                live_count=int(t.size),
                live_bytes=int(y[-1]),
                slope_mb_per_min=float(slope) * per_min / MB,
                r2=r2,
                first_t_s=float(t[0]),
                last_t_s=float(t[-1]),
            )
        )
    out.sort(key=lambda c: -c.slope_mb_per_min)
    return out
