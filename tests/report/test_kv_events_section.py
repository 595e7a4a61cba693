"""The report of a watch run with KV-cache events: residency, reuse distance, the MRC."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from browser import report_specs, series_values
from kvscope.report import build_report


def test_a_watch_run_with_events_shows_residency_reuse_and_the_curve(
    tmp_path: Path, kv_events_run: Any
) -> None:
    run = kv_events_run(tmp_path / "kv")
    meta = json.loads((run / "summary.json").read_text())["recorded"]
    page = build_report([run])
    specs = report_specs(page)
    for title in ("Block residency", "Reuse distance", "Miss-ratio curve"):
        assert specs[title]["data"]["values"], title
    (row,) = specs["Miss-ratio curve"]["data"]["values"]
    mrc = {round(x): y for x, y in zip(row["x"], row["y"], strict=True)}
    pool = meta["publisher"]["num_blocks"] - 1
    vllm = 100 * meta["totals"]["hits"] / meta["totals"]["queries"]
    assert mrc[pool] == pytest.approx(vllm, abs=1e-3)  # the curve at the pool seen is vLLM's
    ys = [mrc[k] for k in sorted(mrc)]
    assert ys == sorted(ys) and ys[-1] > ys[0]  # a bigger pool never hits less
    assert f"pool seen: {pool:,} blocks" in json.dumps(specs["Miss-ratio curve"])
    (res,) = series_values(specs["Block residency"]).values()
    assert res[-1] == pytest.approx(100) and res == sorted(res)
    (dist,) = series_values(specs["Reuse distance"]).values()
    assert dist == sorted(dist) and dist[-1] < 100  # first touches never reuse
    assert "KV-cache events" in page and f"{vllm / 100:.1%}" in page


def test_a_summary_of_garbage_events_leaves_the_charts_out(
    tmp_path: Path, kv_events_run: Any
) -> None:
    run = kv_events_run(tmp_path / "kv")
    doc = json.loads((run / "summary.json").read_text())
    doc["kv_events"]["residency_cdf_s"] = "soon"
    doc["kv_events"]["reuse"]["miss_ratio_curve_blocks"] = [[1, "x"], [2]]
    doc["kv_events"]["endpoints"] = {"e": {"events": "many"}}
    (run / "summary.json").write_text(json.dumps(doc))
    specs = report_specs(build_report([run]))
    assert "Block residency" not in specs and "Miss-ratio curve" not in specs
    assert "Reuse distance" in specs
