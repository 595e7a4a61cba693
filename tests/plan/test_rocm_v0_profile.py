"""vLLM V0 starts on MI300X whose logs print the profiler's budget: the planner's torch side
(weights plus activation peak) matches the logged ``peak_torch_memory``, so the planned-high
KV pool is the memory outside torch alone (RCCL, hipBLASLt, the HIP runtime), which no engine
rule sizes (benchmarks/RESULTS.md, "Issue 17 rows: ROCm V0 memory outside torch").

The figures are the logs' own "Memory profiling results" lines (GiB), printed by the
0.6.4-style profiler: ``peak_torch_memory`` is the caching allocator's allocated peak,
weights included; ``non_torch_memory`` is device memory in use after ``empty_cache`` less
torch's live tensors (vllm/worker/worker.py ``determine_num_available_blocks`` of 0.6.4.post1).
"""

from __future__ import annotations

import pytest

from .log_cases import load_cases

CASES = {c.id: c for c in load_cases()}

#: row id: (peak_torch_memory, non_torch_memory, kv_cache_size) as the row's log prints them.
PRINTED = {
    # AUGMXNT/MI300-testing inference-vllm-vs-vllm-rocm.ipynb, 8x MI300X, ROCm/vllm build
    # 0.6.4.dev5+g4bba0922 with NCCL_MIN_NCHANNELS=112 and chunked prefill (512 tokens)
    "vllm-mi300x-llama31-8b-tp8-chunked": (3.09, 9.32, 160.37),
    # AUGMXNT/llm-tracker.info-vault "_TOORG/vLLM MI300X vs H100.md", 1x MI300X, 70B with
    # dynamic FP8 weights, 32,768-token profile pass with 4,096 sequences
    "vllm-mi300x-llama31-70b-fp8-tp1": (86.79, 6.07, 95.28),
}

#: The same notebook's start of the row's configuration without chunked prefill
#: (131,072-token profile pass) on build 0.6.4.dev5: peak_torch_memory=7.24GiB; the row
#: itself (build 0.6.4.dev9) prints no profile line.
PEAK_TORCH_131K_TP8 = 7.24

#: Logged figures carry two decimals; the activation estimate is within 0.15 GiB of them.
TOL_GIB = 0.15


@pytest.mark.parametrize("row_id", sorted(PRINTED))
def test_weights_plus_activation_peak_is_the_logged_torch_peak(row_id: str) -> None:
    plan = CASES[row_id].plan()
    peak_torch, _, _ = PRINTED[row_id]
    assert plan.weights_gib + plan.activation_peak_gib == pytest.approx(peak_torch, abs=TOL_GIB)


def test_torch_peak_of_the_131k_profile_pass_on_eight_mi300x() -> None:
    plan = CASES["vllm-mi300x-llama31-8b-tp8-131k"].plan()
    total = plan.weights_gib + plan.activation_peak_gib
    assert total == pytest.approx(PEAK_TORCH_131K_TP8, abs=TOL_GIB)


@pytest.mark.parametrize("row_id", sorted(PRINTED))
def test_the_planned_surplus_is_the_unmodelled_memory_outside_torch(row_id: str) -> None:
    # The KV pool is planned off by exactly what the log shows outside torch beyond the
    # planner's figure (now the NVIDIA-measured one: 9.07 GiB a GPU over at TP8, 5.82 GiB at
    # TP1); a change that moved the torch side or the budget to absorb it would break this.
    plan = CASES[row_id].plan()
    _, non_torch, kv_logged = PRINTED[row_id]
    surplus = plan.kv_cache_gib - kv_logged
    assert surplus == pytest.approx(non_torch - plan.non_torch_gib, abs=TOL_GIB)
