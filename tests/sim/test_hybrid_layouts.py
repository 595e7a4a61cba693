"""Sliding-window and hybrid KV layouts in the simulator (kvscope.sim.hybrid_pool), no oracle.

Hand-checked cases follow vLLM 0.33.0's code: ``KVCacheManager.allocate_slots`` frees
out-of-window blocks at the next allocation on the processed-token basis,
``SlidingWindowSpec.max_admission_blocks_per_request`` caps the full-sequence check,
``SlidingWindowManager.reachable_block_mask`` (retention interval 0) caches only the window
blocks at the replay boundary and at a shared-prefix junction. The step-by-step comparison
with vLLM itself is tests/sim/test_vllm_fidelity_hybrid.py.
"""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from kvscope.plan.kv_layout import KVGroupLayout
from kvscope.sim.hybrid_pool import HybridPool
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout, WindowGroup, deepseek_v4_layout
from kvscope.sim.scheduler import Scheduler, SchedulerConfig
from kvscope.sim.sequence import Sequence

SWA128 = KVLayout(16, (WindowGroup("swa", 16, 128),), name="hybrid")


def sched(
    layout: KVLayout, blocks: int, caching: bool = True, budget: int = 256, seqs: int = 8
) -> Scheduler:
    cfg = SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=seqs)
    return Scheduler(cfg, PagedPool(blocks, layout, enable_caching=caching))


def step(s: Scheduler, t: float = 0.0) -> None:
    s.update(s.schedule(t), t)


def shared_seq(i: int, prompt: int, out: int, shared_blocks: int) -> Sequence:
    """A request whose first ``shared_blocks`` 16-token blocks are a common prefix."""
    q = Sequence(i, f"r{i}", float(i), prompt, out)
    q.trace_hashes = [1000 + j for j in range(shared_blocks)]
    q.hash_block_size = 16
    q.n_shareable = shared_blocks
    return q


def test_window_layouts_get_the_hybrid_pool_and_full_ones_keep_the_fast_path() -> None:
    assert type(PagedPool(10, KVLayout(16))) is PagedPool
    assert type(PagedPool(10, SWA128)) is HybridPool
    assert type(PagedPool(10, deepseek_v4_layout())) is HybridPool


def test_183_token_prefill_holds_12_window_blocks_until_its_next_allocation() -> None:
    # allocate_slots frees skipped blocks *before* allocating, with the computed tokens of
    # the step before: the prefill step (0 computed) frees nothing, cdiv(183, 16) = 12
    s = sched(SWA128, 400)
    q = Sequence(0, "a", 0.0, 183, 20)
    s.add(q)
    step(s)
    assert (q.own, q.win, s.pool.used) == (12, 12, 24)
    # next step: 183 processed, window 128 -> tokens 0..55 skipped = 3 whole blocks freed
    step(s)
    assert (q.own, q.win, s.pool.used) == (12, 9, 21)
    s.pool.check()


def test_admission_reserves_the_capped_window_not_the_steady_bound() -> None:
    # max_admission_blocks_per_request: cdiv(min(128 - 1 + 256, L), 16) + 1 = 25 (the steady
    # bound cdiv(127, 16) + 1 = 9 is what a decoding request holds)
    pool = PagedPool(400, SWA128)
    s = Scheduler(SchedulerConfig(max_num_batched_tokens=256), pool)
    assert isinstance(pool, HybridPool)
    assert pool.admission_caps() == (25,)
    assert SWA128.windows[0].cap_blocks == 9
    q = Sequence(0, "a", 0.0, 1000, 10)
    assert pool.blocks_needed(q, 1000, cap=True) == 63 + 25
    assert pool.blocks_needed(q, 1000) == 63 + 63
    # 87 free blocks: the full-sequence check refuses, 88 admits (a 256-token chunk)
    small = Scheduler(SchedulerConfig(max_num_batched_tokens=256), PagedPool(88, SWA128))
    small.add(Sequence(1, "b", 0.0, 1000, 1))
    assert small.schedule(0.0).tokens == 0
    fits = Scheduler(SchedulerConfig(max_num_batched_tokens=256), PagedPool(89, SWA128))
    fits.add(Sequence(2, "c", 0.0, 1000, 1))
    assert fits.schedule(0.0).tokens == 256
    assert s.rejection_reason(Sequence(3, "d", 0.0, 100_000, 1)).startswith(
        "needs 6275 KV"
    )  # 6250 + 25


