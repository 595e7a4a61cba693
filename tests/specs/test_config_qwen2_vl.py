"""Qwen2-VL / Qwen2.5-VL wrappers: the Qwen2 text decoder read from either config layout, the
vision tower counted, and bad input refused in one line.

Published totals (the model cards' parameter counts, rounded there to three figures): Qwen2.5-VL
3B 3.75B, 7B 8.29B, 32B 33.5B, 72B 73.4B; Qwen2-VL 2B 2.21B, 7B 8.29B, 72B 73.4B. Exact pins:
Qwen2.5-VL-7B's text model is Qwen2.5-7B's 7,615,616,512 weights (the preset kvscope ships), and
its tower adds 676,550,144 (8,292,166,656 in all, the checkpoint's bf16 safetensors total).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import one_error_line, run_in_process
from kvscope.errors import ConfigError
from kvscope.specs.config_parse import parse_config
from kvscope.specs.registry import load_model

CONFIGS = Path(__file__).parents[1] / "plan" / "data" / "configs"

PUBLISHED = {
    "qwen2.5-vl-3b-instruct.json": 3.75e9,
    "qwen2.5-vl-7b-instruct.json": 8.29e9,
    "qwen2.5-vl-32b-instruct.json": 33.5e9,
    "qwen2.5-vl-72b-instruct.json": 73.4e9,
    "qwen2-vl-2b-instruct.json": 2.21e9,
    "qwen2-vl-7b-instruct.json": 8.29e9,
    "qwen2-vl-72b-instruct.json": 73.4e9,
}
#: text keys transformers >= 4.52 moves under text_config
TEXT_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_hidden_layers",
    "num_key_value_heads",
    "max_position_embeddings",
    "vocab_size",
    "rms_norm_eps",
    "rope_theta",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "rope_scaling",
)


def _raw(name: str) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads((CONFIGS / name).read_text())
    return raw


def _nested(raw: dict[str, Any]) -> dict[str, Any]:
    """The same checkpoint saved by a newer transformers: text keys under text_config, the
    wrapper keeping tie_word_embeddings and the dtype."""
    out = copy.deepcopy(raw)
    text = {k: out.pop(k) for k in TEXT_KEYS if k in out}
    text["model_type"] = out["model_type"] + "_text"
    out["text_config"] = text
    out["vision_config"]["model_type"] = out["model_type"]
    return out


@pytest.mark.parametrize(("name", "published"), sorted(PUBLISHED.items()))
def test_total_matches_the_published_count(name: str, published: float) -> None:
    model = parse_config(_raw(name), name)
    assert model.model_type == "qwen2"
    assert abs(model.total_params / published - 1) < 0.003, model.total_params


def test_qwen25_vl_7b_is_qwen25_7b_plus_its_tower() -> None:
    model = load_model(str(CONFIGS / "qwen2.5-vl-7b-instruct.json"))
    text = load_model("Qwen/Qwen2.5-7B-Instruct")
    assert model.vision_params == 676_550_144
    assert model.total_params == text.total_params + model.vision_params == 8_292_166_656
    assert model.kv_bytes_per_token("bfloat16") == text.kv_bytes_per_token("bfloat16")


def test_the_two_towers_differ_as_their_mlps_do() -> None:
    """Same depth and width; Qwen2-VL's LayerNorm + 4x GELU MLP against Qwen2.5-VL's RMSNorm +
    SwiGLU of 3420: 791,040 fewer weights in Qwen2-VL-7B's tower."""
    q25 = parse_config(_raw("qwen2.5-vl-7b-instruct.json"))
    q2 = parse_config(_raw("qwen2-vl-7b-instruct.json"))
    assert q25.vision_params - q2.vision_params == 791_040
    assert q2.total_params == 8_291_375_616


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_either_layout_gives_the_same_model(name: str) -> None:
    flat = parse_config(_raw(name), name)
    nested = parse_config(_nested(_raw(name)), name)
    assert nested.model_type == "qwen2"
    assert nested.total_params == flat.total_params
    assert nested.tie_word_embeddings == flat.tie_word_embeddings
    assert nested.kv_bytes_per_token("bfloat16") == flat.kv_bytes_per_token("bfloat16")
    assert nested.vision_output == flat.vision_output


def test_tower_output_as_the_profiling_pass_reads_it() -> None:
    q25 = parse_config(_raw("qwen2.5-vl-72b-instruct.json")).vision_output
    q2 = parse_config(_raw("qwen2-vl-2b-instruct.json")).vision_output
    assert q25 is not None and q2 is not None
    assert (q25.kind, q25.out_width, q25.width, q25.intermediate, q25.heads) == (
        "qwen2_5_vl",
        8192,
        1280,
        3420,
        16,
    )
    assert (q2.kind, q2.out_width, q2.width, q2.intermediate) == ("qwen2_vl", 1536, 1280, 5120)
    assert q25.patch_values == q2.patch_values == 3 * 2 * 14 * 14


@pytest.mark.parametrize(
    ("name", "key"),
    [("qwen2.5-vl-7b-instruct.json", "depth"), ("qwen2-vl-7b-instruct.json", "embed_dim")],
)
def test_missing_tower_key_is_named(name: str, key: str) -> None:
    raw = _raw(name)
    del raw["vision_config"][key]
    with pytest.raises(ConfigError, match=f"vision_config.{key}' is missing"):
        parse_config(raw, "cfg.json")


def test_missing_key_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = _nested(_raw("qwen2.5-vl-3b-instruct.json"))
    del raw["text_config"]["num_attention_heads"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    code, _, err = run_in_process(["plan", "--model", str(path), "--gpu", "h100"], capsys)
    one_error_line(code, err, "num_attention_heads", "missing", str(path))
