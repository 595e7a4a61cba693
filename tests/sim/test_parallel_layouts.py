"""Parallel layouts in ``kvscope simulate``: pools as ``kvscope plan`` sizes them, DP replicas.

Pinned against the planner's own figures (``kvscope plan --json`` for the same flags), the
MLA replication the planner predicts for DeepSeek-V4-Flash (DP8 holds several times the KV
of TP8), invariants of the replica driver (one replica = the plain engine, exactly) and
vLLM 0.33.0's DP load balancer (``vllm/v1/engine/core_client.py::DPLBAsyncMPClient``).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from cli_helpers import one_error_line, one_error_line_of, run_in_process, run_kvscope
from kvscope.sim.data_parallel import DataParallelGroup, RankLoad, pick_rank
from kvscope.sim.engine import sequences_from

from .helpers import outcome, run, workload

V4 = "deepseek-ai/DeepSeek-V4-Flash"
V4_FLAGS = ("--model", V4, "--gpu", "B200", "--max-model-len", "1048576")
SHORT = ("--prompt-len", "64", "--output-len", "4")


def _plan(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    code, out, err = run_in_process(["plan", *flags, "--json"], capsys)
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def _simulate(
    capsys: pytest.CaptureFixture[str], out: Path, *flags: str
) -> tuple[dict[str, Any], Any]:
    """Run ``kvscope simulate FLAGS --out OUT``: its summary.json and steps table."""
    code, _, err = run_in_process(["simulate", *flags, "--out", str(out), "--json"], capsys)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    return summary, pq.read_table(out / "steps.parquet")


LAYOUTS = [
    ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--tp", "2"),
    ("--model", "meta-llama/Llama-3.1-70B", "--gpu", "H100", "--tp", "4", "--pp", "2"),
    ("--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H100", "--tp", "8", "--pp", "2"),
    (*V4_FLAGS, "--tp", "8"),
    (*V4_FLAGS, "--dp", "8", "--enable-expert-parallel", "--num-gpus", "8"),
    ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--dp", "2"),
    (
        *("--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--engine", "sglang"),
        *("--tp", "8", "--dp", "8", "--enable-dp-attention", "--enable-expert-parallel"),
    ),
    ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--engine-version", "0.10.0"),
]


@pytest.mark.parametrize("flags", LAYOUTS, ids=lambda f: " ".join(f[1::2][:1] + f[4:]))
def test_pool_is_the_planned_one(
    flags: tuple[str, ...], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Each engine's pool is ``kvscope plan``'s num_gpu_blocks for the same flags (the
    minimum over pipeline stages); a DP deployment has one such pool per rank."""
    plan = _plan(capsys, *flags)
    summary, _ = _simulate(
        capsys, tmp_path, *flags, "--arrival", "poisson:rate=100", "--num-requests", "4", *SHORT
    )
    pool = summary["config"]["pool"]
    assert pool["num_gpu_blocks"] == plan["num_gpu_blocks"]
    assert pool["parallel"]["stage_blocks"] == [r["num_gpu_blocks"] for r in plan["ranks"]]
    assert pool["parallel"]["engine_replicas"] == plan["dp"]
    assert summary["completed"] == 4
    assert summary["kv_blocks_capacity"] == plan["dp"] * (plan["num_gpu_blocks"] - 1)


