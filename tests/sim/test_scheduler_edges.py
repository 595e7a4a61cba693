"""Scheduler edge cases where kvscope once parted from vLLM 0.33.0 (each seen in the oracle).

Every expectation below is what vLLM's own scheduler did on the same input in
``benchmarks/sim_vs_vllm.py`` (scenarios "priority with ties ...", "long-prefill threshold,
sparse arrivals", "request exactly filling the pool"); the oracle test re-checks them against
vLLM step by step, these pin them without it.
"""

from __future__ import annotations

from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout
from kvscope.sim.scheduler import Scheduler, SchedulerConfig
from kvscope.sim.sequence import Sequence


def make(num_blocks: int, **cfg: object) -> Scheduler:
    pool = PagedPool(num_blocks, KVLayout(16), enable_caching=True)
    base: dict[str, object] = {"max_num_seqs": 8, "max_num_batched_tokens": 256}
    return Scheduler(SchedulerConfig(**{**base, **cfg}), pool)  # type: ignore[arg-type]


def run_until_idle(sched: Scheduler, limit: int = 10_000) -> list[dict[str, int]]:
    steps = []
    for t in range(limit):
        if sched.idle:
            break
        plan = sched.schedule(float(t))
        steps.append(sched.scheduled_tokens(plan))
        sched.update(plan, float(t))
    return steps


def test_priority_victim_among_equal_timestamps_is_the_last_added() -> None:
    sched = make(20, policy="priority", max_num_batched_tokens=64)
    seqs = [Sequence(i, f"r{i}", 0.0, 48, 150) for i in range(3)]  # one timestamp, one priority
    for s in seqs:
        sched.add(s)
    preempted: list[str] = []
    for t in range(400):
        if sched.idle:
            break
        plan = sched.schedule(float(t))
        preempted += [q.request_id for q in plan.preempted]
        sched.update(plan, float(t))
    # vLLM stamps arrival_time as requests come: the newest (r2) is the lowest priority
    assert preempted and preempted[0] == "r2"


def test_long_prefill_threshold_is_lifted_for_a_lone_request() -> None:
    sched = make(200, long_prefill_token_threshold=64)
    sched.add(Sequence(0, "r0", 0.0, 700, 4))
    steps = run_until_idle(sched)
    assert steps[0] == {"r0": 256}  # the whole budget, not the 64-token threshold
    busy = make(200, long_prefill_token_threshold=64)
    busy.add(Sequence(0, "r0", 0.0, 700, 4))
    busy.add(Sequence(1, "r1", 0.0, 700, 4))
    first = run_until_idle(busy)[0]
    assert first == {"r0": 64, "r1": 64}


def test_request_whose_last_token_fills_the_pool_is_served() -> None:
    # 11 blocks = 10 usable (one is vLLM's null block) = 160 token slots; 100 + 61 - 1 = 160
    sched = make(11)
    ok = Sequence(0, "r0", 0.0, 100, 61)
    assert sched.add(ok)
    too_big = Sequence(1, "r1", 0.0, 100, 62)
    assert not sched.add(too_big)
    assert "needs 11 KV blocks" in too_big.error
    run_until_idle(sched)
    assert ok.status == "finished" and ok.outputs == 61
