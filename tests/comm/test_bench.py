"""Real gloo collectives at world sizes 2 and 4: ordered percentiles, consistent bandwidths."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kvscope.comm.bench import BenchConfig, run_bench
from kvscope.comm.collectives import OPS, bus_factor
from kvscope.comm.launch import Fault, RankFailure
from kvscope.errors import KvscopeError, UnknownNameError

pytest.importorskip("torch")

SIZES = (1024, 65536)


@pytest.mark.integration
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("op", OPS)
def test_every_collective_runs_for_real(op: str, n: int) -> None:
    result = run_bench(BenchConfig(op, SIZES, world_size=n, iters=5, warmup=1))
    assert len(result.rows) == len(SIZES)
    assert all(r["size_bytes"] <= s for r, s in zip(result.rows, SIZES, strict=True))
    for r in result.rows:
        assert r["wrong_ranks"] == []  # every rank got the right values back
        assert 0 < r["lat_min_s"] <= r["lat_p50_s"] <= r["lat_p95_s"] <= r["lat_p99_s"]
        assert r["lat_p99_s"] <= r["lat_max_s"]
        assert r["iters"] == 5 and 0 <= r["slowest_rank"] < n
        # nccl-tests: algbw = S / mean time; busbw = algbw x factor(op, n).
        assert r["algbw_gbps"] * 1e9 * r["lat_mean_s"] == pytest.approx(r["size_bytes"])
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * bus_factor(op, n))
        assert r["predicted_s"] > 0
        assert r["p99_over_predicted"] >= r["measured_over_predicted"] > 0
    assert result.fit is not None


@pytest.mark.integration
def test_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = run_bench(BenchConfig("all_reduce", (256, 4096, 65536), world_size=2, iters=4), out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["kind"] == "comm" and summary["status"] == "ok"
    assert summary["config"]["sizes"] == [256, 4096, 65536]
    assert summary["environment"]["backend"] == "gloo"
    fit = summary["fit"]
    assert fit["alpha_s"] >= 0 and fit["beta_s_per_byte"] >= 0
    # on a loaded host small sizes may show no size dependence: beta 0, bandwidth None
    assert (fit["bandwidth_gbps"] is None) == (fit["beta_s_per_byte"] == 0)
    lines = (out / "comm.jsonl").read_text().splitlines()
    assert [json.loads(x)["size_bytes"] for x in lines] == [256, 4096, 65536]
    table = pq.read_table(out / "comm.parquet").to_pylist()
    assert [r["lat_p99_s"] for r in table] == [r["lat_p99_s"] for r in result.rows]
    assert table[0]["measured_over_predicted"] > 0
    samples = pq.read_table(out / "comm_samples.parquet")
    assert samples.num_rows == 3 * 2 * 4  # steps x ranks x iterations


@pytest.mark.integration
def test_failed_run_keeps_what_it_measured(tmp_path: Path) -> None:
    cfg = BenchConfig(
        "all_reduce", (256, 4096, 65536), world_size=2, iters=3, fault=Fault(1, "exit", step=2)
    )
    with pytest.raises(RankFailure, match="rank 1 exited"):
        run_bench(cfg, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "error" and "rank 1" in summary["error"]
    assert len((tmp_path / "comm.jsonl").read_text().splitlines()) == 2


def test_nccl_without_cuda_says_so() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    with pytest.raises(KvscopeError, match="needs CUDA GPUs"):
        run_bench(BenchConfig("all_reduce", (1024,), backend="nccl"))


def test_config_validation() -> None:
    with pytest.raises(UnknownNameError):
        BenchConfig("all_reduce", (1024,), backend="mpi")
    with pytest.raises(KvscopeError):
        BenchConfig("all_reduce", (1024,), iters=0)
    with pytest.raises(KvscopeError):
        BenchConfig("send_recv", (1024,), world_size=1)