@settings(max_examples=80, deadline=None)
@given(
    st.integers(2, 4096),
    st.sampled_from([4, 8, 16, 32, 64, 128, 256]),
    st.integers(1, 16384),
    st.integers(1, 131072),
)
def test_planner_and_simulator_reserve_the_same_window_blocks(
    window: int, block: int, batched: int, max_len: int
) -> None:
    # the planner sizes the pool with vLLM's max_memory_usage_bytes bound; the simulator's
    # admission gate must use the same per-request figure (one source of truth in vLLM)
    planner = KVGroupLayout("sliding", 1, block, window).blocks_for(max_len, batched)
    pool = PagedPool(10, KVLayout(block, (WindowGroup("w", block, window),)))
    assert isinstance(pool, HybridPool)
    pool.configure(batched, max_len)
    assert pool.admission_caps() == (planner,)


def test_deepseek_v4_planner_groups_match_the_simulator_groups() -> None:
    from kvscope.plan.kv_layout import _dsv4_layout
    from kvscope.specs.registry import load_model

    model = load_model("deepseek-ai/DeepSeek-V4-Flash")
    plan = _dsv4_layout(model, tuple(range(len(model.layers))), "fp8", (0, 31, 0))
    sim = deepseek_v4_layout()
    assert plan.block_size == sim.block_size
    got = sorted((w.block_tokens, w.window_tokens) for w in sim.windows)
    assert got == sorted((g.block_size, g.window) for g in plan.groups if g.window)
    pool = PagedPool(1000, sim)
    assert isinstance(pool, HybridPool)
    pool.configure(8192, 1 << 20)
    planner = [g.blocks_for(1 << 20, 8192) for g in plan.groups if g.window]
    assert sorted(pool.admission_caps()) == sorted(planner)


def test_window_blocks_are_cached_at_the_replay_boundary_and_hit_again() -> None:
    # A's prompt ends right after the 10-block shared prefix: its replay boundary (160) keeps
    # window blocks 8 and 9 (cdiv(32 - 1, 16) = 2 contiguous blocks), so B hits 160 tokens
    lay = KVLayout(16, (WindowGroup("swa", 16, 32),))
    s = sched(lay, 200)
    a = shared_seq(0, 161, 2, 10)
    s.add(a)
    while a.status != "finished":
        step(s)
    b = shared_seq(1, 300, 2, 10)
    assert s.pool.lookup(b).tokens == 160


def test_a_shared_prefix_junction_makes_window_blocks_reusable() -> None:
    # A's replay boundary (199) lies past the shared prefix: its window blocks there are
    # private, so B's window group misses and B's hit is 0; the full group hit 160, so B
    # records the junction at 160 and caches its window blocks there: C then hits 160
    lay = KVLayout(16, (WindowGroup("swa", 16, 32),))
    s = sched(lay, 200)
    a = shared_seq(0, 200, 2, 10)
    s.add(a)
    while a.status != "finished":
        step(s)
    b = shared_seq(1, 220, 2, 10)
    hit = s.pool.lookup(b)
    assert (hit.tokens, hit.junction) == (0, 160)
    s.add(b)
    while b.status != "finished":
        step(s)
    assert s.pool.lookup(shared_seq(2, 240, 2, 10)).tokens == 160


