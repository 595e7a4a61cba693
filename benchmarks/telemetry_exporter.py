"""Benchmark: one Prometheus scrape of 2,000 series from the kvscope exporter.

    PYTHONPATH=src python benchmarks/telemetry_exporter.py [--series 2000] [--scrapes 50]

Fills the board with 2,000 series (8 GPUs x 250 per-process/labelled series), starts the
real HTTP exporter on 127.0.0.1 and times full GET /metrics round trips (collector render,
exposition and HTTP on loopback). Target: median < 20 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request

from kvscope.telemetry.exporter import Exporter, LatestValues
from kvscope.telemetry.series import Sample


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=2000)
    ap.add_argument("--scrapes", type=int, default=50)
    args = ap.parse_args()
    board = LatestValues()
    samples = []
    for i in range(args.series):
        gpu = i % 8
        board.set_info(f"gpu:{gpu}", {"uuid": f"GPU-{gpu:08x}", "name": "NVIDIA H100 80GB HBM3"})
        samples.append(
            Sample(0.0, f"gpu:{gpu}", "gpu_process_memory_bytes", float(i * 1_048_576), f"pid={i}")
        )
    board.update(samples)
    exp = Exporter.start(board, port=0)
    url = f"http://127.0.0.1:{exp.port}/metrics"
    times = []
    size = 0
    for _ in range(args.scrapes):
        t = time.perf_counter()
        with urllib.request.urlopen(url) as r:
            size = len(r.read())
        times.append(time.perf_counter() - t)
    exp.stop()
    times.sort()
    print(
        f"exporter scrape of {args.series:,} series ({size:,} bytes): median "
        f"{statistics.median(times) * 1e3:.1f} ms, p90 {times[int(0.9 * len(times))] * 1e3:.1f} ms "
        f"over {args.scrapes} scrapes (target < 20 ms)"
    )


if __name__ == "__main__":
    main()
