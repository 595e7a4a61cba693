"""Benchmark: `alerts check` replay of the default pack over a day of 1 Hz telemetry.

    PYTHONPATH=src python benchmarks/alerts_replay.py [--hours 24] [--gpus 8] [--engines 2]

Writes a DuckDB store with every series the default pack reads (per GPU: memory used and
total, 3 throttle reasons, XID total; per engine: KV usage, fragmentation, preemptions,
retries, queue, TTFT P99, up) sampled at 1 Hz, with a seeded random walk, then times
loading it (:func:`load_store`) and replaying the 13 rules once per minute (:func:`replay`).
Prints rows, load and replay seconds, and evaluations per second.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from kvscope.alerts.evaluate import load_store, replay
from kvscope.alerts.loader import load_pack
from kvscope.telemetry.store import Store


def _columns(hours: float, gpus: int, engines: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = int(hours * 3600)
    t = 1_764_374_400.0 + np.arange(n, dtype=np.float64)  # 2025-11-29 00:00 UTC, 1 Hz
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("t", "src", "m", "lab", "v")}

    def put(src: str, metric: str, values: np.ndarray, labels: str = "") -> None:
        cols["t"].append(t)
        cols["src"].append(np.full(n, src, dtype=object))
        cols["m"].append(np.full(n, metric, dtype=object))
        cols["lab"].append(np.full(n, labels, dtype=object))
        cols["v"].append(values.astype(np.float64))

    walk = lambda lo, hi: np.clip(lo + np.cumsum(rng.normal(0, (hi - lo) / 300, n)), lo, hi)  # noqa: E731
    for g in range(gpus):
        src = f"gpu:{g}"
        put(src, "gpu_memory_used_bytes", walk(50e9, 79e9))
        put(src, "gpu_memory_total_bytes", np.full(n, 80e9))
        for reason in ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"):
            put(
                src,
                "gpu_clock_event_active",
                (rng.random(n) < 0.01).astype(float),
                f"reason={reason}",
            )
        put(src, "gpu_xid_events_total", np.cumsum(rng.random(n) < 1e-5).astype(float))
    for e in range(engines):
        src = f"engine:127.0.0.1:{8000 + e}"
        put(src, "kv_cache_usage_ratio", walk(0.2, 1.0))
        put(src, "kv_fragmentation_ratio", walk(0.0, 0.5))
        put(src, "preemptions_total", np.cumsum(rng.poisson(0.05, n)).astype(float))
        put(src, "allocation_retries_total", np.cumsum(rng.poisson(0.01, n)).astype(float))
        put(src, "requests_waiting", np.round(walk(0, 40)))
        put(src, "ttft_seconds_p99", walk(0.05, 4.0))
        put(src, "engine_up", (rng.random(n) > 0.001).astype(float))
    return pa.table(
        {
            "t_s": pa.array(np.concatenate(cols["t"])),
            "source": pa.array(np.concatenate(cols["src"]).tolist(), pa.string()),
            "metric": pa.array(np.concatenate(cols["m"]).tolist(), pa.string()),
            "labels": pa.array(np.concatenate(cols["lab"]).tolist(), pa.string()),
            "value": pa.array(np.concatenate(cols["v"])),
            "res_s": pa.array(np.zeros(sum(len(x) for x in cols["t"]))),
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--engines", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    pack = load_pack()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        table = _columns(args.hours, args.gpus, args.engines, args.seed)
        with Store(path) as st:
            st.append(table)
        t0 = time.perf_counter()
        data = load_store(str(path), pack)
        t1 = time.perf_counter()
        result = replay(pack, data)
        t2 = time.perf_counter()
    evals = result.steps * len(pack.rules)
    print(f"rows {table.num_rows:,}  series {args.gpus * 6 + args.engines * 7}")
    print(f"load_store  {t1 - t0:.2f} s")
    print(
        f"replay      {t2 - t1:.2f} s for {result.steps:,} steps x {len(pack.rules)} rules "
        f"({evals / (t2 - t1):,.0f} rule evaluations/s), {len(result.events)} state changes"
    )


if __name__ == "__main__":
    main()
