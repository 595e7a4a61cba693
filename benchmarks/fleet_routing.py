"""Fleet routing what-ifs on real traces: hit rate and TTFT by router (issue 22).

Mooncake's conversation trace (FAST'25) on N replicas of Llama-3.1-8B / H100: the fleet
prefix-hit rate and TTFT of round-robin, prefix-aware and prefix-load routing, against the
single-pool bound (the trace's own repeat share: prompt tokens in 16-token blocks whose prefix
was seen earlier, i.e. an infinite cache seeing every request). WEKA's agentic sessions: the
same figures for round-robin, session affinity, prefix-aware and prefix-load.

Run: ``PYTHONPATH=src python benchmarks/fleet_routing.py [--shared DIR] [--replicas 8]
[--limit N] [--only mooncake|weka]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kvscope.fleet import simulate_fleet, single_pool
from kvscope.sim import SimConfig
from kvscope.workload import Workload
from kvscope.workload.stats import prefix_reuse

HERE = Path(__file__).resolve().parent


def run(name: str, w: Workload, replicas: int, routers: list[str], blocks: int | None) -> None:
    bound = prefix_reuse(w, 16)
    share = bound["reusable_token_share"] if bound else 0.0
    print(f"{name}: {len(w):,} requests over {w.duration_s:,.0f} s; single-pool bound {share:.1%}")
    for router in routers:
        t0, c0 = time.perf_counter(), time.process_time()
        cfg = SimConfig(num_gpu_blocks_override=blocks)
        res = simulate_fleet(w, single_pool(cfg, replicas, router=router))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        f = res.figures
        per = [r["requests"] for r in f["replicas"]]
        size = f" ({blocks:,} blocks each)" if blocks else ""
        print(
            f"  {router:>16} x{replicas}{size}: hit {f['prefix_hit_rate']:.1%}, TTFT p50 "
            f"{f['ttft_p50_s']:.3f} s p90 {f['ttft_p90_s']:.3f} s p99 {f['ttft_p99_s']:.3f} s "
            f"mean {f['ttft_mean_s']:.3f} s, E2E p50 {f['e2e_p50_s']:.2f} s, requests per "
            f"replica {min(per)}..{max(per)}, preemptions {f['preemptions']:,} "
            f"({wall:.1f} s wall, {cpu:.1f} s CPU)",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=HERE.parents[1] / "shared")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--only", choices=["mooncake", "weka"], default=None)
    ap.add_argument("--routers", default="", help="comma-separated (default: per trace)")
    ap.add_argument("--num-gpu-blocks", type=int, default=None, help="KV blocks per replica")
    args = ap.parse_args()
    traces = args.shared / "traces"
    if args.only in (None, "weka"):
        w = Workload.from_file(traces / "weka_agentic_sample")
        routers = ["round-robin", "session-affinity", "prefix-aware", "prefix-load"]
        routers = args.routers.split(",") if args.routers else routers
        run("WEKA agentic sample", w, args.replicas, routers, args.num_gpu_blocks)
    if args.only in (None, "mooncake"):
        w = Workload.from_file(traces / "mooncake_fast25" / "conversation_trace.jsonl")
        if args.limit:
            w = w.limit(args.limit)
        routers = ["round-robin", "prefix-aware", "prefix-load"]
        routers = args.routers.split(",") if args.routers else routers
        run("Mooncake conversation", w, args.replicas, routers, args.num_gpu_blocks)


if __name__ == "__main__":
    main()
