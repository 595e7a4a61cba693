"""A config.json with a missing or contradictory field gives one error naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import ConfigError, KvscopeError, UnknownNameError
from kvscope.specs.config_parse import parse_config
from kvscope.specs.registry import load_model

LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


def _with(**changes: Any) -> dict[str, Any]:
    cfg = dict(LLAMA)
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    return cfg


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"hidden_size": None}, "hidden_size"),
        ({"num_hidden_layers": None}, "num_hidden_layers"),
        ({"vocab_size": "many"}, "vocab_size"),
        ({"num_key_value_heads": 5}, "num_key_value_heads"),
        ({"hidden_size": 4100}, "head_dim"),  # 4100 / 32 heads is not whole
        ({"intermediate_size": None}, "intermediate_size"),
        ({"layer_types": ["full_attention"] * 3}, "layer_types"),
        ({"layer_types": ["sliding_attention"] * 32}, "sliding_window"),
        ({"num_local_experts": 8, "num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
        ({"quantization_config": {"bits": 4}}, "quantization_config.quant_method"),
        (
            {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}},
            "quantization_config.weight_block_size",
        ),
    ],
)
def test_bad_field_is_named(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_with(**changes), "my/config.json")
    assert info.value.field == field
    assert f"'{field}'" in info.value.one_line()
    assert "\n" not in info.value.one_line()


def test_mla_config_missing_rope_dim() -> None:
    cfg = _with(kv_lora_rank=512, qk_nope_head_dim=128, v_head_dim=128)
    with pytest.raises(ConfigError, match="qk_rope_head_dim"):
        parse_config(cfg)


def test_dsv4_bad_compress_ratio() -> None:
    raw = json.loads(load_model_path("deepseek-ai/DeepSeek-V4-Flash").read_text())
    raw["compress_ratios"] = [0, 0, 3, *raw["compress_ratios"][3:]]
    with pytest.raises(ConfigError, match="compress_ratios"):
        parse_config(raw)
    raw["compress_ratios"] = [0, 4]
    with pytest.raises(ConfigError, match="at least 43"):
        parse_config(raw)


def test_quantization_flag_contradicting_checkpoint() -> None:
    with pytest.raises(ConfigError, match="quant_method"):
        load_model("deepseek-ai/DeepSeek-V3", quantization="awq")


def test_marlin_kernel_flag_is_the_checkpoints_method() -> None:
    # vLLM takes --quantization awq_marlin / gptq_marlin on an AWQ / GPTQ checkpoint (public
    # vLLM 0.18/0.29 logs of Qwen3-8B-AWQ: "The model is convertible to awq_marlin during
    # runtime", 5.71 GiB loaded); another method is still refused.
    awq = {
        "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "num_hidden_layers": 36, "vocab_size": 151936, "torch_dtype": "float16",
        "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128},
    }  # fmt: skip
    flagged = parse_config(awq, quantization="awq_marlin")
    assert flagged.total_params == parse_config(awq).total_params
    assert flagged.quantization == parse_config(awq).quantization
    with pytest.raises(ConfigError, match="gptq_marlin"):
        parse_config(awq, quantization="gptq_marlin")


def test_unknown_model_lists_close_matches() -> None:
    with pytest.raises(UnknownNameError) as info:
        load_model("deepseek-v3.1")
    assert any("DeepSeek-V3" in m for m in info.value.close_matches)


def test_aliases_and_paths(tmp_path: Path) -> None:
    assert load_model("llama-3.1-8b").name == "meta-llama/Llama-3.1-8B"
    assert load_model("Llama-3.1-8B").name == "meta-llama/Llama-3.1-8B"
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))
    assert load_model(str(tmp_path)).total_params == load_model("llama-3.1-8b").total_params
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(KvscopeError, match="not valid JSON"):
        load_model(str(tmp_path / "bad.json"))
    with pytest.raises(KvscopeError, match="no such file"):
        load_model(str(tmp_path / "missing.json"))


def load_model_path(pid: str) -> Path:
    from kvscope.specs.registry import find_preset

    p = find_preset(pid)
    assert p is not None
    return p.path


@settings(max_examples=60, deadline=None)
@given(
    layers=st.integers(1, 96),
    heads_pow=st.integers(0, 6),
    kv_div=st.integers(0, 6),
    head_dim=st.sampled_from([64, 80, 96, 128, 256]),
    tp=st.sampled_from([1, 2, 4, 8, 16]),
    ctx=st.integers(1, 200_000),
)
def test_gqa_kv_invariants(
    layers: int, heads_pow: int, kv_div: int, head_dim: int, tp: int, ctx: int
) -> None:
    heads = 2**heads_pow
    kv_heads = max(1, heads // 2**kv_div)
    cfg = _with(
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
    )
    m = parse_config(cfg)
    per_token = m.kv_bytes_per_token(tp=tp)
    # A full-attention model holds exactly context x per-token bytes.
    assert m.kv_bytes_for_request(ctx, tp=tp) == ctx * per_token
    # Every rank keeps at least one head; ranks together hold at least the whole cache.
    assert per_token >= layers * 2 * head_dim * 2
    assert per_token * tp >= m.kv_bytes_per_token(tp=1)
    # fp8 halves a bf16 cache exactly.
    assert m.kv_bytes_per_token("fp8", tp=tp) * 2 == per_token


@settings(max_examples=40, deadline=None)
@given(
    ctx_a=st.integers(0, 2_000_000),
    ctx_b=st.integers(0, 2_000_000),
    idx=st.sampled_from(["fp8", "fp4"]),
)
def test_dsv4_request_bytes_monotone_and_linear_in_the_long_run(
    ctx_a: int, ctx_b: int, idx: str
) -> None:
    m = load_model("deepseek-ai/DeepSeek-V4-Flash")
    lo, hi = sorted((ctx_a, ctx_b))
    a = m.kv_bytes_for_request(lo, "fp8", indexer_dtype=idx)
    b = m.kv_bytes_for_request(hi, "fp8", indexer_dtype=idx)
    assert a <= b
    # Past the window, growth never exceeds the amortised history rate (+1 entry of rounding).
    if lo >= 128:
        slack = 21 * (584 + 132) + 20 * 584
        assert b - a <= (hi - lo) * m.kv_bytes_per_token("fp8", indexer_dtype=idx) + slack
