"""Simulator speed: the Azure conversation trace on DeepSeek-V4-Flash/8xH200, and 1M requests.

Targets (issue 5): the full Azure LLM inference conversation trace (19,366 requests) with
DeepSeek-V4-Flash on 8x H200 in < 5 s, and 1,000,000 synthetic requests in < 60 s, on one
core. Prints wall and process CPU time of the simulation proper (workload loading is
reported apart; the loop is single-threaded, so CPU time is the time on an unloaded core and
the fair figure on a shared machine), the number of engine steps, and the speed-up over the
simulated time.

Run: ``PYTHONPATH=src python benchmarks/sim_speed.py [--requests 1000000] [--shared DIR]
[--cost-model roofline|fitted|aic] [--azure-model ID] [--azure-gpu GPU] [--skip-synthetic]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kvscope.sim import SimConfig, simulate
from kvscope.workload import build_workload

HERE = Path(__file__).resolve().parent


def report(name: str, n: int, load_s: float, res: object, target_s: float) -> None:
    f = res.figures  # type: ignore[attr-defined]
    wall, cpu = f["wall_s"], f["cpu_s"]
    print(
        f"{name}: {n:,} requests, load {load_s:.2f} s, simulate {wall:.2f} s wall, "
        f"{cpu:.2f} s CPU (target < {target_s:g} s: {'met' if cpu < target_s else 'NOT met'} "
        f"on CPU time); "
        f"{f['engine_steps']:,} engine steps in {f['engine_spans']:,} spans; "
        f"simulated {f['sim_end_s']:,.0f} s = {f['sim_end_s'] / wall:,.0f}x real time; "
        f"completed {f['completed']:,}, TTFT p50 {f['ttft_p50_s'] * 1e3:.1f} ms, "
        f"TPOT p50 {f['tpot_p50_s'] * 1e3:.2f} ms, KV peak {f['kv_usage_peak_frac']:.1%}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--shared", type=Path, default=HERE.parent.parent / "shared")
    ap.add_argument("--cost-model", default="roofline", help="roofline, fitted or aic")
    ap.add_argument("--azure-model", default="deepseek-ai/DeepSeek-V4-Flash")
    ap.add_argument("--azure-gpu", default="H200", help="GPU of the 8-way Azure run")
    ap.add_argument("--skip-synthetic", action="store_true", help="only the Azure trace")
    args = ap.parse_args()

    trace = args.shared / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    if trace.is_file():
        t0 = time.perf_counter()
        w = build_workload(str(trace))
        load = time.perf_counter() - t0
        cfg = SimConfig(
            model=args.azure_model,
            gpu=args.azure_gpu,
            tp=8,
            kv_cache_dtype="fp8",
            cost_model=args.cost_model,
        )
        name = args.azure_model.split("/")[-1]
        res = simulate(w, cfg)
        report(f"Azure conv, {name}, 8x{args.azure_gpu}, {args.cost_model}", len(w), load, res, 5.0)
    else:
        print(f"skipped the Azure trace: {trace} not found")

    if args.skip_synthetic:
        return
    t0 = time.perf_counter()
    w = build_workload(arrival="poisson:rate=20", num_requests=args.requests, seed=1)
    load = time.perf_counter() - t0
    cfg = SimConfig(
        model="meta-llama/Llama-3.1-8B",
        gpu="H100",
        sample_interval_s=1.0,
        cost_model=args.cost_model,
    )
    report(
        "synthetic poisson 20/s, 1024->128 tokens, Llama-3.1-8B, 1xH100",
        len(w),
        load,
        simulate(w, cfg),
        60.0,
    )


if __name__ == "__main__":
    main()
