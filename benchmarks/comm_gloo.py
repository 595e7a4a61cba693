"""Collective latency tails and the fitted alpha-beta link on this host (gloo, 2 and 4 ranks).

Usage: PYTHONPATH=src python benchmarks/comm_gloo.py [--iters 20] [--max-size 4M]

For world sizes 2 and 4 it measures all_reduce and all_to_all over a size sweep, prints
one row per (ranks, op, size) with P50/P99, busbw (nccl-tests definition) and the fitted
model's prediction, then the fitted link per (ranks, op), then the MoE dispatch at three
routing skews on 4 ranks. Figures are wall-clock on whatever shares the host's cores.
"""

from __future__ import annotations

import argparse
import time

from kvscope.comm.bench import BenchConfig, run_bench
from kvscope.comm.dispatch import MoeConfig, run_moe
from kvscope.comm.sizes import format_size, parse_size, parse_sweep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--max-size", default="4M")
    args = ap.parse_args()
    sizes = tuple(parse_sweep(f"1K:{format_size(parse_size(args.max_size))}:x4"))
    t0 = time.perf_counter()
    fits = []
    print(
        f"{'ranks':>5} {'op':<11} {'size':>6} {'p50 us':>9} {'p99 us':>9} {'p99/p50':>7} "
        f"{'busbw GB/s':>10} {'model us':>9} {'meas/model':>10} {'slowest':>7}"
    )
    for n in (2, 4):
        for op in ("all_reduce", "all_to_all"):
            res = run_bench(BenchConfig(op, sizes, world_size=n, iters=args.iters, warmup=5))
            for r in res.rows:
                print(
                    f"{n:>5} {op:<11} {format_size(r['size_bytes']):>6} "
                    f"{r['lat_p50_s'] * 1e6:>9.1f} {r['lat_p99_s'] * 1e6:>9.1f} "
                    f"{r['lat_p99_s'] / r['lat_p50_s']:>7.2f} {r['busbw_gbps']:>10.3f} "
                    f"{(r['predicted_s'] or 0) * 1e6:>9.1f} "
                    f"{r['measured_over_predicted'] or 0:>10.2f} {r['slowest_rank']:>7}"
                )
            fits.append((n, op, res.fit))
    print()
    print(f"{'ranks':>5} {'op':<11} {'alpha us':>9} {'link GB/s':>9} {'RMS err':>8}")
    for n, op, fit in fits:
        if fit is not None:
            print(
                f"{n:>5} {op:<11} {fit.link.alpha_s * 1e6:>9.1f} "
                f"{fit.link.bandwidth_bytes_per_s / 1e9:>9.3f} {fit.rms_rel_error * 100:>7.1f}%"
            )
    print()
    moe = run_moe(MoeConfig((0.0, 1.0, 2.0), world_size=4, iters=args.iters, warmup=5))
    print("MoE dispatch, top-2 of 8 experts, 128 tokens x 4096 bf16 per rank, 4 ranks")
    print(
        f"{'skew':>5} {'MiB/rank':>8} {'imbalance':>9} {'p50 us':>9} {'p99 us':>9} "
        f"{'p99/least':>9} {'model p99':>9} {'p99/model':>9} {'corr':>6}"
    )
    for r in moe.rows:
        corr = r["corr_imbalance_latency"]
        print(
            f"{r['skew']:>5g} {r['bytes_per_rank_mean'] / 2**20:>8.2f} "
            f"{r['imbalance_mean']:>9.2f} {r['lat_p50_s'] * 1e6:>9.1f} "
            f"{r['lat_p99_s'] * 1e6:>9.1f} {r['p99_vs_least_skew']:>9.2f} "
            f"{(r['predicted_p99_s'] or 0) * 1e6:>9.1f} {r['p99_over_predicted'] or 0:>9.2f} "
            f"{'-' if corr is None else f'{corr:+.2f}':>6}"
        )
    print(f"\nwall time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
