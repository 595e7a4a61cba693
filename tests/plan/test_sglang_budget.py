"""SGLang: default mem_fraction_static and DeepSeek V4 bytes per full token."""

from __future__ import annotations

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.sglang_budget import (
    context_bytes,
    dsv4_bytes_per_full_token,
    dsv4_c128_reservation,
    engine_defaults,
    load_overhead_bytes,
)
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

H100 = get_gpu("H100")


def test_planner_uses_sglangs_own_default_fraction() -> None:
    # The launch's defaults come from kvscope.plan.sglang_defaults with nvidia-smi's total:
    # 0.4.3 table by TP (QwQ-32B on 4x L4 prints 0.85); 0.4.8-0.5.2 reserve 9.5 + p/2 GiB on
    # 80 GB parts: H100 TP8 (81559 - 13824) / 81559 = 0.8305 -> 0.831 (the CUDA total
    # would give 0.830); 141 GB class 12 + p/2: H200 TP8
    # (143771 - 16384) / 143771 = 0.886; above 160 GB a flat 32 GiB: B200 0.821.
    cases = [
        ("L4", 4, "0.4.3", 0.85),
        ("H100", 8, "0.4.9", 0.831),
        ("H100", 8, "0.5.2", 0.831),
        ("H200", 8, "0.5.2", 0.886),
        ("B200", 8, "0.5.2", 0.821),
    ]
    model = load_model("meta-llama/Llama-3.1-70B")
    for gpu, tp, version, mfs in cases:
        eng = EngineConfig(engine="sglang", engine_version=version)
        got = engine_defaults(model, get_gpu(gpu), Parallelism(tp=tp), eng)
        assert got.mem_fraction_static == mfs, (gpu, tp, version)


@pytest.mark.parametrize(
    ("gpu", "tp", "low", "high"),
    [
        # total - "Load weight begin. avail mem": H100 TP1 79.19 - 78.43..78.84 (sglang PR
        # #4760, issue #6291, docs notebooks); H200 TP8 139.80 - 137.29..137.52 (PR #11716);
        # 4x L4 22.03 - 21.63 (QwQ-32B row); MI300X TP1 191.98 - 191.33 (llm-tracker notes).
        ("H100", 1, 0.35, 0.76),
        ("H200", 8, 2.28, 2.51),
        ("L4", 4, 0.38, 0.42),
        ("MI300X", 1, 0.25, 0.70),
    ],
)
def test_sglang_memory_taken_before_the_weights_matches_logs(
    gpu: str, tp: int, low: float, high: float
) -> None:
    assert low <= context_bytes(get_gpu(gpu), Parallelism(tp=tp)) / GIB <= high


def test_sglang_load_overhead_matches_logged_mem_usage() -> None:
    # "mem usage" minus the weights: +0.06..0.15 GiB at TP1, +0.19..0.25 GiB at TP4.
    assert 0.06 <= load_overhead_bytes(Parallelism()) / GIB <= 0.15
    assert 0.19 <= load_overhead_bytes(Parallelism(tp=4)) / GIB <= 0.25


@pytest.mark.parametrize(
    ("model", "old", "bpft"),
    [
        ("deepseek-ai/DeepSeek-V4-Flash", False, 7705.45),
        ("deepseek-ai/DeepSeek-V4-Pro", False, 10993.84),
        ("deepseek-ai/DeepSeek-V4-Flash", True, 15955.85),
        ("deepseek-ai/DeepSeek-V4-Pro", True, 23749.84),
    ],
)
def test_sglang_dsv4_bytes_per_full_token(model: str, old: bool, bpft: float) -> None:
    m = load_model(model)
    assert dsv4_bytes_per_full_token(m, tuple(range(m.num_layers)), old) == pytest.approx(
        bpft, abs=0.01
    )


