"""vLLM and SGLang budget rules: defaults, versions, and block arithmetic from logged figures."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.plan.activation import activation_peak
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.sglang_budget import default_mem_fraction_static, dsv4_bytes_per_full_token
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

H100 = get_gpu("H100")
LLAMA = load_model("meta-llama/Llama-3.1-8B")


def vllm(version: str = "0.19.0", **kw):  # type: ignore[no-untyped-def]
    return EngineConfig(engine="vllm", engine_version=version, **kw)


@pytest.mark.parametrize(
    ("model", "par", "tokens", "seqs", "logged"),
    # "torch peak memory increase" of vLLM 0.19 on H100 (llm-d-planner results_raw.csv).
    [
        ("meta-llama/Llama-3.1-8B", Parallelism(), 8192, 1024, 1.89),
        ("Qwen/Qwen2.5-7B-Instruct", Parallelism(), 8192, 1024, 2.21),
        ("mistralai/Mixtral-8x7B-v0.1", Parallelism(tp=2), 8192, 1024, 1.21),
        ("Qwen/Qwen3-30B-A3B", Parallelism(), 8192, 1024, 2.68),
        ("deepseek-ai/DeepSeek-V2-Lite", Parallelism(), 8192, 1024, 1.93),
    ],
)
def test_activation_peak_matches_profiled_figures(model, par, tokens, seqs, logged) -> None:  # type: ignore[no-untyped-def]
    peak = activation_peak(load_model(model), par, tokens, seqs).total_bytes / GIB
    assert peak == pytest.approx(logged, abs=0.1)


def test_first_pp_stage_runs_no_sampler() -> None:
    first = activation_peak(LLAMA, Parallelism(pp=2), 8192, 1024, last_stage=False)
    assert first.total_bytes / GIB == pytest.approx(1.10, abs=0.1)  # logged 1.10 GiB


@pytest.mark.parametrize(
    ("model", "kv", "avail_gib", "tokens"),
    # "Available KV cache memory" -> "GPU KV cache size" pairs from vLLM 0.19 logs.
    [
        ("meta-llama/Llama-3.1-8B", "auto", 58.11, 476_016),
        ("meta-llama/Llama-3.1-8B", "fp8", 58.11, 952_032),
        ("deepseek-ai/DeepSeek-V2-Lite", "auto", 43.61, 1_505_552),
        ("Qwen/Qwen2.5-7B-Instruct", "auto", 58.53, 1_096_000),
    ],
)
def test_tokens_from_available_memory(model: str, kv: str, avail_gib: float, tokens: int) -> None:
    eng = vllm(kv_cache_dtype=kv, max_model_len=8192, kv_cache_memory_bytes=int(avail_gib * GIB))
    plan = plan_memory(load_model(model), H100, Parallelism(), eng)
    # The log rounds the GiB figure to 0.01, i.e. +-0.005 GiB of blocks.
    assert plan.kv_tokens == pytest.approx(tokens, rel=0.0002)


def test_budget_is_a_fraction_of_total_memory() -> None:
    plan = plan_memory(LLAMA, H100, Parallelism(), vllm(gpu_memory_utilization=0.95))
    assert plan.budget_gib == pytest.approx(75.23, abs=0.01)  # logged "requested memory"


def test_cudagraph_estimate_subtracted_from_021_only() -> None:
    old = plan_memory(LLAMA, H100, Parallelism(), vllm("0.19.0"))
    new = plan_memory(LLAMA, H100, Parallelism(), vllm("0.21.0"))
    forced = plan_memory(LLAMA, H100, Parallelism(), vllm("0.21.0", cudagraph_memory=False))
    assert not old.cudagraph_subtracted and new.cudagraph_subtracted
    assert new.kv_cache_gib < old.kv_cache_gib
    assert forced.kv_cache_gib == pytest.approx(old.kv_cache_gib, abs=1e-6)


def test_logged_tokens_rule_by_version() -> None:
    # Not block-aligned max_model_len: >= 0.21 logs int(concurrency x L), earlier blocks x 16.
    old = plan_memory(LLAMA, H100, Parallelism(), vllm("0.19.0", max_model_len=10_001))
    new = plan_memory(
        LLAMA, H100, Parallelism(), vllm("0.33.0", max_model_len=10_001, cudagraph_memory=False)
    )
    assert old.kv_tokens == old.num_gpu_blocks * 16
    assert new.kv_tokens == int(new.num_gpu_blocks / 626 * 10_001)
    assert new.kv_tokens < new.num_gpu_blocks * 16


def test_pipeline_stages_take_the_minimum_block_count() -> None:
    plan = plan_memory(LLAMA, H100, Parallelism(pp=4), vllm())
    assert plan.num_gpu_blocks == min(r.num_gpu_blocks for r in plan.ranks)
    assert len(plan.ranks) == 4


@settings(max_examples=25, deadline=None)
@given(st.floats(0.5, 0.99), st.floats(0.5, 0.99))
def test_more_memory_never_means_fewer_tokens(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    p_lo = plan_memory(LLAMA, H100, Parallelism(), vllm(gpu_memory_utilization=lo))
    p_hi = plan_memory(LLAMA, H100, Parallelism(), vllm(gpu_memory_utilization=hi))
    assert p_hi.kv_tokens >= p_lo.kv_tokens
    assert p_hi.num_gpu_blocks * p_hi.block_bytes <= p_hi.kv_cache_gib * GIB + 1


@settings(max_examples=15, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]))
def test_mla_latent_is_not_split_by_tp(tp: int) -> None:
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    plan = plan_memory(v3, get_gpu("H200"), Parallelism(tp=max(tp, 8)), vllm())
    assert plan.kv_bytes_per_token == 61 * 576 * 2


def test_sglang_default_mem_fraction_static() -> None:
    # 0.4 series: table by TP (the QwQ-32B 4x L4 log prints 0.85 at TP4).
    assert default_mem_fraction_static(get_gpu("L4"), Parallelism(tp=4), (0, 4, 3)) == 0.85
    assert default_mem_fraction_static(H100, Parallelism(tp=8), (0, 4, 9)) == 0.81
    # 0.5 rule: (mem - reserved) / mem with reserved 9.5 + p/2 GB on 80 GB cards.
    frac = default_mem_fraction_static(H100, Parallelism(tp=8), (0, 5, 2))
    mem = H100.memory_bytes / 2**20
    assert frac == round((mem - 13.5 * 1024) / mem, 3)


@pytest.mark.parametrize(
    ("model", "old", "bpft"),
    [
        ("deepseek-ai/DeepSeek-V4-Flash", False, 7705.45),
        ("deepseek-ai/DeepSeek-V4-Pro", False, 10993.84),
        ("deepseek-ai/DeepSeek-V4-Flash", True, 15955.85),
        ("deepseek-ai/DeepSeek-V4-Pro", True, 23749.84),
    ],
)
def test_sglang_dsv4_bytes_per_full_token(model: str, old: bool, bpft: float) -> None:
    m = load_model(model)
    assert dsv4_bytes_per_full_token(m, tuple(range(m.num_layers)), old) == pytest.approx(
        bpft, abs=0.01
    )
