"""MoE routing: Zipf popularity, top-k dispatch counts, seeded and skew-monotone imbalance."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.comm.routing import (
    RoutingSpec,
    bottleneck_tokens,
    dispatch_plan,
    expert_popularity,
    imbalance,
)
from kvscope.errors import KvscopeError


def test_popularity_is_zipf_on_a_permutation() -> None:
    rng = np.random.default_rng(0)
    p = expert_popularity(8, 1.0, rng)
    assert p.sum() == pytest.approx(1.0)
    # Zipf(1) over 8: hottest / coldest = 8, hottest = 1 / H_8 = 1 / 2.717857...
    assert p.max() / p.min() == pytest.approx(8.0)
    assert p.max() == pytest.approx(1 / 2.717857142857143)
    assert np.allclose(expert_popularity(8, 0.0, rng), 1 / 8)


@settings(max_examples=30, deadline=None)
@given(
    n=st.sampled_from([2, 4, 8]),
    per_rank=st.integers(1, 4),
    top_k=st.integers(1, 6),
    tokens=st.integers(1, 64),
    skew=st.floats(0, 3),
    seed=st.integers(0, 2**16),
)
def test_every_token_reaches_between_one_and_k_ranks(
    n: int, per_rank: int, top_k: int, tokens: int, skew: float, seed: int
) -> None:
    experts = n * per_rank
    spec = RoutingSpec(experts, min(top_k, experts), tokens, 16, skew)
    plans, _ = dispatch_plan(spec, n, 3, seed)
    sent = plans.sum(axis=2)  # tokens each source sends, counted once per destination
    assert np.all(sent >= tokens)
    assert np.all(sent <= tokens * min(spec.top_k, n))
    assert all(imbalance(p) >= 1.0 for p in plans)


def test_seeded_and_reproducible() -> None:
    spec = RoutingSpec(8, 2, 64, 16, 1.0)
    a, _ = dispatch_plan(spec, 4, 5, seed=7)
    b, _ = dispatch_plan(spec, 4, 5, seed=7)
    c, _ = dispatch_plan(spec, 4, 5, seed=8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_skew_concentrates_traffic() -> None:
    base = {s: dispatch_plan(RoutingSpec(8, 2, 128, 16, s), 4, 40, seed=0)[0] for s in (0, 2)}
    uniform = np.mean([imbalance(p) for p in base[0]])
    skewed = np.mean([imbalance(p) for p in base[2]])
    assert uniform < 1.15  # random routing is close to even
    assert skewed > 1.5  # Zipf(2) over 8 experts: 65 % of picks go to the hottest one


def test_bad_specs() -> None:
    with pytest.raises(KvscopeError):
        RoutingSpec(8, 9, 10, 16)
    with pytest.raises(KvscopeError):
        RoutingSpec(8, 2, 10, 16, skew=-1)
    with pytest.raises(KvscopeError, match="evenly"):
        dispatch_plan(RoutingSpec(6, 2, 10, 16), 4, 1, 0)


def test_bottleneck_is_the_busiest_ranks_off_rank_traffic() -> None:
    tokens = np.array([[5, 1, 1], [2, 9, 0], [7, 3, 4]])
    # off-rank sends: 2, 2, 10; off-rank receives: 9, 4, 1 -> rank 2 sends 10
    assert bottleneck_tokens(tokens) == 10
    assert imbalance(tokens) == pytest.approx(14 / (32 / 3))
