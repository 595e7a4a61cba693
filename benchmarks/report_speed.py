"""How fast ``kvscope report`` turns the demo's four runs into one page, and how big it is.

The demo (plan + three simulated configurations of DeepSeek-V4-Flash on 8xH200) is run once
into a scratch folder; then ``kvscope report`` is timed as a whole process (imports included)
on its four run folders: once with an empty cache folder (the charting library is bundled
from the ``vl-convert-python`` wheel, about 2 s) and several times with the library cached.
Targets (issue 21): the page stays under 5 MB and a warm ``kvscope report`` under 3 s on
2 cores.

    PYTHONPATH=src python benchmarks/report_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("plan", "sim-default", "sim-max-num-seqs-64", "sim-no-prefix-caching")


def report_once(demo: Path, out: Path, cache: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "XDG_CACHE_HOME": str(cache)}
    start = time.perf_counter()
    argv = [sys.executable, "-m", "kvscope.cli.main", "report"]
    argv += [str(demo / d) for d in RUNS]
    r = subprocess.run(
        [*argv, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    wall = time.perf_counter() - start
    if r.returncode != 0:
        raise SystemExit(f"kvscope report failed: {r.stderr.strip()}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from kvscope.demo import run_demo

    with tempfile.TemporaryDirectory(prefix="kvscope-report-speed-") as tmp:
        work = Path(tmp)
        run_demo(work / "demo")
        cold = [
            report_once(work / "demo", work / "cold.html", work / f"cache-cold-{i}")
            for i in range(3)
        ]
        warm_cache = work / "cache-warm"
        report_once(work / "demo", work / "w.html", warm_cache)  # fills the cache
        warm = [report_once(work / "demo", work / "w.html", warm_cache) for _ in range(args.repeat)]
        size = (work / "w.html").stat().st_size
        print(f"page: {size / 1e6:.2f} MB ({len(RUNS)} runs)")
        print(
            f"kvscope report, empty cache (3 runs): min {min(cold):.2f} s, "
            f"median {statistics.median(cold):.2f} s, max {max(cold):.2f} s"
        )
        print(
            f"kvscope report, cached ({args.repeat} runs): min {min(warm):.2f} s, "
            f"median {statistics.median(warm):.2f} s, max {max(warm):.2f} s"
        )


if __name__ == "__main__":
    main()
