"""vLLM v1 scheduling, one step at a time: continuous batching, chunked prefill, preemption.

Follows ``vllm/v1/core/sched/scheduler.py::Scheduler.schedule`` of vLLM 0.33.0:

1. *Running* requests first, in order: each asks for ``num_tokens - num_computed_tokens``
   tokens (one for a decode), capped by the token budget (``max_num_batched_tokens``) and
   ``max_model_len - computed - 1``. If its blocks cannot be allocated, the newest running
   request (``running[-1]``; lowest priority under ``--scheduling-policy priority``) is
   preempted by *recompute*: its blocks are freed, its computed count reset, and it goes to
   the front of the waiting queue. A request that has to preempt itself stops the loop.
2. *Waiting* requests next, only if nothing was preempted this step, while the budget lasts
   and fewer than ``max_num_seqs`` run: prefix-cache lookup (fresh admissions only), then
   admission only if the *whole* sequence fits (``scheduler_reserve_full_isl``, default on
   in 0.33.0) and the first chunk can be allocated; the first refusal ends the loop (FCFS).
3. After the model step, each request whose computed tokens caught up with its tokens
   samples one token; it finishes at ``max_tokens`` and frees its blocks in reverse order.

Every allocation is checked with :meth:`PagedPool.blocks_needed` before anything changes.

Speed without changing the outcome: decoding requests live in a decode cohort
(:mod:`kvscope.sim.cohort`). When the cohort's decodes plus every other running request's
tokens fit the budget and all the blocks they need are free, vLLM's loop would schedule
everyone in full and preempt nobody, so that step is done in O(events); otherwise the cohort
is dissolved and the loop above runs request by request. ``--preemption-mode swap`` (vLLM
v0's other mode) keeps a preempted request's computed tokens in host memory instead.

Speculative decoding (``spec``, :mod:`kvscope.sim.spec_decode`) follows the same 0.33.0 file:
a running request asks for ``num_tokens_with_spec - computed`` tokens (1 + its drafts),
allocates ``num_lookahead_tokens`` more slots, its drafts are trimmed to what was scheduled;
a one-token admission is padded to ``1 + k`` with placeholder drafts (the ``pad_spec_decode``
branch); after the step ``computed`` rolls back by the rejected drafts, the accepted tokens
plus one are appended up to ``max_tokens``, full blocks are hashed to ``computed``, and every
request that sampled gets k drafts for its next step. The decode cohort is off then (every
step goes through the exact loop); runs without ``spec`` are unchanged.
"""

from __future__ import annotations

from kvscope.sim.allocator import BlockAllocator
from kvscope.sim.cohort import FINISH, DecodeCohort
from kvscope.sim.cohort_step import fast_running
from kvscope.sim.kv_pool import Hit
from kvscope.sim.sched_config import Policy, SchedulerConfig, StepPlan
from kvscope.sim.sequence import Sequence
from kvscope.sim.spec_decode import SpecDecodeConfig, pad_admission, verify
from kvscope.sim.waiting_queue import WaitingQueue

__all__ = ["Policy", "Scheduler", "SchedulerConfig", "StepPlan"]


