"""The simulator holds a request's window blocks in every sliding group vLLM builds.

vLLM splits each KV spec's layers into groups of ``layers_per_group`` layers
(``_get_kv_cache_groups_uniform_page_size``, vllm/v1/core/kv_cache_utils.py; the planner's
:func:`kvscope.plan.kv_layout.layers_per_group`), and each group keeps its own block table: a
Gemma 3 27B request (52 sliding layers, 10 full) holds its window in six sliding groups beside
the full-history group. The simulator's groups are the planner's, so the pool it admits
against is the one ``kvscope plan`` sizes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.sim.helpers import outcome, run, workload

from kvscope.plan.kv_layout import layers_per_group, vllm_layout
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import KVLayout, WindowGroup, layout_for
from kvscope.sim.scheduler import Scheduler, SchedulerConfig
from kvscope.sim.sequence import Sequence
from kvscope.specs.config_parse import parse_config

ROOT = Path(__file__).parents[1]
CONFIGS = {
    "gemma-3-27b-it": ROOT / "specs" / "data" / "configs" / "google--gemma-3-27b-it.json",
    "gemma-3-12b-it": ROOT / "plan" / "data" / "configs" / "gemma-3-12b-it.json",
    "gemma-3-4b-it": ROOT / "plan" / "data" / "configs" / "gemma-3-4b-it.json",
    "gemma-2-9b": ROOT / "plan" / "data" / "configs" / "gemma-2-9b.json",
    "gemma-4-31b-it": ROOT / "plan" / "data" / "configs" / "gemma-4-31b-it.json",
}


def _model(name: str):  # type: ignore[no-untyped-def]
    return parse_config(json.loads(CONFIGS[name].read_text()), name)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_simulator_keeps_the_planners_groups(name: str) -> None:
    model = _model(name)
    planned = vllm_layout(model, tuple(range(model.num_layers)), "bfloat16", 1, 16)
    sim = layout_for(model, 16, tp=1)
    sliding = [g for g in planned.groups if g.kind == "sliding"]
    assert len(sim.windows) == len(sliding)
    assert len(sim.windows) + 1 == len(planned.groups)


def test_gemma3_27b_has_six_sliding_groups() -> None:
    assert len(layout_for(_model("gemma-3-27b-it"), 16, tp=1).windows) == 6
    # llama.cpp keeps one SWA cache per window, whatever the layer count
    assert len(layout_for(_model("gemma-3-27b-it"), 16).windows) == 1


def test_a_prefill_holds_its_window_in_every_group() -> None:
    layout = layout_for(_model("gemma-3-27b-it"), 16, tp=1)
    s = Scheduler(SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8),
                  PagedPool(2000, layout, enable_caching=True))  # fmt: skip
    q = Sequence(0, "a", 0.0, 183, 20)
    s.add(q)
    s.update(s.schedule(0.0), 0.0)
    # cdiv(183, 16) = 12 blocks of history, and 12 in each of the six window groups
    assert s.pool.used == 12 + 6 * 12


@pytest.mark.parametrize(
    ("counts", "size"), [((52, 10), 10), ((12, 12), 12), ((13, 10), 13), ((15, 10), 10)]
)
def test_layers_per_group_takes_the_largest_only_under_one_and_a_half(
    counts: tuple[int, int], size: int
) -> None:
    assert layers_per_group(counts) == size


def _phi3_mini_4k():  # type: ignore[no-untyped-def]
    path = ROOT / "specs" / "data" / "configs" / "microsoft--Phi-3-mini-4k-instruct.json"
    return parse_config(json.loads(path.read_text()), "phi-3-mini-4k")


def test_a_model_whose_layers_all_slide_holds_one_group_not_two() -> None:
    # Phi-3-mini-4k: every layer has the 2,047-token window, so vLLM builds one sliding group
    # and no full-history one; a 183-token prefill holds cdiv(183, 16) = 12 blocks in all
    layout = layout_for(_phi3_mini_4k(), 16, tp=1)
    assert not layout.full_history
    assert [(w.block_tokens, w.window_tokens) for w in layout.windows] == [(16, 2047)]
    s = Scheduler(SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8),
                  PagedPool(2000, layout, enable_caching=True))  # fmt: skip
    q = Sequence(0, "a", 0.0, 183, 20)
    s.add(q)
    s.update(s.schedule(0.0), 0.0)
    assert s.pool.used == 12


def _decode_past_the_window(layout, caching: bool, model: str = "exact") -> list[int]:  # type: ignore[no-untyped-def]
    """Blocks held after each step of one 3,000-token prompt decoding 300 tokens."""
    cfg = SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=8, max_model_len=4096)
    s = Scheduler(cfg, PagedPool(2000, layout, enable_caching=caching, window_model=model))
    s.add(Sequence(0, "a", 0.0, 3000, 300))
    used = []
    t = 0.0
    while not s.idle:
        s.update(s.schedule(t), t)
        s.pool.check()  # type: ignore[attr-defined]
        used.append(s.pool.used)
        t += 1.0
    return used


@pytest.mark.parametrize("model", ["exact", "bound"])
@pytest.mark.parametrize("caching", [True, False])
def test_past_its_window_a_sliding_only_request_holds_its_window_only(
    caching: bool, model: str
) -> None:
    # vLLM 0.33.0 (SlidingWindowManager.remove_skipped_blocks at the next allocation): the
    # prefill chunks allocate 128 then 188 blocks; the first decode step frees the 59 blocks
    # wholly before token 3000 - 2047 + 1 = 954, leaving 129 = cdiv(2046, 16) + 1, the most a
    # request of this window ever holds (the differential scenarios "sliding-only ..." pin
    # the same arithmetic step by step against vLLM itself). Without a full-history group
    # there is no bound model: --window-model bound runs the exact manager too
    used = _decode_past_the_window(layout_for(_phi3_mini_4k(), 16, tp=1), caching, model)
    assert used[:3] == [128, 188, 129]
    assert max(used[2:]) == 129 and min(used[2:-1]) == 128
    # the lead's first cut (full history) kept every block: 207 by the last step
    full = _decode_past_the_window(layout_for(_phi3_mini_4k(), 16), caching)
    assert full[:3] == [128, 188, 188] and full[-2] == 207


def test_llama_cpp_keeps_the_full_history_view_of_an_all_sliding_model() -> None:
    layout = layout_for(_phi3_mini_4k(), 16)
    assert layout.full_history and layout.windows == ()


@settings(max_examples=15, deadline=None)
@given(
    st.integers(0, 10_000),
    st.integers(1, 40),
    st.integers(12, 200),
    st.booleans(),
    st.sampled_from([32, 64]),
)
def test_a_sliding_only_engine_agrees_span_and_step(
    seed: int, n: int, blocks: int, shared: bool, window: int
) -> None:
    # the engine's spans (steady window churn counted by phase) change nothing a
    # step-at-a-time run sees; every block returns to the pool at the end
    rng = np.random.default_rng(seed)
    prompts = rng.integers(1, 300, n)
    hashes = None
    if shared:
        hashes = [list(rng.integers(0, 3, size=int(p) // 16).cumsum() * 31 + 7) for p in prompts]
    w = workload(np.cumsum(rng.exponential(0.02, n)), prompts, rng.integers(1, 200, n), hashes)
    lay = KVLayout(16, (WindowGroup("sliding", 16, window),), "sliding-only", full_history=False)
    kw = {"num_blocks": blocks, "layout": lay, "max_num_seqs": 8, "max_num_batched_tokens": 128}
    seqs, eng = run(w, mode="span", **kw)  # type: ignore[arg-type]
    ref, eng_ref = run(w, mode="step", **kw)  # type: ignore[arg-type]
    assert outcome(seqs) == outcome(ref)
    assert eng.stats.peak_used == eng_ref.stats.peak_used <= eng.pool.capacity
    assert all(s.status in ("finished", "rejected") for s in seqs)
    assert eng.pool.num_free == eng.pool.capacity
    eng.pool.check()
