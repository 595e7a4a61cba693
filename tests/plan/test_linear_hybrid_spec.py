"""Speculative decoding on a Gated DeltaNet hybrid under vLLM: the MTP layer Qwen3.5 ships, the
conv rows and state blocks each drafted token adds (kvscope.plan.kv_layout, .drafter).

Published figures (waired-ai/waired-agent, docs/knowledges/20260917/0300-mtp-speculative-
decoding-vllm-and-ollama.md, vLLM 0.29.0 on one RTX PRO 4000 Blackwell, gpu_memory_utilization
0.85, fp8 KV cache, prefix caching on, max_model_len 262,144): Qwen3.5-0.8B with its MTP layer
drafting N = 1 / 2 tokens logged "Available KV cache memory" 16.05 / 15.94 GiB and 2,313,885 /
2,273,296 tokens (N = 0: 16.20 GiB, 2,758,256); Qwen3.5-4B logged attention block sizes of
1,056 / 1,056 / 1,072 / 1,072 / 1,088 tokens at N = 0..4 and a KV price of 4,096 B a token for
its MTP layer in fp16 (four KV heads of 256).
"""

from __future__ import annotations

import pytest

from kvscope.plan.kv_layout import vllm_layout
from kvscope.specs.registry import load_model

from .log_cases import GIB, case_by_id, offline_hub

ROWS = {
    "waired-rtxpro4000-qwen35-08b-mtp1-0.29": (1, 16.05, 2_313_885),
    "waired-rtxpro4000-qwen35-08b-mtp2-0.29": (2, 15.94, 2_273_296),
}


def test_qwen35_config_counts_its_mtp_layer() -> None:
    with offline_hub():
        qwen = load_model("Qwen/Qwen3.5-0.8B")
        dsv3 = load_model("deepseek-ai/DeepSeek-V3")
    assert qwen.num_mtp_layers == 1  # text_config.mtp_num_hidden_layers
    assert dsv3.num_mtp_layers == 1  # num_nextn_predict_layers still wins where stated
    # vLLM builds the MTP layer as a full-attention layer of the target's shape; the planner
    # shapes it like the last layer, which must be one
    assert qwen.layers[-1].attention.kind == "full"


@pytest.mark.parametrize("case_id", sorted(ROWS))
def test_logged_pool_gives_the_logged_tokens(case_id: str) -> None:
    n, gib, tokens = ROWS[case_id]
    case = case_by_id(case_id)
    plan = case.plan(kv_cache_memory_bytes=int(gib * GIB))
    # 1,072 / 1,088-token blocks (the conv window grows by n rows), seven full-attention
    # layers in the attention group (six and the MTP layer), 2 + n state blocks in each of
    # the three linear groups of a request
    assert plan.block_size == {1: 1072, 2: 1088}[n]
    per_request = -(-262_144 // plan.block_size) + 3 * (2 + n)
    assert plan.num_gpu_blocks // per_request == int(tokens / 262_144)
    assert abs(plan.kv_tokens - tokens) / tokens < 0.0005


def test_without_the_rule_the_pool_is_misread() -> None:
    # The drafted tokens' state blocks are most of the 2.3 % the N = 2 start loses against
    # the same pool read without drafting (a check that the rule carries weight)
    case = case_by_id("waired-rtxpro4000-qwen35-08b-mtp2-0.29")
    with_rule = case.plan(kv_cache_memory_bytes=int(15.94 * GIB)).kv_tokens
    row = dict(case.row, speculative_config="")
    without = type(case)(row).plan(kv_cache_memory_bytes=int(15.94 * GIB)).kv_tokens
    assert without > with_rule * 1.10  # no MTP layer, no state blocks: >10 % more tokens


@pytest.mark.parametrize(
    ("num_spec", "block"), [(0, 1056), (1, 1056), (2, 1072), (3, 1072), (4, 1088)]
)
def test_conv_rows_raise_the_block_size_as_logged(num_spec: int, block: int) -> None:
    # Qwen3.5-9B's layers (4 KV heads of 256 beside Gated DeltaNet layers of 16 key / 32 value
    # heads of 128, kernel 4): the 4B's logged KV price says four KV heads of 256, and its
    # logged block sizes are the ones these layers give at fp8 as N grows
    with offline_hub():
        model = load_model("Qwen/Qwen3.5-9B")
    layers = tuple(range(model.num_layers))
    layout = vllm_layout(model, layers, "fp8", 1, 16, mamba_cache_mode="align", num_spec=num_spec)
    assert layout.block_size == block
    linear = [g for g in layout.groups if g.kind == "linear_state"]
    assert linear and all(g.blocks_for(262_144, 4096) == 2 + num_spec for g in linear)