def test_v4_flash_dp8_holds_the_planned_multiple_of_tp8(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """DeepSeek-V4-Flash on 8x B200 at 1M context: every TP rank keeps the whole compressed
    MLA cache, so DP8 (attention data-parallel, experts over 8 ranks) holds about 8x the KV
    of TP8. The simulated pools and the peak concurrency a saturating load of 900k-token
    requests reaches keep the ratio of the planner's KV tokens (DP8 total = 8 x per rank)."""
    budget = ("--max-num-batched-tokens", "131072")
    tp8, dp8 = ("--tp", "8"), ("--dp", "8", "--enable-expert-parallel")
    plan_tp = _plan(capsys, *V4_FLAGS, *budget, *tp8)
    plan_dp = _plan(capsys, *V4_FLAGS, *budget, *dp8)
    predicted = 8 * plan_dp["kv_tokens"] / plan_tp["kv_tokens"]
    assert predicted > 6  # the replication the test is about
    load = ("--prompt-len", "900000", "--output-len", "600", "--arrival", "poisson:rate=1e5")
    res = "--step-resolution-s", "0"
    s_tp, steps_tp = _simulate(
        capsys, tmp_path / "tp8", *V4_FLAGS, *budget, *tp8, *load, *res, "--num-requests", "60"
    )
    s_dp, steps_dp = _simulate(
        capsys, tmp_path / "dp8", *V4_FLAGS, *budget, *dp8, *load, *res, "--num-requests", "480"
    )
    assert s_tp["completed"] == 60 and s_dp["completed"] == 480
    assert s_dp["config"]["pool"]["num_gpu_blocks_total"] == 8 * plan_dp["num_gpu_blocks"]
    pools = s_dp["kv_blocks_capacity"] / s_tp["kv_blocks_capacity"]
    assert pools == pytest.approx(predicted, rel=2e-3)
    # Saturated: every pool filled (within one request of the top).
    assert s_tp["kv_usage_peak_frac"] > 0.97
    assert all(r["kv_usage_peak_frac"] > 0.97 for r in s_dp["dp_ranks"])
    peak_tp = int(np.max(steps_tp.column("running").to_numpy()))
    peak_dp = s_dp["running_peak"]
    assert peak_dp == sum(
        int(np.max(steps_dp.filter(pq_eq(steps_dp, r)).column("running").to_numpy()))
        for r in range(8)
    )
    # Whole requests, and one prefilling request per pool holding its window groups'
    # in-flight reservation (vLLM 0.33.0's admission cap, cdiv(W - 1 + 131,072, b) + 1 blocks
    # per window group: ~53k blocks, a third of a TP8 pool) beside the steady decoders: the
    # concurrency ratio sits a little under the pool ratio, never above it.
    ratio = peak_dp / peak_tp
    assert predicted * 0.85 < ratio <= predicted * (1 + 1.0 / peak_tp)


def pq_eq(table: Any, rank: int) -> Any:
    import pyarrow.compute as pc

    return pc.equal(table.column("dp_rank"), rank)


def test_tp8_pp2_deepseek_v3_on_16_h100(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """TP8 x PP2 DeepSeek-V3 on 16x H100 (the layout `plan` recommends) serves a workload
    to the end with the pool of its tighter stage, as `plan` reports it."""
    flags = ("--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H100", "--tp", "8", "--pp", "2")
    plan = _plan(capsys, *flags, "--num-gpus", "16")
    assert plan["pp"] == 2 and len(plan["ranks"]) == 2
    summary, _ = _simulate(
        capsys,
        tmp_path,
        *flags,
        "--num-gpus",
        "16",
        "--num-requests",
        "200",
        "--prompt-len",
        "2000",
        "--output-len",
        "200",
        "--arrival",
        "poisson:rate=20",
    )
    pool = summary["config"]["pool"]
    assert summary["completed"] == 200
    assert pool["num_gpu_blocks"] == min(r["num_gpu_blocks"] for r in plan["ranks"])
    assert pool["parallel"]["num_gpus"] == 16


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (("--pp", "64"), ("--pipeline-parallel-size 64", "32 layers")),
        (("--tp", "2", "--dp", "2", "--num-gpus", "8"), ("--num-gpus 8", "2 x 1 x 2")),
        (("--enable-expert-parallel",), ("--enable-expert-parallel", "no routed experts")),
        (("--enable-dp-attention",), ("--enable-dp-attention", "--data-parallel-size")),
        (("--dp", "0"), ("--data-parallel-size",)),
        (("--dp", "5000"), ("--data-parallel-size", "1,024")),
        (("--engine-version", "x.y"), ("--engine-version",)),
        (("--tp", "4", "--dcp", "3"), ("--decode-context-parallel-size 3", "divide")),
        (("--tp", "2", "--dcp", "2", "--engine", "sglang"), ("--decode-context-parallel-size",)),
        (("--mm-encoder-tp-mode", "pixels"), ("--mm-encoder-tp-mode", "weights or data")),
    ],
)
def test_bad_layout_flags_one_line(
    flags: tuple[str, ...], needles: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--num-requests", "2", *flags]
    code, _, err = run_in_process(argv, capsys)
    one_error_line(code, err, *needles)


def test_bad_layout_flag_from_the_shell() -> None:
    """As a user runs it: exit 2, one line, no traceback (the same check, in a subprocess)."""
    proc = run_kvscope("simulate", "--model", "meta-llama/Llama-3.1-8B", "--enable-dp-attention")
    one_error_line_of(proc, "--enable-dp-attention")


def test_dp_attention_on_a_dense_model_refused_by_plan_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One validation layer: ``simulate`` refuses what the planner's check_layout refuses."""
    from kvscope.errors import KvscopeError
    from kvscope.plan.config import Parallelism, check_layout

    with pytest.raises(KvscopeError, match="no routed experts"):
        check_layout(Parallelism(ep=True), False, "a dense model")
    check_layout(Parallelism(tp=8, dp=8, dp_attention=True, ep=True), True, "a MoE model")


def test_one_replica_group_is_the_plain_engine() -> None:
    """The replica driver only decides where requests go: one replica, advanced arrival by
    arrival (its spans cut at every arrival), serves exactly what the engine's own loop
    serves (same floats)."""
    from kvscope.sim.engine import Engine
    from kvscope.sim.kv_pool import PagedPool
    from kvscope.sim.layout import KVLayout
    from kvscope.sim.scheduler import Scheduler, SchedulerConfig

    from .helpers import toy_cost

    rng = np.random.default_rng(3)
    n = 300
    w = workload(
        np.cumsum(rng.exponential(0.02, n)), rng.integers(10, 600, n), rng.integers(1, 80, n)
    )
    plain, _ = run(w, num_blocks=120, max_num_seqs=16, max_num_batched_tokens=256)
    cfg = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=256, max_model_len=65536)
    pool = PagedPool(120, KVLayout(16), enable_caching=True)
    engine = Engine(Scheduler(cfg, pool), toy_cost(), sample_interval_s=0.0)
    grouped = sequences_from(w, 16)
    assert DataParallelGroup([engine]).run(grouped) == [0] * n
    assert outcome(grouped) == outcome(plain)
    assert any(s.preemptions for s in plain)  # the pool was under pressure


