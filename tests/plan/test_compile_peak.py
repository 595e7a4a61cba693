"""A cold torch.compile's peak in vLLM's profiling pass (:mod:`kvscope.plan.compile_peak`).

Published figures: the "peak activation" and "Estimated CUDA graph memory" lines of seven vLLM
0.29.0 starts, six of them compiling into an empty cache ("Compiling a graph for compile range
(1, T) takes ... s") and one loading the compiled graph ("Directly load AOT compilation").
The transient pass is the logged peak minus the logged graph estimate (both rounded to 0.01 GiB).
"""

from __future__ import annotations

import dataclasses

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.compile_peak import cold_compile_peak_bytes, compiles_cold
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import Case, load_cases, offline_hub

CASES = {c.id: c for c in load_cases()}

#: row id -> (logged "peak activation" GiB, logged "Estimated CUDA graph memory" GiB)
COLD_STARTS = {
    # yuanjuju/vllm-lab phase3/results, Qwen3-8B (and its AWQ build) on a 48 GB RTX 4090
    "lab4090-qwen3-8b-compiled-0.29": (1.28, 0.07),  # phase5_v029_graph_base_20261010.log
    "lab4090-qwen3-8b-mnbt512-0.29": (1.23, 0.07),  # token_budget_server_512_20260923.log
    "lab4090-qwen3-8b-awq-compiled-0.29": (1.29, 0.08),  # phase5_v029_graph_awq_20261010.log
    # samilazrak/vllm-optimization-lab results/raw, Qwen3-14B (and AWQ) on an L40S
    "vllm-l40s-qwen3-14b-0.29": (1.99, 0.51),  # base.startup.log, T = 2,048
    "vllm-l40s-qwen3-14b-awq-0.29": (2.02, 0.54),  # awq.startup.log, T = 2,048
    "vllm-l40s-qwen3-14b-awq-tuned-0.29": (2.2, 0.6),  # tuned.startup.log, T = 8,192
}
#: kv_server_constrained_20260923-190333.log: same host, model and flags as the first cold
#: start above, compiled graph loaded from the cache.
WARM_START = ("lab4090-qwen3-8b-blocks1024-0.29", (0.44, 0.07))


def _plan(row_id: str, cold: bool):  # type: ignore[no-untyped-def]
    row = {**CASES[row_id].row, "cold_compile": "1" if cold else "0"}
    return Case(row).plan()


@pytest.mark.parametrize("row_id", sorted(COLD_STARTS))
def test_cold_starts_log_the_compile_peak(row_id: str) -> None:
    peak, graphs = COLD_STARTS[row_id]
    assert CASES[row_id].row["cold_compile"] == "1"
    planned = _plan(row_id, cold=True).activation_peak_gib
    # two figures rounded to 0.01 GiB each
    assert planned == pytest.approx(peak - graphs, abs=0.015)
    # without the compile the pass alone is far below what these starts logged
    assert _plan(row_id, cold=False).activation_peak_gib < peak - graphs - 0.35


def test_the_warm_start_of_the_same_configuration_logs_the_pass_alone() -> None:
    row_id, (peak, graphs) = WARM_START
    assert CASES[row_id].row["cold_compile"] == "0"
    warm = _plan(row_id, cold=False).activation_peak_gib
    assert warm == pytest.approx(peak - graphs, abs=0.15)
    assert _plan(row_id, cold=True).activation_peak_gib > peak - graphs + 0.8


def test_benchmark_arguments_of_the_embedding_kernel() -> None:
    # Qwen3-8B: vocabulary 151,936 x hidden 4,096 in bf16, plus two [T, hidden] outputs
    with offline_hub():
        qwen = load_model("Qwen/Qwen3-8B")
    assert cold_compile_peak_bytes(qwen, Parallelism(), 512) == 1_253_048_320
    # under TP the rank holds ceil(V / (64 tp)) x 64 rows: 75,968 at TP2
    assert cold_compile_peak_bytes(qwen, Parallelism(tp=2), 0) == 75_968 * 4096 * 2


def test_the_compile_peak_is_a_peak_of_its_own_not_an_addition() -> None:
    # H100 defaults (8,192 tokens, 1,024 sampler rows): the forward pass and the sampler peak
    # above the 1.1 GiB of benchmark tensors, so a cold start logs the same figure
    llama = load_model("meta-llama/Llama-3.1-8B")
    gpu = get_gpu("H100")
    warm = plan_memory(llama, gpu, Parallelism(), EngineConfig(engine_version="0.29.0"))
    eng = EngineConfig(engine_version="0.29.0", cold_compile=True)
    cold = plan_memory(llama, gpu, Parallelism(), eng)
    assert cold.kv_tokens == warm.kv_tokens
    assert warm.activation_peak_gib * GIB > cold_compile_peak_bytes(llama, Parallelism(), 8192)
    # a small budget: the compile's peak replaces the pass's, one for one
    small = EngineConfig(engine_version="0.29.0", max_num_batched_tokens=512, max_num_seqs=8)
    p_warm = plan_memory(llama, gpu, Parallelism(), small)
    p_cold = plan_memory(llama, gpu, Parallelism(), dataclasses.replace(small, cold_compile=True))
    expected = cold_compile_peak_bytes(llama, Parallelism(), 512) / GIB
    assert p_cold.activation_peak_gib == pytest.approx(expected)
    assert p_warm.kv_cache_gib - p_cold.kv_cache_gib == pytest.approx(
        expected - p_warm.activation_peak_gib, abs=1e-6
    )


def test_where_the_engine_does_not_compile_there_is_no_compile_peak() -> None:
    llama = load_model("meta-llama/Llama-3.1-8B")
    v4 = load_model("deepseek-ai/DeepSeek-V4-Flash")
    cold = EngineConfig(engine_version="0.29.0", cold_compile=True)
    assert compiles_cold(llama, cold)
    assert not compiles_cold(llama, dataclasses.replace(cold, cold_compile=False))
    assert not compiles_cold(llama, dataclasses.replace(cold, enforce_eager=True))
    assert not compiles_cold(llama, cold, pp_rank=1)  # no embedding on later stages
    # combo-kernel benchmarking is on from 0.11.1 (torch 2.9); 0.11.0 pinned torch 2.8
    assert not compiles_cold(llama, dataclasses.replace(cold, engine_version="0.11.0"))
    assert compiles_cold(llama, dataclasses.replace(cold, engine_version="0.11.1"))
    # DeepSeek V4 runs breakable CUDA graphs without torch.compile from 0.23.0
    assert not compiles_cold(v4, cold)
    assert compiles_cold(v4, dataclasses.replace(cold, engine_version="0.22.0"))
    # a vision-language wrapper embeds the tokens outside the compiled graph
    with offline_hub():
        gemma = load_model("google/gemma-3-4b-it")
    assert gemma.vision_params and not compiles_cold(gemma, cold)


def test_sglang_refuses_the_assumption() -> None:
    with pytest.raises(KvscopeError, match="--cold-compile"):
        EngineConfig(engine="sglang", cold_compile=True)
