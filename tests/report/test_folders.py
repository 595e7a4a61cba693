"""Folders kvscope writes that hold several runs, and the figures a report must get right."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq

from browser import report_specs, series_values
from cli_helpers import run_kvscope
from kvscope.report import build_report
from kvscope.report.loader import load_run


def test_a_sweep_folder_is_compared_along_the_swept_value(sweep_dir: Path, tmp_path: Path) -> None:
    run = load_run(sweep_dir)
    assert run.kind == "sweep"
    assert [c.label for c in run.children] == [
        "max-num-seqs=8",
        "max-num-seqs=64",
        "max-num-seqs=256",
    ]  # by value, not by name
    html = build_report([sweep_dir])
    specs = report_specs(html)
    ttft = specs["TTFT vs --max-num-seqs"]
    rows = {r["s"]: r for r in ttft["data"]["values"]}
    assert rows["P99"]["x"] == [8, 64, 256]
    summaries = [json.loads((d.path / "summary.json").read_text()) for d in run.children]
    p99 = [s["ttft_p99_s"] for s in summaries]
    unit = 1.0 if "(s)" in ttft["layer"][0]["encoding"]["y"]["title"] else 1e3
    assert [round(v, 3) for v in rows["P99"]["y"]] == [round(v * unit, 3) for v in p99]
    for title in ("Output throughput", "TPOT", "KV-cache peak", "Preemptions"):
        assert f"{title} vs --max-num-seqs" in specs
    assert "Sweep of --max-num-seqs (3 points)" in html
    out = run_kvscope("report", str(sweep_dir), "--out", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    assert "report written" in out.stdout


def test_batch_chart_shows_tokens_per_engine_step(sweep_dir: Path) -> None:
    # The steps table sums tokens over each sample (many engine steps): the chart must
    # divide by the step count, so no point exceeds --max-num-batched-tokens (2048 here).
    point = sweep_dir / "max-num-seqs=256"
    steps = pq.read_table(point / "steps.parquet").to_pydict()
    assert max(steps["batch_tokens"]) > 2048  # the per-sample sum does exceed the budget
    spec = report_specs(build_report([point]))["Batch: tokens per step"]
    per_step = series_values(spec)["max-num-seqs=256"]
    assert 0 < max(per_step) <= 2048
    assert "--max-num-batched-tokens 2,048" in json.dumps(spec)


def test_kv_peak_is_one_figure_in_headline_and_caption(sweep_dir: Path) -> None:
    point = sweep_dir / "max-num-seqs=64"
    summary = json.loads((point / "summary.json").read_text())
    html = build_report([point])
    caption = report_specs(html)["KV cache usage"]["title"]["subtitle"][0]
    m = re.search(r"peak ([\d.]+)% at ([\d.]+) s", caption)
    assert m, caption
    assert abs(float(m.group(1)) - summary["kv_usage_peak_frac"] * 100) < 0.01
    assert abs(float(m.group(2)) - summary["kv_usage_peak_t_s"]) < 0.1
    assert f"{m.group(1)} % at {m.group(2)} s" in html  # the headline cell, same figure


def test_summary_is_readable(sweep_dir: Path) -> None:
    html = build_report([sweep_dir / "max-num-seqs=8"])
    details = html[html.index("All summary figures") :]
    assert "TTFT P99 (s)" in details and "ttft_p99_s" not in details
    cells = re.findall(r"<td>([^<]*)</td>", details)
    assert cells and not [c for c in cells if re.search(r"\de[+-]\d", c)]
    assert not [c for c in cells if c.startswith(("{", "["))]


def test_a_find_max_rate_folder_is_a_capacity_curve(served_runs: dict[str, Path]) -> None:
    fmr = served_runs["max-rate"]
    summary = json.loads((fmr / "summary.json").read_text())
    run = load_run(fmr)
    assert run.kind == "max-rate" and len(run.children) == len(summary["probes"])
    assert not [p for p in run.problems if "missing" in p]
    html = build_report([fmr])
    specs = report_specs(html)
    lat = specs["Latency vs offered rate"]
    rates = sorted(p["rate_per_s"] for p in summary["probes"])
    assert {r["s"]: r["x"] for r in lat["data"]["values"]}["TTFT P99"] == rates
    assert "Goodput vs offered rate" in specs
    best = summary["max_rate_per_s"]
    if best is not None:
        assert f"max rate {best:g} req/s" in json.dumps(lat)


def test_bench_percentiles_include_itl(served_runs: dict[str, Path]) -> None:
    bench = served_runs["bench"]
    summary = json.loads((bench / "summary.json").read_text())
    html = build_report([bench])
    row = re.search(r"<tr><td>ITL</td><td>bench</td><td>([\d,]+)</td><td>([\d.,]+)</td>", html)
    assert row, "no ITL row"
    assert int(row.group(1).replace(",", "")) == summary["itl_gaps"]
    assert abs(float(row.group(2)) - summary["itl_p50_s"] * 1e3) < 0.1
    assert "ITL distribution" in report_specs(html)
    assert "SLO TTFT P99 200 ms" in json.dumps(report_specs(html)["TTFT distribution"])
