"""Fleet simulation speed: the Azure conversation trace over 1, 2, 4, 8, 16 replicas (issue 22).

Target: the whole trace (19,366 requests) across 8 replicas of Llama-3.1-8B / H100 with
prefix-aware routing in < 10 s, and a cost that grows linearly with the replica count (every
replica is advanced to every arrival, so the work is about requests x replicas plus the
engines' own steps). Prints wall and process CPU time of the simulation proper per replica
count (CPU time is the fair figure on a shared machine: the loop is single-threaded), the CPU
seconds per replica and the engine steps.

Run: ``PYTHONPATH=src python benchmarks/fleet_speed.py [--shared DIR] [--router NAME]
[--replicas 1,2,4,8,16]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kvscope.fleet import simulate_fleet, single_pool
from kvscope.sim import SimConfig
from kvscope.workload import Workload

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=HERE.parents[1] / "shared")
    ap.add_argument("--router", default="prefix-aware")
    ap.add_argument("--replicas", default="1,2,4,8,16")
    args = ap.parse_args()
    t0 = time.perf_counter()
    path = args.shared / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    w = Workload.from_file(path)
    print(f"Azure conversation trace: {len(w):,} requests, load {time.perf_counter() - t0:.2f} s")
    for n in (int(x) for x in args.replicas.split(",")):
        t0, c0 = time.perf_counter(), time.process_time()
        res = simulate_fleet(w, single_pool(SimConfig(), n, router=args.router))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        f = res.figures
        print(
            f"  {n:>2} replicas, {args.router}: {wall:.2f} s wall, {cpu:.2f} s CPU "
            f"({cpu / n:.2f} s CPU per replica){' target < 10 s ' if n == 8 else ''}"
            f"{('met' if cpu < 10 else 'NOT met') if n == 8 else ''}; "
            f"{f['engine_steps']:,} engine steps in {f['engine_spans']:,} spans; "
            f"completed {f['completed']:,}, TTFT p50 {f['ttft_p50_s'] * 1e3:.1f} ms, "
            f"p99 {f['ttft_p99_s'] * 1e3:.1f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
