"""``--cost-model aic``: the simulator's step times are AIConfigurator's own estimates.

Each test calls AIC directly (``EngineHandle``, not kvscope's adapter) for the step shapes
the simulator produced and compares them with the steps table, so a wrong mapping (model,
system, the isl/osl convention, ms vs s, prefill vs decode split) fails here.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from tests.sim.helpers import workload

from kvscope.errors import KvscopeError
from kvscope.sim import SimConfig, simulate

aic = pytest.importorskip("aiconfigurator_core", reason="kvscope[aic] is not installed")

LLAMA = dict(model="meta-llama/Llama-3.1-8B", gpu="H200", tp=1)


@pytest.fixture(scope="module")
def handle() -> object:
    """AIC's engine for Llama-3.1-8B on H200 under vLLM, built here without kvscope."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    return EngineHandle.compile(
        "meta-llama/Meta-Llama-3.1-8B", "h200_sxm", "vllm", tp_size=1, moe_tp_size=1, moe_ep_size=1
    )


def _steps(n: int, prompt: int, output: int) -> tuple[list[dict[str, float]], dict]:
    w = workload(np.zeros(n), np.full(n, prompt), np.full(n, output))
    cfg = SimConfig(**LLAMA, cost_model="aic", mode="step", sample_interval_s=0.0)  # type: ignore[arg-type]
    res = simulate(w, cfg)
    return [r for r in res.steps.to_pylist() if r["steps"]], res.figures


def test_single_request_steps_are_aics_prefill_and_decode(handle: object) -> None:
    rows, figs = _steps(1, 1024, 80)
    assert figs["cost_model"]["name"] == "aic"
    first = rows[0]
    assert first["prefill_tokens"] == 1024 and first["decode_tokens"] == 0
    prefill_ms = handle.mixed_step_latency(1024, 0, 1024, 1)  # type: ignore[attr-defined]
    assert first["step_time_s"] == pytest.approx(prefill_ms / 1e3, rel=1e-12)
    checked = 0
    for j, row in enumerate(rows[1:], start=1):
        assert row["decode_tokens"] == 1
        ctx = 1024 + j  # tokens the j-th decode attends, the new one included
        exact = handle.decode_step_latency(1, ctx - 1, 1) / 1e3  # type: ignore[attr-defined]
        if ctx % 32 == 0:  # on AIC's stride the bucket is the shape itself
            assert row["step_time_s"] == pytest.approx(exact, rel=1e-12)
            checked += 1
        else:
            assert row["step_time_s"] == pytest.approx(exact, rel=0.01)
    assert checked >= 2


def test_batched_prefill_and_decodes_are_aics(handle: object) -> None:
    rows, _ = _steps(4, 512, 40)
    first = rows[0]
    assert first["prefill_tokens"] == 2048 and first["decode_tokens"] == 0
    # four 512-token prompts in one step: AIC's context batch of isl 512 over 2,048 tokens
    ms = handle.mixed_step_latency(2048, 0, 512, 1)  # type: ignore[attr-defined]
    assert first["step_time_s"] == pytest.approx(ms / 1e3, rel=1e-12)
    row = rows[32]  # 4 decodes, each attending 512 + 32 tokens
    assert row["decode_tokens"] == 4
    ms = handle.decode_step_latency(4, 543, 1)  # type: ignore[attr-defined]
    assert row["step_time_s"] == pytest.approx(ms / 1e3, rel=1e-12)


