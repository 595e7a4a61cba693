"""``plan --search --simulate-top K``: the cheapest candidates replayed under a workload."""

from __future__ import annotations

import json

import pytest

from cli_helpers import one_error_line, run_in_process
from kvscope.sim import SimConfig, simulate
from kvscope.workload.spec import build_workload

SEARCH = [
    "plan",
    "--model",
    "meta-llama/Llama-3.1-8B",
    "--search",
    "--gpu",
    "H100",
    "--target-context",
    "4096",
    "--target-concurrency",
    "64",
]
WL = [
    "--arrival",
    "poisson:rate=30",
    "--prompt-len",
    "1000",
    "--output-len",
    "200",
    "--num-requests",
    "200",
    "--seed",
    "4",
]


def test_the_cheapest_candidates_are_simulated(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        *SEARCH,
        "--simulate-top",
        "2",
        *WL,
        "--slo",
        "ttft_p99=0.5,tpot_p99=50ms",
        "--workers",
        "1",
        "--json",
    ]
    code, out, err = run_in_process(argv, capsys)
    assert code == 0, err
    doc = json.loads(out)
    sims, cands = doc["simulated"], doc["candidates"]
    assert len(sims) == 2 and all(s["status"] == "ok" for s in sims)
    # the figures are the simulator's for that candidate's layout and KV dtype
    c = cands[1]
    cfg = SimConfig(
        gpu=c["gpu"],
        tp=c["tp"],
        pp=c["pp"],
        dp=c["dp"],
        kv_cache_dtype=c["kv_dtype"],
        max_model_len=4096,
        slo_ttft_s=0.5,
        slo_tpot_s=0.05,
    )
    w = build_workload(None, "poisson:rate=30", "1000", "200", None, 200, None, 4, None)
    figs = simulate(w, cfg).figures
    assert sims[1]["goodput_per_s"] == pytest.approx(figs["goodput_per_s"], rel=1e-12)
    assert sims[1]["ttft_p99_s"] == pytest.approx(figs["ttft_p99_s"], rel=1e-12)
    # the planner's cheapest (one GPU at 64 requests) queues under this traffic; two do not
    assert c["num_gpus"] > cands[0]["num_gpus"]
    assert not sims[0]["slo_met"] and sims[1]["slo_met"]


def test_simulate_top_needs_search(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--simulate-top", "2"]
    code, _o, err = run_in_process(argv, capsys)
    one_error_line(code, err, "--simulate-top")


def test_simulate_top_prices_steps_with_plans_cost_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--cost-model fitted`` reaches the simulated candidates: their figures are the
    simulator's under the fitted roofline, not the default roofline's."""
    argv = [*SEARCH, "--simulate-top", "1", *WL, "--slo", "ttft_p99=0.5", "--workers", "1"]
    code, out, err = run_in_process([*argv, "--cost-model", "fitted", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    c = doc["candidates"][0]
    w = build_workload(None, "poisson:rate=30", "1000", "200", None, 200, None, 4, None)
    base = dict(gpu=c["gpu"], tp=c["tp"], pp=c["pp"], dp=c["dp"], max_model_len=4096)
    base |= dict(kv_cache_dtype=c["kv_dtype"], slo_ttft_s=0.5)
    fitted = simulate(w, SimConfig(**base, cost_model="fitted")).figures  # type: ignore[arg-type]
    plain = simulate(w, SimConfig(**base)).figures  # type: ignore[arg-type]
    got = doc["simulated"][0]["ttft_p99_s"]
    assert got == pytest.approx(fitted["ttft_p99_s"], rel=1e-12)
    assert got != pytest.approx(plain["ttft_p99_s"], rel=1e-3)