class Scheduler:
    """vLLM v1 scheduling over a paged (or contiguous) KV allocator; checks before it mutates."""

    def __init__(
        self, config: SchedulerConfig, pool: BlockAllocator, spec: SpecDecodeConfig | None = None
    ) -> None:
        self.config = config
        self.pool = pool
        self.running: list[Sequence] = []
        self._queue = WaitingQueue(config.policy == "priority")
        self.finished: list[Sequence] = []
        self.preemptions = 0
        self.cohort = DecodeCohort(
            pool.block_size,
            pool.enable_caching,
            # block-per-bs-tokens growth: paged pools without window groups
            periodic=pool.supports_spans and not pool.layout.windows,
        )
        self._explicit: dict[int, Sequence] = {}  # running requests outside the cohort
        self._admits = 0
        self.transfer_s = 0.0  # swap traffic not yet charged to a step
        self.use_cohort = True  # engines whose steps are not vLLM's turn it off
        self._threshold = config.long_prefill_token_threshold  # this step's (see schedule)
        self.spec = spec
        self._look = spec.lookahead_tokens if spec is not None else 0
        self._ds = spec.draft_slots if spec is not None else 0
        self._inb = 0  # vLLM's input budget this step (spec mode: token budget less draft slots)
        self._step_prefill = False  # a running prefill chunk was scheduled (spec padding)
        self._step_running = 0  # running requests scheduled this step (spec padding)
        self._verify_step = 0  # update() calls so far: the draw key of acceptance
        self.step_accepted: dict[str, int] = {}  # last update's accepted drafts per request
        if spec is not None:
            self.use_cohort = False  # drafts make decodes non-uniform: the exact loop runs
        # hybrid pools (sim/hybrid_pool.py): the window admission cap's terms, and the decode
        # cohort whose members' window churn the pool counts by phase
        configure = getattr(pool, "configure", None)
        if configure is not None:
            configure(
                config.max_num_batched_tokens,
                config.max_model_len,
                batches=config.max_concurrent_batches,
                cohort=self.cohort,
            )
        self._window_step = getattr(pool, "window_step", None)
        self._leave_steady = getattr(pool, "leave_steady", None)

    # ------------------------------------------------------------------ queue
    @property
    def num_waiting(self) -> int:
        return len(self._queue)

    def _peek(self) -> Sequence:
        return self._queue.peek()

    def _pop_waiting(self) -> Sequence:
        return self._queue.pop()

    def _push_waiting(self, seq: Sequence, front: bool = False) -> None:
        self._queue.push(seq, front)

    def waiting(self) -> list[Sequence]:
        return self._queue.in_order()

    def rejection_reason(self, seq: Sequence) -> str:
        """Why ``seq`` can never run here ("" when it can)."""
        cfg = self.config
        if seq.prompt >= cfg.max_model_len:
            return f"prompt of {seq.prompt} tokens >= max-model-len {cfg.max_model_len}"
        # the last sampled token never gets a slot: the request's KV peaks at prompt + output - 1
        peak = seq.prompt + seq.max_tokens - 1
        if self.spec is not None:  # the last decode verifies k drafts with lookahead slots
            peak += self.spec.num_speculative_tokens + self._look
        full_len = min(peak, cfg.max_model_len)
        admission = getattr(self.pool, "admission_blocks", None)  # hybrid: capped windows
        if admission is not None:  # vLLM's admission checks the prompt, then windows slide
            need = admission(min(seq.prompt, cfg.max_model_len), full_len)
        else:
            need = self.pool.layout.blocks(full_len)
        if need > self.pool.capacity:
            return f"needs {need} KV blocks at full length; the pool holds {self.pool.capacity}"
        if not cfg.enable_chunked_prefill and seq.prompt > cfg.max_num_batched_tokens:
            return (
                f"prompt of {seq.prompt} tokens > max-num-batched-tokens "
                f"{cfg.max_num_batched_tokens} without chunked prefill"
            )
        return ""

    def add(self, seq: Sequence) -> bool:
        """Queue a new request, or mark it rejected with a reason; True when queued."""
        seq.max_tokens = max(1, min(seq.max_tokens, self.config.max_model_len - seq.prompt))
        reason = self.rejection_reason(seq)
        if reason:
            seq.status = "rejected"
            seq.error = reason
            self.finished.append(seq)
            return False
        self._push_waiting(seq)
        return True

    @property
    def idle(self) -> bool:
        return not self.running and self.num_waiting == 0

    # ------------------------------------------------------------------ schedule
    def schedule(self, now: float) -> StepPlan:
        """One ``schedule()`` call: running requests first, then waiting ones."""
        plan = StepPlan()
        budget = self.config.max_num_batched_tokens
        self._inb = budget
        self._step_prefill = False
        # vLLM lifts --long-prefill-token-threshold when one request is all there is (nobody
        # to starve): Scheduler.schedule counts running + waiting before its loops
        lone = len(self.running) + self.num_waiting <= 1
        self._threshold = 0 if lone else self.config.long_prefill_token_threshold
        fast = self._fast_running(plan, budget) if self.spec is None else -1
        if fast < 0:
            self._dissolve()
            budget = self._slow_running(plan, budget)
        else:
            budget = fast
        self._step_running = len(plan.scheduled)
        if not plan.preempted:
            budget = self._admit(plan, budget, now)
        for seq, n in plan.scheduled:
            if n == 1 + seq.step_drafts and seq.outputs > 0 and seq.computed == seq.num_tokens - 1:
                plan.decode_tokens += n
            else:
                plan.prefill_tokens += n
            seq.computed += n
            plan.context_tokens += seq.computed
        if self.spec is not None:
            for seq, _n in plan.scheduled:
                seq.partial = seq.computed < seq.num_tokens
                plan.draft_tokens += seq.step_drafts
                plan.proposers += not seq.partial
        return plan

    def _fast_running(self, plan: StepPlan, budget: int) -> int:
        """The running loop when nobody can be refused (:mod:`kvscope.sim.cohort_step`)."""
        return fast_running(self, plan, budget)

    def _slow_running(self, plan: StepPlan, budget: int) -> int:
        """vLLM's running loop request by request, with preemption (cohort dissolved)."""
        cfg = self.config
        pool = self.pool
        running = self.running
        scheduled = plan.scheduled
        max_len = cfg.max_model_len
        threshold = self._threshold
        look, ds = self._look, self._ds  # 0 without speculative decoding
        i = 0
        while i < len(running) and budget > 0:
            if self._inb <= ds:
                break
            seq = running[i]
            c = seq.computed
            n = seq.prompt + seq.outputs + seq.drafts - c  # num_tokens_with_spec - computed
            if 0 < threshold < n:
                n = threshold
            n = min(n, budget, self._inb - ds, max_len - c - 1)
            if n <= 0:
                i += 1
                continue
            slots = c + n
            need = min(slots + look, max_len)  # lookahead slots for the drafter's KV
            ok = pool.allocate(seq, need)
            while not ok:
                victim = self._victim()
                if cfg.policy == "priority":
                    vi = running.index(victim)
                    del running[vi]
                    if vi < i:
                        i -= 1
                    for k, (s, m) in enumerate(scheduled):
                        if s is victim:
                            del scheduled[k]
                            budget += m
                            self._inb += m + ds
                            break
                else:
                    running.pop()
                self._preempt(victim, plan)
                if victim is seq:
                    break
                ok = pool.allocate(seq, need)
            if not ok:
                if cfg.policy == "priority":
                    continue  # it preempted itself; later (higher-priority) ones may fit
                break
            pool.cache(seq, slots)
            scheduled.append((seq, n))
            budget -= n
            self._inb -= n + ds
            if self.spec is not None:
                self._step_prefill |= seq.partial
                # drafts trimmed to the scheduled ones; new ones come after the step
                sd = c + n - seq.num_tokens
                seq.step_drafts = min(seq.drafts, sd) if sd > 0 else 0
                seq.drafts = 0
                seq.spec_pad = False
            i += 1
        return budget

    def _dissolve(self) -> None:
        """Materialise every cohort member so the exact loop can see them."""
        cohort = self.cohort
        if cohort.size:
            for seq in self.running:
                if seq.in_cohort:
                    cohort.leave(seq)
                    if self._leave_steady is not None:
                        self._leave_steady(seq)
                    self._explicit[seq.admit_no] = seq

    def total_computed(self) -> int:
        """Computed tokens summed over the running requests."""
        return self.cohort.computed_total + sum(s.computed for s in self._explicit.values())

    def scheduled_tokens(self, plan: StepPlan) -> dict[str, int]:
        """Every request the step scheduled, cohort members included (for checks; O(n))."""
        out = {s.request_id: n for s, n in plan.scheduled}
        if plan.cohort_tokens:
            for s in self.running:
                if s.in_cohort:
                    out[s.request_id] = 1
        return out

    def _victim(self) -> Sequence:
        if self.config.policy == "priority":
            # vLLM: max over (priority, arrival_time); a live server stamps arrival_time as
            # requests come, so among equal trace timestamps the last one added goes first
            return max(self.running, key=lambda r: (r.priority, r.arrival_s, r.index))
        return self.running[-1]

    def _preempt(self, victim: Sequence, plan: StepPlan) -> None:
        """Recompute (vLLM v1): drop the KV. Swap (vLLM v0 ``--preemption-mode swap``): copy
        it to host memory over PCIe and back at re-admission, keeping the computed tokens."""
        self._explicit.pop(victim.admit_no, None)
        if self.config.preemption_mode == "swap" and victim.computed:
            victim.swapped = victim.computed
            self.transfer_s += victim.held * self.config.swap_s_per_block
        self.pool.free(victim)
        victim.computed = 0
        victim.drafts = victim.step_drafts = 0  # vLLM drops a preempted request's drafts
        victim.preemptions += 1
        victim.status = "preempted"
        self.preemptions += 1
        plan.preempted.append(victim)
        self._push_waiting(victim, front=True)

    def head_admissible(self, budget: int) -> bool:
        """Would the waiting loop admit its head now? (No state changes.)"""
        if budget <= 0 or self.num_waiting == 0 or len(self.running) >= self.config.max_num_seqs:
            return False
        seq = self._peek()
        return self._admission_chunk(seq, self._resume_point(seq), budget) > 0

    def _resume_point(self, seq: Sequence) -> Hit:
        """Where a waiting request restarts: its swapped-out KV, else a prefix-cache hit."""
        if seq.swapped:
            return Hit((), None, 0, seq.swapped, 0)  # all its blocks come back fresh
        return self.pool.lookup(seq)

    def _admission_chunk(self, seq: Sequence, hit: Hit, budget: int) -> int:
        """Tokens the head would be admitted with (0 = refused), checks only."""
        cfg = self.config
        pool = self.pool
        n = seq.num_tokens - hit.tokens
        if self.spec is not None:
            budget = min(budget, self._inb - self._ds)
            if not self._step_prefill:  # vLLM pads only when no running prefill chunk ran
                after = self._step_running > 0
                n = pad_admission(self.spec, seq, hit.tokens, n, budget, after, cfg.max_model_len)
            else:
                seq.spec_pad = False
            if n == 0:
                return 0
        if 0 < self._threshold < n:
            n = self._threshold
        if not cfg.enable_chunked_prefill and n > budget:
            return 0
        n = min(n, budget)
        if cfg.scheduler_reserve_full_isl:
            full = min(seq.num_tokens, cfg.max_model_len)
            # cap=True: vLLM's apply_admission_cap (window groups' per-request cap)
            if pool.blocks_needed(seq, full, hit, cap=True) > pool.num_free:
                return 0
        slots = hit.tokens + n
        if self._look:
            slots = min(slots + self._look, cfg.max_model_len)
        if pool.blocks_needed(seq, slots, hit) > pool.num_free:
            return 0
        return n

    def _admit(self, plan: StepPlan, budget: int, now: float) -> int:
        while budget > 0 and self.num_waiting and len(self.running) < self.config.max_num_seqs:
            if self.spec is not None and self._inb <= self._ds:
                break
            seq = self._peek()
            hit = self._resume_point(seq)
            n = self._admission_chunk(seq, hit, budget)
            if n == 0:
                break
            self._admit_one(plan, seq, hit, n, now)
            budget -= n
            self._inb -= n + self._ds
        return budget

    def _admit_one(self, plan: StepPlan, seq: Sequence, hit: Hit, n: int, now: float) -> None:
        """Move the head of the queue into the batch with ``n`` tokens (already checked)."""
        pool = self.pool
        slots = hit.tokens + n
        if self.spec is not None:
            slots = min(slots + self._look, self.config.max_model_len)
            seq.drafts = 0
            seq.step_drafts = n - 1 if seq.spec_pad else 0
        pool.allocate(seq, slots, hit)
        if seq.swapped:
            self.transfer_s += pool.layout.blocks(seq.swapped) * self.config.swap_s_per_block
            seq.swapped = 0
        seq.computed = hit.tokens
        pool.cache(seq, hit.tokens + n)
        self._pop_waiting()
        self._admits += 1
        seq.admit_no = self._admits
        self.running.append(seq)
        self._explicit[seq.admit_no] = seq
        if seq.cached_prompt_tokens < 0:
            # First admission: the prefix-cache lookup counts only here (vLLM counts fresh
            # requests; a re-admission always follows a preemption or a swap-out).
            seq.cached_prompt_tokens = min(hit.tokens, seq.prompt)
            seq.first_scheduled_s = now
            pool.counters.lookups_tokens += seq.num_tokens
            pool.counters.hit_tokens += hit.tokens
            plan.hit_tokens += hit.tokens
        seq.status = "running"
        plan.scheduled.append((seq, n))
        plan.new_admissions += 1

    def take_transfer_s(self) -> float:
        """PCIe seconds of swap traffic since the last step (added to that step's time)."""
        t, self.transfer_s = self.transfer_s, 0.0
        return t

    # ------------------------------------------------------------------ update
    def cohort_step_done(self) -> list[Sequence]:
        """End one cohort decode step: advance the clock, return the members that finished."""
        cohort = self.cohort
        ending = cohort.due(FINISH)
        cohort.clock += 1
        for seq in ending:
            cohort.leave(seq)
            if self._leave_steady is not None:
                self._leave_steady(seq)
        return ending

    def finish_cohort_step(self, t_end: float) -> None:
        """The last step of an engine span: advance the cohort, finish whoever is done."""
        self._finish(self.cohort_step_done(), t_end)

    def _finish(self, done: list[Sequence], t_end: float) -> None:
        """Free finished requests in running order (vLLM's order of outputs)."""
        if len(done) > 1:
            done.sort(key=lambda s: s.admit_no)
        for seq in done:
            seq.status = "finished"
            seq.finish_s = t_end
            self._explicit.pop(seq.admit_no, None)
            self.pool.free(seq)
            self.running.remove(seq)
        self.finished.extend(done)

    def update(self, plan: StepPlan, t_end: float) -> list[Sequence]:
        """Sample one token for every request whose computed tokens caught up; finish them."""
        done: list[Sequence] = []
        cohort = self.cohort
        joins: list[Sequence] = []
        spec = self.spec
        if spec is not None:
            self._verify_step += 1
            self.step_accepted = {}
        for seq, _n in plan.scheduled:
            if seq.computed < seq.num_tokens:
                continue  # a prefill chunk: no token sampled
            if spec is None:
                seq.outputs += 1
            else:
                a = verify(spec, seq, self._verify_step)
                if a >= 0:
                    self.step_accepted[seq.request_id] = a
                self.pool.cache(seq, seq.computed)  # vLLM hashes what the step made final
            if seq.first_token_s != seq.first_token_s:  # NaN: first token
                seq.first_token_s = t_end
            if seq.outputs >= seq.max_tokens:
                done.append(seq)
            else:
                joins.append(seq)
        if plan.cohort_tokens:
            done.extend(self.cohort_step_done())
        if spec is not None:
            for seq in joins:
                seq.drafts = spec.num_speculative_tokens  # the drafter proposed after the step
        self._finish(done, t_end)
        for seq in joins if self.use_cohort else ():
            if seq.computed == seq.num_tokens - 1:
                del self._explicit[seq.admit_no]
                cohort.join(seq)
        return done
