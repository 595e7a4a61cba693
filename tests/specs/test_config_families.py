"""Phi-3, Gemma 2/3 (with the SigLIP tower), GLM-4.5, MiniMax-M2 and Llama 4 configs parse
into counts that match their publishers' figures, with the layer patterns engines build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvscope.errors import ConfigError
from kvscope.specs.config_parse import parse_config
from kvscope.specs.model import ModelSpec

CONFIGS = Path(__file__).parent / "data" / "configs"


def _raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return data


def _load(name: str) -> ModelSpec:
    return parse_config(_raw(name), f"{name}.json")


# (file, published total, published active, active convention, tolerance); sources in
# data/configs/SOURCES.md.
PUBLISHED = [
    ("microsoft--Phi-3-mini-4k-instruct", 3.8e9, 3.8e9, "with_embeddings", 0.01),
    ("google--gemma-2-9b-it", 9.242e9, 9.242e9, "with_embeddings", 0.01),
    # active per text token: the 417M vision encoder runs on images only
    ("google--gemma-3-27b-it", 27.433e9, 27.016e9, "with_embeddings", 0.01),
    ("zai-org--GLM-4.5", 355e9, 32e9, "without_embeddings", 0.01),
    ("zai-org--GLM-4.5-Air", 106e9, 12e9, "without_embeddings", 0.02),
    # "230B / 10B" are rounded to the billion: 2.5 % is inside that rounding.
    ("MiniMaxAI--MiniMax-M2.5", 230e9, 10e9, "without_embeddings", 0.025),
    # "17B active" is rounded: 17.17B with embeddings
    ("meta-llama--Llama-4-Scout-17B-16E-Instruct", 109e9, 17e9, "with_embeddings", 0.015),
]


@pytest.mark.parametrize(("name", "total", "active", "convention", "tol"), PUBLISHED)
def test_counts_match_published(
    name: str, total: float, active: float, convention: str, tol: float
) -> None:
    m = _load(name)
    assert m.total_params == pytest.approx(total, rel=tol)
    assert m.active_params_by(convention) == pytest.approx(active, rel=tol)


def test_gemma2_9b_non_embedding_count_is_the_reports_to_the_parameter() -> None:
    # Gemma 2 report (arXiv 2408.00118) Table 1: 8,324,201,984 non-embedding parameters.
    m = _load("google--gemma-2-9b-it")
    assert m.total_params - m.params["embedding"] == 8_324_201_984
    assert m.tie_word_embeddings  # Gemma2Config default; the config does not say
    assert m.params["lm_head"] == 0


def test_gemma3_27b_components_match_the_report() -> None:
    # Gemma 3 report (arXiv 2503.19786) Table 1, 27B: vision encoder 417M,
    # embedding 1,416M, non-embedding 25,600M.
    m = _load("google--gemma-3-27b-it")
    assert m.params["vision_tower"] == pytest.approx(417e6, rel=0.02)
    assert m.params["embedding"] == pytest.approx(1416e6, rel=0.01)
    non_embedding = m.total_params - m.params["embedding"] - m.params["vision_tower"]
    assert non_embedding == pytest.approx(25_600e6, rel=0.001)
    assert m.vocab_size == 262_208  # Gemma3TextConfig default: the shipped file has none
    assert m.weight_bytes["vision_tower"] == m.params["vision_tower"] * 2  # bf16


def test_gemma3_five_sliding_then_one_global() -> None:
    m = _load("google--gemma-3-27b-it")
    kinds = [layer.attention.kind for layer in m.layers]
    full = [i for i, k in enumerate(kinds) if k == "full"]
    assert full == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    assert {layer.attention.window for layer in m.layers if layer.attention.kind == "sliding"} == {
        1024
    }
    # Only the 10 global layers keep the whole history: 16 KV heads x 128 x K,V x 2 B each.
    assert m.kv_bytes_per_token() == 10 * 16 * 128 * 2 * 2
    groups = m.kv_groups()
    assert sorted(len(g.layers) for g in groups) == [10, 52]


def test_gemma2_alternates_starting_with_a_sliding_layer() -> None:
    m = _load("google--gemma-2-9b-it")
    kinds = [layer.attention.kind for layer in m.layers]
    assert kinds[:4] == ["sliding", "full", "sliding", "full"]
    assert kinds.count("sliding") == 21


def test_layer_types_wins_over_the_period() -> None:
    raw = _raw("google--gemma-3-27b-it")
    raw["text_config"]["layer_types"] = ["full_attention"] * 62
    m = parse_config(raw, "g.json")
    assert m.attention_kinds == {"full": 62}


def test_phi3_window_applies_to_every_layer() -> None:
    # vLLM's Attention falls back to the model-level window on every layer when
    # LlamaAttention (which Phi3ForCausalLM inherits) finds no layer_types.
    m = _load("microsoft--Phi-3-mini-4k-instruct")
    assert m.attention_kinds == {"sliding": 32}
    assert m.first_attention.window == 2047


def test_wrapper_dtype_comes_from_the_top_level() -> None:
    raw = _raw("google--gemma-3-27b-it")
    raw["torch_dtype"] = "float16"
    assert parse_config(raw, "g.json").dtype == "float16"


def test_glm45_mtp_layer_is_left_out_and_only_qkv_have_biases() -> None:
    m = _load("zai-org--GLM-4.5")
    assert m.num_mtp_layers == 1  # vLLM's main model skips its weights
    assert m.num_layers == 92
    att = m.first_attention
    assert att.qkv_bias and not att.o_bias and att.qk_norm
    kinds = [layer.ffn.kind for layer in m.layers]
    assert kinds[:4] == ["dense", "dense", "dense", "moe"]
    assert m.moe_layer is not None and m.moe_layer.num_shared_experts == 1


def test_minimax_per_layer_qk_norm_spans_all_heads() -> None:
    m = _load("MiniMaxAI--MiniMax-M2.5")
    assert not m.first_attention.qk_norm
    # two 3072 RMSNorms + q_norm over 48 x 128 + k_norm over 8 x 128
    assert m.layers[0].extra_params == 2 * 3072 + (48 + 8) * 128


def test_llama4_shared_expert_and_interleave() -> None:
    m = _load("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    moe = m.moe_layer
    assert moe is not None and moe.num_shared_experts == 1
    assert moe.shared_intermediate_size == 8192
    assert not m.first_attention.qk_norm  # L2 norm without weights
    # the tower's patch, position, 34 layers, adapter and projector: 0.87B
    assert m.params["vision_tower"] == pytest.approx(0.872e9, rel=0.001)
    raw = _raw("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    raw["text_config"]["interleave_moe_layer_step"] = 2
    m2 = parse_config(raw, "l4.json")
    assert [layer.ffn.kind for layer in m2.layers[:4]] == ["dense", "moe", "dense", "moe"]
    assert m2.layers[0].ffn.intermediate_size == 16384  # intermediate_size_mlp


@pytest.mark.parametrize(
    ("name", "path", "field"),
    [
        ("google--gemma-3-27b-it", ("text_config", "sliding_window"), "sliding_window"),
        ("google--gemma-2-9b-it", ("sliding_window",), "sliding_window"),
        ("google--gemma-3-27b-it", ("vision_config", "hidden_size"), "vision_config.hidden_size"),
        ("zai-org--GLM-4.5", ("moe_intermediate_size",), "moe_intermediate_size"),
        ("MiniMaxAI--MiniMax-M2.5", ("num_experts_per_tok",), "num_experts_per_tok"),
    ],
)
def test_missing_key_is_one_line_naming_key_and_file(
    name: str, path: tuple[str, ...], field: str
) -> None:
    raw = _raw(name)
    block = raw
    for key in path[:-1]:
        block = block[key]
    del block[path[-1]]
    with pytest.raises(ConfigError) as err:
        parse_config(raw, f"/tmp/{name}.json")
    text = str(err.value)
    assert field in text and f"{name}.json" in text
    assert "\n" not in err.value.message


def test_dense_llama4_layer_without_its_width_names_the_key() -> None:
    raw = _raw("meta-llama--Llama-4-Scout-17B-16E-Instruct")
    raw["text_config"]["interleave_moe_layer_step"] = 2
    del raw["text_config"]["intermediate_size_mlp"]
    with pytest.raises(ConfigError, match="intermediate_size_mlp"):
        parse_config(raw, "l4.json")


def test_vision_config_must_be_an_object() -> None:
    raw = _raw("google--gemma-3-27b-it")
    raw["vision_config"] = "siglip"
    with pytest.raises(ConfigError, match="vision_config"):
        parse_config(raw, "g.json")


def test_text_only_gemma3_has_no_vision_component() -> None:
    # Gemma3ForCausalLM checkpoints ship the text_config alone (model_type gemma3_text).
    wrapper = _load("google--gemma-3-27b-it")
    text = parse_config(_raw("google--gemma-3-27b-it")["text_config"], "t.json")
    assert "vision_tower" not in text.params
    assert wrapper.total_params - text.total_params == wrapper.params["vision_tower"]
    assert text.attention_kinds == wrapper.attention_kinds


def test_wrapper_text_config_without_model_type_is_the_wrappers_text_model() -> None:
    raw = _raw("google--gemma-3-27b-it")
    del raw["text_config"]["model_type"]
    m = parse_config(raw, "g.json")
    assert m.model_type == "gemma3_text"
    assert m.attention_kinds == {"sliding": 52, "full": 10}


def test_minimax_weights_and_kv_match_its_deployment_guide() -> None:
    # MiniMax-AI/MiniMax-M2.5 docs/vllm_deploy_guide.md: "220 GB for weights, 240 GB per 1M
    # context tokens"; the figures fit as GiB (the FP8 checkpoint, a bf16 KV cache).
    m = _load("MiniMaxAI--MiniMax-M2.5")
    gib = 2**30
    assert m.total_weight_bytes / gib == pytest.approx(220, rel=0.03)
    assert m.kv_bytes_per_token("bfloat16") * 1e6 / gib == pytest.approx(240, rel=0.03)


def test_seed_oss_output_bias_follows_attention_out_bias() -> None:
    # ByteDance-Seed/Seed-OSS-36B-Instruct: q/k/v biases, no o_proj bias (vLLM seed_oss.py
    # builds o_proj with bias=config.attention_out_bias)
    path = Path(__file__).parents[1] / "plan" / "data" / "configs" / "seed-oss-36b-instruct.json"
    raw = json.loads(path.read_text())
    att = parse_config(raw, path.name).first_attention
    assert att.qkv_bias and not att.o_bias
    raw["attention_out_bias"] = True
    assert parse_config(raw, path.name).first_attention.o_bias
    del raw["attention_out_bias"]  # absent: attention_bias covers o_proj, as for Llama
    assert parse_config(raw, path.name).first_attention.o_bias
