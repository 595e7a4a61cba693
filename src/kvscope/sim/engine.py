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

from kvscope.sim.allocator import BlockAllocator
from kvscope.sim.cost import CostModel
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
    draft_tokens: int = 0  # speculative drafts verified (counted in decode/prefill tokens)
    accepted_tokens: int = 0  # drafts accepted


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
    cpu_s: float = 0.0  # process CPU time of the loop (wall time on an unloaded core)
    draft_tokens: int = 0
    accepted_tokens: int = 0
    rows: list[StepRow] = field(default_factory=list)


def chain(ids: list[int]) -> list[int]:
    """Chain block ids into prefix hashes: equal values imply equal whole prefixes.

    Traces such as Mooncake's give one id per block; chaining (as vLLM's
    ``hash_block_tokens`` chains a block with its parent) makes a block key also identify
    everything before it. Python's tuple-of-int hash is deterministic across runs.
    """
    out = []
    h = 0
    for v in ids:
        h = hash((h, v))
        out.append(h)
    return out


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
            # only workload blocks that lie wholly inside the prompt identify tokens
            nfull = min(b - a, prompt[i] // hb)
            if nfull > 0:
                s.trace_hashes = chain(vals[a : a + nfull].tolist())
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
        on_progress: Callable[[int, int], None] | None = None,
        request_s: float = 0.0,
    ) -> None:
        self.sched = scheduler
        self.pool: BlockAllocator = scheduler.pool
        self.cost = cost
        self.mode = mode
        self.spans = mode == "span" and self.pool.supports_spans
        self.sample_interval_s = sample_interval_s
        self.on_step = on_step
        self.on_progress = on_progress  # (requests done, requests in all), now and then
        # The engine sees a request this long after it arrives (the server's front end: HTTP,
        # tokenising, the hand-off to the loop); its TTFT still counts from the arrival.
        self.request_s = request_s
        self.stats = EngineStats()
        self.t = 0.0
        self._next_sample = 0.0
        # steps, tokens, prefill, decode, preemptions, hits, drafts, accepted drafts
        self._acc = [0, 0, 0, 0, 0, 0, 0, 0]
        self._acc_s = 0.0  # busy seconds since the last row
        self._last_dt = 0.0  # duration of the last step (a hint for attempting spans)
        self._next = 0  # index of the next request of the list to add (resumable loop)

    # ------------------------------------------------------------------ main loop
    def run(self, seqs: list[Sequence]) -> EngineStats:
        """Serve ``seqs`` to the end. On Ctrl-C the state so far is made readable (the last
        sample row taken, cohort counts written back, times set) and KeyboardInterrupt
        propagates: the caller then reports the partial run instead of losing it."""
        t0 = time.perf_counter()
        c0 = time.process_time()
        try:
            self._loop(seqs)
        except KeyboardInterrupt:
            self._settle(t0, c0)
            raise
        self._sample(force=True)
        self.stats.wall_s = time.perf_counter() - t0
        self.stats.cpu_s = time.process_time() - c0
        return self.stats

    def advance(self, seqs: list[Sequence], until: float) -> None:
        """Serve ``seqs`` while the clock is before ``until``: no step starts at or after it.

        For a driver of several engines on one clock (:mod:`kvscope.sim.data_parallel`):
        ``seqs`` is a list the driver appends to in arrival order, never with an arrival
        after ``until``. The engine stops when its clock reaches ``until`` (the step under way
        then may end after it), and when it can make no progress it waits for the next
        arrival instead of giving up; :meth:`finish` serves what is left.
        """
        i = self._next
        if self.t >= until and (i >= len(seqs) or seqs[i].arrival_s + self.request_s > self.t):
            return  # already there, nothing new to add: the loop would return at once
        self._loop(seqs, until)

    def finish(self, seqs: list[Sequence]) -> EngineStats:
        """Serve the rest of ``seqs`` to the end, after :meth:`advance` calls (as :meth:`run`
        does, resuming where the last call stopped)."""
        self._loop(seqs)
        self._sample(force=True)
        return self.stats

    def settle(self) -> None:
        """Make the state readable after an interrupted :meth:`advance` or :meth:`finish`."""
        self._settle(time.perf_counter(), time.process_time())

    def _settle(self, t0: float, c0: float) -> None:
        """Make an interrupted run's state consistent enough to report."""
        sched = self.sched
        for seq in sched.running:
            if seq.in_cohort:
                sched.cohort.sync(seq)
        self._sample(force=True)
        self.stats.wall_s = time.perf_counter() - t0
        self.stats.cpu_s = time.process_time() - c0

    def _loop(self, seqs: list[Sequence], until: float = math.inf) -> None:
        self._next = self._steps(seqs, until)

    def _steps(self, seqs: list[Sequence], until: float) -> int:
        """The loop proper; returns the index of the next request to add."""
        sched = self.sched
        n = len(seqs)
        i = self._next
        delay = self.request_s
        loops = 0
        while True:
            loops += 1
            if self.on_progress is not None and not loops & 8191:
                self.on_progress(len(sched.finished), n)
            while i < n and seqs[i].arrival_s + delay <= self.t:
                sched.add(seqs[i])
                i += 1
            if sched.idle:
                if i >= n:
                    return i
                self.t = seqs[i].arrival_s + delay
                continue
            if self.t >= until:
                return i  # a driver's horizon (advance): the next step starts at or after it
            next_arrival = seqs[i].arrival_s + delay if i < n else until
            if self.spans and self._span(next_arrival):
                continue
            plan = sched.schedule(self.t)
            if plan.tokens == 0:
                if plan.preempted:
                    continue  # a request preempted itself; it is re-admitted next step
                if next_arrival < math.inf:
                    self.t = max(self.t, next_arrival)
                    continue
                self._give_up()
                return i
            dt = self.cost.plan_time(plan)
            if plan.proposers and self.cost.drafter is not None:
                dt += self.cost.drafter.time(self.cost, plan.proposers, plan.context_tokens)
            self._last_dt = dt
            dt += self.pool.take_overhead_s(self.t) + sched.take_transfer_s()
            self._acc[4] += len(plan.preempted)
            self._acc[5] += plan.hit_tokens
            self._advance(dt, plan.tokens, plan.prefill_tokens, plan.decode_tokens, 1)
            sched.update(plan, self.t)
            if sched.spec is not None:
                self._spec_counts(plan.draft_tokens, sum(sched.step_accepted.values()))
            if self.on_step is not None:
                self.on_step(plan, self.t)

    def _give_up(self) -> None:
        """Nothing can ever be scheduled again: report what is left instead of looping."""
        for seq in self.sched.waiting():
            seq.status = "rejected"
            seq.error = (
                f"preempted at {seq.num_tokens} tokens and never re-admitted: vLLM's "
                "full-sequence admission check asks more KV blocks than the pool holds, "
                "so the engine would wait forever"
                if seq.preemptions
                else "could not be admitted by an idle engine (KV pool too small)"
            )
            self.sched.finished.append(seq)
        for seq in self.sched.running:
            seq.status = "incomplete"
            seq.error = "made no progress"
            self.sched.finished.append(seq)

    # ------------------------------------------------------------------ spans
    def _span(self, next_arrival: float) -> bool:
        """Advance over uniform decode steps at once; False when the next step is special.

        A span is ``k >= 2`` steps in which every running request is a decode-cohort member
        (see :mod:`kvscope.sim.cohort`) and nobody needs a new block, no arrival is due, and
        the waiting queue's head stays refused (nothing frees blocks or sequence slots
        meanwhile). Members may finish in the span's *last* step, whose end frees them, as a
        single step would. The steps differ only in context length, so they are costed at
        once and the cohort clock jumps by ``k``: O(1) in the batch size.
        """
        if next_arrival <= self.t + self._last_dt:
            return False  # not even two steps fit before the next arrival (a hint only)
        sched = self.sched
        cohort = sched.cohort
        nr = len(sched.running)
        budget = sched.config.max_num_batched_tokens
        if nr == 0 or cohort.size != nr or nr > budget:
            return False
        grow, fin = cohort.next_events()
        k = min(grow - cohort.clock, fin - cohort.clock + 1)
        bound = getattr(self.pool, "span_bound", None)
        if bound is not None and k >= 2:
            # hybrid pools: steady window churn must evict nothing, and with a request
            # waiting the free count must not rise inside the span (it could be admitted)
            k, rise = bound(k)
            if rise > 0 and sched.num_waiting:
                return False
        if k < 2 or sched.head_admissible(budget - nr):
            return False
        k, t_end, last_dt = self._span_times(nr, cohort.computed_total + nr, k, next_arrival)
        if k < 2:
            return False
        cohort.clock += k - 1
        self._last_dt = last_dt
        self._advance_to(t_end, t_end - self.t, nr * k, 0, nr * k, k)
        sched.finish_cohort_step(self.t)
        self.stats.spans += 1
        return True

    def _span_times(
        self, nr: int, ctx: int, k: int, next_arrival: float
    ) -> tuple[int, float, float]:
        """Steps that start before ``next_arrival`` (at most ``k``), the end time, last dt.

        Step ``j`` decodes ``nr`` tokens over ``ctx + nr * j`` context. Times accumulate
        left to right exactly as single steps would (same floats).
        """
        t = self.t
        if k <= 16:
            dt = 0.0
            for j in range(k):
                if j and t >= next_arrival:
                    return j, t, dt
                dt = self.cost.step_time(nr, ctx + nr * j)
                t += dt
            return k, t, dt
        j_arr = np.arange(k, dtype=np.float64)
        times = self.cost.step_times(np.full(k, float(nr)), float(ctx) + nr * j_arr)
        ends = np.cumsum(np.concatenate(([t], times)))[1:]
        if next_arrival < math.inf:
            k = min(k, 1 + int(np.searchsorted(ends[: k - 1], next_arrival, side="left")))
        return k, float(ends[k - 1]), float(times[k - 1])

    def _block_bound(self, running: list[Sequence], k: int) -> int:
        """Largest ``k' <= k`` whose new blocks (all running requests) fit in the free queue."""
        layout = self.pool.layout
        free = self.pool.num_free
        # cheap bound first: nobody can need more than this many blocks in k steps
        per_req = -(-k // layout.block_size) + 1 + layout.fixed_blocks_per_request
        if per_req * len(running) <= free:
            return k

        def demand(steps: int) -> int:
            d = 0
            for seq in running:
                need = seq.computed + steps
                if need > seq.room:
                    d += layout.blocks(need) - layout.blocks(seq.slots)
            return d

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

    def _spec_counts(self, drafts: int, accepted: int) -> None:
        """Speculative decoding: drafts verified and accepted in the step just done."""
        self._acc[6] += drafts
        self._acc[7] += accepted
        self.stats.draft_tokens += drafts
        self.stats.accepted_tokens += accepted

    def _sample(self, force: bool = False) -> None:
        acc = self._acc
        if acc[0] == 0 and not force:
            return
        pool = self.pool
        sched = self.sched
        waste = pool.held_full_total * pool.block_size - sched.total_computed()
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
                draft_tokens=acc[6],
                accepted_tokens=acc[7],
            )
        )
        self._acc = [0, 0, 0, 0, 0, 0, 0, 0]
        self._acc_s = 0.0
        step = self.sample_interval_s
        self._next_sample = (math.floor(self.t / step) + 1) * step if step > 0 else self.t