def test_balancer_is_vllm_0_33s() -> None:
    """vLLM 0.33.0 DPLBAsyncMPClient: lowest max(in flight, waiting + running), waiting
    penalised above 50% KV usage, ties to the first engine scanned from a rotating start."""
    idle = RankLoad(0, 0, 0, 0.0)
    assert [pick_rank([idle] * 4, s) for s in range(6)] == [0, 1, 2, 3, 0, 1]
    busy = RankLoad(3, 1, 2, 0.9)  # 3 + 1 x 6 x 0.4 = 5.4
    calm = RankLoad(5, 1, 4, 0.5)  # 5, no pressure at 50%
    assert busy.score == pytest.approx(5.4) and calm.score == 5.0
    assert pick_rank([busy, calm], 0) == 1
    # The client's exact in-flight count outweighs a stale low snapshot.
    assert RankLoad(7, 0, 1, 0.0).score == 7.0


def test_dp_burst_is_dealt_round_robin(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Eight equal requests at once over DP4: two per rank, in rotation, and requests.parquet
    says which rank served each."""
    code, _, err = run_in_process(
        [
            "simulate",
            "--model",
            "meta-llama/Llama-3.1-8B",
            "--dp",
            "4",
            "--num-requests",
            "8",
            "--arrival",
            "poisson:rate=1e9",
            "--prompt-len",
            "100",
            "--output-len",
            "10",
            "--out",
            str(tmp_path),
        ],
        capsys,
    )
    assert code == 0, err
    req = pq.read_table(tmp_path / "requests.parquet")
    assert req.column("dp_rank").to_pylist() == [0, 1, 2, 3, 0, 1, 2, 3]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [r["requests"] for r in summary["dp_ranks"]] == [2, 2, 2, 2]
    assert summary["completed"] == 8


def test_pipeline_has_a_bubble_and_fills_with_a_batch() -> None:
    """PP2 against PP1 at the same TP (Llama-3.1-70B, 4x and 8x H100): one decoding request
    gains nothing from the second stage (it is in one micro-batch; the other is the bubble,
    and the boundary send/recv is extra), while a batch of 64 split over two micro-batches
    reads each stage's half of the weights and KV, so its step is shorter."""
    from kvscope.sim.cost import CostModel
    from kvscope.sim.run import SimConfig, build_pool

    model = "meta-llama/Llama-3.1-70B"
    one = CostModel(build_pool(SimConfig(model=model, tp=4))[2])
    two = CostModel(build_pool(SimConfig(model=model, tp=4, pp=2))[2])
    assert two.step_time(1, 8192) > one.step_time(1, 8192)
    assert two.step_time(64, 64 * 8192) < one.step_time(64, 64 * 8192)
    batch = np.array([1.0, 64.0])
    got = two.step_times(batch, batch * 8192)
    assert got.tolist() == [two.step_time(1, 8192), two.step_time(64, 64 * 8192)]


def test_each_replica_is_an_independent_engine() -> None:
    """The replicas share a clock and nothing else: the requests DP rank 2 served, replayed
    alone through one engine of the same deployment, finish at exactly the same times."""
    from kvscope.sim import SimConfig, simulate
    from kvscope.workload import Workload, build_workload

    w = build_workload(arrival="poisson:rate=80", num_requests=2000, seed=2)
    cfg = SimConfig(model="meta-llama/Llama-3.1-8B", gpu="H100", sample_interval_s=1.0)
    grouped = simulate(w, replace_dp(cfg, 4))
    ranks = grouped.requests.column("dp_rank").to_numpy()
    mine = ranks == 2
    assert 400 < mine.sum() < 600  # dealt about evenly
    alone = simulate(
        Workload.build(w.arrival_s[mine], w.prompt_tokens[mine], w.output_tokens[mine]), cfg
    )
    got = grouped.requests.column("finish_s").to_numpy()[mine]
    assert np.array_equal(got, alone.requests.column("finish_s").to_numpy())
    assert grouped.figures["dp_ranks"][2]["requests"] == mine.sum()


def replace_dp(cfg: Any, dp: int) -> Any:
    from dataclasses import replace

    return replace(cfg, dp=dp)


@pytest.mark.slow
@pytest.mark.integration
def test_pp2_steps_are_vllm_batch_queue_pairs() -> None:
    """vLLM 0.33.0 with two batches in flight (PP2's batch queue) against kvscope's PP2
    engine, whose step is two micro-batches with twice the token budget: a decoding request
    is in one micro-batch at a time (it is not scheduled again until its token is back)
    while a long prompt's chunks fill consecutive micro-batches, so each pair of vLLM
    batches schedules what one kvscope step does, step after step."""
    import subprocess

    from kvscope.sim.run import SimConfig, build_pool, engine_for
    from kvscope.sim.scheduler import StepPlan
    from oracle import vllm_python

    reqs = [(10, 6), (10, 6), (200, 3), (40, 9)]
    spec = {
        "block_size": 16,
        "num_blocks": 400,
        "max_model_len": 2048,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 64,
        "enable_prefix_caching": False,
        "pp": 2,
        "requests": [
            {"id": f"r{i}", "tokens": list(range(100 * i, 100 * i + n)), "max_tokens": m}
            for i, (n, m) in enumerate(reqs)
        ],
    }
    here = Path(__file__).resolve().parent
    proc = subprocess.run(
        [
            vllm_python(),
            str(here.parents[1] / "benchmarks" / "vllm_oracle_pp.py"),
            str(here.parents[1] / "benchmarks"),
        ],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    batches = json.loads(proc.stdout.strip().splitlines()[-1])
    # decode tokens never in two batches in flight at once; the prompt's chunks are
    for a, b in itertools.pairwise(batches):
        assert not any(a.get(r) == 1 and b.get(r) for r in a), (a, b)
    assert sum(1 for b in batches if b.get("r2", 0) > 1) >= 3  # pipelined prefill chunks
    vllm_steps = [
        sum(batches[i].values()) + (sum(batches[i + 1].values()) if i + 1 < len(batches) else 0)
        for i in range(0, len(batches), 2)
    ]
    while vllm_steps and vllm_steps[-1] == 0:
        vllm_steps.pop()

    # the engine `kvscope simulate --pp 2` builds for these flags
    cfg = SimConfig(
        tp=1,
        pp=2,
        block_size=16,
        num_gpu_blocks_override=400,
        max_num_seqs=8,
        max_num_batched_tokens=64,
        max_model_len=2048,
        enable_prefix_caching=False,
        mode="step",
    )
    w = workload([0.0] * len(reqs), [n for n, _ in reqs], [m for _, m in reqs])
    engine, _, _ = engine_for(w, cfg, *build_pool(cfg), None)
    ours: list[int] = []

    def record(plan: StepPlan, _t: float) -> None:
        ours.append(plan.tokens)

    engine.on_step = record
    engine.run(sequences_from(w, 16))
    assert ours == vllm_steps, (ours, vllm_steps)


def test_decode_context_parallel_pool_holds_dcp_times_the_tokens(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--dcp 8`` on DeepSeek-V3 at TP8: the same blocks per GPU (plan's num_gpu_blocks), each
    covering 16 x 8 tokens of a request (vLLM's managers scale the block size by the DCP
    world size), so plan and simulate both hold 8 times the tokens; a 60,000-token prompt
    then needs 469 blocks instead of 3,750 and the same traffic evicts fewer."""
    flags = ("--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "8")
    flags += ("--max-model-len", "131072")
    load = ("--arrival", "poisson:rate=50", "--num-requests", "24")
    load += ("--prompt-len", "60000", "--output-len", "8")
    plans = {d: _plan(capsys, *flags, "--dcp", str(d)) for d in (1, 8)}
    assert plans[8]["num_gpu_blocks"] == plans[1]["num_gpu_blocks"]
    assert plans[8]["kv_tokens"] == 8 * plans[1]["kv_tokens"]
    pools = {}
    for d in (1, 8):
        summary, _ = _simulate(capsys, tmp_path / f"dcp{d}", *flags, "--dcp", str(d), *load)
        assert summary["completed"] == 24
        pools[d] = summary["config"]["pool"]
    assert pools[8]["block_size"] == 8 * pools[1]["block_size"] == 128
    assert pools[8]["kv_tokens"] == plans[8]["kv_tokens"]
    assert pools[8]["evicted_blocks"] < pools[1]["evicted_blocks"]


def test_disable_custom_all_reduce_reaches_the_planned_pool() -> None:
    # The flag drops the custom all-reduce buffers from the plan (kvscope.plan.vllm_collectives),
    # so the simulated engine's pool is the larger one `kvscope plan` gives with it. vLLM 0.25:
    # from 0.26.0 an NVSwitch group grows what one GPU grows, with or without the flag.
    from kvscope.sim import SimConfig
    from kvscope.sim.deployment import build_pool

    base = dict(
        model="meta-llama/Llama-3.1-70B", gpu="H100", tp=4, max_model_len=8192,
        engine_version="0.25.0",
    )  # fmt: skip
    on = build_pool(SimConfig(**base))[0]  # type: ignore[arg-type]
    off = build_pool(SimConfig(**base, disable_custom_all_reduce=True))[0]  # type: ignore[arg-type]
    assert off.num_blocks > on.num_blocks
