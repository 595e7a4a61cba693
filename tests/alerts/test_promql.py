"""PromQL window functions: golden values worked by hand from Prometheus 2.42 semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.alerts import promql


def arr(ts_s: list[float], vs: list[float]) -> tuple[promql.IntArray, promql.FloatArray]:
    return np.asarray([promql.to_ms(t) for t in ts_s], np.int64), np.asarray(vs, np.float64)


def test_instant_lookback_is_five_minutes_inclusive() -> None:
    ts, vs = arr([0.0], [7.0])
    assert promql.instant(ts, vs, 300_000) == (0, 7.0)
    assert promql.instant(ts, vs, 300_001) is None
    assert promql.instant(ts, vs, -1) is None


def test_rate_linear_counter_is_exact() -> None:
    ts, vs = arr([0, 60, 120, 180], [0, 10, 20, 30])
    # window [60, 180] holds 3 samples aligned with its edges: 20 over 120 s.
    assert promql.rate(ts, vs, 180_000, 120_000) == pytest.approx(20 / 120)


def test_rate_counter_reset() -> None:
    ts, vs = arr([0, 60, 120], [100, 110, 5])
    # increase = (5 - 100) + 110 (reset) = 15 over 120 s, no extrapolation needed.
    assert promql.rate(ts, vs, 120_000, 120_000) == pytest.approx(15 / 120)


def test_rate_extrapolates_half_a_gap_when_far_from_edge() -> None:
    # samples at 30 s and 60 s in a [0, 120] window: gap 30 s; start 30 s away (< 33 s
    # threshold, extrapolate fully) but counter at 30 means zero was 30 s earlier: to_start 30;
    # end 60 s away (> 33) -> half a gap (15 s). Extrapolated 30 + 30 + 15 = 75 s of 30 s.
    ts, vs = arr([30, 60], [30, 60])
    assert promql.rate(ts, vs, 120_000, 120_000) == pytest.approx(30 * 75 / 30 / 120)


def test_rate_needs_two_samples() -> None:
    ts, vs = arr([0], [1])
    assert promql.rate(ts, vs, 60_000, 120_000) is None


def test_deriv_and_constant() -> None:
    ts, vs = arr([0, 60, 120], [1, 3, 8])
    # least squares about the means (60 s, 4): cov 420, var 7200 -> 7/120 per second
    assert promql.deriv(ts, vs, 120_000, 120_000) == pytest.approx(7 / 120)
    ts, vs = arr([0, 60, 120], [0.1, 0.1, 0.1])
    assert promql.deriv(ts, vs, 120_000, 120_000) == 0.0


def test_quantile_over_time_interpolates() -> None:
    ts, vs = arr([0, 60, 120, 180], [4, 1, 3, 2])
    # sorted 1 2 3 4, rank 0.9*3 = 2.7 -> 3 + 0.7 * (4 - 3)
    assert promql.quantile_over_time(0.9, ts, vs, 180_000, 180_000) == pytest.approx(3.7)
    assert promql.quantile_over_time(0.5, ts, vs, 180_000, 60_000) == pytest.approx(2.5)
    assert promql.quantile_over_time(0.5, ts, vs, 1_000_000, 60_000) is None


@given(
    st.floats(min_value=0.01, max_value=1e6),
    st.integers(min_value=2, max_value=30),
    st.integers(min_value=1, max_value=120),
)
def test_rate_of_any_linear_counter_is_its_slope(per_s: float, n: int, gap_s: int) -> None:
    """Samples filling the window edge to edge: no extrapolation, rate = slope."""
    times = [k * gap_s for k in range(n)]
    ts, vs = arr([float(t) for t in times], [per_s * t for t in times])
    r = promql.rate(ts, vs, promql.to_ms(times[-1]), promql.to_ms(times[-1]))
    assert r is not None and math.isclose(r, per_s, rel_tol=1e-9)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=40))
def test_quantile_bounds(values: list[float]) -> None:
    ts, vs = arr([float(k) for k in range(len(values))], values)
    t = promql.to_ms(len(values))
    lo = promql.quantile_over_time(0.0, ts, vs, t, t)
    hi = promql.quantile_over_time(1.0, ts, vs, t, t)
    med = promql.quantile_over_time(0.5, ts, vs, t, t)
    assert lo == min(values) and hi == max(values)
    assert med is not None and lo <= med <= hi
