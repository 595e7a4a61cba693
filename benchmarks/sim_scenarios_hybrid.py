"""Differential scenarios for sliding-window and hybrid KV layouts (kvscope vs vLLM 0.33.0).

Each scenario's ``groups`` lists the KV-cache groups both sides build: kvscope through
``sim_vs_vllm.layout_of`` (a :class:`kvscope.sim.layout.KVLayout`), vLLM through
``vllm_oracle_driver.build_kv_config`` (``FullAttentionSpec``/``MLAAttentionSpec`` plus
``SlidingWindowSpec``/``SlidingWindowMLASpec`` groups in one ``KVCacheConfig``). Covered:
one sliding group beside full attention (gpt-oss, Gemma 2: windows 32 to 512 tokens, block
sizes 8 to 32), six sliding groups of one window beside it (Gemma 3 27B), several windows
at once, DeepSeek V4's groups as its model code declares them
(a 256-token MLA group, two SWA groups of 64-token blocks and window 128, the C4 compressor
state in 4-row blocks over 8 rows and the C128 state in 8-row blocks over 128), prefix
caching on and off, pools small enough to preempt, shared-prefix workloads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sim_vs_vllm import mooncake, synthetic

from kvscope.workload import Workload

Scenario = tuple[str, Workload, dict[str, Any]]


def families(seed: int, n: int, prefix_blocks: int, max_suffix: int, max_out: int) -> Workload:
    """Requests of three prefix families: ``prefix_blocks`` shared 16-token hash blocks, a
    family-wide prompt length or a longer one, then tokens of their own (system prompts and
    conversation turns: the junction and replay-boundary cases of window caching)."""
    rng = np.random.default_rng(seed)
    steps = np.cumsum(rng.integers(0, 6, n)).astype(np.float64)
    fam = rng.integers(0, 3, n)
    prompts = prefix_blocks * 16 + np.where(rng.random(n) < 0.3, 1, rng.integers(1, max_suffix, n))
    outputs = rng.integers(1, max_out, n)
    lens = prompts // 16
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    vals = []
    for i in range(n):
        own = rng.integers(10, 1 << 40, int(lens[i]) - prefix_blocks)
        vals.extend([int(fam[i]) + 1] * prefix_blocks + own.tolist())
    return Workload.build(
        steps,
        prompts,
        outputs,
        hash_offsets=off,
        hash_values=np.array(vals, dtype=np.int64),
        hash_block_size=16,
    )


def sliding(block: int, window: int, full_block: int | None = None) -> list[dict[str, Any]]:
    """Full attention plus one sliding-window group (gpt-oss, Gemma)."""
    return [
        {"kind": "full", "block_size": full_block or block},
        {"kind": "sliding", "block_size": block, "window": window},
    ]


def deepseek_v4() -> list[dict[str, Any]]:
    """DeepSeek V4's groups (vLLM 0.33.0 vllm/models/deepseek_v4/attention.py,
    compressor.py, vllm/v1/attention/backends/mla/sparse_swa.py)."""
    return [
        {"kind": "mla", "block_size": 256},
        {"kind": "sliding_mla", "block_size": 64, "window": 128},
        {"kind": "sliding_mla", "block_size": 64, "window": 128},
        {"kind": "sliding_mla", "block_size": 4, "window": 8},
        {"kind": "sliding_mla", "block_size": 8, "window": 128},
    ]


def scenarios(shared: Path | None) -> list[Scenario]:
    base: dict[str, Any] = {
        "block_size": 16,
        "max_model_len": 32768,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 256,
        "enable_prefix_caching": True,
    }
    swa = {**base, "groups": sliding(16, 128)}
    multi = {
        **base,
        "groups": [
            {"kind": "full", "block_size": 16},
            {"kind": "sliding", "block_size": 16, "window": 32},
            {"kind": "sliding", "block_size": 16, "window": 256},
        ],
    }
    v4 = {**base, "block_size": 256, "max_num_batched_tokens": 512, "groups": deepseek_v4()}
    # Gemma 3 27B's groups: 10 full layers, 52 sliding ones in six groups of one window
    gemma3 = {**base, "groups": sliding(16, 1024)[:1] + sliding(16, 1024)[1:] * 6}
    out: list[Scenario] = [
        ("swa128 b16", synthetic(11, 80, False, 400, 100), {**swa, "num_blocks": 500}),
        (
            "swa128 b16, no caching",
            synthetic(12, 80, False, 400, 100),
            {**swa, "num_blocks": 500, "enable_prefix_caching": False},
        ),
        (
            "swa32 b16, preemption",
            synthetic(13, 60, False, 300, 300),
            {**base, "groups": sliding(16, 32), "num_blocks": 100},
        ),
        (
            "swa32 b16, preemption, no caching",
            synthetic(14, 60, False, 300, 300),
            {**base, "groups": sliding(16, 32), "num_blocks": 100, "enable_prefix_caching": False},
        ),
        (
            "swa64 b8, shared prefixes",
            synthetic(15, 80, True, 400, 80),
            {**base, "block_size": 8, "groups": sliding(8, 64), "num_blocks": 400},
        ),
        (
            "swa128 b16, shared, tiny pool",
            synthetic(16, 60, True, 300, 200),
            {**swa, "num_blocks": 110, "max_num_seqs": 8},
        ),
        (
            "swa512 b32, long prompts",
            synthetic(17, 40, False, 2000, 150),
            {**base, "block_size": 32, "groups": sliding(32, 512), "num_blocks": 400},
        ),
        ("multi-window 32+256", synthetic(18, 80, False, 400, 100), {**multi, "num_blocks": 600}),
        (
            "swa1024 x6 b16 (Gemma 3 27B groups)",
            synthetic(31, 50, False, 2500, 200),
            {**gemma3, "num_blocks": 1200},
        ),
        (
            "swa1024 x6 b16, shared, preemption",
            families(32, 50, 70, 1500, 120),
            {**gemma3, "num_blocks": 700, "max_num_seqs": 8},
        ),
        (
            "multi-window, shared",
            synthetic(19, 80, True, 400, 80),
            {**multi, "num_blocks": 400},
        ),
        (
            "multi-window, preemption",
            synthetic(20, 60, False, 300, 300),
            {**multi, "num_blocks": 150, "max_num_seqs": 8},
        ),
        ("DeepSeek V4 groups", synthetic(21, 40, False, 1500, 100), {**v4, "num_blocks": 600}),
        (
            "DeepSeek V4 groups, shared",
            families(22, 40, 40, 900, 60),
            {**v4, "num_blocks": 600},
        ),
        (
            "swa128 b16, prefix families",
            families(25, 60, 20, 300, 60),
            {**swa, "num_blocks": 300},
        ),
        (
            "multi-window, prefix families",
            families(26, 60, 12, 200, 60),
            {**multi, "num_blocks": 250},
        ),
        (
            # every request's admission reservation fits the pool (kvscope rejects one that
            # never can, vLLM would queue it for ever); long outputs grow into preemption
            "DeepSeek V4 groups, preemption",
            synthetic(23, 30, False, 1200, 1500),
            {**v4, "num_blocks": 110, "max_num_seqs": 8, "max_num_batched_tokens": 128},
        ),
        (
            "DeepSeek V4 groups, no caching",
            synthetic(24, 40, True, 1500, 60),
            {**v4, "num_blocks": 300, "enable_prefix_caching": False},
        ),
        # every layer slides (Phi-3-mini-4k, Mistral 7B v0.1): one SlidingWindowSpec group,
        # no full-history one (vLLM's UnitaryKVCacheCoordinator)
        (
            "sliding-only w64 b16",
            synthetic(41, 80, False, 400, 200),
            {**base, "groups": sliding(16, 64)[1:], "num_blocks": 200},
        ),
        (
            "sliding-only w64 b16, no caching",
            synthetic(42, 80, False, 400, 200),
            {
                **base,
                "groups": sliding(16, 64)[1:],
                "num_blocks": 200,
                "enable_prefix_caching": False,
            },
        ),
        (
            "sliding-only w256 b16, shared prefixes",
            synthetic(43, 80, True, 600, 400),
            {**base, "groups": sliding(16, 256)[1:], "num_blocks": 400},
        ),
        (
            "sliding-only w256 b16, prefix families",
            families(44, 60, 30, 400, 300),
            {**base, "groups": sliding(16, 256)[1:], "num_blocks": 300},
        ),
        (
            "sliding-only w64 b16, tiny pool, preemption",
            synthetic(45, 60, True, 300, 400),
            {**base, "groups": sliding(16, 64)[1:], "num_blocks": 40, "max_num_seqs": 8},
        ),
        (
            "sliding-only w256 b16, preemption, no caching",
            synthetic(46, 60, False, 500, 600),
            {
                **base,
                "groups": sliding(16, 256)[1:],
                "num_blocks": 80,
                "max_num_seqs": 8,
                "enable_prefix_caching": False,
            },
        ),
        (
            "sliding-only w100 b32, shared prefixes",
            synthetic(47, 80, True, 600, 300),
            {
                **base,
                "block_size": 32,
                "num_blocks": 150,
                "groups": [{"kind": "sliding", "block_size": 32, "window": 100}],
            },
        ),
        (
            # Mistral 7B v0.1's window
            "sliding-only w4096 b16, long prompts",
            synthetic(49, 30, False, 6000, 300),
            {
                **base,
                "groups": sliding(16, 4096)[1:],
                "num_blocks": 1200,
                "max_num_batched_tokens": 2048,
            },
        ),
    ]
    if shared is not None:
        trace = shared / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
        if trace.is_file():
            s = {
                **swa,
                "num_blocks": 4000,
                "max_num_batched_tokens": 2048,
                "max_num_seqs": 32,
            }
            out.append(("swa128, Mooncake slice", mooncake(trace, 40, 0.05, s), s))
    return out
