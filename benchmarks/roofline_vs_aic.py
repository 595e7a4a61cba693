"""The plain and the fitted roofline against AIConfigurator's measured-kernel step estimates.

For every point of the ``aic_grid.py`` grid (18 deployments: dense, MoE, MLA, DeepSeek V4;
decode at batch 1-256 and 1k-16k context, prefill chunks, a mixed step) prints kvscope/AIC
for the plain roofline (``--cost-model roofline``) and the fitted one (``--cost-model fitted``,
constants from the shipped ``roofline_fit.json``), then the median, min and max ratio and the
median and P90 |ratio - 1| per family and overall, for the held-out points apart.

Run: ``PYTHONPATH=src python benchmarks/roofline_vs_aic.py [--points]``.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aic_grid import evaluate, stats

from kvscope.sim.roofline import FAMILIES, FittedRoofline, constants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", action="store_true", help="print every grid point")
    args = ap.parse_args()
    rows = evaluate()
    for r in rows:
        fit = FittedRoofline(r["terms"], constants(r["point"].family))
        r["fitted_s"] = fit.shape_time(*r["point"].shape)
    print(f"kvscope / AIC step time (aiconfigurator-core {version('aiconfigurator-core')}, vllm)")
    if args.points:
        print(f"{'point':<58} {'AIC ms':>9} {'roofline':>9} {'fitted':>7} held")
        for r in rows:
            p = r["point"]
            print(
                f"{p.label():<58} {r['aic_s'] * 1e3:9.2f} {r['roofline_s'] / r['aic_s']:9.2f} "
                f"{r['fitted_s'] / r['aic_s']:7.2f} {'yes' if p.held_out else ''}"
            )
    head = (
        f"{'family':<8} {'set':<9} {'n':>4}  {'roofline med/min/max':>22} {'|r-1| med':>9} "
        f"{'P90':>5}  {'fitted med/min/max':>20} {'|r-1| med':>9} {'P90':>5}"
    )
    print(head)
    for fam in (*FAMILIES, "all"):
        for subset in ("all", "held-out"):
            sel = [
                r
                for r in rows
                if (fam == "all" or r["point"].family == fam)
                and (subset == "all" or r["point"].held_out)
            ]
            if not sel:
                continue
            a = stats([r["roofline_s"] / r["aic_s"] for r in sel])
            b = stats([r["fitted_s"] / r["aic_s"] for r in sel])
            print(
                f"{fam:<8} {subset:<9} {a['n']:>4}  "
                f"{a['median_ratio']:6.2f} {a['min_ratio']:6.2f} {a['max_ratio']:8.2f} "
                f"{a['median_abs_err']:9.2f} {a['p90_abs_err']:5.2f}  "
                f"{b['median_ratio']:6.2f} {b['min_ratio']:5.2f} {b['max_ratio']:7.2f} "
                f"{b['median_abs_err']:9.2f} {b['p90_abs_err']:5.2f}"
            )
    n_cfg = len({(r["point"].model, r["point"].gpu, r["point"].tp) for r in rows})
    print(f"{len(rows)} points on {n_cfg} deployments (deployments AIC cannot price are left out)")


if __name__ == "__main__":
    main()
