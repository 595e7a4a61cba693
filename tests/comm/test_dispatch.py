"""MoE dispatch all-to-all with uneven splits, on real gloo ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvscope.comm.dispatch import MoeConfig, run_moe
from kvscope.errors import KvscopeError

pytest.importorskip("torch")


@pytest.mark.integration
def test_skew_raises_imbalance_and_rows_are_consistent(tmp_path: Path) -> None:
    cfg = MoeConfig((0.0, 2.0), world_size=4, tokens_per_rank=32, hidden=256, iters=8, warmup=1)
    result = run_moe(cfg, tmp_path)
    uniform, skewed = result.rows
    assert uniform["wrong_ranks"] == [] and skewed["wrong_ranks"] == []
    assert skewed["imbalance_mean"] > uniform["imbalance_mean"] + 0.3
    for r in result.rows:
        assert r["lat_p50_s"] <= r["lat_p95_s"] <= r["lat_p99_s"] <= r["lat_max_s"]
        # the busiest rank receives at least the mean, at most everything sent
        assert r["busiest_rank_recv_bytes_mean"] >= r["bytes_per_rank_mean"]
        assert r["busiest_rank_recv_bytes_mean"] <= 4 * r["bytes_per_rank_mean"]
    assert uniform["p99_vs_least_skew"] == 1.0
    # the skewed routing puts more traffic on its busiest rank, and the model sees it
    assert skewed["bottleneck_bytes_p50"] > uniform["bottleneck_bytes_p50"]
    for r in result.rows:
        assert r["bottleneck_bytes_p50"] <= r["bottleneck_bytes_p99"]
        assert 0 < r["predicted_p50_s"] <= r["predicted_p99_s"]
        assert r["p99_over_predicted"] == pytest.approx(r["lat_p99_s"] / r["predicted_p99_s"])
    assert result.fit is not None and result.fit.points == 2 * 8
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["kind"] == "comm" and summary["pattern"] == "moe_dispatch"
    assert len((tmp_path / "comm.jsonl").read_text().splitlines()) == 2


def test_experts_must_split_over_ranks() -> None:
    with pytest.raises(KvscopeError, match="evenly"):
        MoeConfig((0.0,), world_size=3, num_experts=8)
