"""vLLM's start-up refusal figures against public refusals: the KV memory one request needs and
the "estimated maximum model length" (``_check_enough_kv_cache_memory`` /
``estimate_max_model_len``, vllm/v1/core/kv_cache_utils.py of 0.15.0-0.23.0).

Given the available KV memory the log prints (rounded to 0.01 GiB), the planner's own
search (:func:`kvscope.plan.advice.largest_max_model_len`, what ``kvscope plan`` offers as
"Try --max-model-len N") must bracket the length vLLM printed: the search at the low end of
the rounding interval may not exceed it, the search at the high end may not fall short of it.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvscope.plan import memory
from kvscope.plan.advice import largest_max_model_len
from kvscope.plan.memory import MemoryPlan
from kvscope.specs.hardware import GIB

from . import log_cases
from .log_cases import load_cases

CASES = {c.id: c for c in load_cases()}

#: row id -> (logged available GiB, logged GiB needed, logged estimated maximum model length)
REFUSALS = {
    # t0mdicks0n/llm-self-hosting notes/kimi-k2.5-setup-log.md, "Issue 6": Kimi-K2.5 on 8x H100
    # TP8, vLLM 0.15.0, --max-model-len 16384: "Available KV cache memory: 0.64 GiB", "1.07 GiB
    # KV cache is needed", "the estimated maximum model length is 9664" (151 blocks of 64).
    "t0m-vllm-kimik25-8xh100-tp8-16k-refused": (0.64, 1.07, 9664),
    # vllm-project/vllm#44376 (comment of 2026-06-03): DeepSeek-V4-Flash on 2x GH200 TP2, vLLM
    # 0.22.0, max_model_len 30000: 5.44 GiB available, 6.66 GiB needed, "the estimated maximum
    # model length is 13528" (V4's window groups and compressed pools, not whole blocks).
    "gh44376-gh200-tp2-v4flash-refused": (5.44, 6.66, 13528),
}


def _plan_with_inputs(case: log_cases.Case, avail_gib: float) -> tuple[Any, ...]:
    """The row planned at ``avail_gib`` of KV memory, with the inputs it was planned from."""
    seen: list[tuple[Any, ...]] = []

    def recording(*args: Any) -> MemoryPlan:
        seen.append(args)
        return memory.plan_memory(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(log_cases, "plan_memory", recording)
        plan = case.plan(kv_cache_memory_bytes=int(avail_gib * GIB))
    return (*seen[0], plan)


@pytest.mark.parametrize("row", sorted(REFUSALS))
def test_refusal_states_the_logged_need(row: str) -> None:
    avail, needed, _ = REFUSALS[row]
    *_, plan = _plan_with_inputs(CASES[row], avail)
    assert not plan.fits
    assert plan.problem is not None and f"needs {needed:.2f} GiB" in plan.problem


@pytest.mark.parametrize("row", sorted(REFUSALS))
def test_longest_fitting_length_brackets_the_logged_estimate(row: str) -> None:
    avail, _, logged = REFUSALS[row]
    low = largest_max_model_len(*_plan_with_inputs(CASES[row], avail - 0.005))
    high = largest_max_model_len(*_plan_with_inputs(CASES[row], avail + 0.005))
    assert 0 < low <= logged <= high
    # the rounding interval spans at most a few blocks, so the bracket is tight
    assert high - low <= 0.02 * logged
