"""Benchmark: generate and load 1,000,000 requests (target < 5 s each, issue 4).

Runs the issue's command end to end as a subprocess (interpreter start-up included):

    kvscope workload generate --arrival poisson:rate=1000 --prompt-len mix:0.95@128,0.05@4096
        --output-len lognormal:median=150,sigma=0.8 --num-requests 1000000 --seed 7 --out w.parquet

then times loading 1,000,000-request files in-process: the Parquet and JSONL it wrote, and an
Azure-format CSV (TIMESTAMP with 7 fractional digits) built from the same stream.
Usage: PYTHONPATH=src python benchmarks/workload_generate.py [N]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 5.0


def _timed(label: str, fn: object, results: list[tuple[str, float]]) -> object:
    t0 = time.perf_counter()
    out = fn()  # type: ignore[operator]
    dt = time.perf_counter() - t0
    results.append((label, dt))
    print(f"{label:<58} {dt:6.2f} s {'ok' if dt < TARGET_S else 'OVER TARGET'}", flush=True)
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    from kvscope.workload.stats import workload_stats
    from kvscope.workload.stream import Workload

    results: list[tuple[str, float]] = []
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for ext in ("parquet", "jsonl"):
            cmd = [sys.executable, "-m", "kvscope.cli.main", "workload", "generate",
                   "--arrival", "poisson:rate=1000", "--prompt-len", "mix:0.95@128,0.05@4096",
                   "--output-len", "lognormal:median=150,sigma=0.8", "--num-requests", str(n),
                   "--seed", "7", "--out", str(tmp / f"w.{ext}")]  # fmt: skip
            _timed(f"CLI generate {n:,} -> .{ext} (process wall)",
                   lambda c=cmd: subprocess.run(c, check=True, env=env, capture_output=True),
                   results)  # fmt: skip
        w = _timed(
            f"load {n:,} from Parquet", lambda: Workload.from_file(tmp / "w.parquet"), results
        )
        _timed(f"load {n:,} from JSONL", lambda: Workload.from_file(tmp / "w.jsonl"), results)
        assert isinstance(w, Workload) and len(w) == n
        csv = tmp / "azure_like.csv"
        base = 1_700_155_000  # any epoch second; 7 fractional digits as in the Azure files
        with csv.open("w") as f:
            f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
            import datetime as dt

            for t, p, o in zip(w.arrival_s.tolist(), w.prompt_tokens.tolist(),
                               w.output_tokens.tolist(), strict=True):  # fmt: skip
                sec = int(t)
                stamp = dt.datetime.fromtimestamp(base + sec, tz=dt.UTC).strftime(
                    "%Y-%m-%d %H:%M:%S"
                )
                f.write(f"{stamp}.{int((t - sec) * 1e7):07d},{p},{o}\n")
        _timed(f"load {n:,} from Azure-format CSV", lambda: Workload.from_file(csv), results)
        _timed(f"stats of {n:,}", lambda: workload_stats(w), results)
    worst = max(dt for _, dt in results)
    print(f"worst {worst:.2f} s (target < {TARGET_S:.0f} s)")


if __name__ == "__main__":
    main()
