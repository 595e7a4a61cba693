"""The paged pool against vLLM's block-pool rules, with property tests of its invariants."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout, deepseek_v4_layout
from kvscope.sim.sequence import Sequence

BS = 4


def seq(i: int, prompt: int, hashes: list[int] | None = None, out: int = 8) -> Sequence:
    s = Sequence(i, f"r{i}", 0.0, prompt, out)
    if hashes:
        s.trace_hashes = np.array(hashes, dtype=np.int64)
        s.hash_block_size = BS
        s.n_shareable = min(len(hashes), prompt // BS)
    return s


def admit(pool: PagedPool, s: Sequence) -> bool:
    hit = pool.lookup(s)
    if not pool.allocate(s, s.num_tokens, hit):
        return False
    s.computed = s.num_tokens
    pool.cache(s, s.num_tokens)
    return True


def test_null_block_is_never_free() -> None:
    pool = PagedPool(10, KVLayout(BS))
    assert pool.capacity == 9 and pool.num_free == 9 and pool.usage == 0.0


def test_too_few_blocks_is_one_clear_error() -> None:
    with pytest.raises(KvscopeError, match="at least 2"):
        PagedPool(1, KVLayout(BS))


def test_prefix_hit_shares_blocks_and_stops_before_last_token() -> None:
    pool = PagedPool(50, KVLayout(BS))
    a = seq(0, 16, [1, 2, 3, 4])
    assert admit(pool, a)
    b = seq(1, 16, [1, 2, 3, 4])
    hit = pool.lookup(b)
    # 16 tokens: at most 15 may hit, so three full blocks (12 tokens)
    assert hit.tokens == 12 and hit.evictable == 0
    c = seq(2, 17, [1, 2, 9, 9])
    assert pool.lookup(c).tokens == 8  # chain breaks at the third block


def test_freed_cached_blocks_stay_hittable_until_evicted_lru() -> None:
    pool = PagedPool(9, KVLayout(BS))  # 8 usable
    a = seq(0, 12, [1, 2, 3])
    assert admit(pool, a)
    pool.free(a)
    assert pool.num_free == 8 and pool.cached_free == 3
    b = seq(1, 12, [1, 2, 3])
    assert pool.lookup(b).tokens == 8 and pool.lookup(b).evictable == 2
    # an unrelated request takes the 5 unhashed blocks, then the LRU front: a's blocks were
    # freed tail first, so its third block goes first and the hit shrinks from the end
    big = seq(2, 24)
    assert admit(pool, big)
    assert pool.num_free == 2 and pool.lookup(b).tokens == 8
    assert admit(pool, seq(3, 4))
    assert pool.lookup(b).tokens == 4


def test_unhashed_blocks_are_reused_before_cached_ones() -> None:
    pool = PagedPool(9, KVLayout(BS))
    a = seq(0, 8, [5, 6])
    assert admit(pool, a)
    pool.free(a)
    small = seq(1, 20)
    assert admit(pool, small)  # 5 blocks: 6 fresh ones are still in front
    assert pool.lookup(seq(2, 9, [5, 6])).tokens == 8


def test_allocate_checks_before_mutating() -> None:
    pool = PagedPool(5, KVLayout(BS))  # 4 usable
    a = seq(0, 20)
    free_before = pool.num_free
    assert not pool.allocate(a, 20)
    assert pool.num_free == free_before and a.held == 0


def test_deepseek_v4_request_holds_ceil_over_256_plus_26() -> None:
    # live block counts of V4-Flash-0731 requests on 8x H100 (tant2tls/Deepseek-serving,
    # reports/blog-architecture-h100-v1/memory_tables.md):
    # 1,853 tok -> 34; 17,145 -> 93; 66,343 -> 286
    lay = deepseek_v4_layout()
    assert [lay.blocks(n) for n in (1853, 17145, 66343)] == [34, 93, 286]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(1, 40),  # prompt tokens
            st.lists(st.integers(0, 3), max_size=10),  # hash ids (small alphabet: collisions)
            st.booleans(),  # free it again at once
        ),
        min_size=1,
        max_size=25,
    ),
    st.integers(3, 40),
    st.booleans(),
)
def test_invariants_under_random_traffic(
    reqs: list[tuple[int, list[int], bool]], blocks: int, caching: bool
) -> None:
    pool = PagedPool(blocks, KVLayout(BS), enable_caching=caching)
    live: list[Sequence] = []
    for i, (prompt, ids, release) in enumerate(reqs):
        chain = list(np.cumsum(np.array(ids, dtype=np.int64) + 1) * 7919) if ids else None
        s = seq(i, prompt, chain)
        hit = pool.lookup(s)
        allowed = min(s.n_shareable, (s.num_tokens - 1) // BS) * BS
        assert hit.tokens <= allowed  # hits never exceed what the hashes allow
        if admit(pool, s):
            live.append(s)
        assert 0 <= pool.used <= pool.capacity
        pool.check()
        if release and live:
            pool.free(live.pop(0))
            pool.check()
    for s in live:
        pool.free(s)
    pool.check()
    assert pool.num_free == pool.capacity and pool.held_total == 0
