"""The grid of deployments and step shapes the fitted roofline is fitted and judged on.

Shared by ``fit_roofline.py`` (fits on the training points, writes
``src/kvscope/sim/roofline_fit.json``) and ``roofline_vs_aic.py`` (prints the table). AIC's
figure for a point is the ``--cost-model aic`` adapter's (:mod:`kvscope.sim.cost_aic`), so the
fit targets exactly what the simulator would charge with measured kernels. Held out: four
whole deployments (one per family) and, in the others, every decode at batch 64 or at 4,096
tokens of context and the 2,048-token prefill.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

#: (family, kvscope model, kvscope GPU, TP, held out whole)
CONFIGS: tuple[tuple[str, str, str, int, bool], ...] = (
    ("dense", "meta-llama/Llama-3.1-8B", "H200-SXM-141GB", 1, False),
    ("dense", "meta-llama/Llama-3.1-8B", "H100-SXM-80GB", 1, False),
    ("dense", "meta-llama/Llama-3.1-70B", "H200-SXM-141GB", 4, False),
    ("dense", "meta-llama/Llama-3.1-70B", "H100-SXM-80GB", 8, False),
    ("dense", "meta-llama/Llama-3.1-405B", "H200-SXM-141GB", 8, False),
    ("dense", "meta-llama/Llama-3.1-8B", "B200-SXM-180GB", 1, True),
    ("moe", "Qwen/Qwen3-30B-A3B", "H200-SXM-141GB", 1, False),
    ("moe", "Qwen/Qwen3-235B-A22B", "H200-SXM-141GB", 8, False),
    ("moe", "openai/gpt-oss-120b", "H200-SXM-141GB", 1, False),
    ("moe", "openai/gpt-oss-20b", "H100-SXM-80GB", 1, False),
    ("moe", "Qwen/Qwen3-30B-A3B", "B200-SXM-180GB", 1, True),
    ("mla", "deepseek-ai/DeepSeek-V3", "H200-SXM-141GB", 8, False),
    ("mla", "deepseek-ai/DeepSeek-V3.2", "H200-SXM-141GB", 8, False),
    ("mla", "deepseek-ai/DeepSeek-V3", "B200-SXM-180GB", 8, True),
    ("v4", "deepseek-ai/DeepSeek-V4-Flash", "B200-SXM-180GB", 4, False),
    ("v4", "deepseek-ai/DeepSeek-V4-Flash", "B200-SXM-180GB", 8, False),
    ("v4", "deepseek-ai/DeepSeek-V4-Pro", "B200-SXM-180GB", 8, False),
    ("v4", "deepseek-ai/DeepSeek-V4-Flash", "B300-SXM-288GB", 4, True),
)
DECODE_BATCH = (1, 8, 64, 256)
DECODE_CTX = (1024, 4096, 16384)
PREFILL = (512, 2048, 8192)
MIXED = ((2048, 32, 4096),)  # (prefill tokens of one fresh prompt, decodes, their context)


@dataclass(frozen=True)
class Point:
    """One step shape on one deployment: (P, n, Lp, D, Ld) as the simulator prices it."""

    family: str
    model: str
    gpu: str
    tp: int
    kind: str  # decode, prefill or mixed
    shape: tuple[int, int, int, int, int]
    held_out: bool

    def label(self) -> str:
        p, _n, _lp, d, ld = self.shape
        what = {
            "decode": f"decode B={d} ctx={ld // max(d, 1)}",
            "prefill": f"prefill {p}",
            "mixed": f"mixed P={p} D={d} ctx={ld // max(d, 1)}",
        }[self.kind]
        return f"{self.model.split('/')[-1]} {self.gpu.split('-')[0]} TP{self.tp} {what}"


def points() -> list[Point]:
    out = []
    for fam, model, gpu, tp, whole in CONFIGS:
        for d in DECODE_BATCH:
            for c in DECODE_CTX:
                held = whole or d == 64 or c == 4096
                out.append(Point(fam, model, gpu, tp, "decode", (0, 0, 0, d, d * c), held))
        for p in PREFILL:
            out.append(Point(fam, model, gpu, tp, "prefill", (p, 1, p, 0, 0), whole or p == 2048))
        for p, d, c in MIXED:
            out.append(Point(fam, model, gpu, tp, "mixed", (p, 1, p, d, d * c), whole))
    return out


def models_for(model: str, gpu: str, tp: int) -> tuple[Any, Any, Any, Any]:
    """(plain roofline, the planner's (it without the 3 ms per-step overhead), fitted-roofline
    terms, AIC adapter or None) for one deployment."""
    from kvscope.sim.cost import CostCoefficients, CostModel, HardwareTerms
    from kvscope.sim.cost_aic import AicCostModel, build_aic
    from kvscope.sim.roofline import FittedRoofline, FitTerms
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model

    m, g = load_model(model), get_gpu(gpu)
    plain = CostModel(HardwareTerms.from_specs(m, g, tp=tp))
    planner = CostModel(plain.terms, CostCoefficients(overhead_s=0.0))
    terms = FitTerms.from_specs(m, g, tp=tp)
    logging.disable(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aic = build_aic(FittedRoofline(terms), model, g.name, "vllm", tp, None)
    return plain, planner, terms, aic if isinstance(aic, AicCostModel) else None


def aic_seconds(aic: Any, pt: Point) -> float:
    p, n, lp, d, ld = pt.shape
    return float(aic.decode_s(d, ld) if pt.kind == "decode" else aic.mixed_s(p, n, lp, d, ld))


def plain_seconds(plain: Any, pt: Point) -> float:
    """The plain roofline's step time: it sees only tokens and attended context."""
    p, _n, lp, d, ld = pt.shape
    return float(plain.step_time(p + d, lp + ld))


def evaluate() -> list[dict[str, Any]]:
    """Every grid point with AIC's, the plain roofline's seconds and the fit's inputs."""
    rows: list[dict[str, Any]] = []
    cache: dict[tuple[str, str, int], tuple[Any, Any, Any, Any]] = {}
    for pt in points():
        key = (pt.model, pt.gpu, pt.tp)
        if key not in cache:
            cache[key] = models_for(*key)
        plain, planner, terms, aic = cache[key]
        if aic is None:
            continue
        rows.append(
            {
                "point": pt,
                "terms": terms,
                "aic_s": aic_seconds(aic, pt),
                "roofline_s": plain_seconds(plain, pt),
                "planner_s": plain_seconds(planner, pt),
            }
        )
    return rows


def stats(ratios: list[float]) -> dict[str, float]:
    import numpy as np

    r = np.asarray(ratios)
    err = np.abs(r - 1.0)
    return {
        "n": len(r),
        "median_ratio": float(np.median(r)),
        "min_ratio": float(r.min()),
        "max_ratio": float(r.max()),
        "median_abs_err": float(np.median(err)),
        "p90_abs_err": float(np.quantile(err, 0.9)),
    }
