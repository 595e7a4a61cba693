"""Search deployments for the cheapest tokens: :func:`search`.

Owns the enumeration of (GPU type, GPU count, TP, PP, DP, EP, KV dtype) for one model, the
memory feasibility of each (weights fit and the KV cache holds ``target_concurrency``
requests of ``target_context`` tokens) and their ranking by USD per million output tokens at
the roofline decode throughput (:mod:`kvscope.plan.roofline`, :mod:`kvscope.plan.cost`).

Speed: every configuration is one row of numpy arrays; the per-model constants
(:class:`kvscope.plan.step_costs.StepCosts`) and the per-(KV dtype, TP) KV figures at the
target context are computed once, so the same formulas as the scalar roofline run over all
rows at once (benchmarks/plan_search.py measures configurations per second).

Feasibility is checked twice. A quick vectorised budget in the engines' manner (vLLM:
total x ``gpu_memory_utilization``; :func:`memory_fits`: weights + KV + a fixed reserve for
activations and runtime buffers) prunes every configuration; the cheapest survivors are
then checked in cost order against the engine's exact budget (:func:`engine_check`, which
calls :func:`kvscope.plan.memory.plan_memory`) until ``top`` pass. The quick reserve is a
little smaller than what engines take, so the exact check, not the quick one, decides.

Throughput is steady decode with every request at the target context
(an upper bound on the KV read, so a lower bound on speed) plus TP/EP/PP communication
(:mod:`kvscope.plan.comm`, not overlapped with compute); prefill time is not charged.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvscope.errors import KvscopeError
from kvscope.plan.comm import (
    DEFAULT_ALPHA_S,
    GPUS_PER_NODE,
    SCALE_OUT_BANDWIDTH,
    step_comm_seconds,
)
from kvscope.plan.config import MAX_GPUS, MAX_TOKENS, EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.prices import Prices, check_price
from kvscope.plan.roofline import Efficiency
from kvscope.plan.step_costs import (
    attention_flops,
    kv_read_bytes,
    per_gpu_flops,
    per_gpu_weight_bytes,
    step_costs,
)
from kvscope.plan.vllm_collectives import non_torch_bytes
from kvscope.specs.dtypes import resolve_kv_dtype
from kvscope.specs.hardware import GIB, GPUSpec, list_gpus
from kvscope.specs.model import ModelSpec
from kvscope.validate import count

F64 = NDArray[np.float64]

#: Activation peak and runtime buffers kept out of the KV budget, per GPU: the activation
#: peak of a profile run at the default 8192 batched tokens is a GiB or two for 7-70B models,
#: plus vLLM's non-torch memory for the GPU, TP size and release
#: (:func:`kvscope.plan.vllm_collectives.non_torch_bytes`). SGLang keeps the 0.19-era
#: figures: about 0.25 GiB at TP 1 and 2.1 GiB at TP >= 2.
QUICK_ACTIVATION_GIB = 1.5
RESERVE_GIB_TP1 = QUICK_ACTIVATION_GIB + 0.25
RESERVE_GIB_TP = QUICK_ACTIVATION_GIB + 2.1


@dataclass(frozen=True)
class Candidate:
    """One feasible deployment: memory per GPU as the engine reports it (``weights_gib``,
    ``kv_cache_gib``, ``kv_tokens`` per replica), speed and cost for all its GPUs."""

    gpu: str
    num_gpus: int
    tp: int
    pp: int
    dp: int
    ep: bool
    kv_dtype: str
    weights_gib: float
    kv_cache_gib: float
    kv_tokens: int
    kv_needed_tokens: int
    tokens_per_s: float
    tpot_s: float
    limit: str
    comm_share: float
    usd_per_hour: float
    usd_per_million_tokens: float
    #: The price per GPU-hour used and where it comes from (:mod:`kvscope.plan.prices`).
    gpu_hour_usd: float = 0.0
    price_source: str = ""


@dataclass(frozen=True)
class SearchResult:
    """Ranked feasible candidates (cheapest first) and how the search went.

    ``evaluated`` configurations were costed in ``seconds`` (the vectorised pass);
    ``feasible`` passed the quick memory check; the cheapest were then checked against the
    engine's own budget in order (``engine_checked``, of which ``engine_rejected`` failed).
    """

    model: str
    target_context: int
    target_concurrency: int
    evaluated: int
    feasible: int
    seconds: float
    configs_per_s: float
    engine_checked: int
    engine_rejected: int
    check_seconds: float
    price_overridden: bool
    candidates: tuple[Candidate, ...]
    #: Where ``target_context`` (the context every candidate is ranked at) comes from.
    context_source: str = "--target-context"


@dataclass(frozen=True)
class _Grid:
    """The configurations of a search, one array element each."""

    gpu_idx: NDArray[np.int64]
    n: F64
    tp: F64
    pp: F64
    dp: F64
    ep: NDArray[np.bool_]
    kv_idx: NDArray[np.int64]

    @property
    def size(self) -> int:
        return int(self.n.size)


def parallel_shapes(counts: Sequence[int], model: ModelSpec) -> list[tuple[int, int, int, bool]]:
    """(tp, pp, dp, ep) splits the engines accept for each GPU count.

    TP must divide the attention heads and, for GQA, divide or be a multiple of the KV heads
    (vLLM ``ModelConfig.verify_with_parallel_config``); PP at most the layer count; powers
    of two only, as deployments use. EP is tried for MoE models when it spans > 1 GPU.
    """
    attn = model.first_attention
    heads, kv_heads = attn.num_heads, attn.num_kv_heads
    out: list[tuple[int, int, int, bool]] = []
    for n in sorted(set(counts)):
        if n < 1:
            raise KvscopeError(f"GPU counts must be positive, got {n}.")
        tp = 1
        while tp <= n:
            gqa_ok = attn.is_mla_family or kv_heads % tp == 0 or tp % kv_heads == 0
            if heads % tp == 0 and gqa_ok:
                pp = 1
                while tp * pp <= n and pp <= model.num_layers:
                    if n % (tp * pp) == 0:
                        dp = n // (tp * pp)
                        out.append((tp, pp, dp, False))
                        if model.is_moe and tp * dp > 1:
                            out.append((tp, pp, dp, True))
                    pp *= 2
            tp *= 2
    return out


def _grid(n_gpus: int, shapes: list[tuple[int, int, int, bool]], n_kv: int) -> _Grid:
    s = np.array([(t, p, d, e) for t, p, d, e in shapes], dtype=float).reshape(-1, 4)
    reps = n_gpus * n_kv
    tp, pp, dp, ep = (np.tile(s[:, i], reps) for i in range(4))
    per_gpu = len(shapes) * n_kv
    gpu_idx = np.repeat(np.arange(n_gpus), per_gpu)
    kv_idx = np.tile(np.repeat(np.arange(n_kv), len(shapes)), n_gpus)
    return _Grid(gpu_idx, tp * pp * dp, tp, pp, dp, ep.astype(bool), kv_idx)


def stored_weight_bytes(model: ModelSpec, tp: F64, pp: F64, ep_size: F64) -> F64:
    """Weight bytes one GPU holds (the last PP stage: its layers plus the head)."""
    wb = model.weight_bytes
    c = step_costs(model)
    head = wb["embedding"] if model.tie_word_embeddings else wb["lm_head"]
    dense = c.body_bytes / (tp * pp) + c.replicated_bytes / pp + head / tp
    if not model.tie_word_embeddings:
        dense = dense + np.where(pp > 1, 0.0, wb["embedding"] / tp)  # first stage has it
    experts = wb["routed_experts"] / pp / np.where(ep_size > 1, ep_size, tp)
    result: F64 = dense + experts
    return result


def _beta(pool: Sequence[GPUSpec], gpu_idx: NDArray[np.int64], group: F64) -> F64:
    """Seconds per byte of the link a group of ``group`` GPUs uses (see LinkModel.for_gpu)."""
    intra = np.array([1.0 / x.interconnect_bandwidth for x in pool])[gpu_idx]
    beta: F64 = np.where(group > GPUS_PER_NODE, 1.0 / SCALE_OUT_BANDWIDTH, intra)
    return beta


def memory_fits(
    weights: F64, kv: F64, reserve: F64, memory_bytes: F64, mem_utilization: float
) -> NDArray[np.bool_]:
    """Whether weights + KV + reserve fit in ``memory x mem_utilization`` (per GPU)."""
    fits: NDArray[np.bool_] = weights + kv + reserve <= memory_bytes * mem_utilization
    return fits


def quick_reserve(pool: Sequence[GPUSpec], tps: Sequence[int], engine: EngineConfig) -> F64:
    """The quick screen's reserve, bytes, indexed ``[pool index, TP size]`` (see
    :data:`RESERVE_GIB_TP`)."""
    return _quick_reserve(tuple(pool), tuple(tps), engine.engine, engine.version).copy()


@functools.lru_cache(maxsize=64)
def _quick_reserve(
    pool: tuple[GPUSpec, ...], tps: tuple[int, ...], engine: str, version: tuple[int, int, int]
) -> F64:
    out = np.zeros((len(pool), max(tps) + 1))
    for i, gpu in enumerate(pool):
        for tp in tps:
            if engine == "vllm":
                nt = non_torch_bytes(gpu, Parallelism(tp=tp), version)
                out[i, tp] = QUICK_ACTIVATION_GIB * GIB + nt
            else:
                out[i, tp] = (RESERVE_GIB_TP if tp > 1 else RESERVE_GIB_TP1) * GIB
    return out


@dataclass(frozen=True)
class Verdict:
    """What the engine budget says about an accepted configuration (per GPU / replica)."""

    weights_gib: float
    kv_cache_gib: float
    kv_tokens: int


#: (model, gpu, parallelism, kv dtype, context, requests per replica, memory fraction)
#: -> a Verdict if the engine would serve them, else None.
EngineCheck = Callable[[ModelSpec, GPUSpec, Parallelism, str, int, int, float], "Verdict | None"]


def engine_check(engine: EngineConfig | None = None) -> EngineCheck:
    """Feasibility by the engine's own budget (:func:`kvscope.plan.memory.plan_memory`).

    A configuration passes when the engine starts (weights fit, one request of the target
    context fits) and its logged KV capacity per replica holds ``requests x context`` tokens.
    The target context becomes ``--max-model-len`` and the request count ``--max-num-seqs``.
    """
    base = engine or EngineConfig()

    def accept(
        model: ModelSpec,
        gpu: GPUSpec,
        par: Parallelism,
        kv: str,
        ctx: int,
        reqs: int,
        mem_util: float,
    ) -> Verdict | None:
        cfg = dataclasses.replace(
            base,
            max_model_len=ctx,
            max_num_seqs=max(reqs, base.max_num_seqs or 0),
            kv_cache_dtype=kv,
            gpu_memory_utilization=base.gpu_memory_utilization
            or (mem_util if base.engine == "vllm" else None),
        )
        try:
            plan = plan_memory(model, gpu, par, cfg)
        except KvscopeError:
            return None
        if not plan.fits or plan.kv_tokens < ctx * reqs:
            return None
        return Verdict(plan.weights_gib, plan.kv_cache_gib, plan.kv_tokens)

    return accept


def search(
    model: ModelSpec,
    target_context: int,
    target_concurrency: int,
    gpus: Sequence[GPUSpec] | None = None,
    counts: Sequence[int] = (1, 2, 4, 8, 16),
    kv_dtypes: Sequence[str] | None = None,
    gpu_hour_price: float | Prices | None = None,
    mem_utilization: float = 0.9,
    eff: Efficiency | None = None,
    alpha_s: float = DEFAULT_ALPHA_S,
    top: int = 20,
    engine: EngineConfig | None = None,
    check: EngineCheck | None = None,
    max_checks: int = 2000,
    context_source: str = "--target-context",
) -> SearchResult:
    """Rank feasible deployments of ``model`` by USD per million output tokens.

    ``gpu_hour_price``: one price for every GPU, or the resolved
    :class:`~kvscope.plan.prices.Prices` (per GPU: flag > prices file > kvscope's default
    estimate). GPUs with no price are skipped. Every candidate is ranked, and its
    $/M tokens stated, at ``target_context`` tokens per request.
    ``engine`` (default vLLM, its default version) decides the exact memory budget the
    cheapest candidates are checked against; ``check`` replaces that check altogether.
    """
    count(target_context, "--target-context", low=1, high=MAX_TOKENS)
    count(target_concurrency, "--target-concurrency", low=1, high=MAX_TOKENS)
    for n in counts:
        count(n, "--num-gpus", low=1, high=MAX_GPUS)
    if not 0.0 < mem_utilization <= 1.0:
        raise KvscopeError(f"memory utilization must be in (0, 1], got {mem_utilization}.")
    if isinstance(gpu_hour_price, Prices):
        prices = gpu_hour_price
    elif gpu_hour_price is not None:
        prices = Prices(every_gpu=check_price(gpu_hour_price))
    else:
        prices = Prices()
    e = eff or Efficiency()
    start = time.perf_counter()
    pool = list(gpus) if gpus is not None else list(list_gpus())
    priced = {g.name: p for g in pool if (p := prices.price(g)) is not None}
    pool = [g for g in pool if g.name in priced]
    if not pool:
        raise KvscopeError("no GPU to search.", "Name a catalogue GPU (see `kvscope gpus`).")
    kvs = sorted({resolve_kv_dtype(k, model.dtype) for k in (kv_dtypes or (model.dtype, "fp8"))})
    shapes = parallel_shapes(counts, model)
    if not shapes:
        raise KvscopeError(f"no TP/PP split of {list(counts)} GPUs suits {model.name}.")
    g = _grid(len(pool), shapes, len(kvs))
    c = step_costs(model)

    # Per-GPU-type constants, gathered by index.
    mem = np.array([x.memory_bytes for x in pool], dtype=float)[g.gpu_idx]
    bw = np.array([x.hbm_bandwidth for x in pool], dtype=float)[g.gpu_idx]
    peak = np.array([x.flops("fp8") if c.fp8_compute else x.bf16_flops for x in pool])[g.gpu_idx]
    price = np.array([priced[x.name].usd_per_gpu_hour for x in pool])[g.gpu_idx]

    # Per-(KV dtype, TP) KV bytes at the target context, gathered by index.
    tps = sorted({s[0] for s in shapes})
    kv_read = np.zeros((len(kvs), max(tps) + 1))
    kv_held = np.zeros_like(kv_read)
    for i, k in enumerate(kvs):
        for t in tps:
            kv_read[i, t] = kv_read_bytes(model, target_context, k, t)
            kv_held[i, t] = model.kv_bytes_for_request(target_context, k, t)
    tp_i = g.tp.astype(np.int64)
    ep_size = np.where(g.ep, g.tp * g.dp, 1.0)

    conc = np.ceil(target_concurrency / g.dp)  # requests per replica
    weights = stored_weight_bytes(model, g.tp, g.pp, ep_size)
    kv_gpu = conc * kv_held[g.kv_idx, tp_i] / g.pp
    reserve = quick_reserve(pool, tps, engine or EngineConfig())[g.gpu_idx, tp_i]
    ok = memory_fits(weights, kv_gpu, reserve, mem, mem_utilization)

    micro = np.ceil(conc / g.pp)
    group = np.where(g.ep, micro * g.dp, micro)
    wread = per_gpu_weight_bytes(c, g.tp, g.pp, ep_size, micro, group)
    kread = micro * kv_read[g.kv_idx, tp_i] / g.pp
    attn = micro * attention_flops(model, target_context)
    flops = per_gpu_flops(c, g.tp, g.pp, micro, attn)
    compute_s = flops / (peak * e.flops)
    memory_s = (wread + kread) / (bw * e.hbm)
    comm_s = step_comm_seconds(
        c,
        g.tp,
        g.pp,
        ep_size,
        micro,
        alpha_s,
        _beta(pool, g.gpu_idx, g.tp),
        _beta(pool, g.gpu_idx, ep_size),
        _beta(pool, g.gpu_idx, g.tp * g.pp),
    )
    stage = np.maximum(compute_s, memory_s) + comm_s
    tpot = g.pp * stage
    tok_s = g.dp * conc / tpot
    usd_h = price * g.n
    usd_m = usd_h / (tok_s * 3600.0) * 1e6

    idx = np.flatnonzero(ok)
    ranked = idx[np.lexsort((g.n[idx], usd_m[idx]))]  # cheapest, then fewest GPUs
    elapsed = time.perf_counter() - start

    accept = check or engine_check(engine)
    cands: list[Candidate] = []
    checked = 0
    for j in ranked:
        if len(cands) >= top or checked >= max_checks:
            break
        checked += 1
        par = Parallelism(tp=int(g.tp[j]), pp=int(g.pp[j]), dp=int(g.dp[j]), ep=bool(g.ep[j]))
        gpu = pool[int(g.gpu_idx[j])]
        kv = kvs[int(g.kv_idx[j])]
        verdict = accept(model, gpu, par, kv, target_context, int(conc[j]), mem_utilization)
        if verdict is None:
            continue
        cands.append(
            Candidate(
                gpu=gpu.name,
                num_gpus=int(g.n[j]),
                tp=par.tp,
                pp=par.pp,
                dp=par.dp,
                ep=par.ep,
                kv_dtype=kv,
                weights_gib=verdict.weights_gib,
                kv_cache_gib=verdict.kv_cache_gib,
                kv_tokens=verdict.kv_tokens,
                kv_needed_tokens=target_context * int(conc[j]),
                tokens_per_s=float(tok_s[j]),
                tpot_s=float(tpot[j]),
                limit="compute" if compute_s[j] >= memory_s[j] else "memory",
                comm_share=float(comm_s[j] / stage[j]),
                usd_per_hour=float(usd_h[j]),
                usd_per_million_tokens=float(usd_m[j]),
                gpu_hour_usd=priced[gpu.name].usd_per_gpu_hour,
                price_source=priced[gpu.name].source,
            )
        )
    check_s = time.perf_counter() - start - elapsed
    return SearchResult(
        model=model.name,
        target_context=target_context,
        target_concurrency=target_concurrency,
        evaluated=g.size,
        feasible=int(idx.size),
        seconds=elapsed,
        configs_per_s=g.size / elapsed if elapsed > 0 else math.inf,
        engine_checked=checked,
        engine_rejected=checked - len(cands),
        check_seconds=check_s,
        price_overridden=prices.overridden,
        candidates=tuple(cands),
        context_source=context_source,
    )
