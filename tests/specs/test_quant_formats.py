"""AutoRound, ModelOpt and compressed-tensors FP4 checkpoints: bytes per parameter by component,
the module lists that keep components unquantized, and bad quantization blocks as one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import one_error_line, run_in_process
from kvscope.errors import KvscopeError
from kvscope.specs.config_parse import parse_config
from kvscope.specs.model import ModelSpec
from kvscope.specs.quant_formats import MXFP4_GROUP_BYTES, NVFP4_BYTES
from kvscope.specs.quant_scope import unconverted_components

PLAN_CONFIGS = Path(__file__).parents[1] / "plan" / "data" / "configs"


def _qwen3_8b(qc: dict[str, Any] | None = None, dtype: str = "bfloat16") -> ModelSpec:
    raw = json.loads((PLAN_CONFIGS / "qwen3-8b.json").read_text())
    raw["torch_dtype"] = dtype
    if qc is not None:
        raw["quantization_config"] = qc
    return parse_config(raw, "qwen3-8b.json")


AUTO_ROUND = {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True}


@pytest.mark.parametrize(
    ("packing", "twin"),
    [
        # Qwen/Qwen3-8B-AWQ's block: planned 5.69 GiB where two vLLM logs on a 48 GB RTX 4090
        # printed 5.71 (engine_logs.csv); AutoRound's AWQ packing stores the same tensors.
        ("auto_round:auto_awq", {"quant_method": "awq", "bits": 4, "group_size": 128}),
        ("auto_round:auto_gptq", {"quant_method": "gptq", "bits": 4, "group_size": 128}),
    ],
)
def test_auto_round_int4_weighs_what_its_packing_format_weighs(
    packing: str, twin: dict[str, Any]
) -> None:
    ar = _qwen3_8b({**AUTO_ROUND, "packing_format": packing}, "float16")
    other = _qwen3_8b(twin, "float16")
    assert ar.quantization.method == "auto-round"
    assert ar.weight_bytes == pytest.approx(other.weight_bytes)


def test_auto_round_accepts_vllms_inc_method_name() -> None:
    raw = json.loads((PLAN_CONFIGS / "qwen3-8b.json").read_text())
    raw["quantization_config"] = AUTO_ROUND
    for flag in ("inc", "auto-round"):
        m = parse_config(raw, "q.json", quantization=flag)
        assert m.quantization.method == "auto-round"
    with pytest.raises(KvscopeError, match="quant_method"):
        parse_config(raw, "q.json", quantization="gptq")


def test_auto_round_extra_config_keeps_or_rewidens_modules() -> None:
    qc = {
        **AUTO_ROUND,
        "extra_config": {
            r".*self_attn.*": {"bits": 16, "data_type": "float"},  # a regex key
            "model.layers.0.mlp.down_proj": {"bits": 8},
            "lm_head": {"bits": 16},
        },
    }
    m = _qwen3_8b(qc)
    per = {k: m.weight_bytes[k] / m.params[k] for k in m.params if m.params[k]}
    assert per["attention"] == 2.0
    assert per["dense_ffn"] == pytest.approx(1 + (2 + 1) / 128)  # int8, scale + zero per 128
    assert m.quantization.unconverted == ("attention",)
    plain = _qwen3_8b(AUTO_ROUND)
    assert plain.weight_bytes["attention"] == pytest.approx(
        plain.params["attention"] * (0.5 + 2.5 / 128)
    )


def test_auto_round_fp4_data_types() -> None:
    nv = _qwen3_8b({**AUTO_ROUND, "data_type": "nv_fp", "group_size": 16})
    mx = _qwen3_8b({**AUTO_ROUND, "data_type": "mx_fp", "group_size": 32})
    assert nv.quantization.linear_bytes == NVFP4_BYTES
    assert mx.quantization.linear_bytes == MXFP4_GROUP_BYTES


@pytest.mark.parametrize(
    ("fmt", "group", "expected"),
    [("nvfp4-pack-quantized", 16, NVFP4_BYTES), ("mxfp4-pack-quantized", 32, MXFP4_GROUP_BYTES)],
)
def test_compressed_tensors_fp4_groups(fmt: str, group: int, expected: float) -> None:
    qc = {
        "quant_method": "compressed-tensors",
        "format": fmt,
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "float", "group_size": group},
            }
        },
        "ignore": ["lm_head", "re:.*self_attn.*"],
    }
    m = _qwen3_8b(qc)
    assert m.quantization.linear_bytes == expected
    assert m.weight_bytes["attention"] == 2 * m.params["attention"]
    assert m.weight_bytes["dense_ffn"] == pytest.approx(expected * m.params["dense_ffn"])


@pytest.mark.parametrize(
    ("patterns", "layers", "kept"),
    [
        # nvidia/GLM-5-NVFP4 exclude_modules (a sample): attention projections, the indexer,
        # and the MTP layer 78 (past the 78 decoder layers, so not a decoder component)
        (["model.layers.3.self_attn.kv_b_proj", "model.layers.3.self_attn.indexer*",
          "model.layers.78*", "lm_head"], 78, ("attention",)),
        # nvidia/Kimi-K2.6-NVFP4: wrapper prefix, shared experts and attention wildcards
        (["language_model.model.layers.4.mlp.shared_experts*",
          "language_model.model.layers.4.self_attn*", "vision_tower*"], 61,
         ("attention", "shared_experts")),
        # routers and norms (zai-org/GLM-5-FP8 modules_to_not_convert) are no linear component
        (["model.layers.3.mlp.gate", "model.layers.3.self_attn.indexers_proj",
          "model.layers.3.self_attn.kv_a_layernorm"], 78, ()),
        (["model.layers.0*"], 78, ()),  # one whole layer: not a component of every layer
    ],
)  # fmt: skip
def test_module_lists_name_components(
    patterns: list[str], layers: int, kept: tuple[str, ...]
) -> None:
    assert unconverted_components(patterns, layers) == kept


def test_mixed_precision_modelopt_takes_each_modules_scheme() -> None:
    # nvidia/Qwen3.6-27B-NVFP4's layout: FP8 attention, W4A16_NVFP4 MLPs and LM head, the
    # embedding (and what no entry names) left in bf16
    layers = {
        "model.language_model.layers.3.self_attn.q_proj": {"quant_algo": "FP8"},
        "model.language_model.layers.3.mlp.down_proj": {"quant_algo": "W4A16_NVFP4"},
        "model.language_model.layers.4.mlp.up_proj": {"quant_algo": "W4A16_NVFP4"},
        "model.language_model.layers.5.mlp.up_proj": {"quant_algo": "FP8"},  # outvoted
        "lm_head": {"quant_algo": "W4A16_NVFP4", "group_size": 16},
    }
    qc = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": layers}
    m = _qwen3_8b(qc)
    per = {k: m.weight_bytes[k] / m.params[k] for k in m.params if m.params[k]}
    assert per["attention"] == 1.0
    assert per["dense_ffn"] == per["lm_head"] == NVFP4_BYTES
    assert per["embedding"] == 2.0
    assert m.quantization.method == "modelopt_mixed"


def test_modelopt_flag_runs_any_modelopt_checkpoint() -> None:
    # vLLM's ModelOpt configs take the kernel from the checkpoint's quant_algo and replace the
    # flag (override_quantization_method, vllm/config/model.py of 0.27.1): a `--quantization
    # modelopt` start of an NVFP4 or mixed-precision checkpoint runs; another method does not.
    layers = {"model.layers.0.mlp.down_proj": {"quant_algo": "W4A16_NVFP4"}}
    mixed = {
        "quant_method": "modelopt",
        "quant_algo": "MIXED_PRECISION",
        "quantized_layers": layers,
    }
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    for qc, method in ((mixed, "modelopt_mixed"), (nvfp4, "modelopt_fp4")):
        raw = {
            **json.loads((PLAN_CONFIGS / "qwen3-8b.json").read_text()),
            "quantization_config": qc,
        }
        for flag in ("modelopt", "modelopt_fp4", "modelopt_mixed"):
            assert parse_config(raw, quantization=flag).quantization.method == method
        with pytest.raises(KvscopeError, match="quant_method"):
            parse_config(raw, quantization="awq")


# ----------------------------------------------------------------- bad input, through the CLI
def _plan_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: dict[str, Any]
) -> tuple[int, str]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    code, _, err = run_in_process(["plan", "--model", str(path), "--gpu", "b200"], capsys)
    return code, err


def _family(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((PLAN_CONFIGS / name).read_text())
    return data


@pytest.mark.parametrize(
    ("name", "path", "field"),
    [
        ("glm-5.json", ("index_head_dim",), "index_head_dim"),
        ("glm-5.json", ("kv_lora_rank",), "kv_lora_rank"),  # not planned as GQA instead
        ("kimi-k2.5.json", ("vision_config", "vt_hidden_size"), "vision_config.vt_hidden_size"),
        ("kimi-k2.5.json", ("text_config", "moe_intermediate_size"), "moe_intermediate_size"),
        ("kimi-k2.5-nvfp4.json", ("quantization_config", "quant_algo"), "quant_algo"),
    ],
)
def test_missing_key_names_key_and_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    path: tuple[str, ...],
    field: str,
) -> None:
    raw = _family(name)
    block = raw
    for key in path[:-1]:
        block = block[key]
    del block[path[-1]]
    code, err = _plan_file(tmp_path, capsys, raw)
    one_error_line(code, err, field, "config.json")


@pytest.mark.parametrize(
    ("qc", "needle"),
    [
        ({**AUTO_ROUND, "bits": "four"}, "quantization_config.bits"),
        ({**AUTO_ROUND, "data_type": "fp", "bits": 16}, "quantization_config.data_type"),
        ({**AUTO_ROUND, "extra_config": ["lm_head"]}, "quantization_config.extra_config"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore": "lm_head"}, "ignore"),
        ({"quant_method": "modelopt", "quant_algo": "INT3"}, "quant_algo"),
        ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}, "quantized_layers"),
        ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION",
          "quantized_layers": {"lm_head": {"quant_algo": "W2"}}}, "lm_head.quant_algo"),
        ({"producer": {"name": "modelopt"}, "quant_method": "modelopt_fp4",
          "quantization": {"quant_algo": "NVFP4", "exclude_modules": 7}}, "exclude_modules"),
    ],
)  # fmt: skip
def test_bad_quantization_block_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], qc: dict[str, Any], needle: str
) -> None:
    raw = _family("qwen3-8b.json")
    raw["quantization_config"] = qc
    code, err = _plan_file(tmp_path, capsys, raw)
    one_error_line(code, err, needle)
