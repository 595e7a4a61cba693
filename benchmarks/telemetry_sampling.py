"""Benchmark: CPU cost of `kvscope watch` sampling 8 GPUs (NVML fixture backend) and 2 engines
at 10 Hz, as a share of one core.

The engines are real keep-alive HTTP/1.1 servers in other processes, on loopback,
serving recorded pages: vLLM 0.33.0's real PrometheusStatLogger page (550 lines) and the
SGLang page. The GPUs answer through the same NVML layer as a driver would, from the recorded
shapes in tests/telemetry/fixtures/nvml_recording.json (device 0 replicated 8 times). The
store is on (DuckDB, one transaction per second) and so is the exporter board.

    PYTHONPATH=src python benchmarks/telemetry_sampling.py [--seconds 20]

Prints the sampler process's CPU seconds / wall seconds in steady state (target < 2 % of one
core), store flushes included.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
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


# A keep-alive HTTP/1.1 server (as uvicorn and llama.cpp's httplib are) serving one file.
_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
body = open(sys.argv[2], 'rb').read()
class H(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_GET(self):
        self.send_response(200)
        self.send_header('Content-Type', 'text/plain; version=0.0.4')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--gpus", type=int, default=8)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kvscope-bench-"))
    servers, urls = [], []
    for page in ("vllm_0_33_0_metrics_t1.txt", "sglang_metrics.txt"):
        d = tmp / page.split(".")[0]
        d.mkdir()
        shutil.copy(FIX / page, d / "metrics")
        port = _port()
        servers.append(
            subprocess.Popen(
                [sys.executable, "-c", _SERVER, str(port), str(d / "metrics")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        urls.append(f"http://127.0.0.1:{port}/metrics")
    time.sleep(1.0)
    rec = json.loads((FIX / "nvml_recording.json").read_text())
    rec["devices"] = [rec["devices"][0]] * args.gpus
    rec["xid_events"] = []
    gpus = GpuSampler(Nvml.open(raw=replay_call(rec)))
    cfg = WatchConfig(
        interval_s=0.1,
        duration_s=args.seconds,
        engines=tuple(urls),
        store_path=tmp / "bench.duckdb",
        flush_s=1.0,
    )
    # Steady state: CPU from the end of tick 10 to the end of the last tick (start-up,
    # imports and the final summary are one-off costs, not the cost of sampling).
    marks: dict[str, float] = {}

    def on_tick(ww: Watch) -> None:
        now = (time.process_time(), time.perf_counter(), float(ww.state.ticks))
        if ww.state.ticks == 10:
            marks["cpu0"], marks["wall0"], marks["k0"] = now
        marks["cpu1"], marks["wall1"], marks["k1"] = now

    w = Watch(cfg, gpus=gpus, on_tick=on_tick)
    summary = w.run()
    cpu, wall = marks["cpu1"] - marks["cpu0"], marks["wall1"] - marks["wall0"]
    summary["ticks"] = int(marks["k1"] - marks["k0"])
    for s in servers:
        s.terminate()
    share = cpu / wall * 100
    per_tick_ms = cpu / max(summary["ticks"], 1) * 1e3
    head = f"sampling {args.gpus} GPUs (fixture NVML) + {len(urls)} engines at 10 Hz"
    print(
        f"{head}, steady state {wall:.1f} s, {summary['ticks']} ticks "
        f"({summary['missed_ticks']} missed in the whole run): CPU {cpu:.2f} s = "
        f"{share:.2f} % of one core ({per_tick_ms:.2f} ms/tick); target < 2 %"
    )
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
