"""The 2026 families (GLM-5, Kimi K2.5, MiniMax M2.7) and their NVFP4 checkpoints, planned by
the names their Hugging Face repositories carry, against the figures their publishers state.

Configs: ``data/configs/`` (sources in ``data/configs/SOURCES.md``), resolved through the test
Hugging Face cache (``log_cases.hub_cache``) with ``HF_HUB_OFFLINE=1``. No complete public
start-up log of these checkpoints was found (two published capacities are ``inferred`` rows of
``data/engine_logs_families.csv``), so each family is pinned to its model card's parameter counts
and to the engine's layout (vLLM runs GLM-5 through its DeepSeek-V3.2 code).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from cli_helpers import run_kvscope
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.specs.hardware import get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.specs.quant_formats import NVFP4_BYTES
from kvscope.specs.registry import load_model

from .log_cases import hub_cache, offline_hub

CONFIGS = Path(__file__).with_name("data") / "configs"


def _by_name(repo_id: str) -> ModelSpec:
    with offline_hub():
        return load_model(repo_id)


# (Hub id, published total, published active, active convention, tolerance total / active)
PUBLISHED = [
    # GLM-5 report (arXiv 2602.15763) architecture table: 744B total, 40B activated; the
    # activated count leaves out both vocabulary matrices, as GLM-4.5's 32B does.
    ("zai-org/GLM-5", 744e9, 40e9, "without_embeddings", 0.005, 0.01),
    ("zai-org/GLM-5-FP8", 744e9, 40e9, "without_embeddings", 0.005, 0.01),
    # Kimi K2.5 model card: "1T total parameters, 32B activated" (rounded; the text tower is
    # Kimi K2's, 1.026T, and the MoonViT tower adds 0.47B).
    ("moonshotai/Kimi-K2.5", 1e12, 32e9, "without_input_embedding", 0.03, 0.02),
    # MiniMax M2.7 keeps M2/M2.5's shape: 230B total, 10B activated (M2 model card, rounded).
    ("MiniMaxAI/MiniMax-M2.7", 230e9, 10e9, "without_embeddings", 0.01, 0.025),
]


@pytest.mark.parametrize(("repo_id", "total", "active", "convention", "tol_t", "tol_a"), PUBLISHED)
def test_counts_match_the_model_cards(
    repo_id: str, total: float, active: float, convention: str, tol_t: float, tol_a: float
) -> None:
    m = _by_name(repo_id)
    assert m.total_params == pytest.approx(total, rel=tol_t)
    assert m.active_params_by(convention) == pytest.approx(active, rel=tol_a)


def test_glm5_keeps_deepseek_v32s_kv_per_layer() -> None:
    # vLLM maps GlmMoeDsaForCausalLM to deepseek_v2.py (vLLM PR #34124): the V3.2 path with
    # its FlashMLA-sparse latent and the lightning indexer's key cache, layer for layer.
    glm = _by_name("zai-org/GLM-5")
    v32 = load_model("deepseek-ai/DeepSeek-V3.2")
    assert glm.attention_kinds == {"mla_sparse": 78}
    for kv in ("bfloat16", "fp8_ds_mla"):
        (g,) = glm.kv_groups(kv)
        (d,) = v32.kv_groups(kv)
        assert g.caches == d.caches
        assert glm.kv_bytes_per_token(kv) == pytest.approx(v32.kv_bytes_per_token(kv) * 78 / 61)
    assert glm.num_mtp_layers == 1  # its MTP layer is the drafter's, not the model's
    assert [layer.ffn.kind for layer in glm.layers[:4]] == ["dense"] * 3 + ["moe"]
    att = glm.first_attention
    assert (att.qk_nope_head_dim, att.v_head_dim, att.index_n_heads) == (192, 256, 32)


def test_kimi_k25_text_tower_is_kimi_k2() -> None:
    # "built through continual pretraining ... atop Kimi-K2-Base" (Kimi K2.5 model card)
    k25 = _by_name("moonshotai/Kimi-K2.5")
    k2 = load_model("moonshotai/Kimi-K2-Instruct")
    assert k25.total_params - k25.params["vision_tower"] == k2.total_params
    assert k25.attention_kinds == {"mla": 61}
    # MoonViT starts from SigLIP-so400m (27 x 1152 / 4304, 64 x 64 positions: the 417M the
    # Gemma 3 report gives that encoder) and adds a 2x2 patch-merger projector to 7168.
    assert 0.46e9 < k25.params["vision_tower"] < 0.48e9


def test_kimi_vl_reads_the_same_moonvit_without_the_vt_prefix() -> None:
    # Kimi-VL's vision_config names MoonViT's sizes plainly (hidden_size, ...), K2.5's with vt_;
    # vLLM builds the same tower (moonvit.py / kimi_k25_vit.py), so the two towers differ only
    # by the projector's last linear: (1152 * 2 * 2 + 1) x (7168 - 2048) weights and biases.
    k25 = _by_name("moonshotai/Kimi-K2.5")
    kvl = _by_name("moonshotai/Kimi-VL-A3B-Instruct")
    assert kvl.model_type == "deepseek_v3" and kvl.attention_kinds == {"mla": 27}
    diff = k25.params["vision_tower"] - kvl.params["vision_tower"]
    assert diff == (1152 * 4 + 1) * (7168 - 2048)


def test_kimi_k25_int4_leaves_all_but_the_routed_experts_bf16() -> None:
    # compressed-tensors ignore: re:.*self_attn.*, re:.*shared_experts.*, dense mlp projections
    m = _by_name("moonshotai/Kimi-K2.5")
    per = {k: m.weight_bytes[k] / m.params[k] for k in m.params if m.params[k]}
    assert per["routed_experts"] == pytest.approx(0.5 + 2 / 32)  # int4 + bf16 scale per 32
    for component in ("attention", "shared_experts", "dense_ffn", "embedding", "vision_tower"):
        assert per[component] == 2.0


def test_nvfp4_bytes_match_vllms_modelopt_tensors() -> None:
    # ModelOptNvFp4LinearMethod.create_weights: weight uint8 [out, in/2], weight_scale fp8
    # [out, in/16], weight_scale_2 and input_scale fp32 scalars. One GLM-5 expert down_proj:
    out, inp = 6144, 2048
    stored = out * inp // 2 + out * inp // 16 + 2 * 4
    assert stored / (out * inp) == pytest.approx(NVFP4_BYTES, rel=1e-5)  # scalars: 1e-6


@pytest.fixture(scope="module")
def glm5_nvfp4_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face cache holding nvidia/GLM-5-NVFP4's config.json and hf_quant_config.json."""
    root = tmp_path_factory.mktemp("hub")
    repo = root / "models--nvidia--GLM-5-NVFP4"
    snap = repo / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    shutil.copy(CONFIGS / "glm-5-nvfp4.json", snap / "config.json")
    shutil.copy(CONFIGS / "glm-5-nvfp4.hf_quant_config.json", snap / "hf_quant_config.json")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    return root


