"""Benchmark: CPU cost of `kvscope watch` sampling 8 GPUs (NVML fixture backend) and 2 engines
at 10 Hz, as a share of one core.

The engines are keep-alive HTTP/1.1 servers in other processes, on loopback, serving recorded
pages the way prometheus_client's app does for vLLM and SGLang (tests/metrics_page_server.py,
``name[]`` filtering included): vLLM 0.33.0's real PrometheusStatLogger page (550 lines) and
the SGLang page. The GPUs answer through the same NVML layer as a driver would, from the recorded
shapes in tests/telemetry/fixtures/nvml_recording.json (device 0 replicated 8 times). The
store is on (DuckDB, one transaction per second) and so is the exporter board.

    PYTHONPATH=src python benchmarks/telemetry_sampling.py [--seconds 20] [--runs 3]

Prints the sampler process's CPU seconds / wall seconds in steady state for each session and
the median over sessions (target < 2 % of one core), store commits included.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvscope.telemetry.gpu import GpuSampler
from kvscope.telemetry.nvml import Nvml
from kvscope.telemetry.nvml_replay import replay_call
from kvscope.telemetry.watch import Watch, WatchConfig

FIX = Path(__file__).resolve().parents[1] / "tests" / "telemetry" / "fixtures"


#: The engines' stand-in: recorded pages served like prometheus_client's ASGI app (vLLM's and
#: SGLang's /metrics) -- keep-alive HTTP/1.1, ``name[]`` filtering by a restricted registry.
PAGE_SERVER = Path(__file__).resolve().parents[1] / "tests" / "metrics_page_server.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session(args: argparse.Namespace, urls: list[str], store: Path | None) -> float:
    """One watch session; prints its figures and returns the CPU share (% of one core)."""
    rec = json.loads((FIX / "nvml_recording.json").read_text())
    rec["devices"] = [rec["devices"][0]] * args.gpus
    rec["xid_events"] = []
    gpus = GpuSampler(Nvml.open(raw=replay_call(rec)))
    cfg = WatchConfig(
        interval_s=0.1,
        duration_s=args.seconds,
        engines=tuple(urls),
        store_path=store,
        flush_s=args.flush,
    )
    # Steady state: CPU from the end of tick 10 to the end of the last tick (start-up,
    # imports and the final summary are one-off costs, not the cost of sampling).
    marks: dict[str, float] = {}

    def on_tick(ww: Watch) -> None:
        now = (time.process_time(), time.perf_counter(), float(ww.state.ticks))
        if ww.state.ticks == 10:
            marks["cpu0"], marks["wall0"], marks["k0"] = now
        marks["cpu1"], marks["wall1"], marks["k1"] = now

    summary = Watch(cfg, gpus=gpus, on_tick=on_tick).run()
    cpu, wall = marks["cpu1"] - marks["cpu0"], marks["wall1"] - marks["wall0"]
    ticks = int(marks["k1"] - marks["k0"])
    share = cpu / wall * 100
    head = f"sampling {args.gpus} GPUs (fixture NVML) + {len(urls)} engines at 10 Hz"
    print(
        f"{head}, steady state {wall:.1f} s, {ticks} ticks "
        f"({summary['missed_ticks']} missed in the whole run): CPU {cpu:.2f} s = "
        f"{share:.2f} % of one core ({cpu / max(ticks, 1) * 1e3:.2f} ms/tick)",
        flush=True,
    )
    return share


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=3, help="sessions in a row; the median counts")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--no-store", action="store_true", help="measure without the DuckDB store")
    ap.add_argument(
        "--flush", type=float, default=WatchConfig().flush_s, help="seconds between store commits"
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kvscope-bench-"))
    servers, urls = [], []
    try:
        for page in ("vllm_0_33_0_metrics_t1.txt", "sglang_metrics.txt"):
            d = tmp / page.split(".")[0]
            d.mkdir()
            shutil.copy(FIX / page, d / "metrics")
            port = _port()
            servers.append(
                subprocess.Popen(
                    [sys.executable, str(PAGE_SERVER), str(port), str(d / "metrics")],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            urls.append(f"http://127.0.0.1:{port}/metrics")
        time.sleep(1.0)
        shares = [
            _session(args, urls, None if args.no_store else tmp / f"bench{k}.duckdb")
            for k in range(args.runs)
        ]
    finally:
        for srv in servers:
            srv.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"median of {len(shares)} sessions: {statistics.median(shares):.2f} % of one core "
        f"(range {min(shares):.2f}-{max(shares):.2f}); target < 2 %"
    )


if __name__ == "__main__":
    main()
