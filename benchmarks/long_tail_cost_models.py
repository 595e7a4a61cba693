"""The long-tail mix under each cost model: how much the step-time model moves the answer.

    PYTHONPATH=src python benchmarks/long_tail_cost_models.py [--out DIR] [--report]

``benchmarks/workloads/long_tail.yaml`` (95 % 128-token and 5 % 4,096-token prompts, Poisson
40 req/s) on Llama-3.1-8B / one H100, three scheduler settings (chunked prefill with a 2,048
or 8,192-token budget, no chunking at 8,192) times three cost models (``roofline``,
``fitted``, ``aic``). Each point is one ``kvscope simulate ... --json`` run whose directory is
kept under ``--out``; ``--report`` renders all of them with ``kvscope report`` (one column per
run, the headline names each run's cost model and expected error). Prints one row per point:
TTFT P50/P90/P99, TPOT P50/P99, E2E P99, served rate and the simulator's wall time, then each
cost model's figures relative to ``aic`` at the same setting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "benchmarks" / "workloads" / "long_tail.yaml"
SETTINGS = {
    "chunked-2048": ["--max-num-batched-tokens", "2048"],
    "chunked-8192": ["--max-num-batched-tokens", "8192"],
    "unchunked-8192": ["--max-num-batched-tokens", "8192", "--no-enable-chunked-prefill"],
}
MODELS = ("roofline", "fitted", "aic")
FIGS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p99_s")


def run_point(out: Path, setting: str, cost: str) -> dict[str, object]:
    d = out / f"{setting}-{cost}"
    cmd = [
        sys.executable, "-m", "kvscope.cli.main", "simulate", "--workload", str(WORKLOAD),
        "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--cost-model", cost,
        *SETTINGS[setting], "--out", str(d), "--force", "--json",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{setting}/{cost}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    figs = json.loads(r.stdout)
    figs["process_wall_s"] = wall
    return figs


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="keep the run directories here")
    ap.add_argument("--report", action="store_true", help="render them with kvscope report")
    args = ap.parse_args(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="long-tail-"))
    rows = []
    for setting in SETTINGS:
        for cost in MODELS:
            f = run_point(out, setting, cost)
            rows.append({**f, "setting": setting, "cost": cost})
            print(
                f"{setting:<15} {cost:<9} TTFT P50/P90/P99 "
                + " / ".join(f"{1e3 * float(f[k]):.1f}" for k in FIGS[:3])
                + " ms, TPOT P50/P99 "
                + " / ".join(f"{1e3 * float(f[k]):.2f}" for k in FIGS[3:5])
                + f" ms, E2E P99 {float(f['e2e_p99_s']):.2f} s, "
                f"{float(f['request_throughput_per_s']):.1f} req/s, "
                f"sim {float(f['wall_s']):.2f} s wall",
                flush=True,
            )
    print("relative to aic at the same setting:")
    by = {(r["setting"], r["cost"]): r for r in rows}
    for setting in SETTINGS:
        ref = by[(setting, "aic")]
        for cost in ("roofline", "fitted"):
            r = by[(setting, cost)]
            cells = ", ".join(f"{k[:-2]} {float(r[k]) / float(ref[k]):.2f}x" for k in FIGS)
            print(f"  {setting:<15} {cost:<9} {cells}")
    if args.report:
        page = out / "report.html"
        subprocess.run(
            [sys.executable, "-m", "kvscope.cli.main", "report",
             *[str(out / f"{s}-{c}") for s in SETTINGS for c in MODELS], "--out", str(page)],
            check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )  # fmt: skip
        print(f"report: {page}")
    return rows


if __name__ == "__main__":
    main()
