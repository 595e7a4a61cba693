"""Vocabulary tables on every pipeline stage (kvscope.plan.pp_vocab): the published PP4 start
of Qwen3-235B-A22B-FP8 (vLLM 0.27.1) and the invariants of the placement."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.pp_vocab import builds_tables_everywhere, with_every_stage_tables
from kvscope.plan.weights import all_stage_weights
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

from .log_cases import case_by_id, offline_hub

with offline_hub():
    QWEN3_MOE = load_model("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8")
LLAMA = load_model("meta-llama/Llama-3.1-8B")
GPU = get_gpu("RTX-PRO-6000-Blackwell-Server-96GB")
VOCAB = ("embedding", "lm_head", "pp_embedding", "pp_lm_head")


def _vocab_bytes(w) -> float:  # type: ignore[no-untyped-def]
    return sum(w.by_component.get(k, 0.0) for k in VOCAB)


def test_qwen3_moe_pp4_first_stage_logs_its_weights() -> None:
    # The write-up's PP4 table: "Model loading took" 55.70 GiB on Worker_PP0 (23 of 94 layers
    # plus both tables), against 55.19 GiB a GPU at TP4.
    case = case_by_id("rtxpro6000-qwen3-235b-2507-fp8-pp4-0.27")
    plan = case.plan()
    assert plan.weights_gib == pytest.approx(55.70, abs=0.02)
    # its "Available KV cache" is 26.84 GiB. The graph estimate spread over this start's
    # 17-graph capture list (max_num_seqs 32) leaves stage 0 about 0.8 GiB of non-KV memory
    # short, memory stage 0 spends beyond the middle stages that no engine rule here sizes
    # (the 101-graph fit used to cover it); the binding stage's tokens stay within 0.4 %.
    assert 26.84 < plan.kv_cache_gib < 26.84 * 1.035
    assert [r.layers for r in plan.ranks] == [23, 24, 24, 23]
    # the 24-layer stages bind: one more layer, same tables
    assert min(plan.ranks, key=lambda r: r.num_gpu_blocks).layers == 24


@pytest.mark.parametrize("pp", [2, 3, 4])
def test_every_stage_holds_both_untied_tables(pp: int) -> None:
    stages = with_every_stage_tables(all_stage_weights(QWEN3_MOE, Parallelism(pp=pp)), QWEN3_MOE)
    one = all_stage_weights(QWEN3_MOE, Parallelism())[0]
    assert not QWEN3_MOE.tie_word_embeddings
    for w in stages:
        assert _vocab_bytes(w) == pytest.approx(_vocab_bytes(one))


def test_tied_tables_are_one_per_stage() -> None:
    tied = replace(QWEN3_MOE, tie_word_embeddings=True)
    stages = with_every_stage_tables(all_stage_weights(tied, Parallelism(pp=3)), tied)
    table = stages[0].by_component["embedding"]
    for w in stages:
        assert _vocab_bytes(w) == pytest.approx(table)


def test_classes_that_skip_the_tables_keep_one_copy() -> None:
    # LlamaModel swaps the tables for PPMissingLayer off their stage: one embedding and one
    # head over the whole pipeline, as on one GPU.
    assert not builds_tables_everywhere(LLAMA)
    stages = all_stage_weights(LLAMA, Parallelism(pp=4))
    assert with_every_stage_tables(stages, LLAMA) == stages
    one = all_stage_weights(LLAMA, Parallelism())[0]
    assert sum(_vocab_bytes(w) for w in stages) == pytest.approx(_vocab_bytes(one))


def test_only_vllm_places_the_tables_everywhere() -> None:
    # stage 1 holds one layer more than stage 0; under vLLM the same tables too, while the
    # SGLang plan is left to its own placement (this module is vLLM's)
    par = Parallelism(pp=4)
    raw = all_stage_weights(QWEN3_MOE, par)
    embed = raw[0].by_component["embedding"] / GIB
    layer = (raw[1].total_bytes - raw[0].total_bytes) / GIB + embed
    vllm = plan_memory(QWEN3_MOE, GPU, par, EngineConfig(engine="vllm", engine_version="0.27.1"))
    sgl = plan_memory(QWEN3_MOE, GPU, par, EngineConfig(engine="sglang", engine_version="0.5.5"))
    assert vllm.ranks[1].weights_gib - vllm.ranks[0].weights_gib == pytest.approx(layer, 1e-6)
    assert sgl.ranks[1].weights_gib - sgl.ranks[0].weights_gib == pytest.approx(layer - embed, 1e-6)
