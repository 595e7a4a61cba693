"""Replay the Azure LLM conversation trace (2023) at 10x speed against the mock server.

Measures how closely ``kvscope bench`` reproduces the trace's arrival times: the dispatch lag
(send − scheduled time) percentiles over every request, and the achieved against the
requested rate. The scheduled times are checked against the trace file itself (its
TIMESTAMP column, shifted to start at 0 and divided by the speed-up) so the figure is about
the real trace, not a re-generated one. The trace is read from ../shared (never copied).

    python benchmarks/bench_trace_replay.py [--speedup 10] [--duration 60] [--nice 0] [--itl 0]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def trace_seconds(path: Path) -> np.ndarray:
    """Arrival seconds from the trace's TIMESTAMP column (7 fractional digits, cut to 6)."""
    out = []
    with path.open() as f:
        for row in csv.DictReader(f):
            ts = row["TIMESTAMP"]
            head, _, frac = ts.partition(".")
            out.append(datetime.fromisoformat(f"{head}.{frac[:6]}").timestamp())
    t = np.sort(np.asarray(out))
    return t - t[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--speedup", type=float, default=10.0)
    ap.add_argument(
        "--duration", type=float, default=60.0, help="seconds of replay (after speed-up)"
    )
    ap.add_argument("--nice", type=int, default=0, help="niceness for client and server")
    ap.add_argument(
        "--itl",
        type=float,
        default=0.0,
        help="mock server's gap between tokens (s); 0 writes each answer at once",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not TRACE.is_file():
        sys.exit(f"trace not found: {TRACE}")
    out = args.out or Path(tempfile.mkdtemp(prefix="kvscope-replay-")) / "run"

    def pre() -> None:
        if args.nice:
            os.nice(args.nice)

    mock = subprocess.Popen(
        [sys.executable, "-m", "kvscope.cli.main", "mock-server", "--port", "0", "--ttft", "0.02",
         "--itl", f"{args.itl:g}"],
        stdout=subprocess.PIPE, text=True, env=_env(), preexec_fn=pre,
    )  # fmt: skip
    assert mock.stdout is not None
    url = mock.stdout.readline().rsplit(" ", 1)[1].strip()
    try:
        r = subprocess.run(
            [sys.executable, "-m", "kvscope.cli.main", "bench", "--url", url, "--model", "mock",
             "--workload", str(TRACE), "--speedup", f"{args.speedup:g}",
             "--duration", f"{args.duration:g}", "--out", str(out), "--json",
             "--max-error-rate", "1"],
            capture_output=True, text=True, env=_env(), timeout=args.duration * 5 + 300,
            preexec_fn=pre, check=False,
        )  # fmt: skip
    finally:
        mock.terminate()
        mock.wait(timeout=10)
    if r.returncode != 0:
        sys.exit(f"bench failed ({r.returncode}): {r.stderr[-2000:]}")
    s = json.loads(r.stdout)
    t = pq.read_table(out / "requests.parquet").sort_by("arrival_s")
    sched = np.asarray(t.column("arrival_s").to_pylist())
    sent = np.asarray(t.column("sent_s").to_pylist())
    expect = trace_seconds(TRACE) / args.speedup
    expect = expect[expect < args.duration + 1e-9][: len(sched)]
    schedule_err = float(np.max(np.abs(sched - expect))) if len(expect) == len(sched) else None
    lag = sent - sched
    q = np.percentile(lag, [50, 90, 99, 99.9])
    result = {
        "trace": TRACE.name,
        "speedup": args.speedup,
        "replayed_s": args.duration,
        "mock_itl_s": args.itl,
        "requests": int(t.num_rows),
        "schedule_vs_trace_max_abs_s": schedule_err,
        "requested_rate_per_s": s["requested_request_rate_per_s"],
        "achieved_rate_per_s": s["achieved_request_rate_per_s"],
        "arrival_error_p50_ms": q[0] * 1e3,
        "arrival_error_p90_ms": q[1] * 1e3,
        "arrival_error_p99_ms": q[2] * 1e3,
        "arrival_error_p999_ms": q[3] * 1e3,
        "arrival_error_max_ms": float(lag.max()) * 1e3,
        "errors": s["errors"],
        "within_2ms_at_p99": bool(q[2] < 0.002),
        "run_dir": str(out),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
