"""SGLang-like scheduling: prefill-first batches, reservation-based admission, retraction.

Differences from vLLM's scheduler that this mode models (SGLang's ``scheduler.py``,
``schedule_policy.py`` ``PrefillAdder`` and ``schedule_batch.py`` ``retract_decode``):

* A step is *either* a prefill (extend) batch *or* a decode batch. New requests and the
  in-progress chunked prefill go first; running decodes wait while a prefill batch runs.
* Admission reserves future decode tokens: a request enters only if its uncached prompt plus
  ``min(max_new_tokens, 4096)`` fits in the free KV (free + evictable cached), after every
  running request's remaining ``min(max_new - generated, 4096) x new_token_ratio``. The ratio
  starts at 0.7 and decays by 0.0001 per decode step down to 0.1 (kvscope's reading of
  SGLang's ``init_new_token_ratio`` / ``min_new_token_ratio`` / decay defaults).
* One chunked prefill at a time, ``max_num_batched_tokens`` (``--chunked-prefill-size``) per
  batch; the prefix cache is the radix tree (here: the paged pool with page size
  ``--block-size``; SGLang's default page size is 1 token).
* When a decode step cannot get its slots, requests are *retracted*: fewest generated tokens
  first (ties: longest prompt), until ``20 x running`` token slots are free
  (``retract_decode_steps``); their private KV is dropped (not inserted into the cache), they
  return to the front of the queue, and ``new_token_ratio`` is re-estimated from the
  survivors.

Not modelled: mixed chunked prefill (``--enable-mixed-chunk``), the overlap scheduler,
longest-prefix-match queue ordering, DP attention.
"""

from __future__ import annotations

from kvscope.sim.allocator import BlockAllocator
from kvscope.sim.scheduler import Scheduler, SchedulerConfig, StepPlan
from kvscope.sim.sequence import Sequence

#: SGLang's cap on max_new_tokens when reserving memory (``CLIP_MAX_NEW_TOKENS``).
CLIP_MAX_NEW_TOKENS = 4096
#: Decode steps of headroom a retraction frees (``global_config.retract_decode_steps``).
RETRACT_DECODE_STEPS = 20
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.1
NEW_TOKEN_RATIO_DECAY = 0.0001


class SglangScheduler(Scheduler):
    """Scheduler with SGLang's batch composition, admission and retraction."""

    def __init__(self, config: SchedulerConfig, pool: BlockAllocator) -> None:
        super().__init__(config, pool)
        self.use_cohort = False  # no decode cohort: so no engine spans either
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.retractions = 0

    def schedule(self, now: float) -> StepPlan:
        self._dissolve()
        plan = StepPlan()
        self._prefill_batch(plan, now)
        if not plan.scheduled:
            self._decode_batch(plan)
        for seq, n in plan.scheduled:
            if n == 1 and seq.outputs > 0 and seq.computed == seq.num_tokens - 1:
                plan.decode_tokens += 1
            else:
                plan.prefill_tokens += n
            seq.computed += n
            plan.context_tokens += seq.computed
        return plan

    # ------------------------------------------------------------------ prefill
    def _reserved_tokens(self) -> float:
        r = self.new_token_ratio
        return sum(min(s.max_tokens - s.outputs, CLIP_MAX_NEW_TOKENS) * r for s in self.running)

    def _prefill_batch(self, plan: StepPlan, now: float) -> None:
        pool = self.pool
        cfg = self.config
        bs = pool.block_size
        rem_chunk = cfg.max_num_batched_tokens
        rem_total = pool.num_free * bs - self._reserved_tokens()
        chunked = next((s for s in self.running if s.computed < s.num_tokens - 1), None)
        if chunked is not None:  # the in-progress chunked prefill continues first
            n = min(chunked.num_tokens - chunked.computed, rem_chunk)
            if pool.allocate(chunked, chunked.computed + n):
                pool.cache(chunked, chunked.computed + n)
                plan.scheduled.append((chunked, n))
            return
        while self.num_waiting and len(self.running) < cfg.max_num_seqs and rem_chunk > 0:
            seq = self._peek()
            hit = self._resume_point(seq)
            extend = seq.num_tokens - hit.tokens
            reserve = min(seq.max_tokens - seq.outputs, CLIP_MAX_NEW_TOKENS)
            if extend + reserve >= rem_total:
                break
            n = min(extend, rem_chunk)
            if pool.blocks_needed(seq, hit.tokens + n, hit) > pool.num_free:
                break
            self._admit_one(plan, seq, hit, n, now)
            rem_total -= extend + reserve * self.new_token_ratio
            rem_chunk -= n
            if n < extend:
                break  # one chunked request per batch

    # ------------------------------------------------------------------ decode
    def _decode_batch(self, plan: StepPlan) -> None:
        pool = self.pool
        decoders = [s for s in self.running if s.computed == s.num_tokens - 1]
        need = sum(pool.blocks_needed(s, s.computed + 1) for s in decoders)
        if need > pool.num_free:
            decoders = self._retract(decoders, plan)
        for seq in decoders:
            if pool.allocate(seq, seq.computed + 1):
                pool.cache(seq, seq.computed + 1)
                plan.scheduled.append((seq, 1))
        self.new_token_ratio = max(
            MIN_NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY
        )

    def _retract(self, decoders: list[Sequence], plan: StepPlan) -> list[Sequence]:
        pool = self.pool
        order = sorted(decoders, key=lambda s: (s.outputs, -s.prompt), reverse=True)
        first = True
        while len(order) > 1 and (
            first or pool.num_free * pool.block_size < len(order) * RETRACT_DECODE_STEPS
        ):
            first = False
            victim = order.pop()
            self.running.remove(victim)
            self._explicit.pop(victim.admit_no, None)
            pool.free(victim, keep_private=False)
            victim.computed = 0
            victim.preemptions += 1
            victim.status = "preempted"
            self.preemptions += 1
            self.retractions += 1
            plan.preempted.append(victim)
            self._push_waiting(victim, front=True)
        done = sum(s.outputs for s in order)
        budget = sum(s.max_tokens for s in order) or 1
        self.new_token_ratio = min(1.0, (done + RETRACT_DECODE_STEPS * len(order)) / budget)
        return order
