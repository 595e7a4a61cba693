"""Regenerate the report screenshots under docs/images/ (``report-<kind>.png``).

Writes the run folders in a temporary directory with the real commands (the demo, a
``simulate --sweep``, a ``bench`` run, a ``--find-max-rate`` search and a ``watch`` run
against ``kvscope mock-server`` on 127.0.0.1, a memtrace snapshot), renders each with
``kvscope report``, opens it in headless Chromium (Debian's ``chromium``) cut off the
network, checks the layout from the DOM and saves the top of the page, 1400 px wide.

    .venv/bin/python scripts/report_screenshots.py [--out docs/images] [--height 2500]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_helpers import start_mock, stop  # noqa: E402

from browser import Page, chromium_path, layout_problems  # noqa: E402


def kvscope(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "kvscope.cli.main", *args], check=True, timeout=600)


def make_runs(base: Path) -> dict[str, list[Path]]:
    kvscope("demo", "--out", str(base / "demo"))
    demo = [base / "demo" / n for n in ("plan", "sim-default", "sim-max-num-seqs-64")]
    demo.append(base / "demo" / "sim-no-prefix-caching")
    kvscope(
        "simulate", "--model", "llama-3.1-8b", "--gpu", "h100", "--arrival", "poisson:rate=20",
        "--duration", "30", "--prompt-len", "512", "--output-len", "128",
        "--max-num-batched-tokens", "2048", "--sweep", "max-num-seqs=8,32,128",
        "--out", str(base / "sweep"),
    )  # fmt: skip
    proc, url = start_mock("--ttft", "0.05", "--itl", "0.01", "--max-running", "16")
    try:
        kvscope(
            "bench", "--url", url, "--model", "mock", "--arrival", "poisson:rate=20",
            "--duration", "8", "--prompt-len", "512", "--output-len", "64",
            "--slo", "ttft_p99=0.2,tpot_p99=20ms", "--out", str(base / "bench"),
        )  # fmt: skip
        kvscope(
            "bench", "--url", url, "--model", "mock", "--find-max-rate", "--duration", "3",
            "--start-rate", "2", "--max-rate", "64", "--prompt-len", "256", "--output-len", "32",
            "--slo", "ttft_p99=0.2,tpot_p99=20ms", "--out", str(base / "max-rate"),
        )  # fmt: skip
        watch = subprocess.Popen(
            [
                sys.executable, "-m", "kvscope.cli.main", "watch", "--engine", url,
                "--interval", "0.2", "--duration", "8", "--out", str(base / "watch"),
            ]
        )  # fmt: skip
        kvscope(
            "bench", "--url", url, "--model", "mock", "--arrival", "poisson:rate=30",
            "--duration", "8", "--prompt-len", "256", "--output-len", "64",
            "--out", str(base / "load"),
        )  # fmt: skip
        watch.wait(timeout=60)
    finally:
        stop(proc)
    kvscope("memtrace", "generate", "--scenario", "fragmentation", "--out", str(base / "f.pickle"))
    kvscope("memtrace", "analyze", str(base / "f.pickle"), "--out", str(base / "memtrace"))
    return {
        "demo": demo,
        "sweep": [base / "sweep"],
        "bench": [base / "bench"],
        "max-rate": [base / "max-rate"],
        "watch": [base / "watch"],
        "memtrace": [base / "memtrace"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    ap.add_argument("--height", type=int, default=2500, help="crop to this many px")
    args = ap.parse_args()
    binary = chromium_path()
    if binary is None:
        print("chromium is not installed", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    failed = False
    with tempfile.TemporaryDirectory(prefix="kvscope-shots-") as tmp:
        runs = make_runs(Path(tmp))
        page = Page(binary)
        try:
            requested = page.offline()
            for kind, dirs in runs.items():
                html = Path(tmp) / f"report-{kind}.html"
                kvscope("report", *map(str, dirs), "--out", str(html), "--title", f"kvscope {kind}")
                page.errors.clear()
                page.open(html)
                n = page.charts_drawn()
                problems = layout_problems(page) + page.errors + requested
                shot = page.screenshot(args.out / f"report-{kind}.png", max_height=args.height)
                size = shot.stat().st_size // 1024
                print(f"{shot}: {n} charts, {size} KiB, {len(problems)} problem(s)")
                for p in problems:
                    print(f"  {p}")
                failed |= bool(problems)
        finally:
            page.close()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
