"""The planner against real engine start-up logs (tests/plan/data/engine_logs*.csv).

Targets from the issue (17): ``kv_tokens`` median error <= 1 %, >= 95 % of scored rows
within 5 %, weights within 2 % on >= 95 %; rows outside a target are named in
:data:`KNOWN_OFF` with the reason, so a new miss fails. Rows marked ``hybrid``
(sliding/full attention mixes, whose logged token figure follows a different rule),
``uneven`` (the ranks had different free memory), ``inferred`` (an input the log does
not state — engine release, GPU model — had to be guessed) and ``refused`` (the engine
refused to start; checked in ``test_dsv4_logs.py``) are reported by
benchmarks/plan_accuracy.py, not scored here;
the inferred rows get a loose sanity bound instead.
Where a log gives "Available KV cache memory", the KV-from-available step is checked on its
own: it is the engine's block arithmetic and must be near exact.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from .log_cases import evaluate, load_cases

CASES = load_cases()
RESULTS = [evaluate(c) for c in CASES]
MAIN = [r for r in RESULTS if r.case.row["score"] == "main"]


def test_dataset_covers_the_issue_matrix() -> None:
    rows = [c.row for c in CASES]
    assert len(rows) >= 100
    assert {r["engine"] for r in rows} == {"vllm", "sglang"}
    assert len({r["gpu"] for r in rows}) >= 3
    assert any(int(r["tp"]) > 1 for r in rows) and any(int(r["pp"]) > 1 for r in rows)
    assert any(r["kv_cache_dtype"] == "fp8" for r in rows)
    assert all(r["source"] for r in rows)


#: Scored rows off a target, and why (see benchmarks/RESULTS.md, issue 17 part 2).
KNOWN_OFF = {
    # kv_tokens, +8.3 % / +10.0 %: DeepSeek-V4.1-Flash with DSpark k=5 (fixed and adaptive
    # verification) on 8x H100 TP8+EP, vLLM 0.30.1rc1 (tant2tls/Deepseek-serving). Within
    # 3.1 / 3.8 % while the TP group was charged the 2.1 GiB of NCCL buffers that 0.26+ no
    # longer grows inside the profiled span (vllm_collectives.PYNCCL_ALL_GATHER_SINCE) and V4's
    # 0.29+ attention tensors were left out (dsv4_activation.POOL_DROPPED_SINCE): the two
    # errors cancelled. V4.1 without drafting is now 3.1-4.2 % high, the engine's own split
    # leaving 0.5 GiB consumed and 0.7 GiB transient beyond the plan (V4.1's Engram does not
    # run in the profiling pass); DSpark adds about 1 GiB more unassigned memory on both
    # checkpoints (0731 with DSpark: 2.8 %), which on V4.1's smaller pool crosses 5 %.
    "tant2tls-v41flash-h100-tp8-0.30-dspark5": "kv_tokens",
    "tant2tls-v41flash-h100-tp8-0.30-dspark5-adaptive": "kv_tokens",
    # weights, +3.4 %: 1.18 GiB logged for a 0.6 B model (1.11 GiB of parameters); the planner
    # adds a fixed 0.1 GiB for what SGLang's "mem usage" counts beyond the weights
    # (sglang_budget.LOAD_OVERHEAD_GIB, measured +0.06-0.15 at TP1), which here is 0.07. No
    # engine rule sizes that remainder, and at 1 GiB of weights its spread alone exceeds 2 %.
    "sglang-h100-qwen3-reranker-06b-mfs0.3": "weights",
    # kv_tokens, +10.4 %: ROCm memory outside torch with hipBLASLt off
    # (TORCH_BLAS_PREFER_HIPBLASLT=0, so kvscope.plan.rocm_blas charges nothing): 5.1 GiB a
    # GPU, as the hipBLASLt-off Llama 2
    # TP8 start of the same build and environment leaves (RCCL's two communicators, whose size
    # is RCCL's, not vLLM's), against a KV pool of only ~50 GiB a GPU beside 94.5 GiB of
    # weights. The 0.6.3 formula's cached segments of the 131,072-token pass (2.3 GiB) are
    # charged (kvscope.plan.v0_cached_segments).
    "vllm-mi300x-llama31-405b-tp8": "kv_tokens",
    # kv_tokens, +7.3 %: Qwen3-32B on two RTX PRO 6000 at 0.426, PP2 (vLLM 0.27.1, V2 model
    # runner). The first stage logs 3.02 GiB of non-KV memory beside the weights (planned 1.88:
    # profiling peak and non-torch; the V2 sampler's tables, kvscope.plan.v2_sampler_buffers,
    # and the receive buffer, kvscope.plan.pp_buffers, sit on the last stage only, which now
    # binds the plan at 60,784 tokens). Not the
    # pipeline's send path: the profiling pass sends nothing, and the NCCL communicators the
    # sends and PPHandler's broadcasts use (torch ProcessGroupNCCL on the PP device group and
    # its sibling group, no eager device_id by default) start at their first use, after the
    # pool is sized (parallel_state.py, gpu/pp_utils.py of 0.27.0). The TP2 start of the same
    # write-up left this list with the sampler's tables (2.2 %). Not the pipeline's either: the
    # refused TP1 start of the write-up logs -24.42 GiB against -22.94 planned, 1.48 GiB short,
    # while the second stage is at most 0.51 short (its pool holds >= 3,540 blocks) and TP2 is
    # 0.19 over; no 0.27.0 / 0.27.1 code path read assigns a gigabyte to a GPU that holds the
    # whole embedding table (benchmarks/RESULTS.md, h21-pp2).
    "rtxpro6000-qwen3-32b-pp2-u0426-0.27": "kv_tokens",
    # kv_tokens, -5.2 %: Qwen2.5-VL-7B on one L4 (vLLM 0.9.0.1, 2,048 context), a 1.81 GiB
    # pool: weights 15.57 planned, 15.6271 logged (with M-RoPE's four rotary folds), and the
    # plan holds ~0.1 GiB more non-KV memory than the log leaves. 0.9.0 still charges the whole
    # non-torch footprint, CUDA context included (kvscope.plan.shared_gpu, "counted"), so the
    # pre-Hopper growth figure of 0.9.1+ does not apply; 0.1 GiB is 5 % of so small a pool.
    # Within 1.4 % while the weights were 0.15 GiB short of the log.
    "kserve-l4-qwen25vl7b-0.9.0.1": "kv_tokens",
    # Qwen2-VL-2B-Instruct on one H200, vLLM 0.23.0 (LMCache's multimodal T3 test). weights,
    # +2.7 %: "Model loading took 4.26 GiB" against 4.15 planned for its 2.21 B parameters
    # (tied embeddings). M-RoPE's fourfold rotary cache (kvscope.plan.mrope_buffers) closed
    # most of the same gap on the Qwen2.5-VL, Qwen3-VL and Qwen3.5 loads (Qwen3.5-0.8B +5.8 /
    # +6.3 % to +0.4 / +1.0 %), but at this checkpoint's 32,768 positions it is 24 MiB of the
    # 0.11 GiB still unplanned; on a 4 GiB checkpoint that remainder alone passes 2 %. Its KV
    # pool is within 0.3 %.
    "lmcache-h200-qwen2-vl-2b-t3-0.23.0": "weights",
    # the same checkpoint's preemption-control starts (0.23.0 and 0.27.1, 2,048 context): the
    # same 4.26 GiB load and the same +2.7 %.
    "lmcache-h200-qwen2-vl-2b-2k-0.23.0": "weights",
    "lmcache-h200-qwen2-vl-2b-2k-0.27.1": "weights",
    # kv_tokens, +35.1 %: DeepSeek-V3 at vLLM 0.6.6.post2.dev5 (V0, before MLA: 16 heads a GPU
    # padded to 256, DeepseekV2Attention of the 0.6.6 wheel) on two nodes of 8 H100, TP8 PP2,
    # gmu 0.95. 2,889 blocks leave ~53 GiB a GPU outside the KV pool against ~45 planned
    # (weights 37.2 on the first stage's 30 layers, 42.3 on the second's 31 with the head:
    # before 0.8.0 the odd layer goes to the last stage, weights.pp_layer_split; 2.6 profiling
    # peak). The 0.6.6
    # formula (utils.memory_profiling: non-torch = used - baseline - weights - torch delta,
    # baseline from init_device before the communicators) charges everything NCCL and the
    # two-node PP / TP groups hold; the page keeps neither the "Loading model weights took" nor
    # the profiling line, so the ~11 GiB is not assigned (benchmarks/RESULTS.md, h22-forum).
    "llmtracker-2x8h100-v3-tp8pp2-0.6.6": "kv_tokens",
    # kv_tokens, +38 %: Qwen3-30B-A3B-FP8 on one DGX Spark (GB10, unified memory) at
    # gpu_memory_utilization 0.3, NVIDIA's vLLM 0.13.0 container. Weights are exact (29.04 GiB)
    # but the log leaves 3.43 GiB of the 0.3 budget outside weights and KV (4.04 GiB) against
    # 1.88 planned (profiling peak and non-torch). The container serves a Graphiti stack on the
    # same Spark, whose host processes draw on the memory vLLM's profiler reads as the GPU's;
    # no engine rule sizes that, and the log does not print its profiling breakdown.
    "gb10-qwen3-30b-a3b-fp8-gmu03-fp8kv-0.13.0": "kv_tokens",
    # kv_tokens, +12.4 %: Qwen3.8-27B-FP8 (Marlin W8A16 on Ampere) with MTP n=3 on two RTX 3090
    # at TP2, vLLM 0.27.1 (club-3090 dual-max). A later boot of the same compose on the same
    # class of rig logs the split (club-3090 PR #1139): 15.25 GiB consumed (weights +
    # non-torch), 1.66 peak activation, 0.14 CUDA graphs, 4.76 GiB of KV; planned 14.57 + 0.25,
    # 1.42, 0.05 and 5.40. The MTP-free starts of the same checkpoint on the same rig (rows
    # talos-2x3090-*) are within 4.8 % and the MTP-free 0.24.0 start within 1 %: what is left is
    # the 0.27 "consumed" figure at TP2 over PCIe (0.6-0.9 GiB beside the weights in these
    # logs, 0.25 planned) and the drafter's share of the profiling peak, which no code read here
    # sizes.
    "club3090-2x3090-qwen38-27b-fp8-mtp3-0.27.1": "kv_tokens",
    # kv_tokens, +13.2 %: google/gemma-2b in float32 on a Colab T4 under vLLM 0.4.2 (Google's
    # Gemma cookbook): 9.34 GiB of weights (matched) leave a KV pool of only 0.95 GiB. The
    # planned profile (2.60 GiB: the sorting sampler over 256 rows of a 256,000 vocabulary in
    # fp32 and the runtime buffers with a T4's 8 MiB cuBLAS workspace, plus 0.25 non-torch) is
    # 0.12 GiB short of what the 0.4.2 formula (total x 0.9 -
    # the process's whole peak after the pass) charged; the log prints no profiling line to
    # assign it, and 0.12 GiB is 13 % of so small a pool.
    "gemmacookbook-t4-gemma-2b-fp32-0.4.2": "kv_tokens",
}


def test_weights_within_two_percent() -> None:
    errs = {r.case.id: r.weights_err for r in MAIN if r.weights_err is not None}
    assert len(errs) >= 80
    bad = {k for k, v in errs.items() if v > 0.02}
    assert bad <= {k for k, v in KNOWN_OFF.items() if v == "weights"}, bad
    assert sum(v <= 0.02 for v in errs.values()) / len(errs) >= 0.95


def test_kv_tokens_median_and_share_within_five_percent() -> None:
    errs = {r.case.id: r.tokens_err for r in MAIN if r.tokens_err is not None}
    assert len(errs) >= 80
    assert statistics.median(errs.values()) <= 0.01
    bad = {k for k, v in errs.items() if v > 0.05}
    assert bad <= {k for k, v in KNOWN_OFF.items() if v == "kv_tokens"}, bad
    # Issue 17 asks for >= 95 % of rows within 5 %: 229 of 238 (96.2 %) since the pre-Hopper
    # one-GPU non-torch figure (vllm_collectives, "tp1_pre_hopper"); each miss is named with
    # its reason in KNOWN_OFF above.
    assert sum(e <= 0.05 for e in errs.values()) >= 229
    assert sum(e <= 0.05 for e in errs.values()) / len(errs) >= 0.95


@pytest.mark.parametrize(
    "result",
    [r for r in RESULTS if r.tokens_from_available_err is not None],
    ids=lambda r: r.case.id,
)
def test_kv_tokens_from_logged_available_memory(result) -> None:  # type: ignore[no-untyped-def]
    # Block arithmetic only: the logged available GiB is rounded to 0.01 GiB, so small
    # budgets (a few GiB) carry up to ~0.3 % of rounding. Skipped: PP rows (the log prints
    # rank 0's memory but the tightest stage's tokens) and hybrids. V4 rows are held to the
    # same bound: their pool and report follow the release (kvscope.plan.dsv4_pool).
    row = result.case.row
    if row["score"] != "main" or int(row["pp"]) > 1:
        pytest.skip("figure not determined by one rank's available memory alone")
    if row["id"] in LAYOUT_OFF:
        pytest.skip(LAYOUT_OFF[row["id"]])
    avail = result.case.num("kv_cache_gib")
    slack = 0.006 / avail + 0.001
    if row["version"].startswith("0.9"):
        slack = 0.02  # LMCache connector build: token count rounded differently
    if int(row["tp"]) >= 8:
        # The log shows one rank's available memory while the token count is the minimum
        # over eight ranks, whose free memory differs by tens of MiB.
        slack += 0.003
    assert result.tokens_from_available_err <= slack


#: Scored rows whose logged available memory does not give the logged tokens under the
#: planner's pool rule, and why (see ``test_dsv4_logs.NEAR_MISSES``).
LAYOUT_OFF: dict[str, str] = {}


#: Rows with guessed inputs that the planner misses by more than a factor of two, and why.
INFERRED_OFF: dict[str, str] = {
    # Empty since the self-llm SGLang V4-Flash start (selfllm-sglang-v4flash-tp4-96gb) is
    # planned as its screenshot shows it ran: no drafting, on 96 GB Hopper GPUs.
}


def test_inferred_rows_stay_in_the_right_ballpark() -> None:
    # Rows with guessed inputs: the planner must still land within a factor of two. The
    # loosest is vllm#21348 (LMCache connector), whose ~6 GiB a GPU of non-KV memory has no
    # rule: LMCache 0.3.2's GPU staging buffer is 12 MB there (its KV-from-available is exact).
    inferred = [r for r in RESULTS if r.case.row["score"] == "inferred"]
    assert inferred
    for r in inferred:
        # a log without a token figure (V0's first PP stage) is held to its KV GiB instead
        err = r.tokens_err if r.tokens_err is not None else r.kv_gib_err
        assert err is not None, r.case.id
        # a listed row must still be off: a fix moves it out of INFERRED_OFF
        assert (err >= 1.0) == (r.case.id in INFERRED_OFF), r.case.id


def test_readme_states_the_current_counts() -> None:
    """The README's sentence on the start-up logs carries this data set's own counts."""
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    m = re.search(
        r"Across (\d+) public start-up logs .*?, (\d+) of the (\d+) whose every input the log "
        r"states land within 5 % of the logged `kv_tokens` \(median error ([\d.]+) %\); counting "
        r"the rows where an input had to be guessed, (\d+) of (\d+) do",
        text,
    )
    assert m, "README: the start-up-log sentence changed shape"
    scored = [r.tokens_err for r in MAIN if r.tokens_err is not None]
    every = [r.tokens_err for r in RESULTS if r.tokens_err is not None]
    assert int(m[1]) == len(RESULTS)
    assert (int(m[2]), int(m[3])) == (sum(e <= 0.05 for e in scored), len(scored))
    assert float(m[4]) == round(100 * statistics.median(scored), 2)
    assert (int(m[5]), int(m[6])) == (sum(e <= 0.05 for e in every), len(every))
    # the releases and GPU types the sentence names are the rows' own
    from kvscope.specs.hardware import get_gpu

    span = re.search(
        r"\(vLLM (\d+\.\d+)-(\d+\.\d+) and SGLang (\d+\.\d+)-(\d+\.\d+(?:\.\d+)?);", text
    )
    gpus = re.search(r"; (\d+) GPU types\)", text)
    assert span and gpus, "README: the start-up-log sentence changed shape"

    def minor(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())

    for engine, low, high in (("vllm", span[1], span[2]), ("sglang", span[3], span[4])):
        seen = [minor(r.case.row["version"]) for r in RESULTS if r.case.row["engine"] == engine]
        assert min(seen)[:2] == minor(low)[:2], (engine, min(seen))
        assert max(seen)[: len(minor(high))] == minor(high), (engine, max(seen))
    assert int(gpus[1]) == len({get_gpu(r.case.row["gpu"]).name for r in RESULTS})


def test_hub_ids_refuses_a_repeated_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repeated id in hub_ids.json would silently take the second entry."""
    from . import log_cases

    path = tmp_path / "hub_ids.json"
    path.write_text('{"a/b": {"config": "x.json"}, "a/b": {"config": "y.json"}}')
    monkeypatch.setattr(log_cases, "HUB_IDS", path)
    with pytest.raises(ValueError, match="repeats a/b"):
        log_cases.hub_ids()
