"""DeepSeek V4.1 (kvscope.specs.config_dsv41, kvscope.plan.dsv41_pool) against its real
config.json and two public vLLM start-ups of it (tant2tls/Deepseek-serving, 8x H100 TP8 + EP).

The config is huggingface.co/deepseek-ai/DeepSeek-V4.1-Flash at revision dba1be0a (see
data/configs/SOURCES.md). The logged token figures are integers vLLM derives from an integer
block count, so the pool is pinned when some block count inside the logged "Available KV
cache memory" (rounded to 0.01 GiB) gives the logged "GPU KV cache size" to the token.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvscope.plan.config import EngineConfig
from kvscope.plan.dsv4_workspace import dsv4_profile_workspace
from kvscope.plan.kv_layout import KVLayout, vllm_layout
from kvscope.specs.config_parse import parse_config
from kvscope.specs.hardware import GIB
from kvscope.specs.model import ModelSpec

from .log_cases import case_by_id

CONFIG = Path(__file__).parent / "data" / "configs" / "deepseek-v4.1-flash.json"


@pytest.fixture(scope="module")
def v41() -> ModelSpec:
    return parse_config(json.loads(CONFIG.read_text()), str(CONFIG))


def test_layer_roles_follow_the_config(v41: ModelSpec) -> None:
    atts = [layer.attention for layer in v41.layers]
    # 40 backbone layers; the three trailing zero ratios are DSpark stages, not built
    assert len(atts) == 40 and {a.kind for a in atts} == {"dsv41"}
    assert [a.compress_ratio for a in atts] == [0, 0] + [2] * 18 + [1] * 20
    assert [i for i, a in enumerate(atts) if a.kv_source] == [2, 8, 14, 20]
    assert [i for i, a in enumerate(atts) if a.index_source] == [2, 8, 14, 20, 24, 28, 32, 36]
    ffn = v41.layers[5].ffn
    assert (ffn.num_experts, ffn.experts_per_token, ffn.expert_intermediate_size) == (384, 6, 2304)


def test_only_sources_carry_compressor_and_indexer_weights(v41: ModelSpec) -> None:
    atts = [layer.attention for layer in v41.layers]
    plain = atts[3].num_params()  # ratio 2, neither source
    assert atts[4].num_params() == plain  # every non-source layer has the same attention
    assert atts[21].num_params() == plain  # ratio 1, neither source
    # index source without its own keys: wq_b (1280 -> 32 x 128) and weights_proj (5120 -> 32)
    assert atts[24].num_params() - plain == 1280 * 32 * 128 + 5120 * 32
    # ratio-1 kv source: compressor wkv without a gate, norm, indexer with wk and k_norm
    c1 = 5120 * 512 + 512
    assert atts[20].num_params() - plain == c1 + 1280 * 32 * 128 + 5120 * 32 + 512 * 128 + 128
    # ratio-2 kv source adds the softmax gate (wgate, 5120 -> 512)
    assert atts[8].num_params() - atts[20].num_params() == 5120 * 512


def test_engram_layers_carry_the_projection_not_the_table(v41: ModelSpec) -> None:
    atts = [layer.attention for layer in v41.layers]
    # wkv: 3 n-gram orders x 8 heads x 256 -> 5120 x (hc 4 + 1); two 4 x 5120 gate vectors
    wkv = 3 * 8 * 256 * 5120 * 5 + 2 * 4 * 5120
    assert [i for i, a in enumerate(atts) if a.engram_params] == [1, 14]
    assert atts[1].engram_params == wkv
    # the 384,006,168 + 384,016,682 table rows (x 256, 197B) stay in host memory: the rest is
    # the "552B backbone" of DeepSeek's V4.1-Flash release note (api-docs.deepseek.com/news/
    # news260910, as quoted in public release notes)
    assert abs(v41.total_params - 552e9) / 552e9 < 0.005


def layout(v41: ModelSpec) -> KVLayout:
    return vllm_layout(v41, tuple(range(40)), "fp8_ds_mla", 8, 64, "fp8")


def test_group_block_sizes_match_the_logged_groups(v41: ModelSpec) -> None:
    lay = layout(v41)
    # serve-off-20261010-134419.log (0.31.1rc1.dev260): "kv cache group sizes (32, 32, 32, 32,
    # 32, 32, 32, 64, 8)" (the same groups, another order)
    assert sorted(g.block_size for g in lay.groups) == sorted([32] * 7 + [64, 8])
    assert sum(g.num_layers for g in lay.groups if g.kind == "dsv4_swa") == 40
    assert [g.num_layers for g in lay.groups if g.kind == "dsv41_ring"] == [3]


@pytest.mark.parametrize(
    "row", ["tant2tls-v41flash-h100-tp8-0.30", "tant2tls-v41flash-h100-tp8-0.31"]
)
def test_pool_reproduces_the_logged_token_count(v41: ModelSpec, row: str) -> None:
    r = case_by_id(row).row
    lay = layout(v41)
    length, gib, tokens = int(r["max_model_len"]), float(r["kv_cache_gib"]), int(r["kv_tokens"])
    # async scheduling: two batches of 8192 tokens in flight
    need = lay.blocks_per_request(length, 2 * int(r["max_num_batched_tokens"]))
    lo = int((gib - 0.005) * GIB) // lay.block_bytes
    hi = int((gib + 0.005) * GIB) // lay.block_bytes
    assert any(int(nb / need * length) == tokens for nb in range(lo, hi + 1))


def test_profiling_reserves_the_ratio_one_indexer_gather(v41: ModelSpec) -> None:
    # the ratio-1 index sources (20-36) gather 40 x max_model_len key rows of 132 bytes in the
    # profiling pass, twice what the ratio-2 sources (2, 8, 14) ask for; the buffer follows
    # max_model_len
    eng = EngineConfig(engine="vllm", engine_version="0.31.1")
    ws = dsv4_profile_workspace(v41, eng, 262_144, 8192)
    assert ws is not None and 1.28 * GIB < ws.indexer_gather < 1.30 * GIB
    ws_short = dsv4_profile_workspace(v41, eng, 131_072, 8192)
    assert ws_short is not None and ws_short.indexer_gather < 0.66 * GIB


def test_dspark_stages_join_the_window_bucket(v41: ModelSpec) -> None:
    # The DSpark launch of the same study (0.30.1rc1.dev223, k=5, fixed verification) scraped
    # vllm:cache_config_info num_gpu_blocks 231835 and kv_cache_size_tokens 7381775: its three
    # ratio-0 stages add three window layers, 43 in all, dealt into 8 groups of at most 6.
    lay = vllm_layout(v41, tuple(range(40)), "fp8_ds_mla", 8, 64, "fp8", draft_window_layers=3)
    assert sum(g.num_layers for g in lay.groups if g.kind == "dsv4_swa") == 43
    assert sorted(g.block_size for g in lay.groups) == sorted([32] * 8 + [64, 8])
    assert lay.block_bytes == layout(v41).block_bytes
    need = lay.blocks_per_request(262_144, 2 * 8192)
    assert need == 4096 + 8 * 517 + 1
    assert int(231_835 / need * 262_144) == 7_381_775


def test_dspark_stages_take_the_drafter_expert_count(v41: ModelSpec) -> None:
    # config.json: dspark_n_routed_experts 128 against 384 in the backbone, which vLLM's V4.1
    # DeepseekV4MoE reads for layers numbered from num_hidden_layers; so the three stages
    # together hold as many routed experts as one backbone layer, and no MTP eh_proj.
    from kvscope.plan.config import Parallelism
    from kvscope.plan.weights import rank_weights

    assert (v41.dspark_stages, v41.dspark_routed_experts, v41.dspark_markov_rank) == (3, 128, 256)
    par = Parallelism(tp=8, ep=True)
    base = rank_weights(v41, par).by_component
    stages = rank_weights(v41, par, draft_layers=3, draft_experts=128, draft_eh_proj=False)
    added = {k: v - base[k] for k, v in stages.by_component.items()}
    one_layer = rank_weights(v41, par, draft_layers=1, draft_eh_proj=False).by_component
    assert added["routed_experts"] == pytest.approx(
        one_layer["routed_experts"] - base["routed_experts"]
    )
    assert added["attention"] == pytest.approx(3 * (one_layer["attention"] - base["attention"]))


def test_v4_dspark_keeps_the_target_expert_count() -> None:
    # vLLM's V4 DeepseekV4MoE (models/deepseek_v4) does not read dspark_n_routed_experts
    from tests.plan.log_cases import offline_hub

    from kvscope.specs.registry import load_model

    with offline_hub():
        model = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
    assert (model.dspark_stages, model.dspark_routed_experts, model.dspark_markov_rank) == (
        3,
        0,
        256,
    )


def test_v41_dspark_drafter_has_no_context_projection(v41: ModelSpec) -> None:
    # main_proj 5120 x (3 x 5120) fp8 with 32 x 32 block scales (78,950,400 B) and the bf16
    # Markov head 2 x 129,280 x 256 (132,382,720 B); V4.1 stages project their own context KV
    from kvscope.plan.config import Parallelism
    from kvscope.plan.drafter import plan_drafter
    from kvscope.plan.speculative import parse_vllm

    d = plan_drafter(
        v41, parse_vllm('{"method": "dspark", "num_speculative_tokens": 5}'), Parallelism(tp=8)
    )
    assert (d.mtp_layers, d.kv_layers, d.stage_experts, d.eh_proj) == (3, 3, 128, False)
    assert d.extra_weight_bytes == pytest.approx(78_950_400 + 132_382_720, abs=1)
