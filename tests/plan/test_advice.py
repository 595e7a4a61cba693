"""Advice: the figures re-run the engine's arithmetic, and the command uses real flags only."""

from __future__ import annotations

import dataclasses

import pytest

from kvscope.plan.advice import advise, largest_max_model_len
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

from .log_cases import DATA

#: Flags that exist in vLLM's EngineArgs / `vllm serve` and SGLang's ServerArgs.
VLLM_FLAGS = {
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--data-parallel-size",
    "--enable-expert-parallel",
    "--gpu-memory-utilization",
    "--max-model-len",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--block-size",
    "--kv-cache-dtype",
    "--enforce-eager",
    "--quantization",
}
SGLANG_FLAGS = {
    "--model-path",
    "--tp",
    "--pp-size",
    "--dp-size",
    "--ep-size",
    "--mem-fraction-static",
    "--context-length",
    "--max-running-requests",
    "--chunked-prefill-size",
    "--kv-cache-dtype",
    "--quantization",
}


def _flags(cmd: str) -> set[str]:
    return {p for p in cmd.split() if p.startswith("--")}


def test_largest_max_model_len_is_the_edge_of_fitting() -> None:
    model, gpu = load_model("meta-llama/Llama-3.1-70B"), get_gpu("H100")
    par, eng = Parallelism(tp=2), EngineConfig(engine_version="0.19.0")
    plan = plan_memory(model, gpu, par, eng)
    assert not plan.fits  # 131072 tokens of 160 KiB do not fit beside 65 GiB of weights
    longest = largest_max_model_len(model, gpu, par, eng, plan)
    at = plan_memory(model, gpu, par, dataclasses.replace(eng, max_model_len=longest))
    past = plan_memory(model, gpu, par, dataclasses.replace(eng, max_model_len=longest + 1))
    assert at.fits and at.max_concurrency >= 1.0
    assert not past.fits


def test_fp8_kv_doubles_gqa_capacity_and_dp_attention_helps_mla() -> None:
    v2 = load_model("deepseek-ai/DeepSeek-V2-Lite")
    gpu, par, eng = get_gpu("H100"), Parallelism(tp=2), EngineConfig(max_model_len=32768)
    plan = plan_memory(v2, gpu, par, eng)
    adv = advise(v2, gpu, par, eng, plan, "deepseek-ai/DeepSeek-V2-Lite")
    assert adv.fp8_kv_gain == pytest.approx(2.0, rel=0.01)
    # Latent replicated under TP: two DP ranks hold two independent pools.
    assert adv.dp_attention_gain is not None and adv.dp_attention_gain > 1.5


def test_weights_that_do_not_fit_suggest_the_smallest_tp() -> None:
    model, gpu = load_model("meta-llama/Llama-3.1-70B"), get_gpu("H100")
    eng = EngineConfig(max_model_len=8192, gpu_memory_utilization=0.95)
    plan = plan_memory(model, gpu, Parallelism(), eng)
    adv = advise(model, gpu, Parallelism(), eng, plan, "meta-llama/Llama-3.1-70B")
    assert not plan.fits
    assert adv.smallest_fit == "--tensor-parallel-size 2 --pipeline-parallel-size 1"


def test_low_kv_share_warns() -> None:
    model, gpu = load_model("Qwen/Qwen2.5-72B-Instruct"), get_gpu("H100")
    eng = EngineConfig(engine_version="0.19.0", gpu_memory_utilization=0.95, max_model_len=8192)
    plan = plan_memory(model, gpu, Parallelism(tp=2), eng)
    adv = advise(model, gpu, Parallelism(tp=2), eng, plan, "Qwen/Qwen2.5-72B-Instruct")
    assert any("under 10%" in w for w in adv.warnings)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_command_line_uses_real_flags_only(engine: str) -> None:
    model, gpu = load_model("deepseek-ai/DeepSeek-V3"), get_gpu("H200")
    par = Parallelism(tp=8, ep=True)
    eng = EngineConfig(engine=engine, kv_cache_dtype="fp8", max_model_len=32768)
    plan = plan_memory(model, gpu, par, eng)
    cmd = advise(model, gpu, par, eng, plan, "deepseek-ai/DeepSeek-V3").command
    allowed = VLLM_FLAGS if engine == "vllm" else SGLANG_FLAGS
    assert _flags(cmd) <= allowed
    assert "--kv-cache-dtype" in cmd


