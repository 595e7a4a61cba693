"""The fitted roofline: within its stated error of AIConfigurator on held-out points.

The held-out points are the shipped fit's (``roofline_fit.json``, never used to fit); AIC
is asked again here, so a changed AIC table, a broken term or stale constants fail.
"""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict

import numpy as np
import pytest
from tests.sim.helpers import workload

from kvscope.sim import SimConfig, simulate
from kvscope.sim.roofline import FAMILIES, FittedRoofline, FitTerms, constants, fit_data
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

#: One held-out deployment per family is asked of AIC (the whole set takes half a minute).
ASKED = {
    ("meta-llama/Llama-3.1-8B", "B200-SXM-180GB", 1),
    ("meta-llama/Llama-3.1-70B", "H200-SXM-141GB", 4),
    ("Qwen/Qwen3-30B-A3B", "B200-SXM-180GB", 1),
    ("openai/gpt-oss-120b", "H200-SXM-141GB", 1),
    ("deepseek-ai/DeepSeek-V3", "B200-SXM-180GB", 8),
    ("deepseek-ai/DeepSeek-V4-Flash", "B300-SXM-288GB", 4),
}


def _fitted(model: str, gpu: str, tp: int) -> FittedRoofline:
    m = load_model(model)
    terms = FitTerms.from_specs(m, get_gpu(gpu), tp=tp)
    return FittedRoofline(terms, constants(terms.family))


def test_shipped_fit_is_within_acceptance_on_held_out_points() -> None:
    """Median |kvscope/AIC - 1| <= 25 % overall on held-out points, from the stored AIC
    figures (no AIC needed), and each family within the error it states."""
    grid = fit_data()["grid"]
    held = [p for p in grid if p["held_out"]]
    assert len({(p["model"], p["gpu"], p["tp"]) for p in grid}) >= 12
    assert len(held) >= 30
    errs: dict[str, list[float]] = defaultdict(list)
    for p in held:
        t = _fitted(p["model"], p["gpu"], p["tp"]).shape_time(*p["shape"])
        errs[p["family"]].append(abs(t / p["aic_s"] - 1.0))
    every = [e for v in errs.values() for e in v]
    assert float(np.median(every)) <= 0.25
    for fam, e in errs.items():
        stated = fit_data()["families"][fam]["held_out"]["fitted"]
        assert float(np.median(e)) == pytest.approx(stated["median_abs_err"], abs=1e-9)
        assert float(np.median(e)) <= 0.25


@pytest.mark.slow  # loads AIC's tables for six deployments (~20 s)
def test_aic_still_gives_the_held_out_figures() -> None:
    pytest.importorskip("aiconfigurator_core", reason="kvscope[aic] is not installed")
    from kvscope.sim.cost_aic import AicCostModel, build_aic

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    by_cfg: dict[tuple[str, str, int], list[dict]] = defaultdict(list)
    for p in fit_data()["grid"]:
        if p["held_out"] and (p["model"], p["gpu"], p["tp"]) in ASKED:
            by_cfg[(p["model"], p["gpu"], p["tp"])].append(p)
    assert {fam for pts in by_cfg.values() for fam in {p["family"] for p in pts}} == set(FAMILIES)
    errs = []
    for (model, gpu, tp), pts in by_cfg.items():
        fitted = _fitted(model, gpu, tp)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # every asked deployment has AIC data
            cost = build_aic(fitted, model, gpu, "vllm", tp, None)
        assert isinstance(cost, AicCostModel)
        for p in pts:
            pp, n, lp, d, ld = p["shape"]
            got = cost.decode_s(d, ld) if p["kind"] == "decode" else cost.mixed_s(pp, n, lp, d, ld)
            assert got == pytest.approx(p["aic_s"], rel=1e-6), (model, gpu, p["shape"])
            errs.append(abs(fitted.shape_time(*p["shape"]) / got - 1.0))
    assert float(np.median(errs)) <= 0.25


def test_scalar_and_vector_forms_agree() -> None:
    rng = np.random.default_rng(3)
    for model, gpu, tp in sorted(ASKED):
        f = _fitted(model, gpu, tp)
        p = rng.integers(0, 4096, 20).astype(float)
        n = np.where(p > 0, rng.integers(1, 4, 20), 0).astype(float)
        lp = p + n * rng.integers(0, 8192, 20)
        d = rng.integers(0, 256, 20).astype(float)
        ld = d * rng.integers(1, 32768, 20)
        vec = f.shape_times(p, n, lp, d, ld)
        for i in range(20):
            assert f.shape_time(p[i], n[i], lp[i], d[i], ld[i]) == pytest.approx(vec[i], rel=1e-12)


def test_fitted_roofline_changes_step_times_not_scheduling() -> None:
    """Full-attention FCFS with every request at t=0: the engine's steps are the same plans
    under either roofline; only their durations differ."""
    w = workload(np.zeros(12), np.arange(1, 13) * 300, np.full(12, 60))
    rows = {}
    for cm in ("roofline", "fitted"):
        cfg = SimConfig(gpu="H200", cost_model=cm, mode="step", sample_interval_s=0.0)
        res = simulate(w, cfg)
        rows[cm] = res.steps.to_pylist()
    keys = ("prefill_tokens", "decode_tokens", "running")
    plans = {cm: [tuple(r[k] for k in keys) for r in rows[cm]] for cm in rows}
    assert plans["roofline"] == plans["fitted"]
    assert [r["step_time_s"] for r in rows["roofline"]] != [
        r["step_time_s"] for r in rows["fitted"]
    ]


def test_fitted_constants_are_physical() -> None:
    for fam in FAMILIES:
        c = constants(fam)
        assert 0 < c.mfu <= 1 and 0 < c.mbu <= 1 and 0 < c.attn_mbu <= 1
        assert 0 <= c.layer_s <= 2e-3  # at most 2 ms per layer and step


@pytest.mark.parametrize(
    ("layout", "what"),
    [
        ({"model": "llama-3.1-70b", "gpu": "H100", "num_gpus": 4, "tp": 2, "pp": 2}, "pipeline"),
        (
            {
                "gpu": "H200",
                "speculative_config": '{"method": "ngram", "num_speculative_tokens": 3}',
                "spec_acceptance": "0.6",
            },
            "speculative",
        ),
    ],
)
def test_fitted_falls_back_to_the_roofline_where_it_cannot_price_the_step(
    layout: dict[str, object], what: str
) -> None:
    """Pipeline stages and draft/verify steps are not in the fitted terms (nor in AIC's
    estimators): the run keeps the roofline's step times, says so once, and its summary names
    the model that priced it."""
    from kvscope.sim.cost import CostFallbackWarning

    w = workload(np.linspace(0, 1, 12), np.full(12, 700), np.full(12, 40))
    base = simulate(w, SimConfig(**layout, sample_interval_s=0.0))  # type: ignore[arg-type]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = simulate(w, SimConfig(**layout, cost_model="fitted", sample_interval_s=0.0))  # type: ignore[arg-type]
    said = [str(c.message) for c in caught if issubclass(c.category, CostFallbackWarning)]
    assert len(said) == 1 and what in said[0] and "use the roofline" in said[0]
    assert (
        res.steps.column("step_time_s").to_pylist() == base.steps.column("step_time_s").to_pylist()
    )
    assert res.figures["cost_model"]["name"] == "roofline"
