"""Per-GPU weights by parallelism, pinned to vLLM's "Model loading took" lines."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.dsv4_weights import dsv4_rope_cache_bytes
from kvscope.plan.memory import plan_memory
from kvscope.plan.v0_mla_absorption import v0_absorbed_bytes
from kvscope.plan.weights import (
    all_stage_weights,
    expert_layout,
    mla_absorbed_bytes,
    pp_layer_split,
    rank_weights,
    vllm_remainder_last,
)
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

LLAMA = load_model("meta-llama/Llama-3.1-8B")


@pytest.mark.parametrize(
    ("tp", "pp", "logged_gib"),
    # vLLM 0.19 on H100 (jgchn/llm-d-planner results_raw.csv): TP1 14.99, TP2 7.51, TP4 3.77,
    # first stage of PP2 7.51 and of PP4 4.26 GiB.
    [(1, 1, 14.99), (2, 1, 7.51), (4, 1, 3.77), (1, 2, 7.51), (1, 4, 4.26)],
)
def test_llama_8b_weights_match_vllm_logs(tp: int, pp: int, logged_gib: float) -> None:
    w = rank_weights(LLAMA, Parallelism(tp=tp, pp=pp), 0)
    assert w.total_bytes / GIB == pytest.approx(logged_gib, rel=0.01)


def test_pp_split_gives_extra_layers_to_stages_before_the_last() -> None:
    # vLLM get_pp_indices: 61 layers over 4 stages -> 15, 15, 16, 15.
    assert [len(s) for s in pp_layer_split(61, 4)] == [15, 15, 16, 15]
    assert [len(s) for s in pp_layer_split(32, 3)] == [11, 11, 10]


@given(st.integers(1, 128), st.integers(1, 16))
def test_pp_split_covers_every_layer_once(layers: int, pp: int) -> None:
    if pp > layers:
        with pytest.raises(KvscopeError):
            pp_layer_split(layers, pp)
        return
    stages = pp_layer_split(layers, pp)
    flat = [i for s in stages for i in s]
    assert flat == list(range(layers))
    sizes = [len(s) for s in stages]
    assert max(sizes) - min(sizes) <= 1


def test_vllm_before_0_8_gives_the_remainder_to_the_last_stage() -> None:
    # get_pp_indices of the 0.6.6 / 0.7.x wheels: DeepSeek-V3's 61 layers at PP2 split 30 + 31
    assert [len(s) for s in pp_layer_split(61, 2, remainder_last=True)] == [30, 31]
    assert [len(s) for s in pp_layer_split(61, 4, remainder_last=True)] == [15, 15, 15, 16]
    assert vllm_remainder_last("vllm", (0, 7, 3)) and not vllm_remainder_last("vllm", (0, 8, 0))
    assert not vllm_remainder_last("sglang", (0, 4, 3))


def test_vllm_0_7_mla_decode_matrices() -> None:
    # W_Q_UK (1536 x 16*512) + W_UV_O (16*512 x 7168) a layer, fp8 for an fp8 checkpoint,
    # plus W_QR (1536 x 16*64) in bf16; none from 0.8.0 (mla/common.py) or before 0.7.1
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    par = Parallelism(tp=8)
    layers = tuple(range(v3.num_layers))
    per_layer = (1536 * 8192 + 8192 * 7168) * 1.0 + 1536 * 16 * 64 * 2
    got = v0_absorbed_bytes(v3, par, layers, EngineConfig(engine_version="0.7.2"))
    assert got == pytest.approx(61 * per_layer)
    for release in ("0.7.0", "0.8.0"):
        assert v0_absorbed_bytes(v3, par, layers, EngineConfig(engine_version=release)) == 0
    assert v0_absorbed_bytes(v3, par, layers, EngineConfig(engine="sglang")) == 0


def test_tp_shards_attention_and_ffn_but_not_the_mla_latent_projection() -> None:
    v2 = load_model("deepseek-ai/DeepSeek-V2-Lite")
    one = rank_weights(v2, Parallelism(tp=1)).by_component
    two = rank_weights(v2, Parallelism(tp=2)).by_component
    assert two["routed_experts"] == pytest.approx(one["routed_experts"] / 2)
    # kv_a_proj_with_mqa is replicated, so attention shrinks by less than half.
    assert one["attention"] / 2 < two["attention"] < one["attention"]


def test_expert_parallel_spreads_whole_experts() -> None:
    flash = load_model("deepseek-ai/DeepSeek-V4-Flash")
    tp8 = rank_weights(flash, Parallelism(tp=8)).by_component["routed_experts"]
    ep8 = rank_weights(flash, Parallelism(tp=8, ep=True)).by_component["routed_experts"]
    assert ep8 == pytest.approx(tp8)  # 256 experts / 8 ranks == each expert / 8
    dp_ep = rank_weights(flash, Parallelism(tp=1, dp=8, ep=True)).by_component
    assert dp_ep["routed_experts"] == pytest.approx(tp8)


def test_total_over_tp_ranks_is_at_least_the_checkpoint() -> None:
    for name in ("Qwen/Qwen3-30B-A3B", "deepseek-ai/DeepSeek-V3", "mistralai/Mixtral-8x7B-v0.1"):
        model = load_model(name)
        for tp in (2, 4, 8):
            if model.first_attention.num_heads % tp:
                continue
            total = sum(w.total_bytes for w in all_stage_weights(model, Parallelism(tp=tp))) * tp
            assert total >= model.total_weight_bytes * 0.999


def test_tp_that_does_not_divide_heads_is_refused_with_a_suggestion() -> None:
    with pytest.raises(KvscopeError) as err:
        all_stage_weights(LLAMA, Parallelism(tp=3))
    assert "does not divide the 32 attention heads" in err.value.message
    assert err.value.hint and "2 or 4" in err.value.hint


def test_sglang_dp_attention_keeps_the_input_embedding_whole_on_every_gpu() -> None:
    # SGLang builds VocabParallelEmbedding with enable_tp=not is_dp_attention_enabled(): under
    # --enable-dp-attention each GPU holds all 129,280 x 7,168 rows (fp8 checkpoint, bf16
    # embedding: 1.73 GiB); the LM head stays sharded over the 8 TP ranks.
    v32 = load_model("deepseek-ai/DeepSeek-V3.2")
    dp_att = rank_weights(v32, Parallelism(tp=8, dp=8, dp_attention=True, ep=True), 0)
    tp_only = rank_weights(v32, Parallelism(tp=8, ep=True), 0)
    assert dp_att.by_component["embedding"] == 129280 * 7168 * 2
    # Sharded over 8 ranks: 129,280 / 8 = 16,160 rows, padded to a multiple of 64 = 16,192.
    assert tp_only.by_component["embedding"] == 16192 * 7168 * 2
    assert dp_att.by_component["lm_head"] == tp_only.by_component["lm_head"]


def test_absorbed_mla_copies_by_engine_and_attention_parallelism() -> None:
    # DeepSeek-V3.2: 61 MLA layers, 128 heads, (128 nope + 128 v) x 512 latent per head, kept
    # in bf16 beside kv_b_proj (SGLang's w_kc/w_vc; vLLM's W_UK_T/W_UV when kv_b_proj is fp8).
    v32 = load_model("deepseek-ai/DeepSeek-V3.2")
    layers = tuple(range(v32.num_layers))
    whole = 61 * 128 * 256 * 512 * 2
    assert whole == 2_046_820_352
    dp_att = Parallelism(tp=8, dp=8, dp_attention=True)
    assert mla_absorbed_bytes(v32, dp_att, layers, "sglang") == whole  # every head per GPU
    assert mla_absorbed_bytes(v32, Parallelism(tp=8), layers, "sglang") == whole / 8
    assert mla_absorbed_bytes(v32, Parallelism(tp=8), layers, "vllm") == whole / 8  # fp8 ckpt
    # bf16 DeepSeek-V2-Lite: vLLM's W_UK_T/W_UV are views of kv_b_proj, SGLang copies them
    lite = load_model("deepseek-ai/DeepSeek-V2-Lite")
    lite_layers = tuple(range(lite.num_layers))
    assert mla_absorbed_bytes(lite, Parallelism(), lite_layers, "vllm") == 0.0
    assert mla_absorbed_bytes(lite, Parallelism(), lite_layers, "sglang") == 27 * 16 * 256 * 512 * 2
    # no MLA, no copy
    llama = load_model("meta-llama/Llama-3.1-8B")
    assert mla_absorbed_bytes(llama, Parallelism(), tuple(range(32)), "sglang") == 0.0


@pytest.mark.parametrize(
    ("model", "gpu", "tp", "logged_gib"),
    [
        # vLLM 0.10.1.1, 4x A100 80GB (dennislee22/vLLM-benchmarking log): Marlin pads the
        # per-rank expert width to 128 and the hidden size to 256.
        ("openai/gpt-oss-120b", "A100-SXM-80GB", 4, 17.22),
        # vLLM 0.19.0, one A100 80GB (the blog row of engine_logs.csv).
        ("openai/gpt-oss-20b", "A100-SXM-80GB", 1, 13.72),
        # (Hopper at 0.12-0.31 takes the Triton layout: tests/plan/test_vllm_mxfp4.py.)
    ],
)
def test_mxfp4_expert_layout_by_gpu(model: str, gpu: str, tp: int, logged_gib: float) -> None:
    spec = load_model(model)
    layout = expert_layout(spec, get_gpu(gpu), "vllm")
    w = all_stage_weights(spec, Parallelism(tp=tp), 0, layout)[0]
    assert w.total_bytes / GIB == pytest.approx(logged_gib, rel=0.015)
    # The checkpoint's own layout (no pads) would be over 5 % short on Ampere.
    if gpu.startswith("A100"):
        bare = all_stage_weights(spec, Parallelism(tp=tp))[0]
        assert bare.total_bytes / GIB < 0.95 * logged_gib


def test_sglang_loads_v4_fp4_experts_with_float32_scales() -> None:
    """InferenceX#2128: SGLang's Hopper image logged "mem usage=125.65 GB" for V4-Pro at TP8 on
    H200 and refused to start. The checkpoint's share is 101.2 GiB (e8m0 scales, 0.53125
    B/param); SGLang keeps one float32 per 32 FP4 values (0.625 B/param): 118.0 GiB, 6 % under
    the log; the Marlin runner keeps its e8m0 copy too (0.65625): 123.7 GiB, 1.6 % under."""
    from kvscope.plan.sglang_moe_runner import (
        SGLANG_DSV4_FP4_MARLIN_EXPERT_BYTES,
        sglang_expert_layout,
    )
    from kvscope.plan.weights import ExpertLayout, all_stage_weights, expert_layout

    model = load_model("deepseek-ai/DeepSeek-V4-Pro")
    par = Parallelism(tp=8)
    h200, b200 = get_gpu("H200"), get_gpu("B200")
    v = (0, 5, 14)
    ckpt = all_stage_weights(model, par)[0].total_bytes / GIB
    sgl = all_stage_weights(model, par, 0, sglang_expert_layout(model, h200, v, "auto", par))[0]
    marlin = ExpertLayout(bytes=SGLANG_DSV4_FP4_MARLIN_EXPERT_BYTES)
    high = all_stage_weights(model, par, 0, marlin)[0].total_bytes / GIB
    assert 0.93 < sgl.total_bytes / GIB / 125.65 < 0.95
    assert 0.98 < high / 125.65 < 0.99
    assert ckpt / 125.65 < 0.81  # the checkpoint's own bytes: 19 % short
    # vLLM, and SGLang on Blackwell (DeepGEMM packs the scales back to e8m0), keep the checkpoint's
    assert expert_layout(model, h200, "vllm") == ExpertLayout()
    assert sglang_expert_layout(model, b200, v, "auto", par) == ExpertLayout()


def test_both_engines_keep_two_float32_rope_tables_for_deepseek_v4() -> None:
    # vLLM build_deepseek_v4_rope: one embedding for the window-only layers (rope_theta), one
    # for the compressed layers (compress_rope_theta), each a float32 cos_sin_cache of
    # original_max_position_embeddings x factor = 65,536 x 16 rows of rope_dim 64. SGLang
    # (srt/layers/deepseek_v4_rope.py at 0.5.12/0.5.14): precompute_freqs_cis is lru_cache(2),
    # two complex64 tables of max_position_embeddings x rope_dim / 2, the same bytes.
    v4 = load_model("deepseek-ai/DeepSeek-V4-Flash")
    assert dsv4_rope_cache_bytes(v4) == 2 * 65_536 * 16 * 64 * 4
    assert dsv4_rope_cache_bytes(load_model("deepseek-ai/DeepSeek-V3")) == 0.0
    # Halving the positions frees 2 x 4 bytes per position and rope dim under both engines
    # (the generic rule would free one cache in the model dtype: 2 bytes).
    half = dataclasses.replace(
        v4, max_position_embeddings=v4.max_position_embeddings // 2, rope_cache_positions=0
    )
    par, h100 = Parallelism(tp=8, ep=True), get_gpu("H100")
    for engine in ("vllm", "sglang"):
        eng = EngineConfig(engine=engine, max_model_len=8192)
        full, halved = (plan_memory(m, h100, par, eng).weights_gib for m in (v4, half))
        freed = (full - halved) * GIB
        assert freed == pytest.approx(v4.max_position_embeddings // 2 * 2 * 4 * 64, rel=1e-6)
