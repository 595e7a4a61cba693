"""Latency percentiles, jitter and slowest rank from per-rank timings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from kvscope.comm.latency import latency_stats
from kvscope.errors import KvscopeError


def test_golden_two_ranks() -> None:
    # Iteration latency = slowest rank: [2, 2, 3, 10].
    s = latency_stats([[1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 1.0, 10.0]])
    assert s.iters == 4
    assert s.p50_s == pytest.approx(2.5)
    assert s.max_s == 10.0 and s.min_s == 2.0
    assert s.jitter_s == pytest.approx((0 + 1 + 7) / 3)
    # rank 0's median is 2.5, rank 1's 1.5: rank 0 is the slowest.
    assert s.slowest_rank == 0
    assert s.rank_spread == pytest.approx(2.5 / 1.5)


@settings(deadline=None)  # timing on a shared 2-core host is not the property
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(1, 8), st.integers(1, 60)),
        elements=st.floats(1e-7, 10.0),
    )
)
def test_percentiles_are_ordered(times: np.ndarray) -> None:
    s = latency_stats(times)
    assert s.min_s <= s.p50_s <= s.p95_s <= s.p99_s <= s.max_s
    assert s.min_s * (1 - 1e-12) <= s.mean_s <= s.max_s * (1 + 1e-12)  # float rounding
    assert 0 <= s.slowest_rank < times.shape[0]
    assert s.rank_spread >= 1.0
    assert 0 <= s.jitter_s <= s.max_s - s.min_s


def test_bad_samples() -> None:
    with pytest.raises(KvscopeError):
        latency_stats(np.zeros((2, 0)))
    with pytest.raises(KvscopeError):
        latency_stats([[1.0, float("nan")]])
