"""Arrival processes match their parameters (rate, CV, shape) statistically."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.workload import arrivals as A

N = 20_000


@settings(max_examples=25, deadline=None)
@given(
    rate=st.floats(0.5, 2000.0),
    cv=st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_renewal_rate_and_cv_match_parameters(rate: float, cv: float, seed: int) -> None:
    t = A.generate_arrivals(A.Renewal(rate, cv), seed, num_requests=N)
    assert len(t) == N and np.all(np.diff(t) >= 0)
    gaps = np.diff(t)
    # mean gap has relative s.e. cv/sqrt(N) (< 2.2 %); 6 s.e. keeps flakes negligible
    assert abs(gaps.mean() * rate - 1) < 6 * cv / np.sqrt(N) + 1e-9
    assert abs(gaps.std() / gaps.mean() - cv) < 0.08 * cv + 0.02


@settings(max_examples=15, deadline=None)
@given(rate=st.floats(1.0, 500.0), duration=st.floats(10.0, 200.0), seed=st.integers(0, 10**6))
def test_duration_mode_stays_in_window_and_counts_match(
    rate: float, duration: float, seed: int
) -> None:
    t = A.generate_arrivals(A.Renewal(rate), seed, duration_s=duration)
    assert np.all((t >= 0) & (t < duration))
    expected = rate * duration
    assert abs(len(t) - expected) < 6 * np.sqrt(expected) + 2


def test_constant_is_evenly_spaced_from_zero() -> None:
    t = A.generate_arrivals(A.Constant(4.0), 0, num_requests=9)
    assert t.tolist() == [i / 4 for i in range(9)]
    assert len(A.generate_arrivals(A.Constant(4.0), 0, duration_s=2.0)) == 8


def test_spike_raises_the_rate_only_inside_its_window() -> None:
    spike = A.Spike(base=5, peak=100, start=60, length=20)
    t = A.generate_arrivals(spike, 3, duration_s=200)
    inside = np.count_nonzero((t >= 60) & (t < 80))
    outside = len(t) - inside
    assert abs(inside - 2000) < 6 * np.sqrt(2000)
    assert abs(outside - 5 * 180) < 6 * np.sqrt(900)


def test_linear_ramp_total_is_the_area_under_the_rate() -> None:
    t = A.generate_arrivals(A.Ramp(0, 100, 100), 5, duration_s=100)
    assert abs(len(t) - 5000) < 6 * np.sqrt(5000)
    # first half carries a quarter of the area of a 0 -> peak ramp
    assert abs(np.count_nonzero(t < 50) - 1250) < 6 * np.sqrt(1250)


def test_exponential_ramp_doubles_per_equal_step() -> None:
    t = A.generate_arrivals(A.Ramp(10, 80, 30, curve="exp"), 1, duration_s=30)
    a = np.count_nonzero(t < 10)
    c = np.count_nonzero(t >= 20)
    assert 3.0 < c / a < 5.5  # 80/10 over three steps: x2 per 10 s, so ~4x between thirds


def test_onoff_has_no_arrivals_in_off_phases() -> None:
    t = A.generate_arrivals(A.OnOff(rate=50, on=5, off=10), 2, duration_s=150)
    phase = t % 15
    assert np.all(phase < 5)
    assert abs(len(t) - 50 * 5 * 10) < 6 * np.sqrt(2500)


def test_diurnal_peak_half_is_busier_than_trough_half() -> None:
    d = A.Diurnal(mean=20, amplitude=0.8, period=100, peak_at=0)
    t = A.generate_arrivals(d, 4, duration_s=1000)
    near_peak = np.count_nonzero((t % 100 < 25) | (t % 100 >= 75))
    # integral of 1 + 0.8 cos over the peak half vs the trough half: (pi + 1.6)/(pi - 1.6)
    ratio = near_peak / (len(t) - near_peak)
    assert abs(ratio - (np.pi + 1.6) / (np.pi - 1.6)) < 0.35


def test_steps_levels_stay_within_bounds() -> None:
    t = A.generate_arrivals(A.Steps(low=10, high=40, interval=50), 9, duration_s=1000)
    per_interval = np.bincount((t // 50).astype(int), minlength=20) / 50
    assert per_interval.min() > 10 - 3 and per_interval.max() < 40 + 4
    assert per_interval.std() > 3  # the level really changes


def test_sum_is_the_superposition() -> None:
    proc = A.Sum((A.Renewal(10), A.Spike(0, 90, 20, 10)))
    t = A.generate_arrivals(proc, 8, duration_s=60)
    assert abs(np.count_nonzero((t >= 20) & (t < 30)) - 1000) < 6 * np.sqrt(1000)
    assert np.all(np.diff(t) >= 0)


def test_num_requests_mode_for_shapes_returns_exactly_n() -> None:
    t = A.generate_arrivals(A.Spike(1, 10, 5, 5), 0, num_requests=777)
    assert len(t) == 777 and np.all(np.diff(t) >= 0)


def test_same_seed_same_times_different_seed_different() -> None:
    p = A.Sum((A.Renewal(5, 2.0), A.Diurnal(5, 0.5, 60)))
    a = A.generate_arrivals(p, 11, num_requests=500)
    b = A.generate_arrivals(p, 11, num_requests=500)
    c = A.generate_arrivals(p, 12, num_requests=500)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_needs_a_stop_condition_and_a_nonzero_rate() -> None:
    with pytest.raises(KvscopeError, match="--num-requests or --duration"):
        A.generate_arrivals(A.Renewal(1.0), 0)
    with pytest.raises(KvscopeError, match="zero rate"):
        A.generate_arrivals(A.OnOff(rate=0, on=1, off=1), 0, num_requests=5)
