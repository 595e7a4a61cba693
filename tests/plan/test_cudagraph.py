"""vLLM's CUDA-graph capture list and graph-memory estimate against start-up logs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.cudagraph import (
    CUDAGRAPH_GIB,
    FIT_GRAPH_UNITS,
    capture_sizes,
    estimate_bytes,
    graph_counts,
    graph_units,
)
from kvscope.plan.memory import plan_memory
from kvscope.plan.speculative import parse_vllm
from kvscope.plan.vllm_runner import graphs_profiled
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import load_cases, offline_hub

CASES = {c.id: c for c in load_cases()}
#: An upper bound on one graph unit of the fit for a 61-layer MoE model, GiB.
CUDAGRAPH_PER_UNIT_BOUND = (
    CUDAGRAPH_GIB["base"] + 61 * CUDAGRAPH_GIB["per_layer"] + CUDAGRAPH_GIB["moe"]
) / FIT_GRAPH_UNITS


@pytest.mark.parametrize(
    ("seqs", "tokens", "release", "k", "gpu", "piecewise", "largest", "full", "full_largest"),
    [
        # ghlog-2xrtxpro6000-v4flash-1m-mtp2-0.25 (its source log): "Profiling CUDA graph
        # memory: PIECEWISE=42 (largest=384), FULL=26 (largest=192)", 64 seqs, MTP k=2.
        (64, 4096, (0, 25, 0), 2, "RTX-PRO-6000-Blackwell-96GB", 42, 384, 26, 192),
        # ghlog-2xgb10-v4flash-200k-mtp2-0.21: "PIECEWISE=5 (largest=24), FULL=3 (largest=9)".
        (4, 8192, (0, 21, 1), 2, "DGX-Spark-GB10-128GB", 5, 24, 3, 9),
        # lab4090-qwen3-8b-compiled-0.29: "'cudagraph_capture_sizes': [1, 2, 4, 8, 16]" and
        # four FULL graphs captured ("Capturing CUDA graphs (FULL) ... 4/4").
        (8, 4096, (0, 29, 0), 0, "RTX-4090-48GB", 5, 16, 4, 8),
        # Public DGX Spark log of nvidia/Qwen3.6-27B-NVFP4 (0.23.1 dev, --max-num-seqs 8,
        # --max-num-batched-tokens 65536): "PIECEWISE=5 (largest=16), FULL=4 (largest=8)".
        (8, 65536, (0, 23, 1), 0, "DGX-Spark-GB10-128GB", 5, 16, 4, 8),
        # The fit's configuration, `vllm serve` on an H100 (1024 seqs, 8192 tokens):
        # "PIECEWISE=51 (largest=512), FULL=51 (largest=512)"; 256 seqs keep FULL to 256.
        (1024, 8192, (0, 19, 0), 0, "H100", 51, 512, 51, 512),
        (256, 8192, (0, 20, 0), 0, "H100", 51, 512, 35, 256),
    ],
)
def test_capture_counts_match_logged(
    seqs: int,
    tokens: int,
    release: tuple[int, int, int],
    k: int,
    gpu: str,
    piecewise: int,
    largest: int,
    full: int,
    full_largest: int,
) -> None:
    sizes = capture_sizes(seqs, tokens, release, k, gpu=get_gpu(gpu))
    assert (len(sizes), sizes[-1]) == (piecewise, largest)
    assert graph_counts(sizes, seqs, k)[1] == full
    assert max(s for s in sizes if s <= (1 + k) * seqs) == full_largest


def test_fit_configuration_is_101_units() -> None:
    assert graph_units(capture_sizes(1024, 8192, (0, 19, 0)), 1024) == FIT_GRAPH_UNITS


def test_data_center_blackwell_captures_to_1024_from_028() -> None:
    b200 = get_gpu("B200")
    assert capture_sizes(1024, 8192, (0, 29, 0), gpu=b200)[-1] == 1024
    # vllm/config/vllm.py of 0.28.0 already has the 1024 ceiling; 0.27.0 caps at 512
    assert capture_sizes(1024, 8192, (0, 28, 0), gpu=b200)[-1] == 1024
    assert capture_sizes(1024, 8192, (0, 27, 0), gpu=b200)[-1] == 512
    # the wider cap alone: 0.28.0 does not append the drafting uniform-decode sizes, so
    # 300 sequences x 2 = 600 (off the 16-token grid) is captured only from 0.29.0
    assert 600 not in capture_sizes(300, 8192, (0, 28, 0), 1, gpu=b200)
    assert 600 in capture_sizes(300, 8192, (0, 29, 0), 1, gpu=b200)
    assert capture_sizes(600, 8192, (0, 28, 0), gpu=b200)[-1] == 1024
    assert capture_sizes(600, 8192, (0, 27, 0), gpu=b200)[-1] == 512
    assert capture_sizes(1024, 8192, (0, 29, 0), gpu=get_gpu("H100"))[-1] == 512


@settings(max_examples=60, deadline=None)
@given(
    seqs=st.integers(1, 2048),
    tokens=st.integers(1, 65536),
    k=st.integers(0, 7),
    release=st.sampled_from([(0, 12, 0), (0, 20, 0), (0, 25, 0), (0, 29, 0)]),
)
def test_capture_list_invariants(
    seqs: int, tokens: int, k: int, release: tuple[int, int, int]
) -> None:
    sizes = capture_sizes(seqs, tokens, release, k)
    assert list(sizes) == sorted(set(sizes))
    if sizes:
        assert sizes[-1] <= max(tokens, 1 + k) and sizes[-1] <= 512 + k
    if k:
        assert all(s % (1 + k) == 0 for s in sizes)
    piecewise, full = graph_counts(sizes, seqs, k)
    assert full <= piecewise
    # Without drafting, more sequences never mean fewer graphs. With drafting the list is not
    # monotonic, as vLLM's is not: the uniform decode sizes are (1 + k) x each grid count up
    # to max_num_seqs, so 3 sequences with one draft token capture 6 under a budget of 8,
    # while 4 sequences jump from 4 to 8 and leave 6 out.
    if k == 0:
        more = graph_units(capture_sizes(seqs + 1, tokens, release, k), seqs + 1, k)
        assert more >= graph_units(capture_sizes(seqs, tokens, release, k), seqs, k)


def test_explicit_cap_at_the_default_leaves_the_fit() -> None:
    llama = load_model("meta-llama/Llama-3.1-8B")
    h100 = get_gpu("H100")
    fit = plan_memory(llama, h100, Parallelism(), EngineConfig(engine_version="0.20.0"))
    same = EngineConfig(engine_version="0.20.0", max_cudagraph_capture_size=512)
    small = EngineConfig(engine_version="0.20.0", max_cudagraph_capture_size=16)
    assert plan_memory(llama, h100, Parallelism(), same).cudagraph_gib == fit.cudagraph_gib
    low = plan_memory(llama, h100, Parallelism(), small)
    assert low.cudagraph_gib < fit.cudagraph_gib / 5
    assert low.kv_tokens > fit.kv_tokens


#: Rows whose logs print "Estimated CUDA graph memory", with the logged GiB and the capture
#: cap each log shows ("largest=" or the compilation config; 512 is the L40S default).
LOGGED_ESTIMATE = {
    "lab4090-qwen3-8b-compiled-0.29": (0.07, 16),
    "vllm-l40s-qwen3-14b-0.29": (0.51, 512),
    "vllm-l40s-qwen3-14b-awq-0.29": (0.54, 512),
}
#: Dense rows: the capture-list estimate lies within this of the logged one, GiB.
ESTIMATE_TOLERANCE_GIB = 0.3
#: DeepSeek V4 rows with their logged "Estimated CUDA graph memory" (GiB). Their first
#: PIECEWISE capture holds the sparse indexer's 512 MiB dummy logits block, which a dense
#: model's does not (kvscope.plan.cudagraph.dsv4_first_capture_bytes).
V4_LOGGED_ESTIMATE = {
    "ghlog-2xgb10-v4flash-200k-mtp2-0.21": 0.55,
    "ghlog-2xrtxpro6000-v4flash-1m-mtp2-0.25": 1.58,
}
#: How close the V4 estimate lands, GiB: 0.04 on GB10 (7 graph units), 0.19 on the RTX PRO
#: start (67 units), where the per-graph share of the dense fit stays the open term. The GB10
#: closeness is partly luck: that start's compose sets VLLM_SPARSE_INDEXER_MAX_LOGITS_MB=256,
#: which the planner does not read (at 256 MiB the rule gives 0.34 GiB, the capture's logged
#: "0.34 GiB (actual)"), and ``profile_cudagraph_memory`` reads raw ``cudaMemGetInfo`` (vllm/v1/
#: worker/gpu_model_runner.py of 0.21.0), whose free figure on unified memory also drops with
#: the host's page cache, so a GB10 estimate carries host-side growth a device one does not.
V4_TOLERANCE_GIB = 0.2


@pytest.mark.parametrize("row", sorted(LOGGED_ESTIMATE))
def test_planned_estimate_matches_logged(row: str) -> None:
    logged, cap = LOGGED_ESTIMATE[row]
    planned = CASES[row].plan(max_cudagraph_capture_size=cap).cudagraph_gib
    assert planned == pytest.approx(logged, abs=ESTIMATE_TOLERANCE_GIB)
    # closer to the log than the default-capture fit the budget keeps
    assert abs(planned - logged) < abs(CASES[row].plan().cudagraph_gib - logged)


def test_small_capture_list_estimate_is_tight() -> None:
    logged, cap = LOGGED_ESTIMATE["lab4090-qwen3-8b-compiled-0.29"]
    planned = CASES["lab4090-qwen3-8b-compiled-0.29"].plan(max_cudagraph_capture_size=cap)
    assert planned.cudagraph_gib == pytest.approx(logged, abs=0.02)


@pytest.mark.parametrize("row", sorted(V4_LOGGED_ESTIMATE))
def test_v4_estimate_matches_the_log(row: str) -> None:
    logged = V4_LOGGED_ESTIMATE[row]
    plan = CASES[row].plan()
    assert plan.cudagraph_gib == pytest.approx(logged, abs=V4_TOLERANCE_GIB)
    # closer than the dense fit spread over the fit's own 101 graph units
    with offline_hub():
        layers = len(load_model("deepseek-ai/DeepSeek-V4-Flash").layers)
    fit = estimate_bytes(layers, True, FIT_GRAPH_UNITS) / GIB
    assert abs(plan.cudagraph_gib - logged) < abs(fit - logged)


def _v4_graphs(version: str, **kw: object) -> float:
    with offline_hub():
        v4 = load_model("deepseek-ai/DeepSeek-V4-Flash")
    eng = EngineConfig(engine_version=version, max_model_len=65536, **kw)  # type: ignore[arg-type]
    return plan_memory(v4, get_gpu("H200"), Parallelism(tp=4), eng).cudagraph_gib


def test_v4_first_capture_counts_once_on_the_v1_runner() -> None:
    # One size (1 request, cap 1: one PIECEWISE and one FULL graph, one graph unit): the
    # estimate is the dummy logits block plus one graph's worth; more graphs add only
    # per-graph shares.
    one = _v4_graphs("0.25.0", max_num_seqs=1, max_cudagraph_capture_size=1)
    assert 0.5 < one < 0.5 + 2 * CUDAGRAPH_PER_UNIT_BOUND
    many = _v4_graphs("0.25.0", max_cudagraph_capture_size=512)
    fewer = _v4_graphs("0.25.0", max_cudagraph_capture_size=256)
    assert 0.5 < fewer < many
    # the block is not per graph: 101 units cost far less than 101 x 0.5 GiB
    assert many < 0.5 + 101 * CUDAGRAPH_PER_UNIT_BOUND


def test_v4_first_capture_term_follows_the_runner() -> None:
    # 0.20.0-0.27.0 run V4 on the V1 runner; 0.28.0 makes the V2 runner V4's default on
    # CUDA, whose PIECEWISE dummy runs build attention metadata: the dense fit stays (from
    # 0.29.0, the first V2 runner that measures its graphs at all).
    v1 = _v4_graphs("0.27.0", max_cudagraph_capture_size=512)
    v2 = _v4_graphs("0.29.0", max_cudagraph_capture_size=512)
    assert v1 - v2 == pytest.approx(0.5, abs=1e-9)
    assert _v4_graphs("0.25.0", enforce_eager=True) == 0.0
    # other V1-runner models are untouched: Mixtral (MoE, off 0.25.0's V2 list) keeps the
    # fit's figure; a dense Llama runs on the V2 runner at 0.25.0, which subtracts no
    # estimate before 0.29.0 (kvscope.plan.vllm_runner)
    h100 = get_gpu("H100")
    mixtral = load_model("mistralai/Mixtral-8x7B-v0.1")
    moe = plan_memory(mixtral, h100, Parallelism(tp=2), EngineConfig(engine_version="0.25.0"))
    assert moe.cudagraph_gib == pytest.approx(
        estimate_bytes(len(mixtral.layers), True, FIT_GRAPH_UNITS) / GIB, rel=1e-12
    )
    llama = load_model("meta-llama/Llama-3.1-8B")
    dense = plan_memory(llama, h100, Parallelism(), EngineConfig(engine_version="0.25.0"))
    assert dense.cudagraph_gib == 0.0


def test_flag_is_vllm_only() -> None:
    with pytest.raises(KvscopeError, match="max-cudagraph-capture-size"):
        EngineConfig(engine="sglang", max_cudagraph_capture_size=16)
    with pytest.raises(KvscopeError):
        EngineConfig(max_cudagraph_capture_size=0)


def _dspark(version: str) -> EngineConfig:
    spec = parse_vllm('{"method": "dspark", "num_speculative_tokens": 5}')
    return EngineConfig(engine_version=version, max_model_len=65536, speculative=spec)


def test_v2_runner_logs_no_estimate_before_0_29() -> None:
    # GPUModelRunner.profile_cudagraph_memory of the V2 runner (vllm/v1/worker/gpu/
    # model_runner.py) returns 0 at 0.25.0, 0.27.0 and 0.28.0 and measures from 0.29.0;
    # DSpark forces the V2 runner (vllm/config/vllm.py, 0.25.0-0.31.0); V4 defaults to it
    # from 0.28.0. The V1 runner measures from 0.20.0 whatever the drafter.
    with offline_hub():
        v4 = load_model("deepseek-ai/DeepSeek-V4-Flash")
    llama = load_model("meta-llama/Llama-3.1-8B")
    h100 = get_gpu("H100")

    def profiled(model, version: str, method: str | None) -> bool:  # type: ignore[no-untyped-def]
        spec = (
            None
            if method is None
            else parse_vllm(f'{{"method": "{method}", "num_speculative_tokens": 1}}')
        )
        return graphs_profiled(model, EngineConfig(engine_version=version, speculative=spec), h100)

    assert not profiled(v4, "0.25.0", "dspark")
    assert not profiled(llama, "0.27.0", "dspark")
    assert not profiled(v4, "0.28.0", None)
    assert profiled(v4, "0.27.0", None)
    assert profiled(v4, "0.26.0", "mtp")
    assert profiled(v4, "0.29.0", "dspark")
    # Llama with EAGLE-3 at 0.24 starts on the V2 runner (its list names LlamaForCausalLM and
    # EAGLE-3 is a V2 drafter; the 0.24 eagle3 start-up log prints "Using V2 Model Runner" and
    # no graph estimate); at 0.21 the V2 runner is not a default yet.
    assert not profiled(llama, "0.24.0", "eagle3")
    assert profiled(llama, "0.21.0", "eagle3")
    assert _v4_graphs("0.28.0", max_cudagraph_capture_size=512) == 0.0


def test_dspark_start_before_0_29_subtracts_no_graphs() -> None:
    # gh51454 (vllm 0.25.0, 8x B200): the DSpark arm runs on the V2 runner, so its KV pool
    # carries no graph term; the same flags without drafting (V1 runner) carry V4's.
    with offline_hub():
        dspark = CASES["gh51454-b200-tp8-dspark"].plan()
        plain = CASES["gh51454-b200-tp8"].plan()
    assert dspark.cudagraph_gib == 0.0
    assert plain.cudagraph_gib > 0.5
    with offline_hub():
        v4 = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
        par = Parallelism(tp=8, ep=True)
        h200 = get_gpu("H200")
        assert plan_memory(v4, h200, par, _dspark("0.25.0")).cudagraph_gib == 0.0
        assert plan_memory(v4, h200, par, _dspark("0.30.0")).cudagraph_gib > 0.5


#: Qwen3-235B-A22B-2507-FP8 TP4 on RTX PRO 6000 (vLLM 0.27.1, --max-num-seqs 32, V1 runner:
#: Qwen3MoE is not on 0.27's V2 list): the log's whole profiling peak, graph estimate
#: included, is 0.76 GiB; the H100 fit alone would charge 2.26 GiB for its 17 graph units.
TP4_ROW = "rtxpro6000-qwen3-235b-2507-fp8-tp4-0.27"
TP4_LOGGED_PEAK_WITH_GRAPHS_GIB = 0.76


def test_v1_runner_estimate_follows_the_default_capture_list() -> None:
    # GPUModelRunner.profile_cudagraph_memory (vllm/v1/worker/gpu_model_runner.py, 0.22.0-
    # 0.31.0) logs the first capture plus (graphs - 1) x the second: the default list, capped
    # at max_num_seqs x 2 = 64 tokens, is what an explicit --max-cudagraph-capture-size 64 gives
    default = CASES[TP4_ROW].plan()
    assert default.cudagraph_gib == CASES[TP4_ROW].plan(max_cudagraph_capture_size=64).cudagraph_gib
    assert 0.0 < default.cudagraph_gib < TP4_LOGGED_PEAK_WITH_GRAPHS_GIB


#: DeepSeek-V4.1-Flash TP8 on H100 under the V2 runner, logged "Estimated CUDA graph memory"
#: (GiB): the V2 runner's capture_model measurement holds the workspaces built during capture
#: (vllm/v1/worker/gpu/cudagraph_utils.py of 0.31.0), which the 101-unit fit stands in for.
#: (The 0731 checkpoint's 0.31 start logs 0.82, between the fit and the capture-list spread.)
V2_LOGGED_ESTIMATE = {
    "tant2tls-v41flash-h100-tp8-0.30": 1.25,
    "tant2tls-v41flash-h100-tp8-0.31": 1.15,
}


@pytest.mark.parametrize("row", sorted(V2_LOGGED_ESTIMATE))
def test_v2_runner_keeps_the_fit_from_029(row: str) -> None:
    logged = V2_LOGGED_ESTIMATE[row]
    default = CASES[row].plan().cudagraph_gib
    listed = CASES[row].plan(max_cudagraph_capture_size=128).cudagraph_gib  # 64 seqs x 2
    assert listed < default
    assert abs(default - logged) < abs(listed - logged)
