"""Waveform analysis of a memory series: the "breathing" of KV usage and GPU memory.

For one series it reports peak and trough (value and time), amplitude (peak - trough), the
dominant period (largest peak of the periodogram of the detrended, evenly resampled series),
the lag and phase of the series' peaks relative to request activity (cross-correlation), and
the leak slope by the Theil-Sen estimator (median of pairwise slopes; Sen 1968, Theil 1950),
which tolerates up to ~29.3 % outliers (its breakdown point, 1 - 1/sqrt(2)) -- a restart or a
spike does not fake a leak. Slopes of byte series are also given in MB/min (MB = 10^6 bytes).

Practitioners' rule: report peaks and phase, never only a static
figure; the KV peak often comes in steady decode, after the request burst.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvscope.errors import KvscopeError

Array = npt.NDArray[np.float64]
#: Theil-Sen looks at every pair; above this many points it uses an evenly spaced subset.
THEIL_SEN_MAX_POINTS = 1500
MB = 1e6


@dataclass(frozen=True, slots=True)
class Waveform:
    """Shape of one series. Times are in the series' clock (seconds); ``None`` = not defined."""

    n: int
    duration_s: float
    mean: float
    peak: float
    peak_t_s: float
    trough: float
    trough_t_s: float
    amplitude: float
    dominant_period_s: float | None
    lag_vs_activity_s: float | None
    peak_phase: float | None
    slope_per_s: float
    leak_slope_mb_per_min: float | None


def _clean(t: Sequence[float] | Array, v: Sequence[float] | Array) -> tuple[Array, Array]:
    ta = np.asarray(t, dtype=np.float64)
    va = np.asarray(v, dtype=np.float64)
    if ta.shape != va.shape or ta.ndim != 1:
        raise KvscopeError("a series needs as many times as values.")
    keep = np.isfinite(ta) & np.isfinite(va)
    ta, va = ta[keep], va[keep]
    order = np.argsort(ta, kind="stable")
    return ta[order], va[order]


def theil_sen_slope(t: Sequence[float] | Array, v: Sequence[float] | Array) -> float:
    """Median of the slopes of all point pairs with distinct times (units of v per unit t)."""
    ta, va = _clean(t, v)
    if len(ta) < 2:
        return math.nan
    if len(ta) > THEIL_SEN_MAX_POINTS:
        idx = np.linspace(0, len(ta) - 1, THEIL_SEN_MAX_POINTS).round().astype(np.int64)
        ta, va = ta[idx], va[idx]
    i, j = np.triu_indices(len(ta), k=1)
    dt = ta[j] - ta[i]
    ok = dt > 0
    if not ok.any():
        return math.nan
    return float(np.median((va[j] - va[i])[ok] / dt[ok]))


def _uniform(ta: Array, va: Array) -> tuple[Array, float]:
    step = float(np.median(np.diff(ta)))
    if step <= 0:
        raise KvscopeError("series times must increase.")
    n = int((ta[-1] - ta[0]) / step) + 1
    grid = ta[0] + step * np.arange(n)
    return np.interp(grid, ta, va), step


def dominant_period(t: Sequence[float] | Array, v: Sequence[float] | Array) -> float | None:
    """Period (s) of the strongest oscillation with at least two cycles in the window."""
    ta, va = _clean(t, v)
    if len(ta) < 8:
        return None
    u, step = _uniform(ta, va)
    x = np.arange(len(u)) * step
    slope, icpt = np.polyfit(x, u, 1)
    d = u - (slope * x + icpt)
    if not np.any(np.abs(d) > 1e-12 * max(1.0, float(np.max(np.abs(u))))):
        return None
    power = np.abs(np.fft.rfft(d * np.hanning(len(d)))) ** 2
    freqs = np.fft.rfftfreq(len(d), step)
    span = len(d) * step
    ok = freqs >= 2.0 / span  # two full cycles at least; also drops the DC bin
    if not ok.any():
        return None
    k = int(np.flatnonzero(ok)[np.argmax(power[ok])])
    # Parabolic interpolation of the log power around the peak bin refines the frequency.
    f = freqs[k]
    if 0 < k < len(power) - 1 and min(power[k - 1 : k + 2]) > 0:
        a, b, c = np.log(power[k - 1 : k + 2])
        denom = a - 2 * b + c
        if denom != 0:
            f = freqs[k] + 0.5 * (a - c) / denom * (freqs[1] - freqs[0])
    return float(1.0 / f) if f > 0 else None


def lag_seconds(
    t: Sequence[float] | Array,
    v: Sequence[float] | Array,
    activity_t: Sequence[float] | Array,
    activity_v: Sequence[float] | Array,
    max_lag_s: float | None = None,
) -> float | None:
    """How long after request activity the series follows it (s, positive = series later)."""
    ta, va = _clean(t, v)
    at, av = _clean(activity_t, activity_v)
    if len(ta) < 4 or len(at) < 4:
        return None
    lo, hi = max(ta[0], at[0]), min(ta[-1], at[-1])
    if hi <= lo:
        return None
    step = float(np.median(np.diff(ta)))
    grid = np.arange(lo, hi, step)
    if len(grid) < 4:
        return None
    s = np.interp(grid, ta, va)
    a = np.interp(grid, at, av)
    s, a = s - s.mean(), a - a.mean()
    if not (s.any() and a.any()):
        return None
    corr = np.correlate(s, a, mode="full")  # index n-1 is zero lag
    lags = (np.arange(len(corr)) - (len(grid) - 1)) * step
    if max_lag_s is not None:
        keep = np.abs(lags) <= max_lag_s
        corr, lags = corr[keep], lags[keep]
    return float(lags[int(np.argmax(corr))])


def analyse(
    t: Sequence[float] | Array,
    v: Sequence[float] | Array,
    activity: tuple[Sequence[float] | Array, Sequence[float] | Array] | None = None,
    value_is_bytes: bool = False,
) -> Waveform:
    """Peak, trough, amplitude, period, phase vs ``activity`` (times, values) and leak slope."""
    ta, va = _clean(t, v)
    if len(ta) == 0:
        raise KvscopeError("cannot analyse an empty series.")
    ip, it = int(np.argmax(va)), int(np.argmin(va))
    period = dominant_period(ta, va)
    lag = phase = None
    if activity is not None:
        lag = lag_seconds(
            ta, va, activity[0], activity[1], max_lag_s=period / 2 if period else None
        )
        if lag is not None and period:
            phase = (lag % period) / period
    slope = theil_sen_slope(ta, va)
    leak = slope * 60.0 / MB if value_is_bytes and not math.isnan(slope) else None
    return Waveform(
        n=len(ta),
        duration_s=float(ta[-1] - ta[0]),
        mean=float(va.mean()),
        peak=float(va[ip]),
        peak_t_s=float(ta[ip]),
        trough=float(va[it]),
        trough_t_s=float(ta[it]),
        amplitude=float(va[ip] - va[it]),
        dominant_period_s=period,
        lag_vs_activity_s=lag,
        peak_phase=phase,
        slope_per_s=slope,
        leak_slope_mb_per_min=leak,
    )
