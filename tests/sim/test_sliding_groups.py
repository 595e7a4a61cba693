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

import pytest

from kvscope.plan.kv_layout import layers_per_group, vllm_layout
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.layout import layout_for
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


def test_a_model_whose_layers_all_slide_holds_one_group_not_two() -> None:
    # Phi-3-mini-4k: every layer has the 2,047-token window, so vLLM builds one sliding group;
    # a 183-token prefill holds cdiv(183, 16) = 12 blocks in all
    path = ROOT / "specs" / "data" / "configs" / "microsoft--Phi-3-mini-4k-instruct.json"
    model = parse_config(json.loads(path.read_text()), "phi-3-mini-4k")
    layout = layout_for(model, 16, tp=1)
    assert layout.windows == ()
    s = Scheduler(SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8),
                  PagedPool(2000, layout, enable_caching=True))  # fmt: skip
    q = Sequence(0, "a", 0.0, 183, 20)
    s.add(q)
    s.update(s.schedule(0.0), 0.0)
    assert s.pool.used == 12
