"""Pruning a tune space by the planner, before anything is simulated (vectorised).

Two passes over every point. Rules the engines enforce at start-up, one Python test each: TP
divides the attention heads and suits the KV heads (vLLM
``ModelConfig.verify_with_parallel_config``), a fixed ``--decode-context-parallel-size``
divides TP (the planner's rule, :func:`kvscope.plan.memory.plan_memory`), PP at most the
layer count, expert parallelism only for MoE models, DP attention only for SGLang,
speculative decoding only for vLLM on one stage and replica (what the simulator models),
``--max-num-batched-tokens`` at least ``--max-num-seqs`` and, without chunked prefill, at
least ``--max-model-len`` (vLLM ``SchedulerConfig._verify_args``). Then memory, one numpy
expression over all points: the weights a GPU holds
(:func:`kvscope.plan.search.stored_weight_bytes`) plus one request of the context length
(``--max-model-len``, else the model's) plus the planner's reserve must fit ``memory x
gpu_memory_utilization`` (:func:`kvscope.plan.search.memory_fits`). The quick reserve is a
little under what engines take, so a survivor can still fail the engine's exact budget; that
check runs with the simulation (:func:`kvscope.sim.deployment.replica_pools`) and such a
point is recorded as not starting.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvscope.plan.search import memory_fits, stored_weight_bytes
from kvscope.specs.dtypes import resolve_kv_dtype
from kvscope.specs.hardware import get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.tune.space import Point

#: vLLM's default share of GPU memory for the quick check (the release kvscope models).
DEFAULT_UTILIZATION = 0.92
#: SGLang's static fraction is decided per GPU; the quick check uses this one.
SGLANG_UTILIZATION = 0.88


@dataclass(frozen=True)
class Pruned:
    """The points worth simulating and, for the others, why not; ``seconds`` of work."""

    kept: tuple[Point, ...]
    dropped: tuple[tuple[Point, str], ...]
    seconds: float


def _rule(p: Point, model: ModelSpec, engine: str, ctx: int, dcp: int = 1) -> str | None:
    attn = model.first_attention
    heads, kv_heads = attn.num_heads, attn.num_kv_heads
    if heads % p.tp or not (attn.is_mla_family or kv_heads % p.tp == 0 or p.tp % kv_heads == 0):
        return f"TP {p.tp} does not divide {heads} attention / {kv_heads} KV heads"
    if p.tp % dcp:
        return f"--decode-context-parallel-size {dcp} does not divide TP {p.tp}"
    if p.pp > model.num_layers:
        return f"PP {p.pp} exceeds {model.num_layers} layers"
    if p.enable_expert_parallel and not (model.is_moe and p.tp * p.dp > 1):
        return "expert parallelism needs a MoE model on more than one GPU"
    if p.enable_dp_attention and (engine != "sglang" or p.dp < 2):
        return "DP attention is SGLang's, with --dp 2 or more"
    if p.speculative_config and (engine != "vllm" or p.pp > 1 or p.dp > 1):
        return "speculative decoding is simulated for vLLM with one stage and replica"
    budget = p.max_num_batched_tokens
    if budget is not None:
        if p.max_num_seqs is not None and budget < p.max_num_seqs:
            return "--max-num-batched-tokens is below --max-num-seqs"
        if not p.enable_chunked_prefill and budget < ctx:
            return f"without chunked prefill --max-num-batched-tokens must reach {ctx:,}"
    return None


def prune(
    points: Sequence[Point], model: ModelSpec, engine: str, context: int, dcp: int = 1
) -> Pruned:
    """Keep the points that start and hold one request of ``context`` tokens (under
    ``--decode-context-parallel-size`` ``dcp``, those whose TP it divides)."""
    start = time.perf_counter()
    reasons: list[str | None] = [_rule(p, model, engine, context, dcp) for p in points]
    n = len(points)
    gpus = sorted({p.gpu for p in points})
    specs = {g: get_gpu(g) for g in gpus}
    kvs = sorted({resolve_kv_dtype(p.kv_cache_dtype, model.dtype) for p in points})
    gi = np.fromiter((gpus.index(p.gpu) for p in points), dtype=np.int64, count=n)
    ki = np.fromiter(
        (kvs.index(resolve_kv_dtype(p.kv_cache_dtype, model.dtype)) for p in points),
        dtype=np.int64,
        count=n,
    )
    tp = np.fromiter((p.tp for p in points), dtype=float, count=n)
    pp = np.fromiter((p.pp for p in points), dtype=float, count=n)
    dp = np.fromiter((p.dp for p in points), dtype=float, count=n)
    ep = np.fromiter((p.enable_expert_parallel for p in points), dtype=bool, count=n)
    default_util = SGLANG_UTILIZATION if engine == "sglang" else DEFAULT_UTILIZATION
    util = np.fromiter(
        (p.gpu_memory_utilization or default_util for p in points), dtype=float, count=n
    )
    mem = np.array([specs[g].memory_bytes for g in gpus], dtype=float)[gi]
    tps = sorted({p.tp for p in points})
    kv_one = np.zeros((len(kvs), max(tps) + 1))
    for i, k in enumerate(kvs):
        for t in tps:
            kv_one[i, t] = model.kv_bytes_for_request(context, k, t)
    weights = stored_weight_bytes(model, tp, pp, np.where(ep, tp * dp, 1.0))
    budget = mem * util  # per point: its --gpu-memory-utilization
    no_weights = ~memory_fits(weights, np.zeros(n), tp, budget, 1.0)
    ok = memory_fits(weights, kv_one[ki, tp.astype(np.int64)] / pp, tp, budget, 1.0)
    kept: list[Point] = []
    dropped: list[tuple[Point, str]] = []
    for j, p in enumerate(points):
        why = reasons[j]
        if why is None and no_weights[j]:
            why = f"weights ({weights[j] / 2**30:.1f} GiB per GPU) do not fit {p.gpu}"
        elif why is None and not ok[j]:
            why = f"one request of {context:,} tokens does not fit beside the weights"
        if why is None:
            kept.append(p)
        else:
            dropped.append((p, why))
    return Pruned(tuple(kept), tuple(dropped), time.perf_counter() - start)
