"""Known effects of the field, reproduced by the simulator (SPEC.md "Field knowledge")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvscope.sim import SimConfig, simulate
from kvscope.sim.engine import chain
from kvscope.workload import Workload, build_workload


def burst_workload() -> Workload:
    """Steady chat traffic plus a burst of 40 long-context (16K-token) requests at t = 5 s."""
    base = build_workload(
        arrival="poisson:rate=6",
        num_requests=120,
        prompt_len="uniform:min=200,max=800",
        output_len="uniform:min=100,max=300",
        seed=11,
    )
    n = 40
    return Workload.build(
        np.concatenate([base.arrival_s, np.full(n, 5.0)]),
        np.concatenate([base.prompt_tokens, np.full(n, 16000)]),
        np.concatenate([base.output_tokens, np.full(n, 400)]),
    )


def test_long_context_burst_preempts_and_lowers_throughput() -> None:
    w = burst_workload()
    roomy = simulate(w, SimConfig(num_gpu_blocks_override=200_000))
    # 128K tokens of KV: eight of the 16K prompts fill it. vLLM 0.33 admits a request only if
    # its whole prompt fits (scheduler_reserve_full_isl), so preemption comes from decode growth
    tight = simulate(w, SimConfig(num_gpu_blocks_override=8_000))
    assert roomy.figures["preemptions"] == 0
    assert tight.figures["preemptions"] >= 5
    assert tight.figures["completed"] == roomy.figures["completed"] == len(w)
    # recompute after preemption burns GPU time: fewer output tokens per second, worse tails
    thr = "output_token_throughput_per_s"
    assert tight.figures[thr] < 0.8 * roomy.figures[thr]
    assert tight.figures["ttft_p99_s"] > roomy.figures["ttft_p99_s"]


def test_larger_blocks_waste_more_tokens_in_partial_blocks() -> None:
    w = build_workload(arrival="poisson:rate=10", num_requests=300, seed=5)
    waste = [
        simulate(w, SimConfig(block_size=bs)).figures["internal_waste_tokens_mean"]
        for bs in (16, 64, 256)
    ]
    assert waste[0] < waste[1] < waste[2]
    # on average about half a block per running request is empty
    running = simulate(w, SimConfig(block_size=64)).steps.column("running").to_numpy().mean()
    assert 0.25 * 64 * running < waste[1] < 0.75 * 64 * running


def test_contiguous_allocation_fragments_where_paging_does_not() -> None:
    w = build_workload(
        arrival="poisson:rate=3",
        num_requests=150,
        prompt_len="uniform:min=8000,max=24000",
        output_len="uniform:min=100,max=2000",
        seed=7,
    )
    common = {"num_gpu_blocks_override": 40_000, "enable_prefix_caching": False}
    paged = simulate(w, SimConfig(**common))  # type: ignore[arg-type]
    contig = simulate(
        w,
        SimConfig(allocator="contiguous", compaction="none", **common),  # type: ignore[arg-type]
    )
    frag_paged = paged.steps.column("fragmentation").to_numpy()
    frag_contig = contig.steps.column("fragmentation").to_numpy()
    assert frag_paged.max() == 0.0
    assert frag_contig.max() > 0.3  # holes between regions: SPEC's warning threshold
    assert contig.figures["ttft_p99_s"] > paged.figures["ttft_p99_s"]


def test_compaction_removes_fragmentation_at_a_copy_cost() -> None:
    w = build_workload(
        arrival="poisson:rate=3",
        num_requests=120,
        prompt_len="uniform:min=8000,max=24000",
        output_len="uniform:min=100,max=2000",
        seed=7,
    )
    base = {
        "num_gpu_blocks_override": 40_000,
        "enable_prefix_caching": False,
        "allocator": "contiguous",
    }
    none = simulate(w, SimConfig(compaction="none", **base))  # type: ignore[arg-type]
    eager = simulate(w, SimConfig(compaction="immediate", **base))  # type: ignore[arg-type]
    assert eager.pool_info["moved_blocks"] > 0
    assert eager.figures["ttft_p99_s"] < none.figures["ttft_p99_s"]


@pytest.mark.slow
def test_prefix_caching_on_mooncake_reuses_what_the_hashes_predict(traces_dir: Path) -> None:
    w = Workload.from_file(traces_dir / "mooncake_fast25" / "conversation_trace.jsonl")
    w = w.shift_to_zero().limit(3000)
    # predicted: prompt tokens in full 512-token blocks whose chained prefix was seen before
    seen: set[int] = set()
    repeat = 0
    for i in range(len(w)):
        ids = w.hashes_of(i).tolist()
        for h in chain(ids[: min(len(ids), int(w.prompt_tokens[i]) // 512)]):
            repeat += h in seen
            seen.add(h)
    predicted = repeat * 512 / float(w.prompt_tokens.sum())
    res = simulate(w, SimConfig(block_size=512, num_gpu_blocks_override=2_000_000))
    assert res.figures["prefix_hit_rate"] == pytest.approx(predicted, abs=0.01)
    assert 0.2 < predicted < 0.5  # the trace's SOURCE.md: 36.6 % of block references repeat
    # a small pool evicts cached prefixes before they are reused
    small = simulate(w, SimConfig(block_size=512, num_gpu_blocks_override=1_000))
    assert small.figures["prefix_hit_rate"] < res.figures["prefix_hit_rate"]


def test_cpu_offload_turns_evictions_into_cheaper_loads() -> None:
    # 60 requests sharing 8K-token prefixes in 6 families, a GPU pool too small to keep them
    rng = np.random.default_rng(3)
    n, hb = 60, 512
    fam = rng.integers(0, 6, n)
    prompts = np.full(n, 9000)
    off = np.arange(n + 1, dtype=np.int64) * 17
    vals = np.array(
        [
            f * 1000 + j if j < 16 else 10**6 + i * 100 + j
            for i, f in enumerate(fam)
            for j in range(17)
        ],
        dtype=np.int64,
    )
    w = Workload.build(
        np.arange(n) * 2.0,
        prompts,
        np.full(n, 50),
        hash_offsets=off,
        hash_values=vals,
        hash_block_size=hb,
    )
    base = {"num_gpu_blocks_override": 1_200, "max_num_seqs": 2}
    gpu_only = simulate(w, SimConfig(**base))  # type: ignore[arg-type]
    tiered = simulate(w, SimConfig(cpu_offload_gib=40.0, **base))  # type: ignore[arg-type]
    assert tiered.figures["offload_loaded_blocks"] > 0
    assert tiered.figures["prefix_hit_rate"] > gpu_only.figures["prefix_hit_rate"] + 0.2
    assert tiered.figures["ttft_p50_s"] < gpu_only.figures["ttft_p50_s"]
