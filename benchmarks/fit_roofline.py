"""Fit the fitted roofline's constants to AIConfigurator's step estimates, once.

Queries ``aiconfigurator-core`` over the grid of ``aic_grid.py`` (dense, MoE, MLA and
DeepSeek V4 deployments; decode at several batch sizes and contexts, prefill chunks, a mixed
step), fits the seven constants of :mod:`kvscope.sim.roofline` per family by least squares on
``log(kvscope / AIC)`` over the training points, and writes them with the AIC version, every
grid point (AIC's seconds included, so a test can re-query AIC) and the train and held-out
errors of the plain roofline (``simulate``'s, with its 3 ms per-step overhead, and
``plan``'s, without it) and the fitted one to ``src/kvscope/sim/roofline_fit.json``.

Run: ``PYTHONPATH=src python benchmarks/fit_roofline.py`` (about a minute on one core).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aic_grid import Point, evaluate, stats

from kvscope.sim.roofline import FAMILIES, PARAMS, FitConstants, FittedRoofline

OUT = Path(__file__).resolve().parent.parent / "src" / "kvscope" / "sim" / "roofline_fit.json"
#: Start and bounds per constant (s, fraction, tokens): physical ranges, not tuned.
X0 = {"layer_s": 2e-5, "mfu": 0.5, "mbu": 0.8, "moe_half_tpe": 8.0, "attn_mbu": 0.6,
      "attn_half_ctx": 256.0, "attn_mfu": 0.3}  # fmt: skip
LO = {"layer_s": 0.0, "mfu": 0.02, "mbu": 0.05, "moe_half_tpe": 0.0, "attn_mbu": 0.02,
      "attn_half_ctx": 0.0, "attn_mfu": 0.002}  # fmt: skip
HI = {"layer_s": 2e-3, "mfu": 1.0, "mbu": 1.0, "moe_half_tpe": 4096.0, "attn_mbu": 1.0,
      "attn_half_ctx": 65536.0, "attn_mfu": 1.0}  # fmt: skip


def predict(rows: list[dict[str, Any]], c: FitConstants) -> np.ndarray:
    return np.array([FittedRoofline(r["terms"], c).shape_time(*r["point"].shape) for r in rows])


def fit_family(train: list[dict[str, Any]]) -> FitConstants:
    aic = np.array([r["aic_s"] for r in train])
    scale = np.array([HI[k] - LO[k] for k in PARAMS])

    def resid(x: np.ndarray) -> np.ndarray:
        c = FitConstants(**dict(zip(PARAMS, (float(v) for v in x), strict=True)))
        return np.log(predict(train, c) / aic)

    x0 = np.array([X0[k] for k in PARAMS])
    best = None
    for start in (x0, x0 * 0.3, np.minimum(x0 * 3, [HI[k] for k in PARAMS])):
        res = least_squares(
            resid,
            start,
            bounds=([LO[k] for k in PARAMS], [HI[k] for k in PARAMS]),
            x_scale=scale,
            loss="soft_l1",
            f_scale=0.2,
        )
        if best is None or res.cost < best.cost:
            best = res
    assert best is not None
    return FitConstants(**dict(zip(PARAMS, (float(v) for v in best.x), strict=True)))


def point_doc(p: Point, aic_s: float) -> dict[str, Any]:
    return {
        "family": p.family,
        "model": p.model,
        "gpu": p.gpu,
        "tp": p.tp,
        "kind": p.kind,
        "shape": list(p.shape),
        "held_out": p.held_out,
        "aic_s": aic_s,
    }


def main() -> None:
    rows = evaluate()
    doc: dict[str, Any] = {
        "aic_version": version("aiconfigurator-core"),
        "fitted": dt.date.today().isoformat(),
        "command": "PYTHONPATH=src python benchmarks/fit_roofline.py",
        "backend": "vllm (AIC systems' current vllm tables)",
        "shape": "(prefill tokens, prefill requests, their attended tokens, decodes, "
        "decode attended tokens); errors are |kvscope / AIC - 1|",
        "families": {},
        "grid": [],
    }
    for fam in FAMILIES:
        mine = [r for r in rows if r["point"].family == fam]
        if not mine:
            continue
        train = [r for r in mine if not r["point"].held_out]
        held = [r for r in mine if r["point"].held_out]
        c = fit_family(train)
        entry: dict[str, Any] = {"constants": {k: getattr(c, k) for k in PARAMS}}
        for name, subset in (("train", train), ("held_out", held)):
            aic = np.array([r["aic_s"] for r in subset])
            entry[name] = {
                "roofline": stats(list(np.array([r["roofline_s"] for r in subset]) / aic)),
                "planner": stats(list(np.array([r["planner_s"] for r in subset]) / aic)),
                "fitted": stats(list(predict(subset, c) / aic)),
            }
        doc["families"][fam] = entry
        h = entry["held_out"]
        print(
            f"{fam}: {len(train)} train, {len(held)} held out; held-out median |ratio-1| "
            f"roofline {h['roofline']['median_abs_err']:.2f} -> fitted "
            f"{h['fitted']['median_abs_err']:.2f} (P90 {h['fitted']['p90_abs_err']:.2f}); "
            + ", ".join(f"{k}={getattr(c, k):.4g}" for k in PARAMS)
        )
    doc["grid"] = [point_doc(r["point"], r["aic_s"]) for r in rows]
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
