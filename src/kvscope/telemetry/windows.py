"""Sliding windows that turn cumulative engine series into rates and percentiles.

Engines expose counters and histograms as running totals since start. A dashboard needs the
rate over the last N seconds and the percentile of the observations *in* the last N seconds.
The rules follow Prometheus' own functions:

- ``rate()``: increase over the window divided by its length; a value that goes down is a
  counter reset (engine restart), after which the new value counts as the increase since the
  reset (Prometheus docs, "rate()" and "Counter resets").
- ``histogram_quantile()``: find the bucket that holds rank ``q*count`` and interpolate
  linearly inside it, taking 0 as the lower bound of the first bucket when its upper bound is
  positive; a rank in the ``+Inf`` bucket returns the highest finite bound (Prometheus docs,
  "histogram_quantile()").
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """Cumulative histogram at one instant: ``bounds`` ascending upper bounds (last is +Inf)
    and ``counts`` the cumulative count of observations <= each bound."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    total: float
    sum: float


class CounterWindow:
    """Rate of a cumulative counter over the last ``window_s`` seconds, reset-aware."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._points: deque[tuple[float, float]] = deque()

    def add(self, t_s: float, value: float) -> None:
        self._points.append((t_s, value))
        while len(self._points) > 2 and self._points[1][0] <= t_s - self.window_s:
            self._points.popleft()

    def increase(self) -> float:
        """Increase across the window, counting a drop as a reset."""
        inc = 0.0
        prev: float | None = None
        for _, v in self._points:
            if prev is not None:
                inc += v - prev if v >= prev else v
            prev = v
        return inc

    def rate(self) -> float:
        """Per-second rate over the held window; NaN with fewer than two points."""
        if len(self._points) < 2:
            return math.nan
        dt = self._points[-1][0] - self._points[0][0]
        return self.increase() / dt if dt > 0 else math.nan


def quantile_from_buckets(q: float, bounds: Sequence[float], counts: Sequence[float]) -> float:
    """``histogram_quantile(q)`` over cumulative bucket counts; NaN when empty."""
    if not 0.0 <= q <= 1.0:
        return math.nan
    if not counts or counts[-1] <= 0:
        return math.nan
    total = counts[-1]
    rank = q * total
    for i, (bound, cum) in enumerate(zip(bounds, counts, strict=True)):
        if cum >= rank and cum > 0:
            if math.isinf(bound):
                # Prometheus returns the upper bound of the highest finite bucket.
                return bounds[i - 1] if i > 0 else math.nan
            lower = bounds[i - 1] if i > 0 else 0.0
            if i == 0 and bound <= 0:
                return bound
            below = counts[i - 1] if i > 0 else 0.0
            in_bucket = cum - below
            if in_bucket <= 0:
                return bound
            return lower + (bound - lower) * (rank - below) / in_bucket
    return bounds[-2] if len(bounds) > 1 else math.nan


class HistogramWindow:
    """Percentiles of the observations made during the last ``window_s`` seconds."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._snaps: deque[tuple[float, HistogramSnapshot]] = deque()

    def add(self, t_s: float, snap: HistogramSnapshot) -> None:
        if self._snaps and self._snaps[-1][1].bounds != snap.bounds:
            self._snaps.clear()  # bucket layout changed (engine restarted with new buckets)
        self._snaps.append((t_s, snap))
        while len(self._snaps) > 2 and self._snaps[1][0] <= t_s - self.window_s:
            self._snaps.popleft()

    def delta(self) -> HistogramSnapshot | None:
        """Observations between the oldest and newest snapshot held (a reset restarts it)."""
        if not self._snaps:
            return None
        last = self._snaps[-1][1]
        first = self._snaps[0][1]
        if len(self._snaps) == 1 or last.total < first.total:
            return last
        counts = tuple(b - a for a, b in zip(first.counts, last.counts, strict=True))
        return HistogramSnapshot(
            last.bounds, counts, last.total - first.total, last.sum - first.sum
        )

    def quantile(self, q: float) -> float:
        d = self.delta()
        if d is None:
            return math.nan
        return quantile_from_buckets(q, d.bounds, d.counts)

    def mean(self) -> float:
        d = self.delta()
        if d is None or d.total <= 0:
            return math.nan
        return d.sum / d.total
