"""The simulation loop: arrivals -> schedule -> run (cost model) -> update, deterministic.

``Engine.run`` advances simulated time one engine step at a time where something happens
(an arrival is due, a prefill chunk runs, a request needs a new block, finishes or is
preempted) and in *spans* elsewhere: when every running request is decoding, nobody will
cross a block boundary or finish, and the waiting queue's head cannot be admitted, the next
``k`` steps are identical except for context growth, so they are costed in one vectorised
call and applied at once. ``mode="step"`` disables spans (one vLLM step per iteration, for
the step-exact differential check); both modes produce identical results (tested).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from kvscope.sim.cost import CostModel
from kvscope.sim.kv_pool import BlockAllocator
from kvscope.sim.scheduler import Scheduler, StepPlan
from kvscope.sim.sequence import Sequence
from kvscope.workload import Workload

Mode = Literal["span", "step"]


@dataclass
class StepRow:
    """One row of ``steps.parquet`` (a sample of engine state; counters since last row)."""

    t_s: float
    steps: int
    step_time_s: float
    running: int
    waiting: int
    kv_blocks_used: int
    kv_blocks_cached: int
    kv_blocks_free: int
    kv_usage_frac: float
    internal_waste_tokens: int
    batch_tokens: int
    prefill_tokens: int
    decode_tokens: int
    preemptions: int
    prefix_hit_tokens: int
    fragmentation: float


@dataclass
class EngineStats:
    """Whole-run figures the summary needs, accumulated as the loop goes."""

    steps: int = 0
    spans: int = 0
    busy_s: float = 0.0
    usage_time_integral: float = 0.0  # sum of used-blocks x seconds
    peak_used: int = 0
    peak_t_s: float = 0.0
    tokens: int = 0
    wall_s: float = 0.0
    rows: list[StepRow] = field(default_factory=list)


def sequences_from(workload: Workload, block_size: int) -> list[Sequence]:
    """One :class:`Sequence` per request, with its shareable-prefix length in blocks."""
    seqs: list[Sequence] = []
    hb = workload.hash_block_size or 0
    offs = workload.hash_offsets
    vals = workload.hash_values
    arrival = workload.arrival_s.tolist()
    prompt = workload.prompt_tokens.tolist()
    output = workload.output_tokens.tolist()
    ids = workload.request_ids
    for i in range(len(workload)):
        s = Sequence(i, str(ids[i]), arrival[i], prompt[i], max(1, output[i]))
        if offs is not None and vals is not None and hb:
            a, b = int(offs[i]), int(offs[i + 1])
            if b > a:
                # only workload blocks that lie wholly inside the prompt identify tokens
                nfull = min(b - a, prompt[i] // hb)
                s.trace_hashes = vals[a : a + nfull]
                s.hash_block_size = hb
                s.n_shareable = nfull * hb // block_size
        seqs.append(s)
    return seqs


class Engine:
    """Drive a :class:`Scheduler` over a list of sequences with a :class:`CostModel`."""

    def __init__(
        self,
        scheduler: Scheduler,
        cost: CostModel,
        *,
        mode: Mode = "span",
        sample_interval_s: float = 0.1,
        on_step: Callable[[StepPlan, float], None] | None = None,
    ) -> None:
        self.sched = scheduler
        self.pool: BlockAllocator = scheduler.pool
        self.cost = cost
        self.mode = mode
        self.spans = mode == "span" and self.pool.supports_spans
        self.sample_interval_s = sample_interval_s
        self.on_step = on_step
        self.stats = EngineStats()
        self.t = 0.0
        self._next_sample = 0.0
        self._acc = [0, 0, 0, 0, 0, 0]  # steps, tokens, prefill, decode, preemptions, hits
        self._acc_s = 0.0  # busy seconds since the last row

    # ------------------------------------------------------------------ main loop
    def run(self, seqs: list[Sequence]) -> EngineStats:
        t0 = time.perf_counter()
        sched = self.sched
        n = len(seqs)
        i = 0
        while True:
            while i < n and seqs[i].arrival_s <= self.t:
                sched.add(seqs[i])
                i += 1
            if sched.idle:
                if i >= n:
                    break
                self.t = seqs[i].arrival_s
                continue
            next_arrival = seqs[i].arrival_s if i < n else math.inf
            if self.spans and self._span(next_arrival):
                continue
            plan = sched.schedule(self.t)
            if not plan.scheduled:
                if plan.preempted:
                    continue  # a request preempted itself; it is re-admitted next step
                if i < n:
                    self.t = max(self.t, next_arrival)
                    continue
                self._give_up()
                break
            dt = self.cost.step_time(plan.tokens, plan.context_tokens)
            dt += self.pool.take_overhead_s(self.t)
            self._acc[4] += len(plan.preempted)
            self._acc[5] += plan.hit_tokens
            self._advance(dt, plan.tokens, plan.prefill_tokens, plan.decode_tokens, 1)
            sched.update(plan, self.t)
            if self.on_step is not None:
                self.on_step(plan, self.t)
        self._sample(force=True)
        self.stats.wall_s = time.perf_counter() - t0
        return self.stats

    def _give_up(self) -> None:
        """Nothing can ever be scheduled again: report what is left instead of looping."""
        for seq in self.sched.waiting():
            seq.status = "rejected"
            seq.error = "could not be admitted by an idle engine (KV pool too small)"
            self.sched.finished.append(seq)
        for seq in self.sched.running:
            seq.status = "incomplete"
            seq.error = "made no progress"
            self.sched.finished.append(seq)

    # ------------------------------------------------------------------ spans
    def _span(self, next_arrival: float) -> bool:
        """Advance over uniform decode steps at once; False when the next step is special.

        A span is ``k >= 2`` steps in which every running request decodes one token, none
        finishes, the new blocks they need fit in the free queue (so nobody is preempted)
        and the waiting queue's head stays refused (free blocks only shrink meanwhile, and
        evicting a hit block never makes a lookup cheaper). Block boundaries inside the
        span are allowed: the pool pops the same blocks from its queue whichever request
        takes them.
        """
        sched = self.sched
        running = sched.running
        nr = len(running)
        cfg = sched.config
        if nr == 0 or nr > cfg.max_num_batched_tokens:
            return False
        for seq in running:
            if seq.computed != seq.prompt + seq.outputs - 1 or seq.outputs == 0:
                return False
        left = np.array([s.max_tokens - s.outputs - 1 for s in running], dtype=np.int64)
        k = int(left.min())
        if k < 2 or sched.head_admissible(cfg.max_num_batched_tokens - nr):
            return False
        comp = np.array([s.computed for s in running], dtype=np.int64)
        k = self._block_bound(comp, np.array([s.slots for s in running], np.int64), k)
        if k < 2:
            return False
        ctx = float(comp.sum() + nr)
        j = np.arange(k, dtype=np.float64)
        times = self.cost.step_times(np.full(k, float(nr)), ctx + nr * j)
        ends = np.cumsum(np.concatenate(([self.t], times)))[1:]
        if next_arrival < math.inf:
            # steps that *start* before the next arrival (step 0 starts now)
            k = min(k, 1 + int(np.searchsorted(ends[: k - 1], next_arrival, side="left")))
        if k < 2:
            return False
        pool = self.pool
        bs = pool.block_size
        caching = pool.enable_caching
        for seq in running:
            c = seq.computed + k
            if c > seq.room:
                pool.allocate(seq, c)  # fits: checked by _block_bound
            elif c > seq.slots:
                seq.slots = c
            seq.computed = c
            seq.outputs += k
            if caching:
                seq.hashed = max(seq.hashed, c // bs)
        self._advance_to(float(ends[k - 1]), float(ends[k - 1] - self.t), nr * k, 0, nr * k, k)
        self.stats.spans += 1
        return True

    def _block_bound(self, comp: NDArray[np.int64], slots: NDArray[np.int64], k: int) -> int:
        """Largest ``k' <= k`` whose new blocks (all running requests) fit in the free queue."""
        layout = self.pool.layout
        free = self.pool.num_free

        def demand(steps: int) -> int:
            need = comp + steps
            grow = need > slots
            if not grow.any():
                return 0
            n, s = need[grow], slots[grow]
            bs = layout.block_size
            d = (-(-n // bs) - -(-s // bs)).sum()
            for w in layout.windows:
                b, cap = w.block_tokens, w.cap_blocks
                d += (np.minimum(-(-n // b), cap) - np.minimum(-(-s // b), cap)).sum()
            return int(d)

        if demand(k) <= free:
            return k
        lo, hi = 0, k  # demand(lo) fits, demand(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if demand(mid) <= free:
                lo = mid
            else:
                hi = mid
        return lo

    # ------------------------------------------------------------------ bookkeeping
    def _advance(self, dt: float, tokens: int, prefill: int, decode: int, steps: int) -> None:
        self._advance_to(self.t + dt, dt, tokens, prefill, decode, steps)

    def _advance_to(
        self, t_new: float, dt: float, tokens: int, prefill: int, decode: int, steps: int
    ) -> None:
        st = self.stats
        used = self.pool.used
        st.usage_time_integral += used * dt
        if used > st.peak_used:
            st.peak_used = used
            st.peak_t_s = self.t
        st.steps += steps
        st.busy_s += dt
        st.tokens += tokens
        acc = self._acc
        acc[0] += steps
        acc[1] += tokens
        acc[2] += prefill
        acc[3] += decode
        self._acc_s += dt
        self.t = t_new
        if self.t >= self._next_sample:
            self._sample()

    def _sample(self, force: bool = False) -> None:
        acc = self._acc
        if acc[0] == 0 and not force:
            return
        pool = self.pool
        sched = self.sched
        bs = pool.block_size
        waste = sum(s.held_full * bs - s.computed for s in sched.running)
        self.stats.rows.append(
            StepRow(
                t_s=self.t,
                steps=acc[0],
                step_time_s=self._acc_s / acc[0] if acc[0] else 0.0,
                running=len(sched.running),
                waiting=sched.num_waiting,
                kv_blocks_used=pool.used,
                kv_blocks_cached=pool.cached_free,
                kv_blocks_free=pool.num_free,
                kv_usage_frac=pool.usage,
                internal_waste_tokens=max(waste, 0),
                batch_tokens=acc[1],
                prefill_tokens=acc[2],
                decode_tokens=acc[3],
                preemptions=acc[4],
                prefix_hit_tokens=acc[5],
                fragmentation=pool.fragmentation,
            )
        )
        self._acc = [0, 0, 0, 0, 0, 0]
        self._acc_s = 0.0
        step = self.sample_interval_s
        self._next_sample = (math.floor(self.t / step) + 1) * step if step > 0 else self.t
