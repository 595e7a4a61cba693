"""SGLang mode: prefill-or-decode steps, reservation admission, retraction."""

from __future__ import annotations

import numpy as np
from tests.sim.helpers import toy_cost, workload

from kvscope.sim.engine import Engine, sequences_from
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout
from kvscope.sim.scheduler import Scheduler, SchedulerConfig, StepPlan
from kvscope.sim.sglang import SglangScheduler


def heavy() -> object:
    rng = np.random.default_rng(4)
    n = 60
    return workload(
        np.cumsum(rng.exponential(0.01, n)), rng.integers(50, 400, n), rng.integers(50, 600, n)
    )


def run(kind: type[Scheduler], blocks: int, page: int = 4) -> tuple[list, Engine, list]:
    pool = PagedPool(blocks, KVLayout(page))
    sched = kind(SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=512), pool)
    steps: list[tuple[int, int]] = []

    def record(plan: StepPlan, _t: float) -> None:
        steps.append((plan.prefill_tokens, plan.decode_tokens))

    eng = Engine(sched, toy_cost(), on_step=record)
    seqs = sequences_from(heavy(), page)  # type: ignore[arg-type]
    eng.run(seqs)
    return seqs, eng, steps


def test_every_step_is_a_prefill_or_a_decode_batch() -> None:
    seqs, eng, steps = run(SglangScheduler, 4000)
    assert all(s.status == "finished" and s.outputs == s.max_tokens for s in seqs)
    assert all(p == 0 or d == 0 for p, d in steps)
    assert any(p for p, _ in steps) and any(d for _, d in steps)
    assert eng.pool.num_free == eng.pool.capacity


def test_reservation_admission_retracts_less_than_vllm_preempts() -> None:
    sg, sg_eng, _ = run(SglangScheduler, 3000)
    vl, _, _ = run(Scheduler, 3000)
    assert all(s.status == "finished" for s in sg + vl)
    vllm_preempt = sum(s.preemptions for s in vl)
    sglang_retract = sum(s.preemptions for s in sg)
    assert vllm_preempt > 0
    assert sglang_retract < vllm_preempt
    assert sg_eng.stats.peak_used <= sg_eng.pool.capacity


def test_tight_pool_retracts_and_still_finishes_everything() -> None:
    seqs, eng, _ = run(SglangScheduler, 700)
    assert all(s.status == "finished" for s in seqs)
    assert sum(s.preemptions for s in seqs) > 0
    assert eng.pool.num_free == eng.pool.capacity and eng.pool.held_total == 0
