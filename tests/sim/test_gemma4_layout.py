"""The simulator's Gemma 4 layout takes the planner's per-group block sizes (unequal pages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvscope.plan.kv_layout import vllm_layout
from kvscope.sim.layout import layout_for
from kvscope.specs.config_parse import parse_config

CONFIGS = Path(__file__).parents[1] / "plan" / "data" / "configs"


@pytest.mark.parametrize("name", ["gemma-4-31b-it", "gemma-4-26b-a4b", "gemma-4-e2b-it"])
@pytest.mark.parametrize("tp", [1, 2, 8])
def test_block_sizes_follow_the_planner(name: str, tp: int) -> None:
    model = parse_config(json.loads((CONFIGS / f"{name}.json").read_text()), name)
    planned = vllm_layout(model, tuple(range(model.num_layers)), "bfloat16", tp, 16)
    by_kind = {g.kind: g.block_size for g in planned.groups}
    sim = layout_for(model, 16, tp=tp)
    assert sim.block_size == by_kind["full"]
    # one window group per vLLM sliding group: a request holds window blocks in each
    assert [w.block_tokens for w in sim.windows] == [
        g.block_size for g in planned.groups if g.kind == "sliding"
    ]


def test_31b_full_blocks_hold_twice_the_tokens() -> None:
    # 16 sliding KV heads of 256 against 4 global ones of 512: the global page per token is
    # half the sliding one, so vLLM doubles the global group's block (32 tokens)
    model = parse_config(json.loads((CONFIGS / "gemma-4-31b-it.json").read_text()), "31b")
    sim = layout_for(model, 16, tp=1)
    assert (sim.block_size, sim.windows[0].block_tokens) == (32, 16)
    assert sim.full_blocks(32_768) == 1024
    # llama.cpp's slots (no tp): no page unification
    assert layout_for(model, 16).block_size == 16