def test_v4_groups_hold_their_steady_bound_while_decoding() -> None:
    # a long decode settles at cdiv(W - 1, b) + 1 blocks per window group, or one fewer
    s = sched(deepseek_v4_layout(), 2000, budget=2048)
    q = Sequence(0, "a", 0.0, 1853, 600)
    s.add(q)
    lay = deepseek_v4_layout()
    for _ in range(400):
        step(s)
        if q.computed > 1853 + 300:
            tabs = s.pool._tabs[q.index]  # type: ignore[attr-defined]
            for w, tab in zip(lay.windows, tabs[1:], strict=True):
                held = sum(b is not None for b in tab)
                assert w.cap_blocks - 1 <= held <= w.cap_blocks
    s.pool.check()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 300), st.integers(1, 400), st.integers(0, 3), st.integers(0, 6)),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from([(16, (32,)), (16, (128,)), (8, (16, 64)), (16, (48, 256))]),
    st.integers(40, 300),
    st.booleans(),
    st.integers(16, 300),
)
# a member that leaves the decode cohort and rejoins with another phase: its old release
# times must not free its hashed window blocks early
@example(
    [(1, 55, 3, 4), (284, 117, 3, 6), (99, 101, 2, 0), (57, 197, 3, 6)], (16, (128,)), 75, True, 30
)
# preempted at 321 tokens, the window cap then asks 42 blocks of a 39-block pool: it waits
@example([(71, 132, 0, 0), (229, 110, 0, 0)], (16, (32,)), 40, False, 291)
# the same, with a fitting request stuck behind the preempted one (head-of-line blocking)
@example([(45, 78, 0, 0), (76, 78, 0, 0), (57, 1, 0, 0)], (8, (16, 64)), 60, False, 130)
def test_invariants_under_random_traffic(
    reqs: list[tuple[int, int, int, int]],
    shape: tuple[int, tuple[int, ...]],
    blocks: int,
    caching: bool,
    budget: int,
) -> None:
    bs, windows = shape
    lay = KVLayout(bs, tuple(WindowGroup(f"w{w}", bs, w) for w in windows))
    s = sched(lay, blocks, caching, budget=budget, seqs=6)
    pool = s.pool
    assert isinstance(pool, HybridPool)
    caps = pool.admission_caps()
    pending = []
    for i, (prompt, out, family, gap) in enumerate(reqs):
        q = Sequence(i, f"r{i}", float(i), prompt, out)
        nshared = min(prompt // 16, 1 + family * 3)
        if nshared:
            q.trace_hashes = list(np.cumsum(np.arange(nshared) + 7 * family + 1))
            q.hash_block_size = 16
            q.n_shareable = nshared * 16 // bs
        pending.append((gap, q))
    t = 0
    while pending or not s.idle:
        while pending and pending[0][0] <= 0:
            s.add(pending.pop(0)[1])
        if pending:
            pending[0] = (pending[0][0] - 1, pending[0][1])
        if s.idle:
            continue
        plan = s.schedule(float(t))
        if plan.tokens == 0 and not plan.preempted and not pending and not s.running:
            # where the engine gives up (Engine._give_up): the head of the queue was preempted
            # after it grew past what vLLM's full-sequence admission check can ever fit again
            # (the window cap grows with its length) and would wait forever in vLLM too; the
            # requests behind it wait with it (FCFS: vLLM's scheduler stops at the first
            # request it cannot allocate, vllm/v1/core/sched/scheduler.py)
            head = s.waiting()[0]
            assert head.preemptions > 0
            assert pool.admission_blocks(head.num_tokens) > pool.capacity
            break
        for q in s.running:
            if q.in_cohort:
                s.cohort.sync(q)
            tabs = pool._tabs.get(q.index)
            if tabs is None:
                continue
            for cap, tab in zip(caps, tabs[1:], strict=True):
                # blocks held in a window group never exceed the admission reservation
                assert sum(b is not None for b in tab) <= cap
        pool.check()
        s.update(plan, float(t))
        pool.check()
        t += 1
        assert t < 20000
    # every request finished or was rejected; freeing returned every block
    assert pool.num_free == pool.capacity and pool.held_total == 0
    assert all(q.status in ("finished", "rejected") for q in s.finished)
