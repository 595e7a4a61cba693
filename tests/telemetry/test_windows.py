"""Rates and windowed percentiles follow Prometheus' rate() and histogram_quantile()."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from kvscope.telemetry.windows import (
    CounterWindow,
    HistogramSnapshot,
    HistogramWindow,
    quantile_from_buckets,
)

INF = math.inf


def test_quantile_golden_values() -> None:
    # 100 observations: 10 in (0, 0.1], 40 in (0.1, 0.5], 50 in (0.5, 1].
    bounds, counts = (0.1, 0.5, 1.0, INF), (10.0, 50.0, 100.0, 100.0)
    assert quantile_from_buckets(0.5, bounds, counts) == 0.5  # rank 50 = top of bucket 2
    assert math.isclose(quantile_from_buckets(0.05, bounds, counts), 0.05)  # 0 + 0.1 * 5/10
    assert math.isclose(quantile_from_buckets(0.3, bounds, counts), 0.3)  # 0.1 + 0.4 * 20/40
    assert math.isclose(quantile_from_buckets(0.99, bounds, counts), 0.99)  # 0.5 + 0.5 * 49/50


def test_quantile_in_inf_bucket_returns_highest_finite_bound() -> None:
    assert quantile_from_buckets(0.99, (0.1, 1.0, INF), (0.0, 10.0, 100.0)) == 1.0


def test_quantile_of_empty_histogram_is_nan() -> None:
    assert math.isnan(quantile_from_buckets(0.5, (1.0, INF), (0.0, 0.0)))


@given(
    st.lists(st.integers(0, 50), min_size=2, max_size=12),
    st.floats(0, 1),
    st.floats(0, 1),
)
def test_quantile_is_monotone_and_within_bounds(
    per_bucket: list[int], q1: float, q2: float
) -> None:
    bounds = (*(float(i + 1) for i in range(len(per_bucket) - 1)), INF)
    counts, c = [], 0.0
    for n in per_bucket:
        c += n
        counts.append(c)
    if c == 0:
        return
    lo, hi = sorted((q1, q2))
    a, b = quantile_from_buckets(lo, bounds, counts), quantile_from_buckets(hi, bounds, counts)
    assert a <= b + 1e-12
    assert a >= 0.0 and b <= bounds[-2]


def test_counter_rate_and_reset() -> None:
    w = CounterWindow(window_s=60)
    w.add(0.0, 100.0)
    w.add(10.0, 150.0)
    assert w.rate() == 5.0
    w.add(20.0, 20.0)  # engine restarted: 20 new since the reset
    assert w.increase() == 70.0
    assert w.rate() == 3.5


def test_counter_window_forgets_old_points() -> None:
    w = CounterWindow(window_s=10)
    for t in range(0, 100, 5):
        w.add(float(t), float(t) * (1 if t < 50 else 3))
    # Only the last 10 s (plus one point before) count: slope 3/s.
    assert w.rate() == 3.0


def test_histogram_window_percentile_of_recent_observations_only() -> None:
    bounds = (0.1, 1.0, 10.0, INF)
    w = HistogramWindow(window_s=30)
    w.add(0.0, HistogramSnapshot(bounds, (1000.0, 1000.0, 1000.0, 1000.0), 1000.0, 50.0))
    # In the next 10 s, 100 slow observations in (1, 10].
    w.add(10.0, HistogramSnapshot(bounds, (1000.0, 1000.0, 1100.0, 1100.0), 1100.0, 550.0))
    assert math.isclose(w.quantile(0.5), 1.0 + 9.0 * 0.5)
    assert math.isclose(w.mean(), 5.0)
