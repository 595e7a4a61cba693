"""Roofline step-time bounds for prefill and decode: :func:`roofline`.

Owns the compute-versus-bandwidth bound of one engine step on one replica: time is the larger
of FLOPs / (peak FLOP/s x ``flops`` efficiency) and bytes / (HBM bandwidth x ``hbm``
efficiency), per GPU, for the busiest GPU (the last pipeline stage, which also holds the
head). Bytes and FLOPs come from :mod:`kvscope.plan.step_costs`: weights of the *activated*
parameters (distinct experts touched for MoE) plus the KV the attention reads.

Pipeline parallelism: a replica serving ``batch`` sequences runs ``pp`` micro-batches of
``ceil(batch / pp)`` through ``pp`` stages, so the time per output token (TPOT) is
``pp x stage time`` and throughput is ``batch / TPOT``.

Units: seconds, bytes, FLOPs, tokens per second. Ideal figures (``*_bound_s``) use 100 % of
the datasheet peaks; the others apply :class:`Efficiency`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kvscope.errors import KvscopeError
from kvscope.plan.config import Parallelism
from kvscope.plan.step_costs import (
    StepCosts,
    attention_flops,
    kv_read_bytes,
    per_gpu_flops,
    per_gpu_weight_bytes,
    step_costs,
)
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: Context lengths beyond this are not searched for the KV/weights crossover.
MAX_CONTEXT_SEARCHED = 1 << 24
#: Batch sizes beyond this are not searched for the compute-bound turning point.
MAX_BATCH_SEARCHED = 1 << 20


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of the datasheet peaks (override per deployment).

    Defaults and where they come from:

    - ``hbm`` 0.8: AIConfigurator's empirical memory-bandwidth factor in its system files
      (ai-dynamo/aiconfigurator ``systems/*.yaml``); llm-analysis suggests about 0.9 for
      inference (cli99/llm-analysis README).
    - ``flops`` 0.45: BLIS's calibrated H100 prefill MFU (inference-sim/inference-sim
      ``hardware_config``). llm-analysis advises at most 0.7 (cli99/llm-analysis README).
    """

    hbm: float = 0.8
    flops: float = 0.45

    def __post_init__(self) -> None:
        for name in ("hbm", "flops"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise KvscopeError(f"efficiency '{name}' must be in (0, 1], got {value!r}.")


#: Datasheet peaks, for bounds.
IDEAL = Efficiency(hbm=1.0, flops=1.0)


@dataclass(frozen=True)
class StepBound:
    """One step on the busiest GPU of a replica.

    ``weight_bytes``, ``kv_bytes`` and ``flops`` are per GPU per step (one micro-batch on one
    stage); ``step_s`` is one stage's time, ``token_latency_s`` the time one sequence waits
    between its tokens (``pp`` stages; for prefill the time to process the chunk).
    """

    phase: str
    batch: int
    context: int
    tokens: int
    weight_bytes: float
    kv_bytes: float
    flops: float
    compute_s: float
    memory_s: float
    compute_bound_s: float
    memory_bound_s: float
    step_s: float
    step_bound_s: float
    limit: str
    token_latency_s: float
    tokens_per_s_per_replica: float
    tokens_per_s_per_gpu: float


@dataclass(frozen=True)
class Roofline:
    """Decode and prefill bounds plus the two planning figures.

    ``kv_crossover_context``: context length at which the KV read per step exceeds the weight
    read (None if it never does, e.g. windowed attention). ``compute_bound_batch``: smallest
    batch at which decode turns compute-bound at ``decode.context`` (None if it never does).
    """

    decode: StepBound
    prefill: StepBound
    kv_crossover_context: int | None
    compute_bound_batch: int | None
    efficiency: Efficiency = field(default_factory=Efficiency)
    peak_flops: float = 0.0
    hbm_bandwidth: float = 0.0


def compute_flops_peak(costs: StepCosts, gpu: GPUSpec) -> float:
    """Peak dense FLOP/s the step's GEMMs run at: fp8 for fp8 checkpoints where supported."""
    return gpu.flops("fp8") if costs.fp8_compute else gpu.bf16_flops


def _check(par: Parallelism, batch: int, context: int) -> None:
    if batch < 1:
        raise KvscopeError(f"batch must be at least 1, got {batch}.")
    if context < 1:
        raise KvscopeError(f"context length must be at least 1 token, got {context}.")


def _bound(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    kv_dtype: str,
    phase: str,
    batch: int,
    context: int,
    new_tokens: int,
    eff: Efficiency,
) -> StepBound:
    c = step_costs(model)
    micro = math.ceil(batch / par.pp) if phase == "decode" else batch
    tokens = micro * new_tokens
    ep = par.ep_size
    group = tokens * par.dp if ep > 1 else tokens
    wbytes = float(per_gpu_weight_bytes(c, par.tp, par.pp, ep, tokens, group))
    kv = micro * kv_read_bytes(model, context, kv_dtype, par.tp) / par.pp
    attn = micro * attention_flops(model, context, new_tokens)
    flops = float(per_gpu_flops(c, par.tp, par.pp, tokens, attn))
    peak = compute_flops_peak(c, gpu)
    compute_ideal = flops / peak
    memory_ideal = (wbytes + kv) / gpu.hbm_bandwidth
    compute_s = compute_ideal / eff.flops
    memory_s = memory_ideal / eff.hbm
    step = max(compute_s, memory_s)
    if phase == "decode":
        latency = par.pp * step
        per_replica = batch / latency
    else:
        latency = par.pp * step  # the chunk passes every stage once
        per_replica = tokens / step
    return StepBound(
        phase=phase,
        batch=batch,
        context=context,
        tokens=tokens,
        weight_bytes=wbytes,
        kv_bytes=kv,
        flops=flops,
        compute_s=compute_s,
        memory_s=memory_s,
        compute_bound_s=compute_ideal,
        memory_bound_s=memory_ideal,
        step_s=step,
        step_bound_s=max(compute_ideal, memory_ideal),
        limit="compute" if compute_s >= memory_s else "memory",
        token_latency_s=latency,
        tokens_per_s_per_replica=per_replica,
        tokens_per_s_per_gpu=per_replica / par.gpus_per_replica,
    )


def decode_bound(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism | None = None,
    batch: int = 1,
    context: int = 1,
    kv_dtype: str | None = None,
    eff: Efficiency | None = None,
) -> StepBound:
    """One decode step: ``batch`` sequences of ``context`` tokens each generate one token."""
    par = par or Parallelism()
    _check(par, batch, context)
    return _bound(
        model, gpu, par, kv_dtype or model.dtype, "decode", batch, context, 1, eff or Efficiency()
    )


def prefill_bound(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism | None = None,
    chunk: int = 2048,
    context: int | None = None,
    kv_dtype: str | None = None,
    eff: Efficiency | None = None,
) -> StepBound:
    """One prefill chunk of ``chunk`` tokens ending at ``context`` tokens (default: chunk)."""
    par = par or Parallelism()
    ctx = chunk if context is None else context
    _check(par, chunk, ctx)
    if ctx < chunk:
        raise KvscopeError(f"prefill context ({ctx}) cannot be shorter than its chunk ({chunk}).")
    return _bound(
        model, gpu, par, kv_dtype or model.dtype, "prefill", 1, ctx, chunk, eff or Efficiency()
    )


def kv_crossover_context(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism | None = None,
    batch: int = 1,
    kv_dtype: str | None = None,
) -> int | None:
    """Smallest context at which a decode step reads more KV bytes than weight bytes."""
    par = par or Parallelism()
    kv = kv_dtype or model.dtype

    def kv_wins(ctx: int) -> bool:
        b = decode_bound(model, gpu, par, batch, ctx, kv, IDEAL)
        return b.kv_bytes > b.weight_bytes

    return _first_true(kv_wins, 1, MAX_CONTEXT_SEARCHED)


def compute_bound_batch(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism | None = None,
    context: int = 1,
    kv_dtype: str | None = None,
    eff: Efficiency | None = None,
) -> int | None:
    """Smallest decode batch whose compute time reaches its memory time at ``context``."""
    par = par or Parallelism()
    kv = kv_dtype or model.dtype
    e = eff or Efficiency()

    def compute_wins(b: int) -> bool:
        return decode_bound(model, gpu, par, b, context, kv, e).limit == "compute"

    return _first_true(compute_wins, 1, MAX_BATCH_SEARCHED)


def _first_true(pred: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """Smallest n in [lo, hi] with pred(n) true, for a predicate monotone in n."""
    if not pred(hi):
        return None
    if pred(lo):
        return lo
    while hi - lo > 1:  # invariant: pred(lo) false, pred(hi) true
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def roofline(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism | None = None,
    batch: int = 1,
    context: int = 2048,
    prefill_chunk: int = 2048,
    kv_dtype: str | None = None,
    eff: Efficiency | None = None,
) -> Roofline:
    """Decode at (``batch``, ``context``), one prefill chunk, and the two turning points."""
    par = par or Parallelism()
    e = eff or Efficiency()
    kv = kv_dtype or model.dtype
    chunk = min(prefill_chunk, context)
    return Roofline(
        decode=decode_bound(model, gpu, par, batch, context, kv, e),
        prefill=prefill_bound(model, gpu, par, chunk, context, kv, e),
        kv_crossover_context=kv_crossover_context(model, gpu, par, batch, kv),
        compute_bound_batch=compute_bound_batch(model, gpu, par, context, kv, e),
        efficiency=e,
        peak_flops=compute_flops_peak(step_costs(model), gpu),
        hbm_bandwidth=gpu.hbm_bandwidth,
    )
