"""SGLang's hybrid-SWA pools for Llama 4 by release and GPU (kvscope.plan.sglang_swa).

Expected figures are worked by hand from the public Scout config and SGLang's pool formula
(``HybridSWAPoolConfigurator``; ``get_hybrid_layer_ids``: layer i is SWA when (i + 1) % 4 != 0).
Llama 4 has 48 layers of 8 KV heads x 128 dims: at TP4 one layer costs 2 heads x (128 + 128)
x 2 B = 1,024 B a token in bf16, at TP8 512 B. With two pools (0.5.8.post1+) the cell is
12 full x F + 0.8 x 36 SWA x S; with one pool every layer counts. Maverick's text config
shares Scout's attention (48 layers, 8 KV heads of 128, ``attention_chunk_size`` 8192), so
it is built from Scout's with Maverick's MoE keys (128 experts on every other layer).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.sglang_swa import swa_cell, swa_floor_problem, two_pools
from kvscope.plan.speculative import SpeculativeDecoding
from kvscope.specs.config_parse import parse_config
from kvscope.specs.hardware import get_gpu
from kvscope.specs.model import ModelSpec

from .vl_configs import llama4_scout, scout_raw


def _maverick() -> ModelSpec:
    raw = scout_raw()
    raw["text_config"].update(
        num_local_experts=128, interleave_moe_layer_step=2, intermediate_size_mlp=16384
    )
    return parse_config(raw, "meta-llama/Llama-4-Maverick-17B-128E-Instruct")


def _text_only() -> ModelSpec:
    # Llama4ForCausalLM: the text config alone (model_type llama4_text, no vision tower)
    text = dict(scout_raw()["text_config"], architectures=["Llama4ForCausalLM"])
    return parse_config(text, "llama4-text")


def _plan(m: ModelSpec, version: str, gpu: str = "H100", tp: int = 8, **eng: Any) -> Any:
    e = EngineConfig(engine="sglang", engine_version=version, **eng)
    return plan_memory(m, get_gpu(gpu), Parallelism(tp=tp), e)


@pytest.mark.parametrize("model", [llama4_scout, _maverick])
@pytest.mark.parametrize(
    ("tp", "two_pool", "one_pool"),
    [
        (4, 12_288 + 29_491.2, 49_152),  # 12 x 1024 + 0.8 x 36 x 1024; 48 x 1024
        (8, 6_144 + 14_745.6, 24_576),  # 512 B a layer
    ],
)
def test_cell_by_release_and_gpu(model: Any, tp: int, two_pool: float, one_pool: int) -> None:
    # 0.5.6: hybrid only with --hybrid-kvcache-ratio (default None); 0.5.8.post1-0.5.23: two
    # pools on every GPU (no ServerArgs branch or override turns them off for Llama 4)
    table = [
        ("0.5.6", "H100", one_pool),
        ("0.5.6", "B200", one_pool),
        ("0.5.8.post1", "H100", two_pool),
        ("0.5.9", "B200", two_pool),
        ("0.5.10", "B200", two_pool),
        ("0.5.14", "H100", two_pool),
        ("0.5.14", "B200", two_pool),
        ("0.5.23", "H100", two_pool),
    ]
    m = model()
    got = [(v, g, round(_plan(m, v, g, tp).kv_bytes_per_token, 1)) for v, g, _ in table]
    assert got == [(v, g, round(c, 1)) for v, g, c in table]


def test_every_fourth_layer_is_full() -> None:
    m = llama4_scout()
    assert {x.attention.kind for x in m.layers} == {"full"}  # vLLM's view is unchanged
    cell = swa_cell(m, tuple(range(48)), "bfloat16", 8, (0, 5, 14))
    assert (cell.full_layers, cell.swa_layers) == (12, 36)
    # 3 GB of KV room at TP8: floor(3e9 / 20,889.6) = 143,612 full tokens, int(0.8 x) = 114,889 SWA
    assert cell.split(3e9, 1) == (143_612, 114_889)
    assert cell.split(3e9, 64) == (143_552, 114_816)  # 2,243 pages; int(0.8 x) = 114,841 -> 1,794


def test_two_pools_hold_48_over_40_8_as_many_tokens() -> None:
    # H100 TP8: 0.5.6 (one pool) vs 0.5.8.post1 (two pools), up to other budget terms
    m = llama4_scout()
    one, two = _plan(m, "0.5.6"), _plan(m, "0.5.8.post1")
    assert two.kv_tokens / one.kv_tokens == pytest.approx(48 / 40.8, rel=0.005)


def test_text_only_class_keeps_one_pool() -> None:
    # is_hybrid_swa_model lists Llama4ForConditionalGeneration only
    m = _text_only()
    assert m.vision_params == 0
    for v in ("0.5.9", "0.5.14", "0.5.23"):
        assert _plan(m, v).kv_bytes_per_token == 24_576


def test_speculative_and_pp_keep_planning_on_one_pool() -> None:
    m, h100 = llama4_scout(), get_gpu("H100").compute_capability
    spec = SpeculativeDecoding(method="ngram", num_speculative_tokens=3, verify_tokens=4)
    assert _plan(m, "0.5.14", speculative=spec).kv_bytes_per_token == 24_576
    e = EngineConfig(engine="sglang", engine_version="0.5.14")
    assert not two_pools(m, e, Parallelism(tp=4, pp=2), h100)
    assert two_pools(m, e, Parallelism(tp=4), h100)


def test_vllm_plan_keeps_every_layer_full() -> None:
    e = EngineConfig(engine="vllm")
    p = plan_memory(llama4_scout(), get_gpu("H100"), Parallelism(tp=8), e)
    assert p.kv_bytes_per_token == 24_576


def test_b200_pages_are_64_tokens_from_056() -> None:
    # trtllm_mha, the Llama 4 default on SM100 from 0.5.6 (0.5.3 allows fa3/aiter/triton)
    m = llama4_scout()
    for v in ("0.5.6", "0.5.9", "0.5.14", "0.5.23"):
        p = _plan(m, v, "B200")
        assert p.block_size == 64 and p.kv_tokens % 64 == 0 and p.kv_tokens > 0
    assert _plan(m, "0.5.3", "B200").block_size == 1
    assert _plan(m, "0.5.14").block_size == 1


def test_0523_swa_floor_reads_the_attention_chunk() -> None:
    # validate_swa_pool_size with sliding_window_size = attention_chunk_size (8192): the SWA
    # pool must exceed 8192 + page 1; 10,242 full tokens -> int(0.8 x) = 8,193 is refused,
    # 10,243 -> 8,194 is not
    m, h100 = llama4_scout(), get_gpu("H100").compute_capability

    def floor(tokens: int, version: str, model: ModelSpec = m) -> str | None:
        e = EngineConfig(engine="sglang", engine_version=version)
        return swa_floor_problem(model, tokens, 1, e, Parallelism(), h100)

    assert "SWA pool (8,193 tokens)" in (floor(10_242, "0.5.23") or "")
    assert "(8192 + 1)" in (floor(10_242, "0.5.23") or "")
    assert floor(10_243, "0.5.23") is None
    assert floor(10_242, "0.5.14") is None  # no such check before 0.5.23
    assert floor(10_242, "0.5.23", _text_only()) is None  # one pool
