"""The weights each pipeline stage's GPU holds once the engine has loaded the model, bytes.

The checkpoint's tensors per stage (:func:`kvscope.plan.weights.all_stage_weights`) plus what
each engine builds beside them at load and its "Model loading took" / "mem usage" figure
counts: MLA's absorbed projections (and vLLM 0.7.1-0.7.3's pre-multiplied decode matrices),
float32 rotary caches (gpt-oss under vLLM, DeepSeek V4),
vLLM's three extra M-RoPE rotary folds, vocabulary tables every vLLM stage builds, SGLang's
separate LM head before 0.4.0, ``--enable-lora``'s adapter slots, a vision tower replicated on
every rank, SGLang's whole shared experts, and a drafter's own weights on the last stage.
Each addition is owned, with its engine source, by the module named beside it.
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.config_format import whole_tower_on_every_rank
from kvscope.plan.drafter import Drafter
from kvscope.plan.dsv4_weights import dsv4_rope_cache_bytes, dsv4_wide_param_bytes
from kvscope.plan.mrope_buffers import mrope_extra_cache_bytes
from kvscope.plan.pp_vocab import with_every_stage_tables
from kvscope.plan.sglang_shared_experts import with_whole_shared_experts
from kvscope.plan.sglang_tied_head import with_separate_head
from kvscope.plan.v0_mla_absorption import v0_absorbed_bytes
from kvscope.plan.vllm_lora import lora_slot_bytes
from kvscope.plan.vllm_mxfp4 import float32_rope_bytes
from kvscope.plan.weights import (
    ExpertLayout,
    RankWeights,
    all_stage_weights,
    encoder_replica_bytes,
    mla_absorbed_bytes,
    vllm_remainder_last,
    with_component,
)
from kvscope.specs.model import ModelSpec


def loaded_stage_weights(
    model: ModelSpec,
    par: Parallelism,
    eng: EngineConfig,
    layout: ExpertLayout,
    drafter: Drafter | None,
    draft_layers: int,
) -> tuple[RankWeights, ...]:
    """One :class:`RankWeights` a pipeline stage, as the engine loads it (module text)."""
    stages = tuple(
        with_component(w, "mla_absorbed", mla_absorbed_bytes(model, par, w.layers, eng.engine))
        for w in all_stage_weights(
            model,
            par,
            draft_layers,
            layout,
            drafter.stage_experts if drafter else 0,
            drafter.eh_proj if drafter else True,
            vllm_remainder_last(eng.engine, eng.version),
        )
    )
    stages = tuple(  # vLLM 0.7.1-0.7.3's decode matrices (W_Q_UK, W_UV_O, W_QR)
        with_component(w, "mla_v0_absorbed", v0_absorbed_bytes(model, par, w.layers, eng))
        for w in stages
    )
    if rope := float32_rope_bytes(model, eng.engine):  # gpt-oss under vLLM
        stages = tuple(with_component(w, "rope_cache", rope) for w in stages)
    if eng.engine == "vllm" and (folds := mrope_extra_cache_bytes(model, eng.version)):
        stages = tuple(with_component(w, "mrope_cache_folds", folds) for w in stages)
    if rope := dsv4_rope_cache_bytes(model):
        stages = tuple(with_component(w, "rope_cache", rope) for w in stages)
        stages = tuple(
            with_component(w, "dsv4_wide", dsv4_wide_param_bytes(model, w.layers, i == par.pp - 1))
            for i, w in enumerate(stages)
        )
    if eng.engine == "vllm":  # classes that build both vocabulary tables on every stage
        stages = with_every_stage_tables(stages, model)
    if eng.engine == "sglang":  # a second table beside a tied embedding before 0.4.0
        stages = with_separate_head(stages, model, eng.version)
    if eng.engine == "vllm" and eng.max_lora_rank:  # --enable-lora's adapter slots
        stages = tuple(
            with_component(
                w,
                "lora_slots",
                lora_slot_bytes(model, par, eng, w.layers, i == 0, i == par.pp - 1),
            )
            for i, w in enumerate(stages)
        )
    if eng.engine == "vllm" and (
        eng.mm_encoder_tp_mode == "data" or whole_tower_on_every_rank(model, "vllm", eng.version)
    ):
        first = with_component(stages[0], "encoder_replica", encoder_replica_bytes(model, par))
        stages = (first, *stages[1:])
    if eng.shared_expert_tp1:
        stages = tuple(with_whole_shared_experts(w, par.tp) for w in stages)
    if drafter is not None and drafter.extra_weight_bytes:
        last = with_component(stages[-1], "drafter", drafter.extra_weight_bytes)
        stages = (*stages[:-1], last)
    return stages
