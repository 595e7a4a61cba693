"""``simulate --replicas/--router/--cluster/--autoscale``: the run directory, sweeps over fleet
fields, ``report`` of a fleet run, and bad cluster specs as one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cli_helpers import one_error_line, run_in_process

WL = ["--arrival", "poisson:rate=20", "--prompt-len", "300", "--output-len", "40"]
WL += ["--num-requests", "60", "--seed", "2"]


def test_fleet_run_dir_has_replica_columns_and_renders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["simulate", *WL, "--replicas", "3", "--router", "prefix-load", "--out", str(out)]
    code, _, err = run_in_process([*argv, "--router-weights", "prefix=1,queue=1,kv=0"], capsys)
    assert code == 0, err
    req = pq.read_table(out / "requests.parquet")
    steps = pq.read_table(out / "steps.parquet")
    assert set(req["replica"].to_pylist()) == {0, 1, 2}
    assert set(steps["replica"].to_pylist()) == {0, 1, 2}
    summary = json.loads((out / "summary.json").read_text())
    figs = summary.get("figures", summary)
    assert [r["replica"] for r in figs["replicas"]] == [0, 1, 2]
    assert sum(r["requests"] for r in figs["replicas"]) == 60 == figs["completed"]
    code, _, err = run_in_process(["report", str(out), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "Fleet: per replica" in page and page.count("<td>default</td>") == 3


def test_sweep_over_replicas_and_router(capsys: pytest.CaptureFixture[str]) -> None:
    sweep = ["--sweep", "replicas=1,2", "--sweep", "router=round-robin,least-outstanding"]
    code, out, err = run_in_process(["simulate", *WL, *sweep, "--json"], capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["point"] for r in rows] == [
        "replicas=1,router=round-robin",
        "replicas=1,router=least-outstanding",
        "replicas=2,router=round-robin",
        "replicas=2,router=least-outstanding",
    ]
    assert [len(r["replicas"]) for r in rows] == [1, 1, 2, 2]
    assert rows[0]["ttft_p50_s"] == rows[1]["ttft_p50_s"]  # one replica: the router is moot


def test_cluster_file_pools_of_different_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(
        "router: least-outstanding\npools:\n"
        "  - {name: big, replicas: 2, gpu: H100}\n"
        "  - {name: small, replicas: 1, gpu: L4-24GB, max-num-seqs: 8, max-model-len: 8192}\n"
    )
    code, out, err = run_in_process(["simulate", *WL, "--cluster", str(spec), "--json"], capsys)
    assert code == 0, err
    reps = json.loads(out)["replicas"]
    assert [r["pool"] for r in reps] == ["big", "big", "small"]
    assert reps[2]["kv_blocks_capacity"] < reps[0]["kv_blocks_capacity"]


@pytest.mark.parametrize(
    ("yaml_text", "needles"),
    [
        ("router: nearest\npools: [{replicas: 2}]\n", ("--router must be one of", "nearest")),
        ("pools: [{replicas: 0}]\n", ("pools[0].replicas", ">= 1")),
        ("pools: [{replicas: 1, gpu: L4-24GB, model: meta-llama/Llama-3.1-70B}]\n", ("pools[0]",)),
        ("pools: [{replicas: 1, max-num-seqs: -3}]\n", ("pools[0].max-num-seqs",)),
        ("pools: [{replicas: 1, turbo: 1}]\n", ("pools[0].turbo", "not a per-pool")),
        ("pools: [{replicas: 1, gpu: B9000}]\n", ("pools[0]", "B9000")),
        ("router_weights: {prefix: -1}\npools: [{replicas: 1}]\n", ("--router-weights prefix",)),
        ("pool: []\n", ("'pool'", "not a cluster field")),
        ("pools: []\n", ("'pools'",)),
        ("autoscale: 'queue:up=1'\npools: [{replicas: 2}]\n", ("--autoscale", "'down'")),
    ],
)
def test_bad_cluster_specs_are_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], yaml_text: str, needles: tuple[str, ...]
) -> None:
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml_text)
    code, _, err = run_in_process(["simulate", *WL, "--cluster", str(spec)], capsys)
    one_error_line(code, err, *needles)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--router", "nearest"], "--router must be one of"),
        (["--replicas", "0"], "--replicas must be >= 1"),
        (["--replicas", "2", "--router-weights", "prefix=x"], "--router-weights prefix"),
        (["--replicas", "2", "--autoscale", "schedule:0=3"], "--autoscale replicas at 0"),
        (["--replicas", "2", "--calibrate", "x"], "--calibrate"),
        (["--replicas", "2", "--data-parallel-size", "2"], "--data-parallel-size"),
    ],
)
def test_bad_fleet_flags_are_one_line(
    capsys: pytest.CaptureFixture[str], flags: list[str], needle: str
) -> None:
    code, _, err = run_in_process(["simulate", *WL, *flags], capsys)
    one_error_line(code, err, needle)


def test_moe_runner_backend_is_refused_for_vllm_in_simulate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``simulate`` shares ``plan``'s flag and its one validation (SGLang's flag only)."""
    argv = ["simulate", *WL, "--engine", "vllm", "--moe-runner-backend", "marlin"]
    code, _, err = run_in_process([*argv, "--out", str(tmp_path / "run")], capsys)
    one_error_line(code, err, "--moe-runner-backend is SGLang's")
