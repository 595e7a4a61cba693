"""Router policies: each pick is a valid replica, determinism, and each rule's invariant."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.fleet.routers import ROUTERS, make_router
from kvscope.sim.data_parallel import RankLoad

loads_st = st.lists(
    st.builds(
        RankLoad,
        st.integers(0, 50),
        st.integers(0, 50),
        st.integers(0, 50),
        st.floats(0.0, 1.0),
    ),
    min_size=1,
    max_size=16,
)


@given(loads=loads_st, keys=st.lists(st.text(max_size=8), min_size=1, max_size=20))
@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_pick_is_a_replica_and_deterministic(name: str, loads, keys) -> None:
    a, b = make_router(name, seed=3), make_router(name, seed=3)
    picks_a = [a.pick(k, loads) for k in keys]  # type: ignore[attr-defined]
    picks_b = [b.pick(k, loads) for k in keys]  # type: ignore[attr-defined]
    assert picks_a == picks_b
    assert all(0 <= p < len(loads) for p in picks_a)


def test_round_robin_cycles() -> None:
    loads = [RankLoad(0, 0, 0, 0.0)] * 3
    r = make_router("round-robin")
    assert [r.pick("", loads) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]  # type: ignore[attr-defined]


@given(loads=loads_st)
def test_least_outstanding_takes_a_minimum(loads) -> None:
    p = make_router("least-outstanding").pick("", loads)  # type: ignore[attr-defined]
    assert loads[p].in_flight == min(ld.in_flight for ld in loads)


@given(loads=loads_st, key=st.text(max_size=8))
def test_session_affinity_is_sticky(loads, key) -> None:
    r = make_router("session-affinity")
    assert len({r.pick(key, loads) for _ in range(5)}) == 1  # type: ignore[attr-defined]


def test_unknown_router_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"^router: unknown router 'nope'"):
        make_router("nope")


@given(data=st.data(), loads=loads_st)
def test_prefix_routers_follow_their_scores(data, loads) -> None:
    from kvscope.fleet.routers import RouterWeights

    hits = data.draw(st.lists(st.floats(0, 1), min_size=len(loads), max_size=len(loads)))
    best = max(hits)
    p = make_router("prefix-aware").pick("", loads, hits)  # type: ignore[attr-defined]
    assert hits[p] == best
    # among the best-scored, the fewest outstanding
    assert loads[p].in_flight == min(
        ld.in_flight for h, ld in zip(hits, loads, strict=True) if h == best
    )
    only_prefix = make_router("prefix-load", weights=RouterWeights(1, 0, 0))
    assert hits[only_prefix.pick("", loads, hits)] == best  # type: ignore[attr-defined]
    only_queue = make_router("prefix-load", weights=RouterWeights(0, 1, 0))
    q = only_queue.pick("", loads, hits)  # type: ignore[attr-defined]
    assert loads[q].waiting == min(ld.waiting for ld in loads)
    only_kv = make_router("prefix-load", weights=RouterWeights(0, 0, 1))
    k = only_kv.pick("", loads, hits)  # type: ignore[attr-defined]
    assert loads[k].kv_usage <= min(ld.kv_usage for ld in loads) + 1e-12  # 1 - u rounds


def test_prefix_load_trades_hits_for_queue_by_its_weights() -> None:
    from kvscope.fleet.routers import RouterWeights

    loads = [RankLoad(9, 6, 3, 0.5), RankLoad(1, 0, 1, 0.5)]
    hits = [0.9, 0.0]  # replica 0 holds the prefix but has a queue of 6
    default = make_router("prefix-load")  # 3 x 0.9 = 2.7 against queue 2 x 1
    assert default.pick("", loads, hits) == 0  # type: ignore[attr-defined]
    queue_heavy = make_router("prefix-load", weights=RouterWeights(3, 3, 2))
    assert queue_heavy.pick("", loads, hits) == 1  # type: ignore[attr-defined]
