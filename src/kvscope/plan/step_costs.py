"""What one forward step costs a model, before any GPU is named: bytes read and FLOPs.

Owns the per-model constants the roofline (:mod:`kvscope.plan.roofline`) and the search
(:mod:`kvscope.plan.search`) share, so both evaluate the same formulas. Everything here is
per *replica* and independent of the GPU; splitting over TP/PP/EP happens in
:func:`per_gpu_weight_bytes` / :func:`per_gpu_flops`, written in plain arithmetic (plus
:func:`where` / :func:`maximum`) so they accept
scalars and arrays alike (the search evaluates thousands of configurations in one call).

Units: bytes, FLOPs (multiply-add = 2 FLOPs), tokens.

Modelling choices, with their reasons:

- **Weights read per step** are the *activated* weights. The input embedding is a row gather
  (one ``hidden`` row per token), not a stream of the table; the output head (``lm_head``, or
  the tied embedding table used as the head) is read in full every step.
- **MoE at batch T tokens** reads only the experts the batch routes to. With uniform,
  independent top-k routing over E experts an expert is missed by one token with probability
  (1 - k/E), so the expected number of distinct experts touched per layer is
  ``E * (1 - (1 - k/E)**T)`` (a balls-into-bins expectation). Real routers are skewed, which
  touches fewer experts; uniform is the upper bound a planner should quote.
- **KV read per decode step** is what attention reads, not what is stored: sliding windows
  read the window; DeepSeek-V3.2 sparse attention reads every indexer key but only the top
  ``index_topk`` = 2048 latents (DeepSeek-V3.2 config.json); DeepSeek V4 CSA reads top 512
  compressed entries (V4 config ``index_topk``), HCA every 1-in-128 entry, plus the window.
- **Attention FLOPs per key**: GQA/MHA ``2 * heads * (d_qk + d_v)`` (QK^T and PV). MLA decode
  runs in the absorbed form (FlashMLA; DeepSeek-V2 paper §2.1.2 on absorbing W_UK, W_UV), so a
  key costs ``2 * heads * (kv_lora + rope) + 2 * heads * kv_lora``; MLA prefill runs
  un-absorbed, ``2 * heads * (nope + rope + v)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from kvscope.specs.attention import AttentionLayer
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.kv_state import KVCache
from kvscope.specs.model import ModelSpec

#: DeepSeek-V3.2 sparse attention: latents attended per query (config.json ``index_topk``).
DSV32_INDEX_TOPK = 2048
#: DeepSeek V4 CSA: compressed entries attended per query (V4-Flash config ``index_topk``).
DSV4_CSA_TOPK = 512


@dataclass(frozen=True)
class StepCosts:
    """Per-model constants of a forward step (one replica, all layers).

    Attributes:
        body_bytes: attention, dense-FFN and shared-expert weights (split by TP).
        head_bytes: output head read every step (vocab-parallel, split by TP; last PP stage).
        replicated_bytes: norms, routers and mixers every TP rank keeps whole.
        row_bytes: one embedding row, gathered per token.
        expert_bytes: one routed expert of one layer.
        moe_layers / num_experts / experts_per_token: routed-expert shape (0 when dense).
        body_flops_per_token: 2 x activated parameters outside embedding and head.
        head_flops_per_token: 2 x vocab x hidden.
        act_bytes: bytes per activation element (the model dtype).
        fp8_compute: weights are fp8 and engines run fp8 GEMMs (W8A8) on GPUs that have them.
        hidden_size / num_layers: shape, for communication volumes.
    """

    body_bytes: float
    head_bytes: float
    replicated_bytes: float
    row_bytes: float
    expert_bytes: float
    moe_layers: int
    num_experts: int
    experts_per_token: int
    body_flops_per_token: float
    head_flops_per_token: float
    act_bytes: float
    fp8_compute: bool
    hidden_size: int
    num_layers: int

    @property
    def is_moe(self) -> bool:
        return self.moe_layers > 0


def step_costs(model: ModelSpec) -> StepCosts:
    """Reduce a :class:`ModelSpec` to the constants a step-cost evaluation needs."""
    return _step_costs_cached(model)


@cache
def _step_costs_cached(model: ModelSpec) -> StepCosts:
    wb, p = model.weight_bytes, model.params
    moe = model.moe_layer
    moe_layers = sum(1 for layer in model.layers if layer.ffn.is_moe)
    experts = moe.num_experts if moe else 0
    expert_bytes = wb["routed_experts"] / (experts * moe_layers) if moe and moe_layers else 0.0
    head_bytes = wb["embedding"] if model.tie_word_embeddings else wb["lm_head"]
    head_params = model.vocab_size * model.hidden_size
    body_params = model.active_params - p["embedding"] - p["lm_head"]
    act = element_bytes(model.dtype)
    return StepCosts(
        body_bytes=wb["attention"] + wb["dense_ffn"] + wb["shared_experts"],
        head_bytes=head_bytes,
        replicated_bytes=wb["router"] + wb["norms_other"],
        row_bytes=model.hidden_size * act,
        expert_bytes=expert_bytes,
        moe_layers=moe_layers,
        num_experts=experts,
        experts_per_token=moe.experts_per_token if moe else 0,
        body_flops_per_token=2.0 * body_params,
        head_flops_per_token=2.0 * head_params,
        act_bytes=act,
        fp8_compute=model.quantization.method == "fp8",
        hidden_size=model.hidden_size,
        num_layers=model.num_layers,
    )


def where(cond: Any, a: Any, b: Any) -> Any:
    """``a`` where ``cond`` holds, else ``b``: plain Python for scalars, numpy for arrays.

    Scalar callers (``kvscope plan``) then never import numpy, which costs a fifth of a
    second of start-up; the search passes arrays and gets element-wise selection.
    """
    if isinstance(cond, bool):
        return a if cond else b
    import numpy as np

    return np.where(cond, a, b)


def maximum(a: Any, b: float) -> Any:
    """Element-wise ``max(a, b)`` for a scalar or an array ``a``."""
    if isinstance(a, int | float):
        return max(a, b)
    import numpy as np

    return np.maximum(a, b)


def distinct_experts(num_experts: int, top_k: int, tokens: Any) -> Any:
    """Expected distinct experts one MoE layer touches for ``tokens`` routed tokens.

    ``E * (1 - (1 - k/E)**T)`` under uniform independent routing; array-friendly.
    """
    if num_experts <= 0:
        return tokens * 0.0
    miss = 1.0 - top_k / num_experts
    return num_experts * (1.0 - miss**tokens)


def per_gpu_weight_bytes(
    c: StepCosts, tp: Any, pp: Any, ep_size: Any, tokens: Any, group_tokens: Any
) -> Any:
    """Weight bytes the busiest GPU reads in one step.

    ``tokens``: tokens this replica's stage processes; ``group_tokens``: tokens routed through
    one EP group (``tokens x dp`` when experts span data-parallel ranks, else ``tokens``).
    ``ep_size`` 1 means experts are sharded by TP. PP stages split layers evenly; the last
    stage also holds the head, so it is the one timed.
    """
    ep = ep_size
    body = c.body_bytes / (tp * pp) + c.replicated_bytes / pp + c.head_bytes / tp
    rows = tokens * c.row_bytes
    if not c.is_moe:
        return body + rows
    # EP: each GPU holds E/ep whole experts, each touched with the group-wide probability.
    # TP-sharded experts: each GPU holds 1/tp of every expert the replica's tokens touch.
    frac_ep = distinct_experts(c.num_experts, c.experts_per_token, group_tokens) / c.num_experts
    frac_tp = distinct_experts(c.num_experts, c.experts_per_token, tokens) / c.num_experts
    per_layer = where(ep > 1, frac_ep / maximum(ep, 1.0), frac_tp / tp)
    experts = per_layer * c.num_experts * c.expert_bytes * c.moe_layers / pp
    return body + rows + experts


def per_gpu_flops(c: StepCosts, tp: Any, pp: Any, tokens: Any, attn_flops: Any) -> Any:
    """FLOPs of the busiest GPU in one step: linear layers, head, attention (heads split by TP).

    ``attn_flops`` is the attention FLOPs of the whole step on one replica (all layers). Under
    EP the expert FLOPs land on tp x dp GPUs but so do dp x the tokens, so the share is 1/tp.
    """
    t = tokens
    return (t * c.body_flops_per_token + attn_flops) / (tp * pp) + t * c.head_flops_per_token / tp


# ---------------------------------------------------------------------- attention (per seq)
def _read_entries(cache_: KVCache, attn: AttentionLayer, context: int) -> float:
    """Bytes attention reads from one cache for one query at ``context`` tokens."""
    if attn.kind == "mla_sparse" and cache_.name == "latent":
        return min(context, DSV32_INDEX_TOPK) * cache_.entry_bytes
    if cache_.name == "csa":
        return min(context // cache_.tokens_per_entry, DSV4_CSA_TOPK) * cache_.entry_bytes
    return cache_.bytes_for(context)


def kv_read_bytes(model: ModelSpec, context: int, kv_dtype: str, tp: int = 1) -> float:
    """KV bytes one decoding sequence reads per step on one TP rank, all layers."""
    return _kv_read_cached(model, int(context), kv_dtype, int(tp))


@cache
def _kv_read_cached(model: ModelSpec, context: int, kv_dtype: str, tp: int) -> float:
    total = 0.0
    for layer in model.layers:
        attn = layer.attention
        for cache_ in attn.kv_caches(kv_dtype, tp):
            total += _read_entries(cache_, attn, context)
    return total


def _keys_and_cost(attn: AttentionLayer, context: int, prefill: bool) -> float:
    """Attention FLOPs of one query over its keys at ``context`` tokens, one layer."""
    nh = attn.num_heads
    if attn.kind in ("full", "sliding"):
        span = min(context, attn.window) if attn.kind == "sliding" and attn.window else context
        return span * 2.0 * nh * (attn.head_dim + attn.v_head_dim)
    if attn.kind in ("mla", "mla_sparse"):
        if prefill:
            per_key = 2.0 * nh * (attn.qk_nope_head_dim + attn.qk_rope_head_dim + attn.v_head_dim)
        else:
            per_key = 2.0 * nh * (2 * attn.kv_lora_rank + attn.qk_rope_head_dim)
        if attn.kind == "mla":
            return context * per_key
        indexer = context * 2.0 * attn.index_n_heads * attn.index_head_dim
        return min(context, DSV32_INDEX_TOPK) * per_key + indexer
    # DeepSeek V4: one shared K=V head of head_dim, attended by every query head.
    per_key = 2.0 * nh * 2 * attn.head_dim
    keys = float(min(context, attn.window or 128))
    extra = 0.0
    if attn.kind == "dsv4_csa":
        compressed = context // max(attn.compress_ratio, 1)
        keys += min(compressed, DSV4_CSA_TOPK)
        extra = compressed * 2.0 * attn.index_n_heads * attn.index_head_dim
    elif attn.kind == "dsv4_hca":
        keys += context // max(attn.compress_ratio, 1)
    return keys * per_key + extra


def attention_flops(model: ModelSpec, context: int, new_tokens: int = 1) -> float:
    """Attention FLOPs, all layers, for ``new_tokens`` queries ending at ``context`` tokens.

    Decode (``new_tokens`` 1) uses each attention kind's decode form. A prefill chunk of
    ``new_tokens`` is approximated by its middle query: causal attention gives the i-th query
    ``context - new_tokens + i`` keys, whose mean is ``context - new_tokens/2``.
    """
    return _attn_flops_cached(model, int(context), int(new_tokens))


@cache
def _attn_flops_cached(model: ModelSpec, context: int, new_tokens: int) -> float:
    prefill = new_tokens > 1
    mid = max(1, context - new_tokens // 2) if prefill else context
    return new_tokens * sum(_keys_and_cost(layer.attention, mid, prefill) for layer in model.layers)
