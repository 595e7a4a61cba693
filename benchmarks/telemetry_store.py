"""Benchmark: DuckDB store ingest rate (samples/s), one transaction per batch.

    PYTHONPATH=src python benchmarks/telemetry_store.py [--samples 1000000] [--batch 10000]

Batches are lists of Sample records as the watch loop produces them (Arrow conversion
included). Target >= 100,000 samples/s.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from kvscope.telemetry.series import Sample
from kvscope.telemetry.store import Store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=10_000)
    args = ap.parse_args()
    metrics = [
        "gpu_memory_used_bytes",
        "gpu_power_watts",
        "kv_cache_usage_ratio",
        "gpu_sm_clock_hertz",
    ]
    batches = []
    for b in range(args.samples // args.batch):
        t0 = 1.7e9 + b
        batches.append(
            [
                Sample(t0 + i * 1e-4, f"gpu:{i % 8}", metrics[i % 4], float(i))
                for i in range(args.batch)
            ]
        )
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "bench.duckdb") as st:
        start = time.perf_counter()
        for batch in batches:
            st.append(batch)
        wall = time.perf_counter() - start
        n = st.count()
    print(
        f"store ingest: {n:,} samples in {len(batches)} transactions of {args.batch:,} "
        f"in {wall:.2f} s = {n / wall:,.0f} samples/s (target >= 100,000)"
    )


if __name__ == "__main__":
    main()
