"""Pooled connections against llama-server under CPU contention: errors and resends.

llama.cpp's server closes its connection after every streamed answer (see
``kvscope.bench.pool``); a request that takes such a connection from the pool before the close
reaches the client never reaches the server. This script runs ``kvscope bench`` against one
llama-server (the tiny test model, 4 slots) ``--runs`` times with the flags of
``tests/bench/test_llama_server.py::test_streaming_timings_usage_and_metrics`` while ``--busy``
spinning processes share the CPUs, and prints completed requests, errors and resends per run
and in total.

    python benchmarks/bench_pool_llama_server.py [--runs 80] [--busy 4]

llama-server comes from ``tests/llama_cpp.py::llama_server_binary`` (the Makefile builds it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

FLAGS = (
    "--arrival", "poisson:rate=8", "--num-requests", "24", "--prompt-len", "48",
    "--output-len", "16", "--scrape-interval", "0.1",
)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=80)
    ap.add_argument("--busy", type=int, default=4, help="spinning processes beside the run")
    args = ap.parse_args()
    from bench_helpers import LlamaServer, kvscope

    from llama_cpp import llama_server_binary, write_tiny_llama

    binary = llama_server_binary()
    if binary is None:
        sys.exit("llama-server is not built: run scripts/build_llama_server.sh")
    work = Path(tempfile.mkdtemp(prefix="kvscope-pool-"))
    server = LlamaServer(binary, write_tiny_llama(work / "tiny.gguf"))
    server.start()
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    totals: Counter[str] = Counter()
    try:
        for i in range(args.runs):
            out = work / f"run{i}"
            r = kvscope("bench", "--url", server.url, "--model", "tiny", "--out", str(out),
                        "--json", *FLAGS, timeout=180)  # fmt: skip
            s = json.loads(r.stdout) if r.stdout.strip() else {}
            rows = pq.read_table(out / "requests.parquet").to_pylist()
            errors = [row["error"] for row in rows if row["error_kind"]]
            totals.update(requests=len(rows), completed=s.get("completed", 0),
                          errors=len(errors), resends=s.get("resends", 0))  # fmt: skip
            print(f"run {i:3d}: completed {s.get('completed')}/{len(rows)}, "
                  f"resends {s.get('resends')}, errors {errors}", flush=True)  # fmt: skip
    finally:
        for p in spin:
            p.kill()
        server.kill()
    print(f"total: {args.runs} runs, {totals['requests']} requests, {totals['completed']} "
          f"completed, {totals['errors']} errors, {totals['resends']} resends "
          f"({args.busy} busy processes)")  # fmt: skip


if __name__ == "__main__":
    main()
