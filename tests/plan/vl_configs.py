"""Vision-language configs the encoder-profile tests share, built from the real checkpoints'
config.json files under data/configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvscope.specs.config_parse import parse_config
from kvscope.specs.model import ModelSpec

CONFIGS = Path(__file__).parent / "data" / "configs"
#: Llama 4 Scout's config.json (the specs tests' copy of the checkpoint's file).
SCOUT = (
    Path(__file__).parents[1]
    / "specs"
    / "data"
    / "configs"
    / "meta-llama--Llama-4-Scout-17B-16E-Instruct.json"
)


def scout_raw() -> dict[str, Any]:
    """Llama 4 Scout's config.json as a fresh mapping (callers may edit it)."""
    raw: dict[str, Any] = json.loads(SCOUT.read_text())
    return raw


def llama4_scout() -> ModelSpec:
    """Llama 4 Scout (``Llama4ForConditionalGeneration``: chunked local attention, MoE, vision)."""
    return parse_config(scout_raw(), "meta-llama/Llama-4-Scout-17B-16E-Instruct")


def dense_qwen3_vl() -> ModelSpec:
    """Qwen3-VL-30B-A3B's config with a dense text tower (``Qwen3VLForConditionalGeneration``,
    12,288-wide MLP): neither MoE nor hybrid, so vLLM runs it on the V2 runner from 0.25."""
    raw = json.loads((CONFIGS / "qwen3-vl-30b-a3b-instruct.json").read_text())
    text = raw["text_config"]
    text["model_type"] = "qwen3_vl_text"
    text["intermediate_size"] = 12288
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "mlp_only_layers"):
        text.pop(key, None)
    raw["vision_config"]["model_type"] = "qwen3_vl"
    return parse_config(raw, "cfg.json")
