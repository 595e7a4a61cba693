"""Gemma 4: weights against the checkpoint, KV bytes per layer type, vLLM's page unification.

The layout itself is checked against vLLM 0.33's own grouping code by benchmarks/vllm_oracle.py
(tests/plan/test_vllm_oracle.py, slow); these tests are the fast pins.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import run_kvscope
from kvscope.errors import ConfigError, KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_layout import vllm_layout
from kvscope.plan.memory import plan_memory
from kvscope.specs.config_parse import parse_config
from kvscope.specs.hardware import get_gpu
from kvscope.specs.model import ModelSpec

CONFIGS = Path(__file__).with_name("data") / "configs"


def _load(name: str) -> ModelSpec:
    return parse_config(json.loads((CONFIGS / name).read_text()), name)


def test_31b_weights_equal_the_checkpoint_plus_vllms_v_slots() -> None:
    # google/gemma-4-31B-it's safetensors: 31,273,088,876 parameters (a public checkpoint
    # report listing every tensor). The 10 full-attention layers ship k_proj only
    # (attention_k_eq_v); vLLM's fused qkv_proj still allocates their V slot, 4 heads x 512
    # wide, and loads K into it.
    m = _load("gemma-4-31b-it.json")
    v_slots = 10 * 5376 * 4 * 512
    assert m.total_params == 31_273_088_876 + v_slots
    assert m.params["vision_tower"] == 575_743_536  # 27 layers of 1152 plus embed_vision
    assert m.params["lm_head"] == 0  # tied


def test_26b_a4b_counts_match_the_model_card() -> None:
    # Model card of google/gemma-4-26B-A4B-it: 25.2B total, 3.8B active (the text model).
    m = _load("gemma-4-26b-a4b.json")
    text = m.total_params - m.params["vision_tower"]
    assert text == pytest.approx(25.2e9, rel=0.005)
    assert m.active_params == pytest.approx(3.8e9, rel=0.02)
    assert m.params["shared_experts"] == 30 * 3 * 2816 * 2112  # the dense MLP beside experts


def test_e4b_counts_its_audio_tower() -> None:
    # USM conformer of 12 layers of 1024 (24 h^2 + 14 h + head_dim a layer), its subsampler
    # (1,086,752), output_proj 1024 -> 1536 with bias (1,574,400) and embed_audio 1536 -> 2560
    # (3,932,160), worked by hand from Google's PyTorch reference Gemma4AudioModel; vLLM and
    # SGLang build it whenever the config has an audio_config.
    m = _load("gemma-4-e4b-it.json")
    audio = 12 * (24 * 1024 * 1024 + 14 * 1024 + 128) + 1_086_752 + 1_574_400 + 3_932_160
    assert audio == 308_756_768
    assert m.params["vision_tower"] == 169_330_688 + audio
    # the planned weights now land on the checkpoint vLLM 0.22.1 reports reading (14.89 GiB,
    # "Checkpoint size" of the RTX 3090 Ti start, row rtx3090ti-vm-gemma4-e4b-0.22.1)
    plan = plan_memory(m, get_gpu("RTX-3090-24GB"), Parallelism(), EngineConfig(engine="vllm"))
    assert plan.weights_gib == pytest.approx(14.89, abs=0.01)


def test_e2b_per_layer_inputs_dominate_its_weights() -> None:
    # E2B: 35 layers x 256 per-layer-input width over a 262,144 vocabulary is a 2.35B table;
    # without it (and the towers) the text model is the card's "2.3B effective".
    m = _load("gemma-4-e2b-it.json")
    ple = 262_144 * 35 * 256
    assert m.params["embedding"] >= 262_144 * 1536 + ple
    effective = m.total_params - m.params["vision_tower"] - ple - 1536 * 35 * 256 - 256
    assert effective == pytest.approx(2.3e9, rel=0.03)
    # use_double_wide_mlp: the 20 KV-shared layers run a 12,288-wide MLP
    assert m.layers[15].ffn.intermediate_size == 2 * m.layers[14].ffn.intermediate_size


def test_bytes_per_token_per_layer_type() -> None:
    m = _load("gemma-4-31b-it.json")
    kinds = {g.kind: g for g in m.kv_groups("bfloat16")}
    # sliding: 16 KV heads x 256 x (K + V) x 2 B; global: 4 heads x 512, V cached beside K
    assert kinds["sliding"].bytes_per_token_per_layer == 0.0  # windowed: bounded, not per token
    assert kinds["sliding"].caches[0].entry_bytes == 16 * 256 * 2 * 2
    assert kinds["full"].caches[0].entry_bytes == 4 * 512 * 2 * 2
    assert len(kinds["full"].layers) == 10 and len(kinds["sliding"].layers) == 50
    assert m.kv_bytes_per_token("bfloat16") == 10 * 4 * 512 * 2 * 2


def test_kv_shared_layers_keep_no_cache() -> None:
    m = _load("gemma-4-e2b-it.json")
    owners = [i for i, layer in enumerate(m.layers) if layer.attention.kv_caches("bfloat16")]
    assert owners == list(range(15))  # num_kv_shared_layers 20 of 35
    layout = vllm_layout(m, tuple(range(35)), "bfloat16", 1, 16)
    assert sum(g.num_layers for g in layout.groups) == 15
    # global page (1 head x 512) is twice the sliding one: the sliding spec's block doubles
    assert {(g.kind, g.block_size) for g in layout.groups} == {("sliding", 32), ("full", 16)}


def test_e4b_keeps_24_caches() -> None:
    # A public runtime's model topology for E4B: kv_cache_layers 24 (35 sliding, 7 full,
    # num_kv_shared_layers 18), so the last 18 layers own nothing
    m = _load("gemma-4-e4b-it.json")
    groups = {g.kind: len(g.layers) for g in m.kv_groups("bfloat16") if g.caches}
    assert groups == {"sliding": 20, "full": 4}


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from([f"gemma-4-{n}.json" for n in ("31b-it", "26b-a4b", "e2b-it", "e4b-it")]),
    tp=st.sampled_from([1, 2, 4, 8]),
    block=st.sampled_from([16, 32, 64]),
    kv=st.sampled_from(["bfloat16", "fp8"]),
)
def test_every_group_holds_one_page(name: str, tp: int, block: int, kv: str) -> None:
    # vLLM's unify_kv_cache_spec_page_size: one physical page for every group, each group's
    # block size x its per-token bytes filling it exactly (the ratios here divide)
    m = _load(name)
    layout = vllm_layout(m, tuple(range(m.num_layers)), kv, tp, block)
    owners = [x.attention for x in m.layers if x.attention.kv_caches(kv, tp)]
    page = block * max(a.kv_caches(kv, tp)[0].entry_bytes for a in owners)
    for g in layout.groups:
        layer = next(a for a in owners if a.kind == g.kind)
        assert g.block_size * layer.kv_caches(kv, tp)[0].entry_bytes == page
    assert layout.block_bytes == page * max(g.num_layers for g in layout.groups)


def test_plan_logs_the_vllm_capacity_of_a_known_pool() -> None:
    # 50 GiB of KV for the 31B on one GPU at 262,144 tokens: 20,480 blocks of 10 x 256 KiB;
    # a request holds 8,192 global blocks of 32 tokens and 5 x 577 window blocks, so vLLM
    # logs 1.85 x 262,144 tokens (the oracle run gives the same 20,480 blocks)
    eng = EngineConfig(
        engine_version="0.30.0",
        max_model_len=262_144,
        max_num_batched_tokens=8192,
        kv_cache_memory_bytes=50 << 30,
    )
    plan = plan_memory(_load("gemma-4-31b-it.json"), get_gpu("H100"), Parallelism(), eng)
    assert plan.num_gpu_blocks == 20_480
    assert plan.num_kv_groups == 6


def test_sglang_before_its_first_gemma4_release_is_refused() -> None:
    eng = EngineConfig(engine="sglang", engine_version="0.5.9")
    with pytest.raises(KvscopeError, match="Gemma 4"):
        plan_memory(_load("gemma-4-26b-a4b.json"), get_gpu("H100"), Parallelism(), eng)


@pytest.mark.parametrize("key", ["layer_types", "sliding_window", "head_dim"])
def test_missing_key_is_named(key: str) -> None:
    raw = json.loads((CONFIGS / "gemma-4-31b-it.json").read_text())
    del raw["text_config"][key]
    with pytest.raises(ConfigError, match=key):
        parse_config(raw, "gemma4.json")


def test_cli_names_the_missing_key_and_the_file(tmp_path: Path) -> None:
    raw = json.loads((CONFIGS / "gemma-4-26b-a4b.json").read_text())
    del raw["text_config"]["layer_types"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    out = run_kvscope("plan", "--model", str(path), "--gpu", "h100")
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "layer_types" in lines[0] and str(path) in lines[0]