# Figures worked by hand from DSV4PoolConfigurator._get_bytes_per_full_token in the sglang
# wheels (srt/model_executor/pool_configurator.py): V4-Flash has 21 C4, 20 C128 and 2 SWA-only
# layers (44 compress_ratios entries with the MTP layer's 0). 0.5.12 with EAGLE: rings 16 / 256,
# 0.1 x 584 x 44 + 584 x 21/4 + 584 x 20/128 + 132 x 21/4 + 0.1 x 16/128 x 8192 x 21
# + 0.1 x 2 x 4096 x 20 + 0.1 x 16/128 x 2048 x 21 = 25,491.85, x 45/44. 0.5.13-0.5.14 without
# drafting: the 0.5.15 sum plus the scaled C128 state 0.1 x 4096 x 20. 0.5.15 with EAGLE: the
# C4 rings doubled (+1,344) and x 44/43.
@pytest.mark.parametrize(
    ("old", "spec", "scaled", "bpft"),
    [
        (True, True, None, 25491.85 * 45 / 44),
        (False, False, True, 15897.45),
        (False, True, False, 9049.45 * 44 / 43),
    ],
)
def test_sglang_dsv4_bytes_per_full_token_by_release(
    old: bool, spec: bool, scaled: bool | None, bpft: float
) -> None:
    m = load_model("deepseek-ai/DeepSeek-V4-Flash")
    got = dsv4_bytes_per_full_token(m, tuple(range(m.num_layers)), old, spec, scaled)
    assert got == pytest.approx(bpft, abs=0.01)


def test_sglang_dsv4_c128_state_reserved_per_request_slot() -> None:
    """0.5.15 ``_get_c128_state_fixed_bytes``: 257 slots x 256 ring rows + 257 with EAGLE =
    66,049 rows, padded to 66,176; 20 HCA layers of 4,096 B rows."""
    m = load_model("deepseek-ai/DeepSeek-V4-Flash")
    layers = tuple(range(m.num_layers))
    assert dsv4_c128_reservation(m, layers, 256, True) == 66_176 * 4096 * 20
    assert dsv4_c128_reservation(m, layers, 256) == 33_152 * 4096 * 20


def test_plan_says_where_the_fraction_came_from() -> None:
    model, h100 = load_model("meta-llama/Llama-3.1-8B"), get_gpu("H100")
    default = plan_memory(model, h100, Parallelism(), EngineConfig(engine="sglang"))
    given = plan_memory(
        model, h100, Parallelism(), EngineConfig(engine="sglang", mem_fraction_static=0.8)
    )
    assert default.budget_source.startswith("SGLang default: 0.5.3+")
    assert given.budget_source == "given" and given.budget_fraction == 0.8
    vllm = plan_memory(model, h100, Parallelism(), EngineConfig(engine_version="0.19.0"))
    assert vllm.budget_source == "vLLM 0.19.0 default" and vllm.budget_fraction == 0.9


@pytest.mark.parametrize(("version", "warned"), [("0.5.18", False), ("0.5.20", True)])
def test_sglang_v4_swa_cap_releases_are_flagged(version: str, warned: bool) -> None:
    m = load_model("deepseek-ai/DeepSeek-V4-Flash")
    eng = EngineConfig(engine="sglang", engine_version=version)
    plan = plan_memory(m, get_gpu("H200"), Parallelism(tp=4), eng)
    assert any("per-request cap" in w for w in plan.warnings) == warned


def test_sglang_v4flash_tp4_start_that_saw_96_gb() -> None:
    """The self-llm V4-Flash start (datawhalechina/self-llm PR 517, images/02-04.png: 0.5.14,
    TP4, Marlin, mfs 0.85, 131,072 context) logs 2,182,656 tokens and, after the pool and the
    CUDA-graph capture, 13.00-13.24 GB free on each of its four ranks; SGLang leaves about
    M0 x (1 - mfs) free after the pool (``_profile_available_bytes``,
    ``model_runner_kv_cache_mixin.py`` at 0.5.14), so every GPU showed about 93 GiB at start.
    The 0.5.14 no-drafting rule on a 96 GB Hopper lands within 5 % of the logged pool; on a
    141 GB H200 it plans twice as many tokens, and the tutorial's EAGLE flags on 96 GB far
    fewer (the capture is named "target decode": no drafting ran)."""
    m = load_model("deepseek-ai/DeepSeek-V4-Flash")
    par = Parallelism(tp=4)

    def eng(draft_layers: int = 0) -> EngineConfig:
        return EngineConfig(
            engine="sglang",
            engine_version="0.5.14",
            mem_fraction_static=0.85,
            max_model_len=131072,
            moe_runner_backend="marlin",
            speculative_layers=draft_layers,
        )

    logged = 2_182_656
    h20 = plan_memory(m, get_gpu("H20-96GB"), par, eng())
    h200 = plan_memory(m, get_gpu("H200"), par, eng())
    eagle = plan_memory(m, get_gpu("H20-96GB"), par, eng(1))
    assert abs(h20.kv_tokens / logged - 1) < 0.05
    assert h200.kv_tokens > 2 * logged
    assert eagle.kv_tokens < 0.7 * logged
