"""PromQL's window functions, re-implemented exactly, so kvscope and Prometheus agree.

Semantics of Prometheus 2.42 (``promql/engine.go`` and ``promql/functions.go``), which is
what ``promtool test rules`` runs on the CI image:

- instant selector: the newest sample at or before ``t`` and no older than the 5 min
  lookback delta (both ends inclusive);
- range selector ``[w]``: samples with ``t - w <= ts <= t`` (inclusive both ends in 2.x);
- ``rate()``: ``extrapolatedRate`` -- increase with counter-reset correction, extrapolated
  to the window edges when the first/last sample is within 1.1 average sample gaps of it,
  else by half a gap, and never below zero for counters (``durationToZero``);
- ``deriv()``: least-squares slope (``linearRegression``), 0 for a constant series;
- ``quantile_over_time()``: linear interpolation at rank ``q * (n - 1)``.

Times are integer milliseconds, as in the TSDB; values are floats.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Prometheus' default ``--query.lookback-delta`` (5 min).
LOOKBACK_MS = 300_000


def to_ms(t_s: float) -> int:
    """Seconds -> integer milliseconds (the TSDB's resolution)."""
    return round(t_s * 1000.0)


def instant(ts: IntArray, vs: FloatArray, t: int) -> tuple[int, float] | None:
    """(timestamp, value) an instant selector returns at ``t``, or None."""
    i = int(np.searchsorted(ts, t, side="right")) - 1
    if i < 0 or ts[i] < t - LOOKBACK_MS:
        return None
    return int(ts[i]), float(vs[i])


def window(ts: IntArray, vs: FloatArray, t: int, range_ms: int) -> tuple[IntArray, FloatArray]:
    """Samples a range selector ``[range]`` holds at ``t``."""
    lo = int(np.searchsorted(ts, t - range_ms, side="left"))
    hi = int(np.searchsorted(ts, t, side="right"))
    return ts[lo:hi], vs[lo:hi]


def rate(ts: IntArray, vs: FloatArray, t: int, range_ms: int) -> float | None:
    """PromQL ``rate(x[range])`` per second at ``t``; None when fewer than two samples."""
    wt, wv = window(ts, vs, t, range_ms)
    if len(wt) < 2:
        return None
    first, last = float(wv[0]), float(wv[-1])
    result = last - first
    prev = first
    for v in wv[1:]:
        if v < prev:  # counter reset: the value before the drop was lost
            result += prev
        prev = float(v)
    range_start, range_end = t - range_ms, t
    to_start = (int(wt[0]) - range_start) / 1000.0
    to_end = (range_end - int(wt[-1])) / 1000.0
    sampled = (int(wt[-1]) - int(wt[0])) / 1000.0
    avg_gap = sampled / (len(wt) - 1)
    if result > 0 and first >= 0:
        to_zero = sampled * (first / result)
        to_start = min(to_start, to_zero)
    threshold = avg_gap * 1.1
    extrapolate = sampled
    extrapolate += to_start if to_start < threshold else avg_gap / 2
    extrapolate += to_end if to_end < threshold else avg_gap / 2
    return result * (extrapolate / sampled) / (range_ms / 1000.0)


def deriv(ts: IntArray, vs: FloatArray, t: int, range_ms: int) -> float | None:
    """PromQL ``deriv(x[range])`` (per second) at ``t``; None with fewer than two samples."""
    wt, wv = window(ts, vs, t, range_ms)
    if len(wt) < 2:
        return None
    if bool(np.all(wv == wv[0])):
        return 0.0 if math.isfinite(float(wv[0])) else math.nan
    n = 0.0
    sum_x = sum_y = sum_xy = sum_x2 = 0.0
    t0 = int(wt[0])
    for ti, v in zip(wt, wv, strict=True):
        x = (int(ti) - t0) / 1e3
        y = float(v)
        n += 1.0
        sum_x += x
        sum_y += y
        sum_xy += x * y
        sum_x2 += x * x
    cov_xy = sum_xy - sum_x * sum_y / n
    var_x = sum_x2 - sum_x * sum_x / n
    return cov_xy / var_x


def quantile_over_time(
    q: float, ts: IntArray, vs: FloatArray, t: int, range_ms: int
) -> float | None:
    """PromQL ``quantile_over_time(q, x[range])`` at ``t``; None when the window is empty."""
    _, wv = window(ts, vs, t, range_ms)
    n = len(wv)
    if n == 0:
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    s = np.sort(wv)
    rank = q * (n - 1)
    lower = max(0, math.floor(rank))
    upper = min(n - 1, lower + 1)
    weight = rank - math.floor(rank)
    return float(s[lower]) * (1 - weight) + float(s[upper]) * weight


def compare(value: float, op: str, threshold: float) -> bool:
    """A PromQL filter comparison (NaN compares false, as in Go)."""
    if op == ">":
        return value > threshold
    if op == ">=":
        return value >= threshold
    if op == "<":
        return value < threshold
    if op == "<=":
        return value <= threshold
    if op == "==":
        return value == threshold
    return value != threshold