def test_glm5_nvfp4_reads_hf_quant_config_and_keeps_attention_bf16(
    glm5_nvfp4_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(glm5_nvfp4_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    m = load_model("nvidia/GLM-5-NVFP4")
    q = m.quantization
    assert q.method == "modelopt_fp4" and q.unconverted == ("attention",)
    per = {k: m.weight_bytes[k] / m.params[k] for k in m.params if m.params[k]}
    assert per["attention"] == 2.0  # every q_a/q_b/kv_a/kv_b/o_proj and indexer excluded
    for component in ("routed_experts", "shared_experts", "dense_ffn"):
        assert per[component] == NVFP4_BYTES
    fp8 = _by_name("zai-org/GLM-5-FP8")
    # the 4-bit experts hold 97 % of the parameters: 0.59x the FP8 checkpoint
    assert 0.55 < m.total_weight_bytes / fp8.total_weight_bytes < 0.62


def test_minimax_nvfp4_inline_modelopt_config() -> None:
    m = _by_name("nvidia/MiniMax-M2.5-NVFP4")
    assert m.quantization.method == "modelopt_fp4"
    assert m.quantization.unconverted == ("attention",)  # model.layers.N.self_attn*
    assert m.weight_bytes["router"] == 2 * m.params["router"]  # block_sparse_moe.gate


def test_glm5_fp8_plans_on_eight_h200_by_name() -> None:
    m = _by_name("zai-org/GLM-5-FP8")
    plan = plan_memory(m, get_gpu("h200"), Parallelism(tp=8), EngineConfig(max_model_len=32768))
    assert plan.fits
    # 746.1 GB of checkpoint over 8 ranks, the MLA latent projections replicated
    assert 86 < plan.weights_gib < 92
    assert plan.kv_cache_dtype == "bfloat16"
    # one KV group: the 576-element bf16 latent plus the 132-B indexer key, 78 layers
    assert plan.num_kv_groups == 1
    assert plan.kv_bytes_per_token == 78 * (576 * 2 + 132)


def test_cli_plans_the_2026_ids(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HUB_CACHE=str(hub_cache()), HF_HUB_OFFLINE="1", HOME=str(tmp_path))
    for repo_id in ("zai-org/GLM-5-FP8", "nvidia/Kimi-K2.5-NVFP4"):
        out = run_kvscope(
            "plan", "--model", repo_id, "--gpu", "b200", "--tp", "8", "--json", env=env
        )
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["model"] == repo_id


def test_glm45_air_from_an_independent_copy_matches_the_test_config() -> None:
    # GLM-4.5/4.6 (glm4_moe) already parse; an independent copy of GLM-4.5-Air's keys gives
    # the counts of tests/specs' file to the parameter, and the card's 106B / 12B.
    from kvscope.specs.config_parse import parse_config

    copy = parse_config(json.loads((CONFIGS / "glm-4.5-air.json").read_text()), "air.json")
    specs = Path(__file__).parents[1] / "specs" / "data" / "configs"
    ours = parse_config(json.loads((specs / "zai-org--GLM-4.5-Air.json").read_text()), "a.json")
    assert copy.params == ours.params
    assert copy.total_params == pytest.approx(106e9, rel=0.02)
    assert copy.active_params_by("without_embeddings") == pytest.approx(12e9, rel=0.02)


@pytest.mark.parametrize(
    ("repo_id", "total"), [("Qwen/Qwen3.6-27B", 27e9), ("Qwen/Qwen3.6-35B-A3B", 35e9)]
)
def test_qwen36_is_the_qwen35_hybrid_with_its_vision_tower(repo_id: str, total: float) -> None:
    # The names state the totals (27B; 35B with 3B activated); the vision_config's type is
    # qwen3_5_vision in these files, and the tower counts.
    m = _by_name(repo_id)
    assert m.model_type.startswith("qwen3_5")
    assert 0.44e9 < m.params["vision_tower"] < 0.47e9
    assert m.total_params == pytest.approx(total, rel=0.015)
    assert set(m.attention_kinds) == {"gdn", "full"}