def test_dp_attention_gain_for_v4_matches_the_published_b200_comparison() -> None:
    # vllm#51454 (8x B200, v0.25.0): DP8 + EP holds 7.7x the KV of TP8 + EP for
    # DeepSeek-V4-Flash at 1M context, because the single latent head is replicated under TP.
    flash, b200 = load_model("deepseek-ai/DeepSeek-V4-Flash"), get_gpu("B200")
    eng = EngineConfig(
        engine_version="0.25.0",
        gpu_memory_utilization=0.95,
        max_model_len=1 << 20,
        max_num_batched_tokens=8192,
        max_num_seqs=256,
        kv_cache_dtype="fp8",
        block_size=256,
    )
    tp = plan_memory(flash, b200, Parallelism(tp=8, ep=True), eng)
    adv = advise(flash, b200, Parallelism(tp=8, ep=True), eng, tp, "x")
    assert adv.dp_attention_gain == pytest.approx(7.7, rel=0.05)


def test_sglang_dp_attention_splits_the_tp_group() -> None:
    v3, h200 = load_model("deepseek-ai/DeepSeek-V3"), get_gpu("H200")
    eng = EngineConfig(engine="sglang", max_model_len=32768)
    par = Parallelism(tp=8, dp=8, ep=True, dp_attention=True)
    assert par.world_size == 8 and par.attn_tp == 1 and par.ep_size == 8
    plan = plan_memory(v3, h200, par, eng)
    tp_plan = plan_memory(v3, h200, Parallelism(tp=8, ep=True), eng)
    # Attention weights are whole on every rank, so each pool is smaller than under TP ...
    assert plan.weights_gib > tp_plan.weights_gib
    assert plan.kv_tokens < tp_plan.kv_tokens
    # SGLang's own default keeps more out of the static pool under DP attention (0.5.3+:
    # 3 x cuda_graph_max_bs x dp MiB more, and 1.5 x more above a 300 limit) ...
    assert plan.budget_fraction < tp_plan.budget_fraction - 0.1
    # ... yet at the same fraction eight independent pools hold far more in all (the latent
    # is not split by TP).
    same = dataclasses.replace(eng, mem_fraction_static=0.85)
    dp_same = plan_memory(v3, h200, par, same)
    tp_same = plan_memory(v3, h200, Parallelism(tp=8, ep=True), same)
    assert 8 * dp_same.kv_tokens > 4 * tp_same.kv_tokens
    cmd = advise(v3, h200, par, eng, plan, "deepseek-ai/DeepSeek-V3").command
    assert "--enable-dp-attention" in cmd and "--ep-size 8" in cmd


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_online_quantization_is_repeated_in_the_command(engine: str) -> None:
    # --quantization fp8 on a bf16 checkpoint quantizes at load time: the launch needs it too.
    h100 = get_gpu("H100")
    eng = EngineConfig(engine=engine, max_model_len=8192)
    online = load_model("meta-llama/Llama-3.1-8B", None, "fp8")
    plan = plan_memory(online, h100, Parallelism(), eng)
    cmd = advise(online, h100, Parallelism(), eng, plan, "meta-llama/Llama-3.1-8B").command
    assert "--quantization fp8" in cmd
    assert _flags(cmd) <= (VLLM_FLAGS if engine == "vllm" else SGLANG_FLAGS)
    # A pre-quantized checkpoint carries its quantization_config: no flag is written.
    gptq = load_model(str(DATA / "configs" / "llama-3.1-8b-w4a16.json"))
    plan = plan_memory(gptq, h100, Parallelism(), eng)
    assert "--quantization" not in advise(gptq, h100, Parallelism(), eng, plan, "x").command


@pytest.mark.parametrize("version", ["0.25.0", "0.31.0"])
def test_largest_max_model_len_is_the_edge_for_v4_with_mtp(version: str) -> None:
    # V4's window groups reserve the tokens in flight (two budgets under 0.26+'s async
    # scheduling) and the MTP layer joins them; 0.25's start-up check counts 1,051,776 B per
    # block where the pool strides 1,039,680 (kvscope.plan.dsv4_pool).
    from kvscope.plan.speculative import parse_vllm

    model, gpu = load_model("deepseek-ai/DeepSeek-V4-Flash"), get_gpu("H200")
    eng = EngineConfig(
        engine_version=version,
        kv_cache_dtype="fp8",
        gpu_memory_utilization=0.62,
        speculative=parse_vllm('{"method": "mtp", "num_speculative_tokens": 2}'),
    )
    par = Parallelism(tp=2)
    plan = plan_memory(model, gpu, par, eng)
    longest = largest_max_model_len(model, gpu, par, eng, plan)
    assert 0 < longest < model.max_position_embeddings
    at = plan_memory(model, gpu, par, dataclasses.replace(eng, max_model_len=longest))
    past = plan_memory(model, gpu, par, dataclasses.replace(eng, max_model_len=longest + 1))
    assert at.fits
    assert not past.fits
