"""Roofline bounds pinned to published figures, plus invariants (Hypothesis).

Published inputs: Llama-3.1-8B bf16 checkpoint 16.06 GB (HF safetensors total; 8.03 B
params x 2 B), embedding table 128256 x 4096 x 2 B = 1.05 GB, KV 128 KiB per token
(8 KV heads x 128 x 2 x 2 B x 32 layers); H100 SXM 3.35 TB/s and 989 TFLOP/s bf16 dense
(NVIDIA H100 Tensor Core GPU datasheet).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.plan.config import Parallelism
from kvscope.plan.roofline import (
    IDEAL,
    Efficiency,
    compute_bound_batch,
    decode_bound,
    kv_crossover_context,
    prefill_bound,
    roofline,
)
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

H100 = get_gpu("h100")
LLAMA8 = load_model("meta-llama/Llama-3.1-8B")
NAIVE_MS = 16.06e9 / 3.35e12 * 1e3  # weights-bytes / HBM bandwidth = 4.794 ms


def test_llama8b_batch1_decode_bound_is_weights_over_bandwidth() -> None:
    b = decode_bound(LLAMA8, H100, batch=1, context=1, eff=IDEAL)
    # The input embedding is gathered one row per token, not streamed: 16.06 - 1.05 GB.
    assert b.step_bound_s * 1e3 == pytest.approx((16.06e9 - 1.0506e9) / 3.35e12 * 1e3, rel=2e-3)
    assert 0.93 < b.step_bound_s * 1e3 / NAIVE_MS < 0.94
    assert b.limit == "memory"
    # At a 2K-token context the KV read (0.27 GB) nearly offsets the gathered table.
    b2k = decode_bound(LLAMA8, H100, batch=1, context=2048, eff=IDEAL)
    assert abs(b2k.step_bound_s * 1e3 / NAIVE_MS - 1) < 0.05
    assert b2k.tokens_per_s_per_gpu == pytest.approx(1 / b2k.step_s)


def test_efficiency_slows_the_memory_bound_by_its_factor() -> None:
    ideal = decode_bound(LLAMA8, H100, batch=1, context=1, eff=IDEAL)
    derated = decode_bound(LLAMA8, H100, batch=1, context=1, eff=Efficiency(hbm=0.8))
    assert derated.step_s == pytest.approx(ideal.step_s / 0.8)
    assert derated.step_bound_s == pytest.approx(ideal.step_bound_s)


def test_kv_overtakes_weights_at_the_published_kv_size() -> None:
    # 15.01 GB of activated weights / 128 KiB per token = 114.5 K tokens at batch 1.
    assert kv_crossover_context(LLAMA8, H100, batch=1) == pytest.approx(114_517, abs=2)
    assert kv_crossover_context(LLAMA8, H100, batch=16) == pytest.approx(114_517 / 16, abs=2)
    # fp8 KV halves the bytes per token, doubling the crossover.
    fp8 = kv_crossover_context(LLAMA8, H100, batch=16, kv_dtype="fp8")
    assert fp8 == pytest.approx(2 * 114_517 / 16, abs=2)


def test_sliding_window_layers_cap_the_kv_read() -> None:
    # gpt-oss-120b: half its layers keep a 128-token window, so KV read grows half as fast.
    m = load_model("openai/gpt-oss-120b")
    short = decode_bound(m, H100, batch=1, context=1024, eff=IDEAL).kv_bytes
    long = decode_bound(m, H100, batch=1, context=2048, eff=IDEAL).kv_bytes
    full_per_token = m.kv_bytes_per_token()  # full-history layers only (the 18 full ones)
    assert full_per_token == 18 * 8 * 64 * 2 * 2  # 8 KV heads x 64 dims x K,V x bf16
    assert long - short == pytest.approx(1024 * full_per_token)


def test_decode_turns_compute_bound_at_the_ridge_point() -> None:
    # Ridge of H100 bf16: 989e12 / 3.35e12 = 295 FLOP/byte; a bf16 dense decode does
    # 1 FLOP per weight byte per sequence, so compute wins from about 295 sequences.
    b = compute_bound_batch(LLAMA8, H100, context=1, eff=IDEAL)
    assert b is not None and abs(b - 295) <= 6
    # With 128 KiB/token of KV read per sequence at 32K context it never does.
    assert compute_bound_batch(LLAMA8, H100, context=32768, eff=IDEAL) is None


def test_moe_decode_reads_activated_experts_at_batch_1_and_all_at_large_batch() -> None:
    # Mixtral-8x7B: 12.88 B active / 46.70 B total params (model card); bf16.
    m = load_model("mistralai/Mixtral-8x7B-v0.1")
    emb = 32000 * 4096 * 2
    one = decode_bound(m, H100, batch=1, context=1, eff=IDEAL)
    assert one.weight_bytes == pytest.approx(12.88e9 * 2 - emb, rel=0.01)
    many = decode_bound(m, H100, batch=4096, context=1, eff=IDEAL)
    assert many.weight_bytes == pytest.approx(46.70e9 * 2 - emb, rel=0.01)


def test_deepseek_v3_fp8_uses_fp8_tensor_flops() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    r = roofline(m, H100, Parallelism(tp=8), batch=8, context=8192, prefill_chunk=8192)
    assert r.peak_flops == H100.fp8_flops
    # An 8K chunk touches every expert (84 GB per GPU, 31 ms at 80 % of 3.35 TB/s) but
    # needs 8192 x 2 x 37.5 B / 8 FLOPs per GPU (85 ms at 45 % of 1979 TF): compute-bound.
    assert r.prefill.limit == "compute"
    # A 1K chunk still reads every expert and is memory-bound: MoE prefill wants big chunks.
    assert prefill_bound(m, H100, Parallelism(tp=8), chunk=1024).limit == "memory"


def test_prefill_chunk_is_compute_bound_on_h100() -> None:
    p = prefill_bound(LLAMA8, H100, chunk=2048, eff=IDEAL)
    assert p.limit == "compute"
    # 2048 tokens x 2 x 7.5 B non-embedding params / 989 TF = 31.1 ms, attention on top.
    assert 31e-3 < p.step_bound_s < 36e-3


def test_pipeline_parallel_reports_latency_of_all_stages() -> None:
    par = Parallelism(tp=1, pp=2)
    b = decode_bound(LLAMA8, H100, par, batch=8, context=1024)
    assert b.token_latency_s == pytest.approx(2 * b.step_s)
    assert b.tokens_per_s_per_replica == pytest.approx(8 / b.token_latency_s)


@pytest.mark.parametrize("kwargs", [{"batch": 0}, {"context": 0}])
def test_bad_batch_or_context_is_a_user_error(kwargs: dict[str, int]) -> None:
    with pytest.raises(KvscopeError):
        decode_bound(LLAMA8, H100, **kwargs)


@pytest.mark.parametrize("hbm,flops", [(0.0, 0.5), (1.2, 0.5), (0.8, -1.0)])
def test_efficiency_out_of_range_is_rejected(hbm: float, flops: float) -> None:
    with pytest.raises(KvscopeError):
        Efficiency(hbm=hbm, flops=flops)


# ------------------------------------------------------------------ invariants
MODELS = [
    "meta-llama/Llama-3.1-8B",
    "Qwen/Qwen2.5-7B-Instruct",
    "mistralai/Mixtral-8x7B-v0.1",
    "deepseek-ai/DeepSeek-V2-Lite",
    "deepseek-ai/DeepSeek-V3.2",
    "openai/gpt-oss-20b",
    "deepseek-ai/DeepSeek-V4-Flash",
]
GPUS = ["h100", "a100", "l40s", "h200", "b200"]


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(MODELS),
    st.sampled_from(GPUS),
    st.integers(1, 256),
    st.integers(1, 200_000),
    st.integers(1, 50_000),
)
def test_decode_time_never_falls_as_context_grows(
    name: str, gpu: str, batch: int, ctx: int, more: int
) -> None:
    m, g = load_model(name), get_gpu(gpu)
    a = decode_bound(m, g, batch=batch, context=ctx)
    b = decode_bound(m, g, batch=batch, context=ctx + more)
    assert b.step_s >= a.step_s
    assert b.kv_bytes >= a.kv_bytes


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(MODELS),
    st.sampled_from(GPUS),
    st.integers(1, 512),
    st.integers(1, 512),
    st.integers(1, 65_536),
)
def test_bigger_batches_take_longer_but_never_lower_throughput(
    name: str, gpu: str, b1: int, extra: int, ctx: int
) -> None:
    m, g = load_model(name), get_gpu(gpu)
    a = decode_bound(m, g, batch=b1, context=ctx)
    b = decode_bound(m, g, batch=b1 + extra, context=ctx)
    assert b.step_s >= a.step_s
    assert b.tokens_per_s_per_replica >= a.tokens_per_s_per_replica * (1 - 1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(MODELS),
    st.sampled_from(GPUS),
    st.integers(1, 256),
    st.integers(1, 65_536),
    st.sampled_from([1, 2, 4]),
)
def test_more_tp_gpus_never_lower_the_aggregate_bandwidth_bound(
    name: str, gpu: str, batch: int, ctx: int, tp: int
) -> None:
    m, g = load_model(name), get_gpu(gpu)
    if m.first_attention.num_heads % (2 * tp):
        return
    small = decode_bound(m, g, Parallelism(tp=tp), batch, ctx, eff=IDEAL)
    big = decode_bound(m, g, Parallelism(tp=2 * tp), batch, ctx, eff=IDEAL)
    assert big.memory_bound_s <= small.memory_bound_s
    assert big.tokens_per_s_per_replica >= small.tokens_per_s_per_replica * (1 - 1e-12)
