"""Latency distribution of one collective at one size, from every rank's timings.

Input: ``times_s[rank, iteration]``, the seconds each rank spent inside the operation in
each timed iteration, all ranks having left a barrier just before it. An operation is
finished when its slowest rank is, so the latency of iteration ``i`` is
``max over ranks of times_s[:, i]``; the percentiles are over those per-iteration maxima.

- percentiles: numpy's default linear interpolation (Hyndman & Fan type 7);
- ``jitter_s``: mean absolute difference between consecutive iterations' latencies (the
  unsmoothed form of the RFC 3550 section 6.4.1 interarrival jitter);
- ``slowest_rank``: the rank with the highest median own time; ``rank_spread`` is its
  median over the fastest rank's (1.0 = all ranks alike).

All times in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from kvscope.errors import KvscopeError


@dataclass(frozen=True)
class LatencyStats:
    """Percentiles and spread of one operation's latency (seconds)."""

    iters: int
    p50_s: float
    p95_s: float
    p99_s: float
    max_s: float
    min_s: float
    mean_s: float
    std_s: float
    jitter_s: float
    slowest_rank: int
    slowest_rank_p50_s: float
    fastest_rank_p50_s: float
    rank_spread: float


def latency_stats(times_s: ArrayLike) -> LatencyStats:
    """Summarise ``times_s[rank, iteration]`` (see the module docstring)."""
    t = np.asarray(times_s, dtype=np.float64)
    if t.ndim == 1:
        t = t[None, :]
    if t.ndim != 2 or t.shape[1] == 0:
        raise KvscopeError("latency needs at least one timed iteration per rank.")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise KvscopeError("latency samples must be finite and non-negative.")
    per_iter = t.max(axis=0)
    p50, p95, p99 = np.percentile(per_iter, [50, 95, 99])
    rank_p50 = np.median(t, axis=1)
    slowest = int(np.argmax(rank_p50))
    fastest_p50 = float(rank_p50.min())
    jitter = float(np.mean(np.abs(np.diff(per_iter)))) if per_iter.size > 1 else 0.0
    return LatencyStats(
        iters=int(per_iter.size),
        p50_s=float(p50),
        p95_s=float(p95),
        p99_s=float(p99),
        max_s=float(per_iter.max()),
        min_s=float(per_iter.min()),
        mean_s=float(per_iter.mean()),
        std_s=float(per_iter.std()),
        jitter_s=jitter,
        slowest_rank=slowest,
        slowest_rank_p50_s=float(rank_p50[slowest]),
        fastest_rank_p50_s=fastest_p50,
        rank_spread=float(rank_p50[slowest] / fastest_p50) if fastest_p50 > 0 else 1.0,
    )


def latency_fields(stats: LatencyStats) -> dict[str, float | int]:
    """The stats as flat row fields, units in the names (``lat_p99_s``, ``jitter_s``...)."""
    return {
        "iters": stats.iters,
        "lat_p50_s": stats.p50_s,
        "lat_p95_s": stats.p95_s,
        "lat_p99_s": stats.p99_s,
        "lat_max_s": stats.max_s,
        "lat_min_s": stats.min_s,
        "lat_mean_s": stats.mean_s,
        "lat_std_s": stats.std_s,
        "jitter_s": stats.jitter_s,
        "slowest_rank": stats.slowest_rank,
        "slowest_rank_p50_s": stats.slowest_rank_p50_s,
        "fastest_rank_p50_s": stats.fastest_rank_p50_s,
        "rank_spread": stats.rank_spread,
    }
