"""Report sections for plan, memtrace and comm run directories written by the real commands."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa

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
    assert "Memory per GPU as the engine budgets it" in html
    bar = html[html.index("Memory per GPU as the engine") :]
    assert len(re.findall(r"<rect [^>]*><title>(weights|KV cache)", bar)) == 2
    assert "GPU memory (CUDA total)" in bar


def test_memtrace_run_renders_timeline_fragmentation_and_heatmap(tmp_path: Path) -> None:
    snap = tmp_path / "frag.pickle"
    kvscope("memtrace", "generate", "--scenario", "fragmentation", "--out", str(snap))
    kvscope("memtrace", "analyze", str(snap), "--out", str(tmp_path / "m"), "--no-cache")
    html = build_report([tmp_path / "m"])
    for title in ("Memory timeline", "External fragmentation", "Segment blocks"):
        assert title in html
    assert "allocated fraction" in html


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
    assert "Collective latency vs size" in html and "Bus bandwidth vs size" in html
    assert "alpha = 50.0 µs per step, bandwidth = 1.00 GB/s" in html
