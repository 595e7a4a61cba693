"""Qwen3-VL wrappers: their text decoder read as the Qwen3 / Qwen3-MoE family, their tower counted.

vLLM builds Qwen3-VL's language model as ``Qwen3MoeLLMForCausalLM`` (vllm/model_executor/
models/qwen3_vl_moe.py at v0.11.0), the Qwen3-MoE decoder, so the wrapper's
``qwen3_vl_moe_text`` config must plan exactly as Qwen3-30B-A3B does; the vision tower is the
Qwen3VLVisionModel that Qwen3.5 also uses. Pinned end to end by the row
``nanokvm-4x3090-qwen3vl30b-tp4-0.11.0`` (weights 14.55 vs the logged 14.77 GiB a rank).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvscope.errors import ConfigError
from kvscope.specs.config_parse import parse_config
from kvscope.specs.registry import load_model

CONFIG = Path(__file__).parents[1] / "plan" / "data" / "configs" / "qwen3-vl-30b-a3b-instruct.json"


def test_text_decoder_plans_as_qwen3_30b_a3b() -> None:
    vl = load_model(str(CONFIG))
    raw = json.loads(CONFIG.read_text())
    del raw["vision_config"]
    text_only = parse_config(raw, "cfg.json")
    qwen3 = load_model("Qwen/Qwen3-30B-A3B")
    assert vl.model_type == "qwen3_moe"
    assert text_only.total_params == qwen3.total_params
    assert text_only.kv_bytes_per_token("bfloat16") == qwen3.kv_bytes_per_token("bfloat16")
    # the tower (27 blocks of width 1152, three deepstack mergers) is what the wrapper adds
    assert vl.vision_params == vl.total_params - text_only.total_params
    assert 0.5e9 < vl.vision_params < 0.7e9


def test_unknown_wrapped_text_type_is_still_refused() -> None:
    raw = json.loads(CONFIG.read_text())
    raw["text_config"]["model_type"] = "qwen9_vl_text"
    with pytest.raises(ConfigError, match="qwen9_vl_text"):
        parse_config(raw, "cfg.json")