def test_mixed_step_joins_aics_passes(handle: object) -> None:
    """A prompt arriving while another decodes: one step holds a prefill and a decode."""
    from kvscope.sim.cost_aic import AicCostModel, build_aic
    from kvscope.sim.roofline import FittedRoofline, FitTerms
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model

    m, g = load_model(LLAMA["model"]), get_gpu("H200")
    cost = build_aic(FittedRoofline(FitTerms.from_specs(m, g)), m.name, g.name, "vllm", 1, None)
    assert isinstance(cost, AicCostModel)
    # 256 new tokens of one fresh prompt + 8 decodes at 2,048 tokens of context each
    got = cost.mixed_s(256, 1, 256, 8, 8 * 2048)
    _, shared, ctx_attn, _ = handle.mixed_step_breakdown(256, 8, 256, 1)  # type: ignore[attr-defined]
    dec_attn = handle.mixed_step_breakdown(0, 8, 2047, 1)[3]  # type: ignore[attr-defined]
    assert got == pytest.approx((shared + ctx_attn + dec_attn) / 1e3, rel=1e-12)
    # and it is AIC's mixed step when the decodes' context is the prompt's
    same = cost.mixed_s(256, 1, 1024, 8, 8 * 1024)
    assert same == pytest.approx(
        handle.mixed_step_latency(256, 8, 1024, 1) / 1e3,  # type: ignore[attr-defined]
        rel=0.02,
    )


def test_no_aic_model_falls_back_with_one_warning() -> None:
    w = workload(np.zeros(3), np.full(3, 300), np.full(3, 50))
    cfg = SimConfig(model="Qwen/Qwen2.5-7B-Instruct", gpu="H200", cost_model="aic")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = simulate(w, cfg)
    from kvscope.sim.cost_aic import AicFallbackWarning

    mine = [c for c in caught if issubclass(c.category, AicFallbackWarning)]
    assert len(mine) == 1
    assert "Qwen/Qwen2.5-7B-Instruct" in str(mine[0].message)
    assert "fitted roofline" in str(mine[0].message)
    assert res.figures["cost_model"]["name"] == "fitted"


def test_missing_data_warns_once_names_the_combination() -> None:
    """DeepSeek-V4-Flash's MXFP4 experts have no H200 tables in AIC 0.12."""
    w = workload(np.linspace(0, 1, 6), np.full(6, 700), np.full(6, 30))
    cfg = SimConfig(
        model="deepseek-ai/DeepSeek-V4-Flash", gpu="H200", tp=8, kv_cache_dtype="fp8",
        cost_model="aic",
    )  # fmt: skip
    from kvscope.sim.cost_aic import AicFallbackWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        simulate(w, cfg)
    mine = [str(c.message) for c in caught if issubclass(c.category, AicFallbackWarning)]
    assert len(mine) == 1
    assert "DeepSeek-V4-Flash on h200_sxm" in mine[0] and "TP8" in mine[0]


def test_aic_extra_missing_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "aiconfigurator_core" else real(name, *a),
    )
    with pytest.raises(KvscopeError, match=r"install kvscope\[aic\]"):
        SimConfig(cost_model="aic")
    with pytest.raises(KvscopeError, match="--cost-model must be roofline, fitted or aic"):
        SimConfig(cost_model="vidur")


@pytest.mark.slow  # plan loads AIC's H200 tables in-process
def test_plan_shows_the_cost_models_side_by_side(
    capsys: pytest.CaptureFixture[str], handle: object
) -> None:
    from tests.cli_helpers import run_json

    argv = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H200", "--cost-model", "aic"]
    doc = run_json(capsys, *argv, "--json")
    models = doc["step_models"]["models"]
    assert set(models) == {"roofline", "fitted", "aic"}
    assert models["fitted"]["expected_error"]["family"] == "dense"
    ctx = doc["step_models"]["shapes"]["decode_batch1"][4]  # 8,192: on AIC's stride
    ms = handle.decode_step_latency(1, ctx - 1, 1)  # type: ignore[attr-defined]
    assert models["aic"]["step_s"]["decode_batch1"] == pytest.approx(ms / 1e3, rel=1e-12)


def test_unknown_cost_model_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.cli_helpers import one_error_line, run_in_process

    code, _out, err = run_in_process(["simulate", "--cost-model", "vidur"], capsys)
    one_error_line(code, err, "--cost-model must be roofline, fitted or aic")
    code, _out, err = run_in_process(["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu",
                                      "H200", "--cost-model", "vidur"], capsys)  # fmt: skip
    one_error_line(code, err, "--cost-model must be roofline, fitted or aic")
