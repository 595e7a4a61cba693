"""Speculative decoding in the simulator: closed-form figures, invariants, bad input.

The closed form is the acceptance model's, not the simulator's: with conditional rate ``a``
per draft position and k drafts, ``E = sum_{i=1..k} a^i`` drafts are accepted per
verification, so a decoding request advances ``1 + E`` tokens per step; lookahead slots add
``k / block_size`` blocks per running request on average (the slot position is uniform over a
block). Step-exact agreement with vLLM's own scheduler is tests/sim/test_vllm_fidelity_spec.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import one_error_line, run_in_process
from kvscope.errors import KvscopeError
from kvscope.results import REQUEST_COLUMNS, read_summary
from kvscope.sim.cost import DrafterCost
from kvscope.sim.engine import Engine, sequences_from
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout
from kvscope.sim.scheduler import Scheduler, SchedulerConfig
from kvscope.sim.sequence import Sequence
from kvscope.sim.spec_config import load_rates, parse_spec_config
from kvscope.sim.spec_decode import SpecDecodeConfig
from kvscope.workload import Workload

from .helpers import toy_cost


def spec(method: str = "mtp", k: int = 3, a: float = 0.7, seed: int = 1) -> SpecDecodeConfig:
    return SpecDecodeConfig(method, k, (a,) * k, seed=seed)


def drive(
    w: Workload, sd: SpecDecodeConfig | None, *, blocks: int = 20000, budget: int = 8192
) -> tuple[list[Sequence], list[dict[str, Any]]]:
    """The scheduler step by step (arrival i at step i): per step, who sampled and blocks used."""
    pool = PagedPool(blocks, KVLayout(16))
    sched = Scheduler(
        SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=budget, max_model_len=65536),
        pool,
        sd,
    )
    sched.use_cohort = False  # cohort members are not listed in plan.scheduled
    seqs = sequences_from(w, 16)
    rows: list[dict[str, Any]] = []
    nxt = step = 0
    while nxt < len(seqs) or not sched.idle:
        while nxt < len(seqs) and seqs[nxt].arrival_s <= step:
            sched.add(seqs[nxt])
            nxt += 1
        plan = sched.schedule(float(step))
        drafts = {q.request_id: q.step_drafts for q, _n in plan.scheduled}
        pads = {q.request_id for q, _n in plan.scheduled if q.spec_pad}
        before = {q.index: q.outputs for q, _n in plan.scheduled}
        used, running = pool.used, len(sched.running)
        sched.update(plan, float(step))
        gained = {q.index: q.outputs - before[q.index] for q, _n in plan.scheduled}
        for q, _n in plan.scheduled:  # vLLM's invariant after a sampling step
            if gained[q.index] and q.status == "running":
                assert q.computed == q.num_tokens - 1, q
        rows.append(
            {
                "used": used,
                "running": running,
                "gained": {i: g for i, g in gained.items() if g},
                "drafts": drafts,
                "pads": pads,
                "tokens": {q.request_id: n for q, n in plan.scheduled},
                "accepted": dict(sched.step_accepted),
            }
        )
        step += 1
    return seqs, rows


def test_accepted_length_and_decode_steps_follow_the_closed_form() -> None:
    """a = 0.7, k = 3: 1 + E = 2.533 tokens per decode step, measured over ~10k steps."""
    e = 0.7 + 0.7**2 + 0.7**3
    n, out = 12, 2000
    w = Workload.build(np.zeros(n), np.full(n, 100), np.full(n, out))
    seqs, rows = drive(w, spec())
    verifies = sum(s.spec_verifies for s in seqs)
    mean_len = 1 + sum(s.spec_accepted for s in seqs) / verifies
    assert mean_len == pytest.approx(1 + e, rel=0.03)
    # every request: one prefill step, then (out - 1) tokens at 1 + E per step
    steps = [sum(1 for r in rows if i in r["gained"]) for i in range(n)]
    assert np.mean(steps) == pytest.approx(1 + (out - 1) / (1 + e), rel=0.03)
    # without spec decoding a request needs `out` sampling steps
    _, base = drive(w, None)
    assert sum(1 for r in base if 0 in r["gained"]) == out


def test_tpot_falls_by_one_plus_e_on_a_memory_bound_step() -> None:
    """ngram (no drafter cost): a weights-bound step costs the same with 1 or 4 tokens per
    request, so TPOT divides by 1 + E."""
    e = 0.7 + 0.7**2 + 0.7**3
    w = Workload.build(np.zeros(4), np.full(4, 64), np.full(4, 1500))

    def tpot(sd: SpecDecodeConfig | None) -> float:
        pool = PagedPool(5000, KVLayout(16))
        sched = Scheduler(SchedulerConfig(max_model_len=65536), pool, sd)
        seqs = sequences_from(w, 16)
        Engine(sched, toy_cost(), mode="step").run(seqs)
        return float(np.mean([(s.finish_s - s.first_token_s) / (s.outputs - 1) for s in seqs]))

    assert tpot(spec("ngram")) / tpot(None) == pytest.approx(1 / (1 + e), rel=0.05)


def test_lookahead_slots_hold_k_over_block_size_more_blocks_per_request() -> None:
    """MTP reserves k lookahead slots, ngram none; same draws, same steps: the difference in
    blocks held, per running request and step, is k / block_size on average."""
    n = 16
    rng = np.random.default_rng(5)
    w = Workload.build(np.zeros(n), rng.integers(50, 400, n), rng.integers(500, 900, n))
    for k in (3, 5):
        _, mtp = drive(w, spec("mtp", k))
        _, ngram = drive(w, spec("ngram", k))
        assert len(mtp) == len(ngram)
        extra = sum(a["used"] - b["used"] for a, b in zip(mtp, ngram, strict=True))
        per_req = extra / sum(r["running"] for r in ngram)
        assert per_req == pytest.approx(k / 16, rel=0.15)


def test_drafter_cost_prices_one_layer_per_draft_for_mtp() -> None:
    cost = toy_cost()
    one_pass = cost.step_time(8, 4000) - cost.coef.overhead_s
    assert DrafterCost(3, fraction=1 / 61).time(cost, 8, 4000) == pytest.approx(3 * one_pass / 61)
    assert DrafterCost(0).time(cost, 8, 4000) == 0.0


workloads = st.integers(1, 10).flatmap(
    lambda n: st.tuples(
        st.lists(st.integers(0, 3), min_size=n, max_size=n),
        st.lists(st.integers(1, 300), min_size=n, max_size=n),
        st.lists(st.integers(1, 120), min_size=n, max_size=n),
    )
)


def build(t: tuple[list[int], list[int], list[int]]) -> Workload:
    gaps, prompts, outputs = t
    return Workload.build(np.cumsum(gaps).astype(float), np.array(prompts), np.array(outputs))


@settings(max_examples=40, deadline=None)
@given(workloads, st.sampled_from(["ngram", "mtp", "eagle", "draft_model"]), st.integers(1, 5))
def test_acceptance_zero_samples_exactly_as_without_spec_decoding(
    t: tuple[list[int], list[int], list[int]], method: str, k: int
) -> None:
    """Nothing accepted: every step yields the one token it would without drafts."""
    w = build(t)
    _, base = drive(w, None)
    seqs, rows = drive(w, spec(method, k, 0.0))
    assert [r["gained"] for r in rows] == [r["gained"] for r in base]
    assert all(s.spec_accepted == 0 for s in seqs)


@settings(max_examples=40, deadline=None)
@given(workloads, st.sampled_from(["ngram", "mtp", "eagle3"]), st.integers(1, 5))
def test_acceptance_one_decodes_k_plus_one_tokens_per_step(
    t: tuple[list[int], list[int], list[int]], method: str, k: int
) -> None:
    w = build(t)
    seqs, rows = drive(w, spec(method, k, 1.0))
    for s in seqs:
        steps = sum(1 for r in rows if s.index in r["gained"])
        # the step after the prefill samples 1, every later step 1 + k (the last truncated)
        assert steps == 1 + -(-(s.max_tokens - 1) // (k + 1)), s
    for r in rows:  # a decode verifies k drafts; all real ones accepted, placeholders never
        for rid, a in r["accepted"].items():
            assert r["drafts"][rid] == k and r["tokens"][rid] == 1 + k
            assert a == (0 if rid in r["pads"] else k)


def test_draws_are_deterministic_and_seeded() -> None:
    a, b = spec(seed=1), spec(seed=2)
    draws = [a.accepted(i, s, 3) for i in range(50) for s in range(50)]
    assert draws == [a.accepted(i, s, 3) for i in range(50) for s in range(50)]
    assert draws != [b.accepted(i, s, 3) for i in range(50) for s in range(50)]
    # conditional: P(all 3 accepted) = 0.343
    assert np.mean([d == 3 for d in draws]) == pytest.approx(0.343, abs=0.04)


def test_acceptance_files_give_conditional_rates(tmp_path: Path) -> None:
    counters = tmp_path / "c.json"
    counters.write_text(
        json.dumps({"num_drafts": 1000, "num_accepted_tokens_per_pos": [800, 560, 336]})
    )
    assert load_rates(counters, 3) == pytest.approx((0.8, 0.7, 0.6))
    prom = tmp_path / "metrics.txt"
    prom.write_text(
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        'vllm:spec_decode_num_drafts_total{model_name="m"} 200.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 150.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 75.0\n'
    )
    assert load_rates(prom, 2) == pytest.approx((0.75, 0.5))
    listed = tmp_path / "l.json"
    listed.write_text("[0.9, 0.5]")
    cfg = parse_spec_config('{"method": "deepseek_mtp", "num_speculative_tokens": 2}', str(listed))
    assert cfg.method == "mtp" and cfg.acceptance == (0.9, 0.5)
    synth = parse_spec_config(
        '{"method": "eagle3", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",'
        ' "synthetic_acceptance_rates": [0.8, 0.56]}',
        None,
    )
    assert synth.acceptance == pytest.approx((0.8, 0.7))
    with pytest.raises(KvscopeError, match="2 rates for 3"):
        parse_spec_config('{"method": "mtp", "num_speculative_tokens": 3}', "0.9,0.5")


BAD = [
    ('{"method": "mtp", "num_speculative_tokens": 3}', "1.5", "[0, 1]"),
    ('{"method": "mtp", "num_speculative_tokens": 3}', "-0.1", "[0, 1]"),
    ('{"method": "mtp", "num_speculative_tokens": 0}', "0.7", "num_speculative_tokens"),
    ('{"method": "medusa", "num_speculative_tokens": 3}', "0.7", "unknown method"),
    ('{"method": "mtp", "num_speculative_tokens": 3, "draft_lenght": 2}', "0.7", "draft_lenght"),
    ('{"method": "mtp"', "0.7", "not JSON"),
    ('{"method": "dflash", "num_speculative_tokens": 3}', "0.7", "not modelled"),
    # the planner sizes DSpark's stages; the simulator does not schedule its block drafts
    ('{"method": "dspark", "num_speculative_tokens": 5}', "0.7", "not modelled"),
    ('{"method": "mtp", "num_speculative_tokens": 3}', "nan", "[0, 1]"),
]


@pytest.mark.parametrize(("config", "acceptance", "needle"), BAD)
def test_bad_spec_input_is_one_error_line(
    config: str, acceptance: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--speculative-config", config, "--spec-acceptance", acceptance]
    code, _out, err = run_in_process(argv, capsys)
    one_error_line(code, err, needle)


def test_acceptance_without_spec_config_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_in_process(["simulate", "--spec-acceptance", "0.7"], capsys)
    one_error_line(code, err, "--speculative-config")


def test_cli_run_writes_spec_columns_and_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "simulate",
        "--arrival",
        "poisson:rate=10",
        "--num-requests",
        "100",
        "--seed",
        "3",
        "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 3}',
        "--spec-acceptance",
        "0.7",
        "--out",
        str(tmp_path / "r"),
    ]
    code, _out, err = run_in_process(argv, capsys)
    assert code == 0, err
    req = pq.read_table(tmp_path / "r" / "requests.parquet")
    assert tuple(req.column_names[: len(REQUEST_COLUMNS)]) == REQUEST_COLUMNS
    drafted = sum(req.column("spec_draft_tokens").to_pylist())
    accepted = sum(req.column("spec_accepted_tokens").to_pylist())
    rates = [r for r in req.column("spec_acceptance").to_pylist() if r == r]
    assert rates and all(0.0 <= r <= 1.0 for r in rates)
    steps = pq.read_table(tmp_path / "r" / "steps.parquet")
    assert sum(steps.column("draft_tokens").to_pylist()) == drafted
    assert sum(steps.column("accepted_tokens").to_pylist()) == accepted
    summary = read_summary(tmp_path / "r")
    assert summary is not None
    figs = summary["figures"]["speculative"] if "figures" in summary else summary["speculative"]
    assert figs["accepted_tokens"] == accepted and 0.4 < figs["acceptance_rate"] < 0.6


def test_a_draft_model_costs_its_own_roofline_and_mtp_one_layer() -> None:
    """Acceptance 0 makes drafting pure cost: each drafter slows the run by its own passes.
    MTP needs a checkpoint with MTP layers (vLLM and ``plan`` refuse it elsewhere), so it is
    DeepSeek-V3's (61 layers); the draft model runs at the target's TP, as vLLM requires."""
    from kvscope.sim import SimConfig, simulate

    w = Workload.build(np.arange(20) * 0.05, np.full(20, 500), np.full(20, 200))

    def tpot(sc: str | None, model: str = "meta-llama/Llama-3.1-70B") -> float:
        acc = "0" if sc else None
        layout = {"gpu": "H100", "tp": 4} if "Llama" in model else {"gpu": "H200", "tp": 8}
        cfg = SimConfig(model=model, speculative_config=sc, spec_acceptance=acc, **layout)  # type: ignore[arg-type]
        return float(simulate(w, cfg).figures["tpot_p50_s"])

    ngram_spec = '{"method": "ngram", "num_speculative_tokens": 3}'
    plain = tpot(None)
    ngram = tpot(ngram_spec)
    draft = tpot(
        '{"method": "draft_model", "model": "meta-llama/Llama-3.1-8B", "num_speculative_tokens": 3}'
    )
    assert plain <= ngram < draft  # ngram only verifies; the 8B drafts 3 tokens
    v3 = "deepseek-ai/DeepSeek-V3"
    ngram_v3 = tpot(ngram_spec, v3)
    mtp_v3 = tpot('{"method": "mtp", "num_speculative_tokens": 3}', v3)
    # three passes of the one MTP layer, each 1/61 of the target's roofline pass (no step
    # overhead, and the verify step of 4 tokens a request costs more than that pass)
    assert 1 + 0.3 * 3 / 61 < mtp_v3 / ngram_v3 < 1 + 3 / 61


def test_the_pool_is_the_plan_with_its_drafter(capsys: pytest.CaptureFixture[str]) -> None:
    """The simulated pool is what ``kvscope plan --speculative-config`` plans: the MTP layer's
    weights and KV layer come out of it, as vLLM sizes it, so it holds fewer blocks than the
    same deployment without drafting."""
    import json

    from kvscope.sim import SimConfig
    from kvscope.sim.run import build_pool

    spec = '{"method": "mtp", "num_speculative_tokens": 2}'
    flags = ["--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "8"]
    code, out, err = run_in_process(
        ["plan", *flags, "--speculative-config", spec, "--json"], capsys
    )
    assert code == 0, err
    planned = json.loads(out)["num_gpu_blocks"]
    base = {"model": "deepseek-ai/DeepSeek-V3", "gpu": "H200", "tp": 8}
    with_mtp = build_pool(SimConfig(**base, speculative_config=spec, spec_acceptance="0.7"))  # type: ignore[arg-type]
    without = build_pool(SimConfig(**base))  # type: ignore[arg-type]
    assert with_mtp[3]["num_gpu_blocks"] == planned < without[3]["num_gpu_blocks"]
