"""Per-step bytes and FLOPs: expected distinct experts, KV read of sparse and hybrid attention."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.plan.step_costs import (
    DSV32_INDEX_TOPK,
    attention_flops,
    distinct_experts,
    kv_read_bytes,
    step_costs,
)
from kvscope.specs.registry import load_model


def test_one_token_touches_exactly_top_k_experts() -> None:
    assert distinct_experts(256, 8, 1) == pytest.approx(8)
    assert distinct_experts(8, 2, 1) == pytest.approx(2)


def test_deepseek_v3_batch_64_touches_most_experts() -> None:
    # 256 experts, top-8, 64 tokens: 256 x (1 - (248/256)^64) = 222.44 experts per layer.
    assert distinct_experts(256, 8, 64) == pytest.approx(222.44, abs=0.01)


@given(st.integers(2, 512), st.integers(1, 16), st.integers(1, 10_000), st.integers(1, 1000))
def test_distinct_experts_grows_with_tokens_and_stays_in_range(
    e: int, k: int, t: int, more: int
) -> None:
    k = min(k, e)
    a = float(distinct_experts(e, k, t))
    b = float(distinct_experts(e, k, t + more))
    assert k - 1e-9 <= a <= b <= e + 1e-9
    assert a <= k * t + 1e-9


def test_dense_model_constants_match_the_checkpoint() -> None:
    c = step_costs(load_model("meta-llama/Llama-3.1-8B"))
    # 16.06 GB = body + untied head (1.05 GB) + embedding (1.05 GB) + norms.
    assert c.head_bytes == 128256 * 4096 * 2
    assert c.body_bytes + c.head_bytes + c.replicated_bytes == pytest.approx(15.01e9, rel=1e-3)
    assert not c.is_moe and not c.fp8_compute


def test_v32_sparse_attention_reads_all_indexer_keys_but_top_2048_latents() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3.2")
    ctx = 100_000
    # fp8 cache: 656 B packed latent + 132 B indexer key per token per layer (vLLM layout).
    expected = m.num_layers * (DSV32_INDEX_TOPK * 656 + ctx * 132)
    assert kv_read_bytes(m, ctx, "fp8") == pytest.approx(expected)
    # Below the top-k the whole latent cache is read.
    assert kv_read_bytes(m, 1000, "fp8") == pytest.approx(m.num_layers * 1000 * (656 + 132))


def test_mla_latent_is_read_whole_on_every_tp_rank() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    assert kv_read_bytes(m, 4096, "bfloat16", tp=8) == kv_read_bytes(m, 4096, "bfloat16", tp=1)
    assert kv_read_bytes(m, 4096, "bfloat16") == 61 * 576 * 2 * 4096


def test_gqa_heads_split_over_tp_until_one_per_rank() -> None:
    m = load_model("meta-llama/Llama-3.1-8B")
    full = kv_read_bytes(m, 1000, "bfloat16")
    assert kv_read_bytes(m, 1000, "bfloat16", tp=4) == full / 4
    assert kv_read_bytes(m, 1000, "bfloat16", tp=16) == full / 8  # max(1, 8 // 16) = 1 head


def test_decode_attention_flops_llama() -> None:
    m = load_model("meta-llama/Llama-3.1-8B")
    # 32 layers x 32 heads x 2 x (128 + 128) FLOPs per key.
    assert attention_flops(m, 1000) == 32 * 32 * 2 * 256 * 1000


def test_prefill_attention_is_causal_on_average() -> None:
    m = load_model("meta-llama/Llama-3.1-8B")
    # 2048 queries over a mean of 1024 keys each.
    assert attention_flops(m, 2048, 2048) == 2048 * 32 * 32 * 2 * 256 * 1024


def test_expert_parallel_gpu_reads_its_share_of_all_experts_at_large_batch() -> None:
    from kvscope.plan.step_costs import per_gpu_weight_bytes

    m = load_model("deepseek-ai/DeepSeek-V3")
    c = step_costs(m)
    routed = m.weight_bytes["routed_experts"]
    # 8 replicas x 512 tokens touch every one of the 256 experts: each GPU streams its 32.
    ep = per_gpu_weight_bytes(c, 1, 1, 8, 512, 512 * 8)
    non_expert = c.body_bytes + c.replicated_bytes + c.head_bytes + 512 * c.row_bytes
    assert ep - non_expert == pytest.approx(routed / 8, rel=1e-6)
    # One token on one GPU without EP streams its 8 routed experts in each of 58 layers.
    one = per_gpu_weight_bytes(c, 1, 1, 1, 1, 1) - c.body_bytes - c.replicated_bytes
    assert one - c.head_bytes - c.row_bytes == pytest.approx(8 * 58 * c.expert_bytes)
