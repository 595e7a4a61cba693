"""Disaggregated DeepSeek-V4-Flash (prefill 2x8 H200, decode 1x8 H200) against the aggregated
layout on the same 24 GPUs (3 engines of 8 H200) on the Azure code trace (2023).

Prints TTFT/TPOT/E2E percentiles of both, where the disaggregated TTFT went (prefill, wait
for the link, transfer, decode's first step) and the KV bytes per request, checked against
the planner's per-token figure. The trace is read from ../shared (never copied).

    PYTHONPATH=src python benchmarks/disagg_v4.py [--num-requests N] [--link KIND] [--speedup X]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from kvscope.fleet.disagg import DisaggConfig, simulate_disagg
from kvscope.fleet.kv_transfer import default_link
from kvscope.plan.config import Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.sim import SimConfig, simulate
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model
from kvscope.workload import Workload

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
MODEL = "deepseek-ai/DeepSeek-V4-Flash"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-requests", type=int, default=None)
    ap.add_argument("--link", default="rdma")
    ap.add_argument("--speedup", type=float, default=1.0, help="arrival rate x this")
    args = ap.parse_args()
    w = Workload.from_file(TRACE).shift_to_zero()
    if args.speedup != 1.0:
        w = Workload.build(
            w.arrival_s / args.speedup, w.prompt_tokens, w.output_tokens, request_ids=w.request_ids
        )
    if args.num_requests:
        w = w.limit(args.num_requests)
    v4 = {"model": MODEL, "gpu": "H200", "tp": 8}
    h200 = get_gpu("H200")
    cfg = DisaggConfig(
        SimConfig(dp=2, **v4),  # type: ignore[arg-type]
        SimConfig(**v4),  # type: ignore[arg-type]
        default_link(args.link, h200),
    )
    t0 = time.perf_counter()
    dis = simulate_disagg(w, cfg)
    t1 = time.perf_counter()
    agg = simulate(w, SimConfig(dp=3, **v4))  # type: ignore[arg-type]
    t2 = time.perf_counter()
    per_tok = plan_memory(load_model(MODEL), h200, Parallelism(tp=8)).kv_bytes_per_token
    c = dis.columns
    b = c["transfer_bytes_per_rank"]
    fixed = b - c["prompt_tokens"] * per_tok  # window state: SWA KV and compressor states
    f = agg.figures
    out = {
        "requests": len(w),
        "disaggregated": {k: dis.figures[k] for k in ("completed", "ttft_s", "tpot_s", "e2e_s")},
        "ttft_parts_s": dis.figures["ttft_parts_s"],
        "kv_bytes_per_token_planner": per_tok,
        "transfer_bytes_per_rank": dis.figures["transfer_bytes_per_rank"],
        "transfer_fixed_part_bytes": [float(fixed.min()), float(fixed.max())],
        "aggregated_3x8": {
            "completed": f["completed"],
            "ttft_s": {k: f[f"ttft_{k}_s"] for k in ("mean", "p50", "p90", "p99")},
            "tpot_s": {k: f[f"tpot_{k}_s"] for k in ("mean", "p50", "p90", "p99")},
            "e2e_s": {k: f[f"e2e_{k}_s"] for k in ("mean", "p50", "p90", "p99")},
        },
        "wall_s": {"disaggregated": round(t1 - t0, 2), "aggregated": round(t2 - t1, 2)},
    }
    print(json.dumps(out, indent=1, default=float))
    assert np.all(np.isfinite(b))


if __name__ == "__main__":
    main()
