"""Kimi K3 and Kimi-Linear-48B-A3B (KDA linear attention beside gated MLA) in the planner.

Configs: ``data/configs/kimi-k3.json`` and ``kimi-linear-48b-a3b.json`` (sources in
``data/configs/SOURCES.md``), planned by their Hugging Face ids through the test Hub cache. No
public start-up log of either checkpoint with a KV figure was found, so they are pinned to the
K3 checkpoint's safetensors listing (shapes and bytes), the Kimi Linear README's parameter
count, literal figures vLLM 0.34.0's own spec classes print for them
(``benchmarks/vllm_oracle_kda.py``, run here as a slow differential test) and invariants.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import run_kvscope
from kvscope.errors import ConfigError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_layout import vllm_layout
from kvscope.plan.memory import plan_memory
from kvscope.plan.weights import rank_weights
from kvscope.specs.config_parse import parse_config
from kvscope.specs.hardware import get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.specs.registry import load_model

from .log_cases import offline_hub

CONFIGS = Path(__file__).with_name("data") / "configs"
ORACLE = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_oracle_kda.py"
GIB = 1 << 30

#: moonshotai/Kimi-K3's safetensors listing (497,220 tensors): (tensor, shape, layers holding
#: it) per component, with the packed MXFP4 experts given at their unpacked element counts
#: (``weight_packed`` [3072, 1792] uint8 = 3072 x 3584 fp4) and their scales left out.
K3_LISTING: dict[str, list[tuple[str, tuple[int, ...], int]]] = {
    "attention": [
        ("kda.A_log", (128,), 69),
        ("kda.b_proj", (96, 7168), 69),
        ("kda.dt_bias", (12288,), 69),
        ("kda.f_a_proj", (128, 7168), 69),
        ("kda.f_b_proj", (12288, 128), 69),
        ("kda.q/k/v_conv1d", (3, 12288, 1, 4), 69),
        ("kda.q/k/v_proj", (3, 12288, 7168), 69),
        ("kda.o_norm", (128,), 69),
        ("all.g_proj", (12288, 7168), 93),
        ("all.o_proj", (7168, 12288), 93),
        ("mla.kv_a_layernorm", (512,), 24),
        ("mla.kv_a_proj_with_mqa", (576, 7168), 24),
        ("mla.kv_b_proj", (24576, 512), 24),
        ("mla.q_a_layernorm", (1536,), 24),
        ("mla.q_a_proj", (1536, 7168), 24),
        ("mla.q_b_proj", (18432, 1536), 24),
    ],
    "dense_ffn": [("mlp.gate/up/down_proj", (3, 33792, 7168), 1)],
    "routed_experts": [("experts.w1/w2/w3", (896, 3, 3072, 3584), 92)],
    "shared_experts": [("shared_experts.gate/up/down", (3, 6144, 7168), 92)],
    "router": [
        ("gate.weight", (896, 7168), 92),
        ("gate.e_score_correction_bias", (896,), 92),
        ("routed_expert_down/up_proj", (2, 3584, 7168), 92),
        ("routed_expert_norm", (3584,), 92),
    ],
    "norms_other": [
        ("input/post_attention/attn_res/mlp_res norms and res projections", (6, 7168), 93),
        ("norm, output_attn_res_norm, output_attn_res_proj", (3, 7168), 1),
    ],
    "vision_tower": [
        ("blocks.wqkv", (4608, 1024), 27),
        ("blocks.wo", (1024, 1536), 27),
        ("blocks.fc0/fc1", (2, 4096, 1024), 27),
        ("blocks.norm0/norm1", (2, 1024), 27),
        ("final_layernorm", (1024,), 1),
        ("patch_embed.pos_emb", (64, 64, 1024), 1),
        ("patch_embed.proj", (1024, 3, 14, 14), 1),
        ("mm_projector.proj.0", (4096, 4096), 1),
        ("mm_projector.proj.2", (7168, 4096), 1),
        ("mm_projector.post_norm", (7168,), 1),
    ],
}
#: the listing's "张量累计大小" (summed tensor bytes), GiB
K3_CHECKPOINT_GIB = 1453.66
#: one KDA layer's state per request on a TP rank, and one MLA token's page, as vLLM 0.34.0's
#: ``MambaSpec(kda_state_shape, kda_state_dtype).page_size_bytes`` and ``MLAAttentionSpec``
#: print them (benchmarks/vllm_oracle_kda.py)
VLLM_KDA_STATE = {
    ("kimi-k3", 4): 1_628_160,
    ("kimi-k3", 8): 814_080,
    ("kimi-k3", 16): 407_040,
    ("kimi-linear-48b-a3b", 1): 2_170_880,
    ("kimi-linear-48b-a3b", 2): 1_085_440,
    ("kimi-linear-48b-a3b", 4): 542_720,
}
VLLM_MLA_PAGE = {"bfloat16": 1152, "fp8": 576}


def _by_name(repo_id: str) -> ModelSpec:
    with offline_hub():
        return load_model(repo_id)


@pytest.fixture(scope="module")
def k3() -> ModelSpec:
    return _by_name("moonshotai/Kimi-K3")


@pytest.fixture(scope="module")
def linear48() -> ModelSpec:
    return _by_name("moonshotai/Kimi-Linear-48B-A3B-Instruct")


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_k3_parameters_equal_its_checkpoint_listing(k3: ModelSpec) -> None:
    # Every component to within the two listing details kvscope does not carry: A_log is
    # listed with 128 values (kvscope: one per head, 96) and the router's
    # e_score_correction_bias (896 a layer).
    listed = {
        comp: sum(_count(shape) * layers for _, shape, layers in rows)
        for comp, rows in K3_LISTING.items()
    }
    assert listed["attention"] - k3.params["attention"] == 69 * (128 - 96)
    assert listed["router"] - k3.params["router"] == 92 * 896
    for comp in ("dense_ffn", "routed_experts", "shared_experts", "norms_other", "vision_tower"):
        assert k3.params[comp] == listed[comp], comp
    assert k3.params["embedding"] == k3.params["lm_head"] == 163_840 * 7168
    # "a 2.8T-param natively-multimodal MoE (896 experts, 16 routed + 2 shared)": the K3
    # recipe's description, github.com/SemiAnalysisAI/InferenceX/pull/2351
    assert k3.total_params == pytest.approx(2.8e12, rel=0.01)


def test_k3_weight_bytes_match_the_checkpoint(k3: ModelSpec) -> None:
    # mxfp4 routed experts (e2m1 + an e8m0 scale per 32), everything else bf16 as listed;
    # kvscope adds vLLM's 0.125 GiB rotary cache (1,048,576 positions x 64 x bf16).
    w = rank_weights(k3, Parallelism(tp=1))
    total = sum(w.by_component.values()) - w.by_component["rope_cache"]
    assert total / GIB == pytest.approx(K3_CHECKPOINT_GIB, rel=2e-4)
    assert w.by_component["routed_experts"] / GIB == pytest.approx(1347.1, rel=1e-3)


def test_kimi_linear_48b_parameters_against_its_readme(linear48: ModelSpec) -> None:
    # README (github.com/MoonshotAI/Kimi-Linear): 48B total, 3B activated; the tensors hold
    # 49.1B with embedding and head, 3.5B touched a token.
    assert 48e9 <= linear48.total_params < 49.5e9
    assert 3e9 <= linear48.active_params < 3.6e9
    kinds = [layer.attention.kind for layer in linear48.layers]
    assert kinds.count("gdn") == 20 and kinds.count("mla") == 7
    assert kinds[3] == kinds[26] == "mla"  # full_attn_layers 4 ... 24, 27 (1-based)


@pytest.mark.parametrize(("name", "tp"), sorted(VLLM_KDA_STATE))
def test_kda_state_per_request_equals_vllms(name: str, tp: int) -> None:
    path = CONFIGS / f"{name}.json"
    model = parse_config(json.loads(path.read_text()), str(path))
    kda = next(layer.attention for layer in model.layers if layer.attention.kind == "gdn")
    caches = kda.kv_caches("bfloat16", tp)
    assert [c.bytes_per_token for c in caches] == [0.0]  # nothing grows with the context
    assert caches[0].bytes_for(1) == caches[0].bytes_for(1_000_000) == VLLM_KDA_STATE[name, tp]


@pytest.mark.parametrize("dtype", sorted(VLLM_MLA_PAGE))
def test_only_the_mla_layers_grow_with_context(k3: ModelSpec, dtype: str) -> None:
    per_token = [
        sum(c.bytes_per_token for c in layer.attention.kv_caches(dtype, 8)) for layer in k3.layers
    ]
    assert sorted(set(per_token)) == [0.0, VLLM_MLA_PAGE[dtype]]
    assert sum(per_token) == 24 * VLLM_MLA_PAGE[dtype]  # the latent is not split over TP


def test_k3_block_size_follows_the_release_rule(k3: ModelSpec) -> None:
    layers = tuple(range(k3.num_layers))
    new = vllm_layout(k3, layers, "bfloat16", 8, 16, release=(0, 34, 0))
    # 0.27+: the smallest multiple of 128 tokens whose MLA page holds the 814,080-B state
    assert new.block_size == 768 and new.block_bytes == 768 * 1152 * 24
    # at TP4 (1,628,160 B) the 128-token rule and the 64-token one before 0.27 part ways
    at_tp4 = [
        vllm_layout(k3, layers, "bfloat16", 4, 16, release=r) for r in ((0, 34, 0), (0, 19, 0))
    ]
    assert [lay.block_size for lay in at_tp4] == [1536, 1472]
    # one MLA group of 24 layers, the 69 KDA layers in groups of 24, 24 and 21
    assert [(g.kind, g.num_layers) for g in new.groups] == [
        ("full", 24),
        ("linear_state", 24),
        ("linear_state", 24),
        ("linear_state", 21),
    ]


def test_kimi_linear_start_of_vllm_28228() -> None:
    """vllm#28228 (2025-11-06, a vLLM nightly between 0.11.0 and 0.11.1): a 4-bit
    Kimi-Linear-48B-A3B on 2 x RTX 3090 at TP2, fp16, prefix caching turned off for the hybrid,
    logs "Setting attention block size to 960 tokens", "Padding mamba page size by 1.89%",
    "Add 1 padding layers", "Available KV cache memory: 2.30 GiB", "GPU KV cache size: 75,840
    tokens" and "Maximum concurrency for 120,000 tokens per request: 2.48x". The layout does not
    depend on the weights' quantization, so the bf16 config stands for the 4-bit checkpoint."""
    from kvscope.plan.vllm_budget import VllmDefaults, logged_capacity

    path = CONFIGS / "kimi-linear-48b-a3b.json"
    model = parse_config(json.loads(path.read_text()), str(path), dtype="float16")
    release = (0, 11, 1)
    lay = vllm_layout(model, tuple(range(model.num_layers)), "float16", 2, 16, release=release)
    state = model.layers[0].attention.gdn_state_bytes(2)
    assert lay.block_size == 960
    assert round(100 * (960 * 1152 / state - 1), 2) == 1.89
    # 7 MLA layers, 20 KDA layers in groups of 7, 7 and 6 (the padding layer)
    assert [g.num_layers for g in lay.groups] == [7, 7, 7, 6]
    defaults = VllmDefaults(0.95, 120_000, 64_000, 8, 960, cudagraph_subtracted=False)
    # 2.30 GiB (printed rounded) holds 318 or 319 pages of 7 layers
    assert {int(2.295 * GIB) // lay.block_bytes, int(2.30 * GIB) // lay.block_bytes} == {318, 319}
    tokens, conc = logged_capacity(lay, 318, defaults, release)
    assert (tokens, round(conc, 2)) == (75_840, 2.48)
    assert logged_capacity(lay, 319, defaults, release)[0] == 75_840


@settings(max_examples=25, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8, 16, 32]), fp8=st.booleans())
def test_hybrid_block_holds_the_state_in_128_token_steps(k3: ModelSpec, tp: int, fp8: bool) -> None:
    dtype = "fp8" if fp8 else "bfloat16"
    lay = vllm_layout(k3, tuple(range(k3.num_layers)), dtype, tp, 16, release=(0, 34, 0))
    state = k3.layers[0].attention.gdn_state_bytes(tp)
    page = VLLM_MLA_PAGE[dtype]
    assert lay.block_size % 128 == 0
    assert state <= lay.block_size * page < state + 128 * page


