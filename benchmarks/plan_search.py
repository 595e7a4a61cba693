"""Benchmark: configurations per second of ``kvscope.plan.search.search``.

Runs the search for a few models over every catalogue GPU, GPU counts 1-64, all TP/PP/DP
splits the engines accept, EP on/off for MoE models and two KV dtypes, and prints the
configurations evaluated, the wall time (best of ``--repeat``) and configurations per
second of the vectorised pass, then how many of the cheapest survivors were checked
against the engine's exact memory budget (plan_memory) and how long that took. The issue's
target is at least 10,000 configurations per second.

    PYTHONPATH=src python benchmarks/plan_search.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import platform
import time

from kvscope.plan.search import search
from kvscope.specs.registry import load_model

CASES = [
    ("meta-llama/Llama-3.1-8B", 8192, 64),
    ("meta-llama/Llama-3.1-70B", 32768, 32),
    ("mistralai/Mixtral-8x7B-v0.1", 4096, 128),
    ("deepseek-ai/DeepSeek-V3", 8192, 256),
    ("deepseek-ai/DeepSeek-V4-Flash", 131072, 64),
]
COUNTS = (1, 2, 4, 8, 16, 32, 64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, counts {COUNTS}")
    print(
        f"{'model':34} {'configs':>8} {'feasible':>8} {'best ms':>8} {'configs/s':>11} "
        f"{'checked':>7} {'check ms':>8}  cheapest"
    )
    total_cfg = 0
    total_s = 0.0
    for name, ctx, conc in CASES:
        model = load_model(name)
        search(model, ctx, conc, counts=COUNTS)  # first call fills the per-model caches
        best = check = float("inf")
        for _ in range(args.repeat):
            r = search(model, ctx, conc, counts=COUNTS)
            best = min(best, r.seconds)
            check = min(check, r.check_seconds)
        total_cfg += r.evaluated
        total_s += best
        top = r.candidates[0] if r.candidates else None
        desc = (
            f"{top.num_gpus}x {top.gpu} tp{top.tp} pp{top.pp} dp{top.dp}"
            f"{' ep' if top.ep else ''} kv {top.kv_dtype}: ${top.usd_per_million_tokens:.3f}/Mtok"
            if top
            else "none feasible"
        )
        print(
            f"{name:34} {r.evaluated:8d} {r.feasible:8d} {best * 1e3:8.2f} "
            f"{r.evaluated / best:11,.0f} {r.engine_checked:7d} {check * 1e3:8.1f}  {desc}"
        )
    cold_model = load_model("Qwen/Qwen3-235B-A22B")
    t0 = time.perf_counter()
    cold = search(cold_model, 16384, 64, counts=COUNTS)
    wall = time.perf_counter() - t0
    cold_s = cold.seconds
    print(
        f"all cases: {total_cfg} configs in {total_s * 1e3:.1f} ms = "
        f"{total_cfg / total_s:,.0f} configs/s (warm)"
    )
    print(
        f"cold first search (Qwen3-235B-A22B, caches empty): {cold.evaluated} configs in "
        f"{cold_s * 1e3:.1f} ms = {cold.evaluated / cold_s:,.0f} configs/s; with "
        f"{cold.engine_checked} engine checks {wall * 1e3:.1f} ms wall"
    )


if __name__ == "__main__":
    main()
