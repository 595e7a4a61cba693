"""Wall time of ``kvscope doctor``: a live run on this host and an offline replay.

Usage: PYTHONPATH=src python benchmarks/doctor_live.py [--repeat N]

Prints, per run, the total wall time of the live command (as a user runs it: a subprocess,
``--json``), the slowest probe from the bundle manifest (the live run costs about as much as
that probe because probes run concurrently), and the time to replay a captured bundle.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _cli(*args: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", "doctor", "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return time.perf_counter() - t0, out.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    n = ap.parse_args().repeat
    live, replay = [], []
    for i in range(n):
        with tempfile.TemporaryDirectory() as tmp:
            bundle = Path(tmp) / "b"
            wall, code = _cli("--capture", str(bundle))
            manifest = json.loads((bundle / "manifest.json").read_text())
            slow = max(manifest["probes"], key=lambda p: p["duration_s"])
            r_wall, _ = _cli("--from", str(bundle))
        live.append(wall)
        replay.append(r_wall)
        print(
            f"run {i + 1}: live {wall:.2f} s (exit {code}; slowest probe {slow['name']} "
            f"{slow['duration_s']:.2f} s), replay --from {r_wall:.2f} s"
        )
    print(
        f"live wall time: median {statistics.median(live):.2f} s, max {max(live):.2f} s; "
        f"offline replay: median {statistics.median(replay):.2f} s (n={n})"
    )


if __name__ == "__main__":
    main()