def test_k3_plans_by_name_on_eight_b300s(k3: ModelSpec) -> None:
    eng = EngineConfig(engine_version="0.34.0", max_model_len=262_144)
    plan = plan_memory(k3, get_gpu("B300"), Parallelism(tp=8), eng)
    assert plan.fits and plan.block_size == 768 and plan.num_kv_groups == 4
    # a quarter of the checkpoint's 1453.66 GiB would not fit; an eighth plus replicas does
    assert K3_CHECKPOINT_GIB / 8 < plan.weights_gib < K3_CHECKPOINT_GIB / 7


def _write(tmp_path: Path, edit: dict[str, object], drop: str = "") -> Path:
    raw = json.loads((CONFIGS / "kimi-k3.json").read_text())
    la = raw["text_config"]["linear_attn_config"]
    la.update(edit)
    la.pop(drop, None)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(
    ("edit", "drop", "field"),
    [
        ({}, "num_heads", "linear_attn_config.num_heads"),
        ({}, "kda_layers", "linear_attn_config.kda_layers"),
        ({"kda_layers": [1, 2, 3, 4]}, "", "linear_attn_config.kda_layers"),
        ({"full_attn_layers": [4, 94]}, "", "linear_attn_config.full_attn_layers"),
    ],
)
def test_bad_linear_attn_config_names_the_field(
    tmp_path: Path, edit: dict[str, object], drop: str, field: str
) -> None:
    path = _write(tmp_path, edit, drop)
    with pytest.raises(ConfigError) as err:
        parse_config(json.loads(path.read_text()), str(path))
    assert err.value.field == field and str(path) in str(err.value)


def test_missing_key_exits_2_in_one_line(tmp_path: Path) -> None:
    path = _write(tmp_path, {}, "head_dim")
    out = run_kvscope("plan", "--model", str(path), "--gpu", "b300", "--tp", "8")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1
    assert "linear_attn_config.head_dim" in lines[0] and str(path) in lines[0]


def test_sglang_is_refused_in_one_line() -> None:
    path = CONFIGS / "kimi-k3.json"
    out = run_kvscope(
        "plan", "--model", str(path), "--gpu", "b300", "--tp", "8", "--engine", "sglang"
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Kimi Linear" in lines[0] and "--engine vllm" in lines[0]


@pytest.mark.integration
@pytest.mark.slow
def test_vllm_034_sizes_and_groups_kimi_like_kvscope() -> None:
    from tests.oracle import release_path, vllm_python

    python = vllm_python()
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": release_path("0.34.0")}
    proc = subprocess.run(
        [python, str(ORACLE)], capture_output=True, text=True, timeout=300, env=env, check=False
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("OK", "BAD"))]
    assert len(lines) == 7, proc.stderr[-2000:]
    assert all(ln.startswith("OK") for ln in lines), "\n".join(lines)
    assert proc.returncode == 0
