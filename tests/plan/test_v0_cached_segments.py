"""Torch's cached segments in V0's free-memory-drop profile (kvscope.plan.v0_cached_segments).

Pinned to the allocator walk worked by hand for Llama 3.1 405B at TP8 and 131,072 tokens, to
two published MI300X starts of one build (AUGMXNT's llm-tracker.info-vault at b56234c), to the
release that stopped charging the segments, and to invariants of the allocator model.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.v0_cached_segments import (
    CachingAllocator,
    charged_reserved_bytes,
    v0_cached_segments,
)
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import load_cases, offline_hub

CASES = {c.id: c for c in load_cases()}
with offline_hub():
    L405 = load_model("meta-llama/Llama-3.1-405B-Instruct")
    MIXTRAL = load_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
MIB = 1 << 20


def test_the_405b_walk_worked_by_hand() -> None:
    """Per rank: hidden H = 131,072 x 16,384 x 2 = 4 GiB, QKV 0.5625, attention output 0.5,
    gate_up 3.25, activation 1.625. Layer 0 reserves the embedding, the normalised copy, QKV,
    two attention outputs, o_proj, the activation and the down projection (gate_up fits the
    freed normalised copy); layer 1's down projection finds every 4 GiB block busy or split and
    adds a fifth; from layer 2 on everything is reused: 5 H + 0.5625 + 2 x 0.5 + 1.625."""
    seg = v0_cached_segments(L405, Parallelism(tp=8), 131072)
    assert seg is not None
    assert seg.reserved / GIB == pytest.approx(5 * 4 + 0.5625 + 1.0 + 1.625)
    # live at the down projection: the caller's input, residual, MLP input, gate_up, act, out
    assert seg.peak_allocated / GIB == pytest.approx(4 + 4 + 4 + 3.25 + 1.625 + 4)


def _surplus_gib(row_id: str) -> float:
    case = CASES[row_id]
    plan = case.plan()
    return (plan.kv_tokens - float(case.row["kv_tokens"])) * plan.kv_bytes_per_token / GIB


def test_the_405b_start_now_leaves_what_the_same_builds_small_start_leaves() -> None:
    """Both starts ran build 0.6.3.dev114 at TP8 with rocBLAS on the same MI300X host. The
    Llama 2 7B one profiles 4,096 tokens, so it caches almost nothing; what the plan leaves
    out there (RCCL's two communicators, ~5 GiB) is what the 405B start must also leave out
    once its 131,072-token pass's cached segments are charged (before: 2.4 GiB more)."""
    small = _surplus_gib("vllm-mi300x-llama2-7b-tp8-nohipblaslt")
    big = _surplus_gib("vllm-mi300x-llama31-405b-tp8")
    assert 4.5 < small < 5.5
    assert big == pytest.approx(small, abs=0.15)


def test_from_064_the_allocated_peak_is_charged_instead() -> None:
    """vllm PR #9352 (0.6.4): ``allocated_bytes.all.peak`` plus memory outside torch after
    ``empty_cache``; the cached segments drop out of the charge."""

    def act(version: str) -> float:
        eng = EngineConfig(
            engine="vllm", engine_version=version, gpu_memory_utilization=0.9,
            max_model_len=131072, max_num_batched_tokens=131072,
        )  # fmt: skip
        plan = plan_memory(L405, get_gpu("MI300X-192GB"), Parallelism(tp=8), eng)
        return plan.activation_peak_gib

    assert act("0.6.3") - act("0.6.4") == pytest.approx(2.3125, abs=0.01)
    assert charged_reserved_bytes(L405, Parallelism(tp=8), 131072, (0, 8, 0)) == 0.0


def test_moe_layers_are_outside_the_dense_path() -> None:
    assert v0_cached_segments(MIXTRAL, Parallelism(tp=2), 32768) is None
    assert charged_reserved_bytes(MIXTRAL, Parallelism(tp=2), 32768, (0, 6, 3)) == 0.0


@settings(max_examples=60, deadline=None)
@given(
    hidden=st.sampled_from([2048, 4096, 5120, 8192, 16384]),
    inter_ratio=st.floats(min_value=2.0, max_value=4.0),
    tokens=st.sampled_from([2048, 8192, 32768, 131072]),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_the_pattern_settles_by_the_third_layer(
    hidden: int, inter_ratio: float, tokens: int, tp: int
) -> None:
    """The module walks three layers because every later layer repeats the third's requests
    into the same free blocks: eight layers reserve no more than three, and the reserve always
    covers the allocated peak."""
    layer = L405.layers[0]
    ffn = dataclasses.replace(layer.ffn, intermediate_size=int(hidden * inter_ratio) // 256 * 256)
    model = dataclasses.replace(
        L405, hidden_size=hidden, layers=(dataclasses.replace(layer, ffn=ffn),) * 4
    )
    three = v0_cached_segments(model, Parallelism(tp=tp), tokens)
    eight = v0_cached_segments(model, Parallelism(tp=tp), tokens, layers=8)
    assert three is not None and eight is not None
    assert eight.reserved == three.reserved
    assert three.reserved >= three.peak_allocated


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=2, max_value=600)), max_size=40))
def test_the_allocator_never_returns_reserved_memory(ops: list[tuple[bool, int]]) -> None:
    """Random mallocs (MiB) and frees of the oldest live block: the reserve never shrinks,
    always covers what is allocated, and the allocated bytes return to zero when all is freed."""
    pool = CachingAllocator()
    live = []
    last = 0
    for is_free, mib in ops:
        if is_free and live:
            pool.free(live.pop(0))
        else:
            live.append(pool.malloc(mib * MIB))
        assert pool.reserved >= last and pool.reserved >= pool.allocated
        last = pool.reserved
    for block in live:
        pool.free(block)
    assert pool.allocated == 0
