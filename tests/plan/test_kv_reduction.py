"""DeepSeek-V2's KV reduction reproduced with its basis (arXiv 2405.04434).

DeepSeek LLM 67B shape from its paper (arXiv 2401.02954, Table 2): 95 layers, hidden 8192,
64 query heads, 8 KV heads, FFN 22016, vocab 102400.
"""

from __future__ import annotations

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.kv_reduction import kv_elements_per_token, kv_reduction, mha_counterfactual
from kvscope.specs.config_parse import parse_config
from kvscope.specs.registry import load_model

V2 = load_model("deepseek-ai/DeepSeek-V2")
DS67B = parse_config(
    {
        "model_type": "llama",
        "hidden_size": 8192,
        "num_hidden_layers": 95,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 22016,
        "vocab_size": 102400,
        "torch_dtype": "bfloat16",
    },
    "DeepSeek LLM 67B (arXiv 2401.02954)",
    "deepseek-llm-67b",
)


def test_baseline_is_the_published_67b() -> None:
    assert DS67B.total_params == pytest.approx(67.4e9, rel=0.005)
    assert kv_elements_per_token(DS67B) == 194_560


def test_v2_keeps_576_elements_per_layer() -> None:
    # Paper Table 1: MLA caches (d_c + d_h^R) l = (512 + 64) x 60.
    assert kv_elements_per_token(V2) == 34_560


def test_paper_93_3_percent_is_v2_at_6_bits_vs_67b_at_16_bits() -> None:
    r = kv_reduction(V2, DS67B, model_bits=6, baseline_bits=16)
    assert round(r.reduction * 100, 1) == 93.3
    assert "6 bit" in r.basis and "16 bit" in r.basis


def test_same_dtype_reduction_is_82_percent() -> None:
    assert round(kv_reduction(V2, DS67B).reduction * 100, 1) == 82.2


def test_same_shape_mha_counterfactual_matches_paper_table_1() -> None:
    # MHA: 2 n_h d_h l = 2 x 128 x 128 x 60; MLA is (9/2) d_h l, i.e. 2.25 GQA groups.
    mha = mha_counterfactual(V2)
    assert kv_elements_per_token(mha) == 2 * 128 * 128 * 60
    r = kv_reduction(V2)
    assert round(r.reduction * 100, 1) == 98.2
    assert r.model_elements_per_token / (2 * 128 * 60) == pytest.approx(2.25)


def test_gqa_counterfactual_restores_all_heads() -> None:
    llama = load_model("meta-llama/Llama-3.1-8B")
    # 8 of 32 heads keep K/V: GQA saves 75 % against MHA of the same shape.
    assert kv_reduction(llama).reduction == pytest.approx(0.75)


def test_non_positive_bits_are_rejected() -> None:
    with pytest.raises(KvscopeError):
        kv_reduction(V2, DS67B, model_bits=0)
