"""The scheduler's flags and its per-step output: ``SchedulerConfig`` (vLLM ``EngineArgs`` names)
and ``StepPlan`` (vLLM ``SchedulerOutput``, reduced). Units: tokens, requests, seconds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kvscope.errors import KvscopeError
from kvscope.sim.sequence import Sequence

Policy = Literal["fcfs", "priority"]


@dataclass(frozen=True)
class SchedulerConfig:
    """Engine flags the scheduler obeys (names as vLLM's ``EngineArgs``).

    Defaults: ``max_num_seqs`` 256 and ``max_num_batched_tokens`` 8192 are what ``vllm
    serve`` uses on data-centre GPUs (vllm/engine/arg_utils.py, usage-context defaults;
    ``vllm serve`` startup logs); ``scheduler_reserve_full_isl`` and
    ``watermark`` 0 are vllm/config/scheduler.py defaults in 0.33.0.
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 131072
    enable_chunked_prefill: bool = True
    policy: Policy = "fcfs"
    long_prefill_token_threshold: int = 0
    scheduler_reserve_full_isl: bool = True
    preemption_mode: Literal["recompute", "swap"] = "recompute"
    swap_s_per_block: float = 0.0  # PCIe seconds to move one block (swap mode)
    # batches in flight (vLLM ``VllmConfig.max_concurrent_batches``): window groups' admission
    # cap reserves for this many token budgets; 2 under async scheduling (on by default on
    # GPUs from 0.26.0), 1 with it off, as in the oracle's hand-built scheduler
    max_concurrent_batches: int = 1

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                flag = name.replace("_", "-")
                raise KvscopeError(f"--{flag} must be >= 1, got {getattr(self, name)}.")


@dataclass
class StepPlan:
    """What one ``schedule()`` call decided (vLLM ``SchedulerOutput``, reduced)."""

    scheduled: list[tuple[Sequence, int]] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_tokens: int = 0
    context_tokens: int = 0  # KV tokens attended by the batch (sum of computed + new)
    hit_tokens: int = 0
    new_admissions: int = 0
    cohort_tokens: int = 0  # decodes of the cohort's members (not listed in ``scheduled``)
    draft_tokens: int = 0  # speculative drafts verified this step (in the tokens above)
    proposers: int = 0  # requests that sample this step (the drafter proposes for each)

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens
