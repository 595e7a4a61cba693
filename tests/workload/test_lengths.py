"""Length distributions match their parameters (quantiles, weights, bounds)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.workload import lengths as L

N = 40_000


@settings(max_examples=25, deadline=None)
@given(median=st.floats(20, 5000), sigma=st.floats(0.05, 1.5), seed=st.integers(0, 10**6))
def test_lognormal_median_and_p90_match(median: float, sigma: float, seed: int) -> None:
    x = L.LogNormal(median, sigma).sample(np.random.default_rng(seed), N)
    assert x.min() >= 1 and x.dtype == np.int64
    # P50 = median; P90 = median * exp(1.2816 sigma) (standard normal 90th percentile)
    assert abs(np.median(x) / median - 1) < 0.03 + 1 / median
    p90 = median * np.exp(1.2815516 * sigma)
    assert abs(np.percentile(x, 90) / p90 - 1) < 0.05 + 1 / median


@settings(max_examples=25, deadline=None)
@given(
    w_long=st.floats(0.01, 0.5),
    short=st.integers(1, 500),
    long=st.integers(1000, 32000),
    seed=st.integers(0, 10**6),
)
def test_mix_weights_hold(w_long: float, short: int, long: int, seed: int) -> None:
    x = L.Mix(((1 - w_long, short, short), (w_long, long, long))).sample(
        np.random.default_rng(seed), N
    )
    assert set(np.unique(x).tolist()) <= {short, long}
    share = np.count_nonzero(x == long) / N
    assert abs(share - w_long) < 6 * np.sqrt(w_long * (1 - w_long) / N)


@settings(max_examples=20, deadline=None)
@given(lo=st.integers(1, 1000), width=st.integers(0, 5000), seed=st.integers(0, 10**6))
def test_uniform_bounds_and_mean(lo: int, width: int, seed: int) -> None:
    x = L.Uniform(lo, lo + width).sample(np.random.default_rng(seed), N)
    assert x.min() >= lo and x.max() <= lo + width
    sd = np.sqrt(((width + 1) ** 2 - 1) / 12)
    assert abs(x.mean() - (lo + width / 2)) < 6 * sd / np.sqrt(N) + 1e-9


def test_mix_range_component_is_uniform_inside_the_range() -> None:
    x = L.Mix(((1.0, 100, 199),)).sample(np.random.default_rng(0), N)
    assert x.min() == 100 and x.max() == 199
    assert abs(np.median(x) - 149.5) < 2


def test_normal_is_floored_at_one_token() -> None:
    x = L.Normal(5, 50).sample(np.random.default_rng(1), N)
    assert x.min() == 1


def test_empirical_only_returns_observed_values() -> None:
    obs = np.array([3, 3, 3, 900], dtype=np.int64)
    x = L.Empirical(obs).sample(np.random.default_rng(2), N)
    assert set(x.tolist()) == {3, 900}
    assert abs(np.count_nonzero(x == 900) / N - 0.25) < 0.02
