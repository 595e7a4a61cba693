"""Qwen3-Next, the attention + Gated DeltaNet hybrid: its config, weights and vLLM KV layout.

Pinned to one public vLLM 0.10.2 start-up on two H200 (tests/plan/data/engine_logs.csv row
``h200-qwen3-next-80b-tp2-0.10.2``), whose log states the layout vLLM chose: "Setting
attention block size to 544 tokens to ensure that attention page size is >= mamba page size"
and "Padding mamba page size by 1.49%", then 973,760 tokens at 14.77x for 262,144-token
requests from 44.59 GiB.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import one_error_line, run_in_process
from kvscope.errors import ConfigError
from kvscope.plan.kv_layout import vllm_layout
from kvscope.specs.config_parse import parse_config
from kvscope.specs.registry import load_model

CONFIG = (
    Path(__file__).parents[1] / "plan" / "data" / "configs" / "qwen3-next-80b-a3b-instruct.json"
)


def _raw() -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(CONFIG.read_text())
    return raw


def test_layers_and_parameters() -> None:
    m = load_model(str(CONFIG))
    assert m.attention_kinds == {"gdn": 36, "full": 12}
    assert [i for i, layer in enumerate(m.layers) if layer.attention.kind == "full"][:3] == [
        3,
        7,
        11,
    ]
    # model card: 80B parameters in all, 3B activated (ours counts embeddings and lm_head)
    assert m.total_params == pytest.approx(80e9, rel=0.01)
    assert 3.0e9 < m.active_params < 4.0e9


def test_state_and_layout_match_the_logged_block_size() -> None:
    m = load_model(str(CONFIG))
    gdn = m.layers[0].attention
    # The log's 544-token page (1,024 B a token at TP2) is the state padded by 1.49 %: the
    # state is 536 tokens' worth, 548,864 B per layer on each rank.
    assert gdn.gdn_state_bytes(2) == 536 * 1024
    layout = vllm_layout(m, tuple(range(48)), "bfloat16", 2, 16)
    assert layout.block_size == 544
    page = 544 * 1 * 256 * 2 * 2  # one KV head of 256 per rank, K and V, bf16
    assert page / gdn.gdn_state_bytes(2) == pytest.approx(1.0149, abs=1e-4)  # "by 1.49%"
    assert len(layout.groups) == 4 and layout.block_bytes == 12 * page
    # a 262,144-token request: its full-attention blocks plus one state block per linear group
    assert layout.blocks_per_request(262_144, 8192) == math.ceil(262_144 / 544) + 3


def test_bad_layer_types_are_named() -> None:
    raw = _raw()
    raw["layer_types"] = ["linear_attention"] * 47 + ["mamba"]
    with pytest.raises(ConfigError, match="layer_types"):
        parse_config(raw, "cfg.json")
    raw = _raw()
    raw["linear_num_value_heads"] = 20
    with pytest.raises(ConfigError, match="linear_num_value_heads"):
        parse_config(raw, "cfg.json")


def test_sglang_refuses_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # 0.5.5 predates the mamba pool split kvscope reads (handle_max_mamba_cache, 0.5.6-0.5.23)
    argv = ["plan", "--model", str(CONFIG), "--gpu", "h200", "--tp", "2", "--engine", "sglang"]
    argv += ["--engine-version", "0.5.5"]
    code, _, err = run_in_process(argv, capsys)
    one_error_line(code, err, "mamba pool", "--engine vllm")


QWEN35 = CONFIG.with_name("qwen3.5-27b.json")


def test_qwen35_fp32_recurrent_state_sets_a_784_token_block() -> None:
    # vllm#40691 (Qwen3.5-27B, vLLM 0.19.0): 290,864 tokens at 33.04x for 32,768-token
    # requests are 1,487 blocks of 784 tokens in 4 groups (1487 // 4 x 784 = 290,864 and
    # 1487 / (42 + 3) = 33.04): the block one attention page needs to hold the state whose
    # recurrent part is fp32 (mamba_ssm_dtype); in bf16 the block would be 400 tokens.
    m = load_model(str(QWEN35))
    assert m.model_type == "qwen3_5_text" and m.attention_kinds == {"gdn": 48, "full": 16}
    layout = vllm_layout(m, tuple(range(64)), "bfloat16", 1, 16)
    assert layout.block_size == 784 and len(layout.groups) == 4
    assert 1487 // 4 * layout.block_size == 290_864
    assert layout.blocks_per_request(32_768, 16_384) == 45
    raw = json.loads(QWEN35.read_text())
    del raw["text_config"]["mamba_ssm_dtype"]
    bf16 = parse_config(raw, "cfg.json")
    assert vllm_layout(bf16, tuple(range(64)), "bfloat16", 1, 16).block_size == 400


def test_qwen35_vision_tower_and_bad_ssm_dtype() -> None:
    m = load_model(str(QWEN35))
    assert m.total_params == pytest.approx(27e9, rel=0.02)  # model card: 27B
    raw = json.loads(QWEN35.read_text())
    del raw["vision_config"]
    text_only = parse_config(raw, "cfg.json")
    assert m.vision_params > 0 and m.total_params - text_only.total_params == m.vision_params
    raw = json.loads(QWEN35.read_text())
    raw["text_config"]["mamba_ssm_dtype"] = "float12"
    with pytest.raises(ConfigError, match="mamba_ssm_dtype"):
        parse_config(raw, "cfg.json")
