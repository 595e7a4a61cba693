"""The running loop's fast path: one step for the whole decode cohort when nobody can be refused.

When the cohort's decodes plus every other running request's tokens fit the token budget and
every block they need is free, vLLM 0.33.0's running loop (``Scheduler.schedule``) schedules
everyone in full whatever the order and preempts nobody; this path does that step in
O(events) instead of request by request. Otherwise it returns -1 and the scheduler runs the
exact loop. Units: tokens, blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvscope.sim.cohort import GROW
from kvscope.sim.sched_config import StepPlan
from kvscope.sim.sequence import Sequence

if TYPE_CHECKING:
    from kvscope.sim.scheduler import Scheduler


def fast_running(sched: Scheduler, plan: StepPlan, budget: int) -> int:
    """The running loop when nobody can be refused: left budget, or -1 to go exact.

    Holds when the cohort's decodes plus every other running request's full request fit
    in the token budget and all the blocks they need fit in the free queue: then vLLM's
    loop schedules everyone in full whatever the order, and preempts nobody.
    """
    cfg = sched.config
    pool = sched.pool
    cohort = sched.cohort
    grow = cohort.due(GROW) if cohort.size and not cohort.periodic else []
    bucket = cohort.due_bucket() if cohort.size and cohort.periodic else {}
    tokens = cohort.size
    work: list[tuple[Sequence, int, int]] = []  # (request, tokens, slots)
    for seq in grow:
        c = seq.base_c + cohort.clock
        work.append((seq, 0, c + 1))
    for seq in sched._explicit.values():
        c = seq.computed
        n = seq.prompt + seq.outputs - c
        if 0 < sched._threshold < n:
            n = sched._threshold
        n = min(n, cfg.max_model_len - c - 1)
        if n > 0:
            work.append((seq, n, c + n))
            tokens += n
    if tokens > budget:
        return -1
    need = len(bucket)  # each due bucket member needs exactly one block
    for seq, _n, slots in work:
        if slots > seq.room:
            need += pool.blocks_needed(seq, slots)
    if need > pool.num_free:
        return -1
    if cohort.size and sched._window_step is not None and not sched._window_step(need):
        return -1  # hybrid pool: the members' window churn could evict a cached block
    if bucket:
        pool.grow_private(bucket.values())
    if len(work) > 1:
        work.sort(key=lambda w: w[0].admit_no)  # vLLM's running order
    for seq, n, slots in work:
        if seq.in_cohort:
            cohort.sync(seq)
            pool.allocate(seq, slots)
            cohort.regrow(seq)
            continue
        if slots > seq.room:
            pool.allocate(seq, slots)
        elif slots > seq.slots:
            seq.slots = slots
        pool.cache(seq, slots)
        plan.scheduled.append((seq, n))
    plan.cohort_tokens = cohort.size
    plan.decode_tokens += cohort.size
    plan.context_tokens += cohort.computed_total + cohort.size
    return budget - tokens
