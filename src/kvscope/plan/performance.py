"""Speed, communication and cost of one deployment: :func:`performance`.

Owns the ``roofline``, ``comm`` and ``cost`` sections of ``kvscope plan``: it evaluates the
roofline (:mod:`kvscope.plan.roofline`) at batch 1 (latency) and at a serving batch
(throughput), the communication of those steps and of one prefill chunk
(:mod:`kvscope.plan.comm`), and prices the throughput (:mod:`kvscope.plan.cost`).

The throughput figure adds communication to the roofline step without overlap, as the
search does (:mod:`kvscope.plan.search`), so a plan and a search row of the same
configuration agree. Units: seconds, bytes, tokens per second, USD, kWh.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.plan.comm import DEFAULT_ALPHA_S, CommStep, LinkModel, comm_volume
from kvscope.plan.config import Parallelism
from kvscope.plan.cost import Cost, cost
from kvscope.plan.prices import Prices
from kvscope.plan.roofline import Efficiency, Roofline, StepBound, decode_bound, roofline
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: The context per request (prompt + output tokens) speed and cost figures assume when none
#: is given: chat and RAG requests mostly hold a few thousand tokens, so 8,192 covers them
#: with headroom, where the model's maximum (128K and more) would price a rare worst case.
TYPICAL_CONTEXT_TOKENS = 8192


def figure_context(
    target_context: int | None, context: int | None, max_model_len: int
) -> tuple[int, str]:
    """(tokens per request, where that comes from) for the throughput and cost figures:
    ``--target-context``, else ``--context``, else ``max_model_len`` capped at
    :data:`TYPICAL_CONTEXT_TOKENS` (never silently the maximum)."""
    if target_context is not None:
        return target_context, "--target-context"
    if context is not None:
        return context, "--context"
    if max_model_len <= TYPICAL_CONTEXT_TOKENS:
        return max_model_len, f"default: --max-model-len {max_model_len:,}"
    return TYPICAL_CONTEXT_TOKENS, (
        f"default: typical {TYPICAL_CONTEXT_TOKENS:,}, not the max-model-len {max_model_len:,}"
    )


@dataclass(frozen=True)
class Throughput:
    """Steady decode of ``batch`` sequences per replica, communication included."""

    batch: int
    context: int
    tpot_s: float
    tokens_per_s_per_replica: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    comm_share: float


@dataclass(frozen=True)
class Performance:
    """The three planner sections for one deployment."""

    roofline: Roofline
    latency: StepBound
    throughput: Throughput
    comm_decode: CommStep
    comm_prefill: CommStep
    link: LinkModel
    cost: Cost
    #: Caveats about the inputs (e.g. a measured link that is not the planned GPU's).
    warnings: tuple[str, ...] = ()


def performance(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    batch: int,
    context: int,
    kv_dtype: str | None = None,
    prefill_chunk: int = 2048,
    gpu_hour_price: float | Prices | None = None,
    eff: Efficiency | None = None,
    alpha_s: float = DEFAULT_ALPHA_S,
    link: LinkModel | None = None,
    context_source: str = "",
) -> Performance:
    """Roofline, communication and cost of ``par`` serving ``batch`` sequences per replica
    at ``context`` tokens each. ``link`` overrides the catalogue's tensor-parallel link
    (e.g. one fitted by ``kvscope comm bench``); ``context_source`` says where ``context``
    comes from, for the cost section."""
    if batch < 1:
        raise KvscopeError(
            f"serving batch must be at least 1, got {batch}.",
            "The KV cache may not hold one request at this context; lower the context.",
        )
    e = eff or Efficiency()
    kv = kv_dtype or model.dtype
    roof = roofline(model, gpu, par, batch, context, prefill_chunk, kv, e)
    latency = decode_bound(model, gpu, par, 1, context, kv, e)
    micro = math.ceil(batch / par.pp)
    measured = link  # a fitted link replaces every group's; else each group's own link
    link = link or LinkModel.for_gpu(gpu, par.tp, alpha_s)
    comm_d = comm_volume(
        model, gpu, par, micro, "decode", roof.decode.step_s, link=measured, alpha_s=alpha_s
    )
    chunk = roof.prefill.tokens
    comm_p = comm_volume(
        model, gpu, par, chunk, "prefill", roof.prefill.step_s, link=measured, alpha_s=alpha_s
    )
    stage = roof.decode.step_s + comm_d.total_s
    tpot = par.pp * stage
    per_replica = batch / tpot
    total = per_replica * par.dp
    thr = Throughput(
        batch=batch,
        context=context,
        tpot_s=tpot,
        tokens_per_s_per_replica=per_replica,
        tokens_per_s=total,
        tokens_per_s_per_gpu=total / par.world_size,
        comm_share=comm_d.total_s / stage if stage > 0 else 0.0,
    )
    return Performance(
        roofline=roof,
        latency=latency,
        throughput=thr,
        comm_decode=comm_d,
        comm_prefill=comm_p,
        link=link,
        cost=cost(
            gpu,
            par.world_size,
            total,
            gpu_hour_price,
            context_tokens=context,
            context_source=context_source,
        ),
    )


def _step(b: StepBound) -> dict[str, Any]:
    return {
        "batch": b.batch,
        "context_tokens": b.context,
        "tokens": b.tokens,
        "weight_bytes_per_gpu": b.weight_bytes,
        "kv_bytes_per_gpu": b.kv_bytes,
        "flops_per_gpu": b.flops,
        "compute_s": b.compute_s,
        "memory_s": b.memory_s,
        "step_s": b.step_s,
        "step_bound_s": b.step_bound_s,
        "limit": b.limit,
        "token_latency_s": b.token_latency_s,
        "tokens_per_s_per_replica": b.tokens_per_s_per_replica,
        "tokens_per_s_per_gpu": b.tokens_per_s_per_gpu,
    }


def _comm(c: CommStep) -> dict[str, Any]:
    return {
        "tokens": c.tokens,
        "tp_allreduce_count": c.tp_allreduce_count,
        "tp_allreduce_bytes": c.tp_allreduce_bytes,
        "ep_alltoall_count": c.ep_alltoall_count,
        "ep_dispatch_bytes": c.ep_dispatch_bytes,
        "ep_combine_bytes": c.ep_combine_bytes,
        "pp_sendrecv_bytes": c.pp_sendrecv_bytes,
        "total_bytes": c.total_bytes,
        "bytes_per_token": c.bytes_per_token,
        "tp_s": c.tp_s,
        "ep_s": c.ep_s,
        "pp_s": c.pp_s,
        "total_s": c.total_s,
        "share_of_step": c.share_of_step,
        "tp_link": c.tp_link,
        "ep_link": c.ep_link,
    }


def sections(perf: Performance) -> dict[str, dict[str, Any]]:
    """The ``roofline``, ``comm`` and ``cost`` objects of ``kvscope plan --json``.

    Base units in every key name (seconds, bytes, FLOPs, tokens/s, USD, kWh); figures are per
    GPU of the busiest stage unless the name says replica or the deployment.
    """
    r, t, c = perf.roofline, perf.throughput, perf.cost
    return {
        "roofline": {
            "efficiency": {"hbm": r.efficiency.hbm, "flops": r.efficiency.flops},
            "peak_flops": r.peak_flops,
            "hbm_bandwidth_bytes_per_s": r.hbm_bandwidth,
            "decode_batch1": _step(perf.latency),
            "decode": _step(r.decode),
            "prefill": _step(r.prefill),
            "kv_crossover_context_tokens": r.kv_crossover_context,
            "compute_bound_batch": r.compute_bound_batch,
            "throughput": {
                "batch_per_replica": t.batch,
                "context_tokens": t.context,
                "tpot_s": t.tpot_s,
                "tokens_per_s": t.tokens_per_s,
                "tokens_per_s_per_replica": t.tokens_per_s_per_replica,
                "tokens_per_s_per_gpu": t.tokens_per_s_per_gpu,
                "comm_share": t.comm_share,
            },
        },
        "comm": {
            "link": {
                "name": perf.link.name,
                "alpha_s": perf.link.alpha_s,
                "bandwidth_bytes_per_s": perf.link.bandwidth,
            },
            "decode": _comm(perf.comm_decode),
            "prefill": _comm(perf.comm_prefill),
        },
        "cost": {
            "gpu": c.gpu,
            "num_gpus": c.num_gpus,
            "gpu_hour_usd": c.gpu_hour_usd,
            "price_source": c.price_source,
            "usd_per_hour": c.usd_per_hour,
            "tokens_per_s": c.tokens_per_s,
            "usd_per_million_tokens": c.usd_per_million_tokens,
            "power_w": c.power_w,
            "kwh_per_million_tokens": c.kwh_per_million_tokens,
            "context_tokens": c.context_tokens,
            "context_source": c.context_source,
        },
    }
