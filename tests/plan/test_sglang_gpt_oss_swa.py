"""SGLang's hybrid-SWA pools for gpt-oss by release and GPU (kvscope.plan.sglang_swa).

Expected figures are worked by hand from the public configs and SGLang's pool formula
(``HybridSWAPoolConfigurator``, ``set_num_tokens_hybrid_swa`` before 0.5.11): gpt-oss has 8 KV
heads of 64 dims on every layer, so one layer costs F = S = 8 x (64 + 64) x 2 B = 2,048 B a
token in bf16; 20b has 12 full + 12 sliding layers, 120b 18 + 18. With two pools the cell is
F x n_full + 0.8 x S x n_swa; with one pool every layer counts (49,152 / 73,728 B).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_layout import sglang_cell_bytes
from kvscope.plan.memory import plan_memory
from kvscope.plan.sglang_swa import SwaCell, pool_tokens, swa_floor_problem
from kvscope.plan.speculative import SpeculativeDecoding
from kvscope.specs.config_parse import parse_config
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

CONFIGS = Path(__file__).with_name("data") / "configs"


def _plan(name: str, version: str, gpu: str = "H100", tp: int = 1, **eng: object) -> object:
    e = EngineConfig(engine="sglang", engine_version=version, **eng)  # type: ignore[arg-type]
    return plan_memory(load_model(name), get_gpu(gpu), Parallelism(tp=tp), e)


@pytest.mark.parametrize(
    ("name", "tp", "two_pool", "one_pool"),
    [
        ("gpt-oss-20b", 1, 24_576 + 19_660.8, 49_152),  # 12 x 2048 + 0.8 x 12 x 2048
        ("gpt-oss-120b", 1, 36_864 + 29_491.2, 73_728),  # 18 x 2048 + 0.8 x 18 x 2048
        ("gpt-oss-120b", 8, 4_608 + 3_686.4, 9_216),  # 8 heads // 8 = 1 head: 256 B a layer
    ],
)
def test_cell_by_release_and_backend(name: str, tp: int, two_pool: float, one_pool: int) -> None:
    # (release, GPU) -> pools: 0.5.6 disables the hybrid pool for gpt-oss outright; 0.5.9
    # disables it under trtllm_mha (SM100's default, B200) only; from 0.5.10 nothing does.
    table = [
        ("0.5.6", "H100", one_pool),
        ("0.5.6", "B200", one_pool),
        ("0.5.9", "H100", two_pool),
        ("0.5.9", "B200", one_pool),
        ("0.5.10", "B200", two_pool),
        ("0.5.14", "H100", two_pool),
        ("0.5.14", "B200", two_pool),
        ("0.5.23", "H100", two_pool),
    ]
    got = [(v, g, round(_plan(name, v, g, tp).kv_bytes_per_token, 1)) for v, g, _ in table]  # type: ignore[attr-defined]
    assert got == [(v, g, round(c, 1)) for v, g, c in table]


def test_two_pools_hold_about_eleven_percent_more_tokens() -> None:
    # B200, 0.5.9 (trtllm_mha: one pool) vs 0.5.10 (two pools): 49,152 / 44,236.8 = 10/9 more
    # tokens, up to the two releases' other budget terms (within 1 %)
    one, two = _plan("gpt-oss-20b", "0.5.9", "B200"), _plan("gpt-oss-20b", "0.5.10", "B200")
    assert two.kv_tokens / one.kv_tokens == pytest.approx(10 / 9, rel=0.01)  # type: ignore[attr-defined]


def test_b200_pages_are_64_tokens() -> None:
    # trtllm_mha (gpt-oss's SM100 default at every release read) forces page_size 64
    for v in ("0.5.6", "0.5.9", "0.5.14", "0.5.23"):
        p = _plan("gpt-oss-20b", v, "B200")
        assert p.block_size == 64 and p.kv_tokens % 64 == 0 and p.kv_tokens > 0  # type: ignore[attr-defined]
    assert _plan("gpt-oss-20b", "0.5.14").block_size == 1  # type: ignore[attr-defined]


def test_before_0511_the_one_pool_count_is_rescaled() -> None:
    # set_num_tokens_hybrid_swa (0.5.8.post1-0.5.10): floor(30e9 / 49,152) = 610,351 one-pool
    # tokens, x 49,152 / 44,236.8 = 678,167.77 -> 678,167; the 0.5.11+ configurator divides
    # 30e9 by 44,236.8 directly: 678,168.40 -> 678,168.
    c = SwaCell(2048.0, 2048.0, 12, 12)
    assert pool_tokens(30e9, c, 49_152.0, (0, 5, 9)) == 678_167
    assert pool_tokens(30e9, c, 49_152.0, (0, 5, 11)) == 678_168


def test_speculative_and_pp_keep_planning_on_one_pool() -> None:
    # not modelled with two pools: planned as before (full-length cell), never refused
    spec = SpeculativeDecoding(method="ngram", num_speculative_tokens=3, verify_tokens=4)
    p = _plan("gpt-oss-120b", "0.5.14", speculative=spec)
    assert p.kv_bytes_per_token == 73_728  # type: ignore[attr-defined]
    m = load_model("gpt-oss-120b")
    e = EngineConfig(engine="sglang", engine_version="0.5.14")
    pp = plan_memory(m, get_gpu("H100"), Parallelism(pp=2), e)
    assert pp.kv_tokens > 0


@pytest.mark.parametrize("config", ["gemma-3-12b-it.json", "gemma-2-9b.json"])
def test_gemma2_gemma3_keep_one_pool(config: str) -> None:
    # ServerArgs sets disable_hybrid_swa_memory for Gemma2/Gemma3 at every release read
    m = parse_config(json.loads((CONFIGS / config).read_text()), config)
    assert any(x.attention.kind == "sliding" for x in m.layers)
    full = sglang_cell_bytes(m, tuple(range(m.num_layers)), "bfloat16", 1)
    for v in ("0.5.9", "0.5.14", "0.5.23"):
        e = EngineConfig(engine="sglang", engine_version=v)
        assert plan_memory(m, get_gpu("H100"), Parallelism(), e).kv_bytes_per_token == full


def test_0523_swa_floor_covers_gpt_oss_two_pools_only() -> None:
    # validate_swa_pool_size: SWA pool must exceed sliding_window_size (128 - 1) + page (1);
    # 160 full tokens -> int(0.8 x 160) = 128 SWA tokens is refused, 162 -> 129 is not
    m, h100 = load_model("gpt-oss-20b"), get_gpu("H100").compute_capability

    def floor(tokens: int, version: str, **eng: object) -> str | None:
        e = EngineConfig(engine="sglang", engine_version=version, **eng)  # type: ignore[arg-type]
        return swa_floor_problem(m, tokens, 1, e, Parallelism(), h100)

    assert "SWA pool (128 tokens)" in (floor(160, "0.5.23") or "")
    assert floor(162, "0.5.23") is None
    assert floor(160, "0.5.14") is None  # no such check before 0.5.23
    spec = SpeculativeDecoding(method="ngram", num_speculative_tokens=3, verify_tokens=4)
    assert floor(160, "0.5.23", speculative=spec) is None  # planned on one pool
