"""SGLang's hybrid-SWA pool for Gemma 4 (kvscope.plan.sglang_swa), pinned on the public configs.

Per-layer bytes are SGLang's own ``HybridSWAPoolConfigurator`` terms after its Gemma 4 config
swap (full layers: ``global_head_dim`` x ``num_global_key_value_heads``; sliding layers:
``head_dim`` x ``num_key_value_heads``), worked by hand from the configs; the KV-shared layers
of E2B/E4B stay in both pools (``get_hybrid_layer_ids`` splits by ``layer_types`` only).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import run_kvscope
from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_layout import sglang_cell_bytes
from kvscope.plan.memory import plan_memory
from kvscope.plan.sglang_swa import SwaCell, swa_cell
from kvscope.specs.config_parse import parse_config
from kvscope.specs.hardware import get_gpu
from kvscope.specs.model import ModelSpec

CONFIGS = Path(__file__).with_name("data") / "configs"
V14, V23 = (0, 5, 14), (0, 5, 23)


def _load(name: str, **text_overrides: object) -> ModelSpec:
    raw = json.loads((CONFIGS / name).read_text())
    raw["text_config"].update(text_overrides)
    return parse_config(raw, name)


def _cell(name: str, tp: int = 1, dtype: str = "bfloat16") -> SwaCell:
    m = _load(name)
    return swa_cell(m, tuple(range(m.num_layers)), dtype, tp, V14)


@pytest.mark.parametrize(
    ("name", "full", "swa", "n_full", "n_swa", "cell"),
    [
        # 31B: full 4 heads x (512 + 512) x 2 B; sliding 16 x (256 + 256) x 2 B
        ("gemma-4-31b-it.json", 8192, 16384, 10, 50, 737_280),
        ("gemma-4-26b-a4b.json", 4096, 8192, 5, 25, 184_320),
        # E2B / E4B: one / two KV heads on both types; 20 / 18 KV-shared layers still counted
        ("gemma-4-e2b-it.json", 2048, 1024, 7, 28, 37_273.6),
        ("gemma-4-e4b-it.json", 4096, 2048, 7, 35, 86_016),
    ],
)
def test_per_layer_bytes_and_cell(
    name: str, full: int, swa: int, n_full: int, n_swa: int, cell: float
) -> None:
    c = _cell(name)
    assert (c.full_per_layer, c.swa_per_layer, c.full_layers, c.swa_layers) == (
        full,
        swa,
        n_full,
        n_swa,
    )
    assert c.cell_bytes == pytest.approx(cell)


def test_tp_splits_heads_and_replicates_below_one() -> None:
    # TP8 on 31B: 4 global KV heads // 8 -> max(1, 0) = 1 replicated head; 16 sliding -> 2.
    c = _cell("gemma-4-31b-it.json", tp=8)
    assert (c.full_per_layer, c.swa_per_layer) == (2048, 2048)
    assert _cell("gemma-4-31b-it.json", tp=2, dtype="fp8").cell_bytes == 737_280 / 4


def test_kv_shared_layers_keep_their_buffers_in_sglang() -> None:
    # SGLang allocates the KV-shared layers (vLLM does not): dropping the sharing leaves the
    # SGLang cell unchanged, while vLLM's per-token bytes grow.
    shared, unshared = (
        _load("gemma-4-e2b-it.json"),
        _load("gemma-4-e2b-it.json", num_kv_shared_layers=0),
    )
    layers = tuple(range(shared.num_layers))
    a = swa_cell(shared, layers, "bfloat16", 1, V14).cell_bytes
    b = swa_cell(unshared, layers, "bfloat16", 1, V14).cell_bytes
    assert a == b
    # the per-layer cache list kvscope uses for vLLM skips the shared layers
    assert sglang_cell_bytes(unshared, layers, "bfloat16", 1) > sglang_cell_bytes(
        shared, layers, "bfloat16", 1
    )


def test_full_swa_split() -> None:
    # 10 GiB for 31B: floor(10,737,418,240 / 737,280) = 14,563 full tokens, int(0.8x) = 11,650
    c = _cell("gemma-4-31b-it.json")
    assert c.split(10 << 30, 1) == (14_563, 11_650)
    assert c.split(10 << 30, 64) == (14_528, 11_584)  # both page-aligned (trtllm_mha)


@pytest.mark.parametrize(
    ("name", "version", "tokens"),
    [
        ("gemma-4-31b-it.json", "0.5.14", 1_491),
        ("gemma-4-26b-a4b.json", "0.5.14", 66_325),
        # E2B / E4B hold their audio towers too (0.57 / 0.58 GiB: SGLang's gemma4_mm.py builds
        # Gemma4AudioEncoder and embed_audio whenever the config has an audio_config)
        ("gemma-4-e2b-it.json", "0.5.14", 1_608_347),
        ("gemma-4-e4b-it.json", "0.5.14", 630_990),
        ("gemma-4-31b-it.json", "0.5.23", 1_348),  # same cell; 0.5.23 reserves mm caches
    ],
)
def test_h100_token_counts(name: str, version: str, tokens: int) -> None:
    eng = EngineConfig(engine="sglang", engine_version=version)
    plan = plan_memory(_load(name), get_gpu("H100"), Parallelism(), eng)
    assert plan.kv_tokens == tokens
    assert plan.kv_bytes_per_token == _cell(name).cell_bytes  # the pool's cell, not vLLM's


def test_b200_pages_are_64_tokens_from_0513() -> None:
    # trtllm_mha (page 64) is Gemma 4's SM100 default from 0.5.13; 0.5.12 starts triton (page 1)
    def plan(version: str, gpu: str) -> object:
        eng = EngineConfig(engine="sglang", engine_version=version)
        return plan_memory(_load("gemma-4-e4b-it.json"), get_gpu(gpu), Parallelism(), eng)

    b200 = plan("0.5.14", "B200")
    assert b200.block_size == 64 and b200.kv_tokens % 64 == 0 and b200.kv_tokens > 0
    assert plan("0.5.12", "B200").block_size == 1
    assert plan("0.5.14", "H100").block_size == 1


def test_pp_layers_per_stage_by_release() -> None:
    # 31B layer types: five sliding then one full, ten times; layer 30 is sliding.
    m = _load("gemma-4-31b-it.json")
    first, second = tuple(range(30)), tuple(range(30, 60))
    # to 0.5.14 a stage also holds the next stage's first layer (range(start, end + 1))
    a = swa_cell(m, first, "bfloat16", 1, V14)
    assert (a.full_layers, a.swa_layers) == (5, 26)
    last = swa_cell(m, second, "bfloat16", 1, V14)
    assert (last.full_layers, last.swa_layers) == (5, 25)
    # at 0.5.23 the stages partition the layers
    half = swa_cell(m, first, "bfloat16", 1, V23)
    rest = swa_cell(m, second, "bfloat16", 1, V23)
    assert (half.full_layers, half.swa_layers) == (5, 25)
    assert half.cell_bytes + rest.cell_bytes == pytest.approx(737_280)
    eng = EngineConfig(engine="sglang", engine_version="0.5.18")
    with pytest.raises(KvscopeError, match="pipeline parallelism"):
        plan_memory(m, get_gpu("H100"), Parallelism(pp=2), eng)


def test_swa_pool_below_the_admission_floor_does_not_fit_at_0523() -> None:
    # 0.5.23's validate_swa_pool_size: the SWA pool must exceed sliding_window_size + page_size,
    # Gemma 4's sliding_window_size being sliding_window - 1 (1,023 + 1 for 31B). At
    # mem_fraction_static 0.757 int(0.8 x full) falls to the floor; 0.5.14 has no such check.
    def plan(version: str) -> object:
        eng = EngineConfig(engine="sglang", engine_version=version, mem_fraction_static=0.757)
        return plan_memory(_load("gemma-4-31b-it.json"), get_gpu("H100"), Parallelism(), eng)

    new, old = plan("0.5.23"), plan("0.5.14")
    assert new.kv_tokens > 0 and int(new.kv_tokens * 0.8) <= 1024
    assert not new.fits and "SWA pool" in (new.problem or "")
    assert old.fits


def test_releases_before_gemma4_are_refused() -> None:
    eng = EngineConfig(engine="sglang", engine_version="0.5.10")
    with pytest.raises(KvscopeError, match=r"0\.5\.11"):
        plan_memory(_load("gemma-4-26b-a4b.json"), get_gpu("H100"), Parallelism(), eng)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10"])
def test_cli_refuses_releases_before_gemma4_in_one_line(version: str) -> None:
    path = CONFIGS / "gemma-4-26b-a4b.json"
    out = run_kvscope(
        "plan", "--model", str(path), "--gpu", "h100", "--engine", "sglang",
        "--engine-version", version,
    )  # fmt: skip
    assert out.returncode == 2
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "0.5.11" in lines[0] and "Gemma 4" in lines[0]
