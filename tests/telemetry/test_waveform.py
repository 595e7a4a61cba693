"""Waveform analysis: golden values on known signals and robustness of the leak slope."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.telemetry.waveform import analyse, dominant_period, lag_seconds, theil_sen_slope


def test_theil_sen_golden() -> None:
    # Pairwise slopes 1, 1, 33, 1, 49, 97 -> median (1 + 33) / 2 = 17 (hand computed).
    assert theil_sen_slope([1, 2, 3, 4], [1, 2, 3, 100]) == 17.0
    # Least squares on the same points would give 29.4; one outlier barely moves Theil-Sen
    # with more points: 10 on a line of slope 2 plus one wild value.
    t = list(range(11))
    v = [2.0 * x for x in t]
    v[5] = 1e6
    assert theil_sen_slope(t, v) == 2.0


@settings(max_examples=40, deadline=None)
@given(
    st.floats(-50, 50),
    st.integers(0, 2**31 - 1),
    st.floats(0.0, 0.25),
)
def test_theil_sen_survives_outliers_below_breakdown(slope: float, seed: int, frac: float) -> None:
    rng = np.random.default_rng(seed)
    t = np.arange(200.0)
    v = slope * t + rng.normal(0, 0.01, t.size)
    bad = rng.choice(t.size, int(frac * t.size), replace=False)
    v[bad] += rng.choice([-1, 1], bad.size) * 1e6
    assert theil_sen_slope(t, v) == pytest.approx(slope, abs=0.05 + 0.01 * abs(slope))


def test_sine_period_lag_phase_and_leak() -> None:
    t = np.arange(0, 120, 0.1)
    activity = np.sin(2 * np.pi * t / 12)
    leak = 5e6 / 60  # 5 MB/min in bytes/s
    mem = 5e9 + 1e9 * np.sin(2 * np.pi * (t - 3) / 12) + leak * t
    w = analyse(t, mem, (t, activity), value_is_bytes=True)
    assert w.dominant_period_s == pytest.approx(12.0, rel=0.01)
    assert w.lag_vs_activity_s == pytest.approx(3.0, abs=0.1)
    assert w.peak_phase == pytest.approx(0.25, abs=0.01)
    assert w.leak_slope_mb_per_min == pytest.approx(5.0, rel=0.02)
    assert w.amplitude == pytest.approx(w.peak - w.trough)
    assert w.peak == mem.max() and w.trough_t_s == 0.0


def test_flat_and_short_series_have_no_period() -> None:
    assert dominant_period(np.arange(100.0), np.ones(100)) is None
    assert dominant_period([0, 1, 2], [1, 2, 3]) is None
    assert lag_seconds([0, 1], [1, 2], [0, 1], [1, 2]) is None


def test_non_bytes_series_has_no_mb_slope_and_bad_input_errors() -> None:
    w = analyse([0, 1, 2, 3], [0.1, 0.2, 0.3, 0.4])
    assert w.leak_slope_mb_per_min is None and w.slope_per_s == pytest.approx(0.1)
    with pytest.raises(KvscopeError):
        analyse([], [])
    with pytest.raises(KvscopeError):
        analyse([0, 1], [1])
