"""Report sections for plan, memtrace and comm run directories written by the real commands."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from browser import report_specs
from cli_helpers import run_kvscope
from kvscope.report import build_report
from kvscope.results import RunDir


def kvscope(*args: str) -> None:
    out = run_kvscope(*args, timeout=300)
    assert out.returncode == 0, out.stderr


def test_plan_run_renders_the_memory_breakdown(tmp_path: Path) -> None:
    kvscope(
        "plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--out", str(tmp_path / "p"), "--json"
    )
    html = build_report([tmp_path / "p"])
    bar = report_specs(html)["Memory per GPU as the engine budgets it"]
    parts = {row["part"]: row["v"] for row in bar["data"]["values"]}
    assert parts["KV cache"] > parts["weights"] > 10  # GiB: 8B weights in bf16 are ~15
    assert "GPU memory (CUDA total)" in json.dumps(bar)


def test_memtrace_run_renders_timeline_fragmentation_and_heatmap(tmp_path: Path) -> None:
    snap = tmp_path / "frag.pickle"
    kvscope("memtrace", "generate", "--scenario", "fragmentation", "--out", str(snap))
    kvscope("memtrace", "analyze", str(snap), "--out", str(tmp_path / "m"), "--no-cache")
    specs = report_specs(build_report([tmp_path / "m"]))
    for title in ("Memory timeline", "External fragmentation", "Segment blocks: m"):
        assert title in specs
    assert "allocated fraction" in json.dumps(specs["Segment blocks: m"])


def test_comm_run_renders_latency_and_bandwidth_vs_size(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "c", "comm")
    sizes = [1024, 65536, 4 << 20]
    with run.table(
        "comm",
        pa.schema(
            [
                ("op", pa.string()),
                ("size_bytes", pa.int64()),
                ("lat_p50_s", pa.float64()),
                ("lat_p99_s", pa.float64()),
                ("predicted_s", pa.float64()),
                ("busbw_gbps", pa.float64()),
            ]
        ),
    ) as t:
        t.append_rows(
            [
                {
                    "op": "all_reduce",
                    "size_bytes": s,
                    "lat_p50_s": 1e-4 + s * 1e-9,
                    "lat_p99_s": 3e-4 + s * 1e-9,
                    "predicted_s": 1e-4 + s * 1e-9,
                    "busbw_gbps": s / (1e-4 + s * 1e-9) / 1e9,
                }
                for s in sizes
            ]
        )
    run.write_summary({"op": "all_reduce"}, {"fit": {"alpha_s": 5e-5, "beta_s_per_byte": 1e-9}})
    html = build_report([run.path])
    specs = report_specs(html)
    assert "Collective latency vs size" in specs and "Bus bandwidth vs size" in specs
    assert (
        specs["Collective latency vs size"]["layer"][0]["encoding"]["x"]["scale"]["type"] == "log"
    )
    assert "alpha = 50.0 µs per step, bandwidth = 1.00 GB/s" in html
