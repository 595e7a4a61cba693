"""Speed and acceptance figures of ``kvscope tune`` (issue 23); prints what RESULTS.md records.

1. The planner's pruning of a space of ~11,500 points (expand + prune), median of 5.
2. Every point of the default Llama-3.1-8B / up to 8 H100 space (240) simulated on a
   1,000-request slice of the Azure conversation trace with 1 and with 2 local pool workers,
   then in this process alone: wall time and points per second.
3. The tune itself (successive halving, goodput per dollar) on that slice: the winner, its
   gain over vLLM's defaults, and whether two runs (and, with ``--ray ADDRESS``, a Ray run)
   give the same table.

Run: ``PYTHONPATH=src python benchmarks/tune_speed.py [--ray 127.0.0.1:PORT]``; the trace is
read from ``../shared/traces`` (or ``$KVSCOPE_SHARED/traces``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kvscope.executor import Backend, PointStore, PointTask, run_points
from kvscope.plan.prices import Prices
from kvscope.sim import SimConfig
from kvscope.specs.registry import load_model
from kvscope.tune.point import PointJob, simulate_point
from kvscope.tune.prune import prune
from kvscope.tune.run import TuneRequest, candidates, tune
from kvscope.tune.space import default_axes, expand
from kvscope.workload.spec import build_workload

SLO = (("ttft_p99_s", 0.5), ("tpot_p99_s", 0.05))
MODEL = "meta-llama/Llama-3.1-8B"


def _trace() -> Path:
    shared = Path(os.environ.get("KVSCOPE_SHARED", Path(__file__).resolve().parents[2] / "shared"))
    return shared / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"


def prune_speed() -> None:
    m = load_model(MODEL)
    axes = {
        **default_axes("vllm", ("H100", "A100-80GB", "L40S", "L4"), 8, m.is_moe, m.uses_mla),
        "max_num_seqs": (None, 16, 32, 64, 128, 256),
        "block_size": (16, 32),
        "enable_prefix_caching": (True, False),
        "max_num_batched_tokens": (None, 1024, 2048, 4096, 8192, 16384),
    }
    times, n, kept = [], 0, 0
    for _ in range(5):
        t = time.perf_counter()
        points = expand(axes, 8)
        r = prune(points, m, "vllm", m.max_position_embeddings)
        times.append(time.perf_counter() - t)
        n, kept = len(points), len(r.kept)
    print(
        f"prune: {n:,} points -> {kept:,} kept in {statistics.median(times) * 1e3:.0f} ms "
        f"(median of 5; expand + prune)"
    )


def points_speed(w: Any) -> None:
    req = TuneRequest(SimConfig(), ("H100",), 8, SLO)
    cands, _facts = candidates(req, Prices())
    tasks = [PointTask(f"p{i:04d}", PointJob(c.cfg, len(w), 1.0, SLO)) for i, c in enumerate(cands)]
    # 1 vs 2 pool workers, the same start-up path for both; then this process alone, which
    # skips the pool's pickling but carries this process's larger heap
    for backend in (Backend("local", 1), Backend("local", 2), Backend("serial")):
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            out = run_points(simulate_point, tasks, w, PointStore(d), backend)
            wall = time.perf_counter() - t
        print(
            f"points: {len(out)} points of {len(w):,} requests on {backend.describe()}: "
            f"{wall:.1f} s ({len(out) / wall:.2f} points/s)"
        )


def _table(s: dict[str, Any]) -> list[dict[str, Any]]:
    return s["ranked"]


def tune_run(w: Any, ray: str | None) -> None:
    req = TuneRequest(SimConfig(), ("H100",), 8, SLO)
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        a = tune(req, w, Path(d) / "a", Backend("local", 2))
        wall = time.perf_counter() - t
        b = tune(req, w, Path(d) / "b", Backend("local", 2))
        c = tune(req, w, Path(d) / "c", Backend("serial"))
        win, dflt, gain = a["winner"], a["defaults"], a["gain_vs_defaults"]
        sims = sum(1 + r["rung"] for r in a["ranked"])
        print(
            f"tune: {a['simulated_points']} points, {sims} simulations in {wall:.1f} s "
            f"(2 workers, successive halving)"
        )
        print(
            f"tune: winner {win['label']}: goodput {win['goodput_per_s']:.2f} req/s, "
            f"TTFT P99 {win['ttft_p99_s'] * 1e3:.0f} ms, TPOT P99 "
            f"{win['tpot_p99_s'] * 1e3:.1f} ms, {win['usd_per_hour']:.2f} USD/h"
        )
        print(
            f"tune: vLLM defaults {dflt['label']}: goodput {dflt['goodput_per_s']:.2f} req/s, "
            f"TTFT P99 {dflt['ttft_p99_s'] * 1e3:.0f} ms, SLO met: {dflt['slo_met']}"
        )
        print(
            f"tune: gain over the defaults: goodput {gain['goodput']:+.1%}, goodput per "
            f"dollar {gain['goodput_per_dollar']:+.1%}"
        )
        print(
            f"tune: same table twice (pool): {_table(a) == _table(b)}; "
            f"pool vs this process: {_table(a) == _table(c)}"
        )
        print(f"tune: command: {win['command']}")
        if ray:
            t = time.perf_counter()
            r = tune(req, w, Path(d) / "r", Backend("ray", 0, ray))
            print(
                f"tune: Ray at {ray}: {time.perf_counter() - t:.1f} s, same table as the "
                f"pool: {_table(r) == _table(a)}"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--speedup", type=float, default=4.0)
    ap.add_argument("--ray", default=None)
    ap.add_argument("--skip-points", action="store_true")
    args = ap.parse_args()
    prune_speed()
    w = build_workload(str(_trace()), None, None, None, None, args.requests, args.speedup, 0)
    print(
        f"workload: {len(w):,} requests of the Azure conversation trace at {args.speedup:g}x "
        f"({w.mean_rate_per_s:.1f} req/s)"
    )
    if not args.skip_points:
        points_speed(w)
    tune_run(w, args.ray)


if __name__ == "__main__":
    main()
