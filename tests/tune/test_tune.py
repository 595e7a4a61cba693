"""``tune()`` on a slice of the Azure conversation trace: it beats vLLM's defaults, the same
arguments give the same table on every backend, a rerun resumes, the folder is a report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvscope.executor import Backend
from kvscope.report.loader import load_run
from kvscope.report.page import build_report
from kvscope.sim import SimConfig
from kvscope.tune.point import PointJob, simulate_point, slo_check
from kvscope.tune.run import TuneRequest, tune
from kvscope.workload.spec import build_workload

SLO = (("ttft_p99_s", 0.5), ("tpot_p99_s", 0.05))
SPACE = (
    "tp: [1, 2]\ndp: [1, 2]\nkv_cache_dtype: [auto, fp8]\nmax_num_seqs: [null]\n"
    "max_num_batched_tokens: [null, 2048]\n"
)


@pytest.fixture(scope="module")
def azure(traces_dir: Path) -> Any:
    """400 requests of the conversation trace at 6x its rate (~25 req/s): one H100 at vLLM's
    defaults queues (TTFT P99 ~1 s), two do not."""
    f = traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    return build_workload(str(f), None, None, None, None, 400, 6.0, 0, None)


def _request(space: Path, **kw: Any) -> TuneRequest:
    return TuneRequest(
        SimConfig(), ("H100",), 4, SLO, space_file=str(space), eta=2, min_requests=100, **kw
    )


def _table(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items()} for r in summary["ranked"]]


@pytest.fixture(scope="module")
def runs(azure: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("tune")
    space = root / "space.yaml"
    space.write_text(SPACE)
    serial = tune(_request(space), azure, root / "serial", Backend("serial"))
    pool = tune(_request(space), azure, root / "pool", Backend("local", 2))
    return {"root": root, "space": space, "serial": serial, "pool": pool}


def test_tune_beats_vllm_defaults(runs: dict[str, Any]) -> None:
    s = runs["serial"]
    w, d = s["winner"], s["defaults"]
    assert d["label"] == "H100x1 tp1 (defaults)" and d["requests_simulated"] == 400
    assert w["requests_simulated"] == 400 and w["slo_met"]
    assert not d["slo_met"]  # one H100 queues at this rate
    assert w["goodput_per_s"] > d["goodput_per_s"]
    gain = s["gain_vs_defaults"]
    assert gain["goodput"] == pytest.approx(w["goodput_per_s"] / d["goodput_per_s"] - 1)
    assert gain["goodput_per_dollar"] > 0
    assert w["command"].startswith("vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size")
    # halving: 16 points on 100 requests, fewer on 200, fewer again on 400
    rungs = [sum(r["rung"] >= k for r in s["ranked"]) for k in range(3)]
    assert rungs[0] == 16 and rungs[0] > rungs[1] > rungs[2] >= 3


def test_same_arguments_same_table_on_every_backend(runs: dict[str, Any]) -> None:
    assert _table(runs["serial"]) == _table(runs["pool"])
    assert len({r["goodput_per_s"] for r in runs["serial"]["ranked"]}) > 3


def test_a_rerun_resumes_without_simulating_again(runs: dict[str, Any], azure: Any) -> None:
    out = runs["root"] / "serial"
    points = sorted((out / "points").iterdir())
    stamps = [(p / "summary.json").stat().st_mtime_ns for p in points]
    again = tune(_request(runs["space"]), azure, out, Backend("serial"))
    assert again["resumed"] is True
    assert _table(again) == _table(runs["serial"])
    assert stamps == [(p / "summary.json").stat().st_mtime_ns for p in points]


def test_the_tune_folder_is_a_report(runs: dict[str, Any]) -> None:
    out = runs["root"] / "serial"
    run = load_run(out)
    assert run.kind == "tune"
    assert [c.label.split(":")[0] for c in run.children] == ["winner", "defaults"]
    page = build_report([out])
    assert runs["serial"]["winner"]["command"] in page
    assert "Cost against goodput" in page
    ranked = json.loads((out / "ranked.json").read_text())
    assert [r["rank"] for r in ranked] == list(range(1, len(ranked) + 1))


def test_max_rate_finds_the_edge_of_the_slo(azure: Any, tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(
        "tp: [1, 2]\ndp: [1]\nkv_cache_dtype: [auto]\nmax_num_seqs: [null]\n"
        "max_num_batched_tokens: [null]\n"
    )
    req = _request(space, objective="max-rate")
    s = tune(req, azure.limit(200), tmp_path / "out", Backend("serial"))
    w, d = s["winner"], s["defaults"]
    assert w["label"].startswith("H100x2 tp2") and w["max_rate_per_s"] > d["max_rate_per_s"] > 0
    # the rate found meets the SLO and the bracket's upper end does not
    cfg = SimConfig(tp=2, slo_ttft_s=0.5, slo_tpot_s=0.05)
    low, high = w["max_rate_factor"], None
    probes = json.loads((tmp_path / "out" / w["run_dir"] / "summary.json").read_text())["probes"]
    high = min(p["factor"] for p in probes if p["verdict"] != "pass")
    assert low < high <= low * 1.06
    for factor, ok in ((low, True), (high, False)):
        res = simulate_point(PointJob(cfg, 200, factor, SLO), azure)
        assert slo_check(res.figures, dict(SLO))[0] is ok


def test_a_fleet_space_tunes_replicas_behind_routers(azure: Any, tmp_path: Path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(
        "tp: [1]\ndp: [1]\nkv_cache_dtype: [auto]\nmax_num_seqs: [null]\n"
        "max_num_batched_tokens: [null]\nreplicas: [1, 2]\n"
        "router: [round-robin, least-outstanding]\n"
    )
    s = tune(_request(space), azure.limit(200), tmp_path / "out", Backend("serial"))
    rows = {r["label"]: r for r in s["ranked"]}
    assert set(rows) == {
        "H100x1 tp1 (defaults)",
        "H100x2 tp1 x2 round-robin",
        "H100x2 tp1 x2 least-outstanding",
    }
    d = rows["H100x1 tp1 (defaults)"]
    for router in ("round-robin", "least-outstanding"):
        r = rows[f"H100x2 tp1 x2 {router}"]
        assert r["num_gpus"] == 2 and r["usd_per_hour"] == pytest.approx(2 * d["usd_per_hour"])
        assert r["flags"]["replicas"] == 2 and r["flags"]["router"] == router
        # two replicas share the 200 requests between them and serve them faster
        summary = json.loads((tmp_path / "out" / r["run_dir"] / "summary.json").read_text())
        served = [x["requests"] for x in summary["replicas"]]
        assert len(served) == 2 and sum(served) == 200 and min(served) > 50
        assert r["ttft_p99_s"] < d["ttft_p99_s"]
    assert "x2" in s["winner"]["label"]
    assert s["winner"]["command"].endswith("routing")


def test_halving_keeps_the_points_with_slo_headroom(traces_dir: Path, tmp_path: Path) -> None:
    # At 8x its rate the whole 1,000-request slice queues one- and two-GPU points that pass
    # its first 112 requests; ranked by goodput per dollar alone, the halving kept only those
    # and no point met the SLO at the end. Keeping the points with the most SLO headroom
    # too carries a fleet that meets it through to the whole workload.
    f = traces_dir / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
    w = build_workload(str(f), None, None, None, None, 1000, 8.0, 0, None)
    space = tmp_path / "space.yaml"
    space.write_text(
        "tp: [1, 2]\ndp: [1]\nkv_cache_dtype: [fp8]\nmax_num_seqs: [null]\n"
        "max_num_batched_tokens: [null, 2048]\nreplicas: [1, 2, 4]\n"
        "router: [round-robin, prefix-aware]\n"
    )
    req = TuneRequest(SimConfig(), ("H100",), 8, SLO, space_file=str(space), min_requests=100)
    s = tune(req, w, tmp_path / "out", Backend("serial"))
    win = s["winner"]
    assert win["slo_met"] and win["requests_simulated"] == 1000
    assert s["slo_met_by_any"]
