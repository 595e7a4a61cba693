"""Public memory plan: what each engine will report at start-up, per GPU.

:func:`plan_memory` combines per-GPU weights (:mod:`kvscope.plan.weights`), the profiling
activation peak (:mod:`kvscope.plan.activation`) and the engine's budget rule
(:mod:`kvscope.plan.vllm_budget`, :mod:`kvscope.plan.sglang_budget`) into a
:class:`MemoryPlan` whose figures are those the engine logs: weights ("Model loading took"),
available KV memory, ``num_gpu_blocks``, "GPU KV cache size: N tokens" / SGLang "#tokens",
and "Maximum concurrency". Figures of GPU 0 (first pipeline stage) are the headline ones,
as rank 0 prints them; blocks and tokens are the minimum over stages, as the engines take it.
Units: GiB (2^30 bytes) where a name ends in ``_gib``, bytes and tokens otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.plan import (
    attention_backend,
    sglang_budget,
    sglang_dspark,
    sglang_mamba,
    shared_gpu,
    vllm_budget,
)
from kvscope.plan._cache import attention_kinds
from kvscope.plan.activation import activation_peak
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.drafter import Drafter, plan_drafter
from kvscope.plan.encoder_releases import unmodelled_note
from kvscope.plan.kv_connector import with_connector
from kvscope.plan.kv_sharing import check_vllm_stages
from kvscope.plan.language_model_only import text_only
from kvscope.plan.loaded_weights import loaded_stage_weights
from kvscope.plan.mm_limits import tower_dropped
from kvscope.plan.rocm_blas import check_hipblaslt
from kvscope.plan.sglang_moe_runner import sglang_expert_layout
from kvscope.plan.sglang_swa import check_gemma4, swa_floor_problem
from kvscope.plan.vllm_bnb import with_vllm_bnb_statistics
from kvscope.plan.vllm_extensible_kv import extensible_on, path_note
from kvscope.plan.vllm_fp8_marlin import fp8_marlin_model
from kvscope.plan.vllm_mxfp4 import vllm_expert_layout
from kvscope.plan.weights import RankWeights, pp_layer_split, vllm_remainder_last, with_component
from kvscope.specs.dtypes import is_fp8, resolve_kv_dtype
from kvscope.specs.hardware import GIB, GPUSpec
from kvscope.specs.model import ModelSpec


@dataclass(frozen=True)
class RankMemory:
    """Budget of one GPU of a pipeline stage (all TP ranks of a stage are alike)."""

    pp_rank: int
    layers: int
    weights_gib: float
    kv_cache_gib: float
    kv_bytes_per_token: float
    num_gpu_blocks: int
    kv_tokens: int


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory budget and KV capacity as the engine computes and logs it.

    ``kv_bytes_per_token`` is the amortised full-history bytes per token on GPU 0;
    ``block_bytes`` one block of all its KV groups; ``kv_tokens`` what the engine logs as
    its capacity (vLLM "GPU KV cache size", SGLang "#tokens"); ``max_concurrency`` requests of
    ``max_model_len`` tokens that fit at once. ``fits`` is False when the engine would refuse
    to start; ``problem`` then says why in one sentence.
    """

    engine: str
    engine_version: str
    model: str
    gpu: str
    tp: int
    pp: int
    dp: int
    ep: bool
    kv_cache_dtype: str
    gpu_memory_gib: float
    budget_fraction: float
    budget_gib: float
    weights_gib: float
    activation_peak_gib: float
    non_torch_gib: float
    cudagraph_gib: float
    cudagraph_subtracted: bool
    kv_cache_gib: float
    kv_bytes_per_token: float
    block_size: int
    block_bytes: int
    num_kv_groups: int
    num_gpu_blocks: int
    kv_tokens: int
    max_concurrency: float
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    fits: bool
    problem: str | None
    ranks: tuple[RankMemory, ...]
    #: Where ``budget_fraction`` came from: "given" or the engine's default rule.
    budget_source: str = "given"
    activation_peak_logged_gib: float = 0.0
    #: Caveats about the inputs (an engine release outside the modelled range), one sentence
    #: each; the CLI prints them on stderr and ``--json`` carries them.
    warnings: tuple[str, ...] = ()
    #: How the engine sizes the cache where a release changed it (vLLM 0.34's extensible KV
    #: cache), one sentence each; information, not a caveat: the table and ``--json`` show it.
    notes: tuple[str, ...] = ()
    #: Speculative decoding's share (method, drafter weights and KV layers, token slots).
    speculative: dict[str, Any] | None = None
    #: vLLM ``max_in_flight_tokens``: what a window group reserves beyond its window per
    #: request (the token budget, twice it under async scheduling); 0 for SGLang.
    in_flight_tokens: int = 0
    #: ``--gpu-memory-in-use``: GiB other processes held on each GPU at start (shared_gpu).
    gpu_memory_in_use_gib: float = 0.0
    #: vLLM ``--attention-backend`` as given (None: the engine's automatic choice), and the
    #: GiB a GPU its buffers hold beside the KV pool that vLLM subtracts nowhere
    #: (:func:`kvscope.plan.attention_backend.outside_pool_bytes`).
    attention_backend: str | None = None
    backend_workspace_gib: float = 0.0

    def raise_if_infeasible(self) -> None:
        """Raise :class:`KvscopeError` (one sentence plus a hint) when it does not fit."""
        if not self.fits:
            raise KvscopeError(
                self.problem or "the deployment does not fit.",
                "Run with --json to see the budget terms.",
            )


def _identity(
    engine: str,
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    eng: EngineConfig,
    kv_dtype: str,
) -> dict[str, Any]:
    """The fields every plan carries whatever the engine: what was planned, on what."""
    return {
        "engine": engine,
        "engine_version": eng.version_text,
        "model": model.name,
        "gpu": gpu.name,
        "tp": par.tp,
        "pp": par.pp,
        "dp": par.dp,
        "ep": par.ep,
        "kv_cache_dtype": kv_dtype,
        "gpu_memory_gib": gpu.memory_bytes / GIB,
        "gpu_memory_in_use_gib": eng.gpu_memory_in_use_gib,
    }


def plan_memory(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism | None = None,
    engine: EngineConfig | None = None,
) -> MemoryPlan:
    """Memory budget and KV capacity per GPU for ``model`` on ``gpu`` under ``engine``.

    Raises :class:`KvscopeError` for inputs no engine accepts (TP not dividing the heads,
    unknown KV dtype); a deployment that is valid but does not fit returns ``fits=False``.
    """
    par = par or Parallelism()
    eng = engine or EngineConfig()
    if eng.language_model_only or tower_dropped(model, eng.limit_mm_per_prompt, eng.version):
        model = text_only(model)  # no tower weights, no encoder profiling
    model = fp8_marlin_model(model, gpu, eng.engine, eng.version)  # block fp8, SM < 8.9
    model = with_vllm_bnb_statistics(model, eng)  # a release's double-quant statistics
    kv_dtype = resolve_kv_dtype(eng.kv_cache_dtype, model.dtype)
    kinds = attention_kinds(model)
    _check_inputs(model, gpu, par, eng, kv_dtype)
    if eng.engine == "sglang":
        check_gemma4(model, eng, par)
        kv_dtype = sglang_budget.dsa_kv_dtype(model, gpu, eng, kinds, kv_dtype)
    if model.is_deepseek_v4 or ("mla_sparse" in kinds and is_fp8(kv_dtype)):
        # DeepSeek V4 always stores its packed fp8 record; V3.2 with an fp8 cache uses the
        # same FlashMLA-sparse layout (vLLM rewrites the dtype to fp8_ds_mla).
        kv_dtype = "fp8_ds_mla"
    layout = (
        sglang_expert_layout(model, gpu, eng.version, eng.moe_runner_backend, par)
        if eng.engine == "sglang"
        else vllm_expert_layout(model, gpu, eng.engine, eng.version, par)
    )
    drafter = plan_drafter(model, eng.speculative, par) if eng.speculative else None
    if drafter is not None and eng.engine == "sglang":
        drafter = sglang_dspark.sglang_drafter(model, par, eng, drafter)
    draft_layers = eng.speculative_layers or (drafter.mtp_layers if drafter else 0)
    stages = loaded_stage_weights(model, par, eng, layout, drafter, draft_layers)
    if eng.engine == "sglang":
        plan = _plan_sglang(model, gpu, par, eng, stages, kv_dtype)
    else:
        plan = _plan_vllm(model, gpu, par, eng, stages, kv_dtype, drafter)
    if drafter is not None:
        plan = replace(plan, speculative=_speculative_record(drafter, eng.engine))
    return with_connector(plan, model, par, eng)  # --kv-transfer-config's notes


def _speculative_record(d: Drafter, engine: str) -> dict[str, Any]:
    """The drafter's share of the plan, as ``--json`` shows it."""
    return {
        "method": d.method,
        "mtp_layers": d.mtp_layers,
        "drafter_weights_gib": d.extra_weight_bytes / GIB,
        "drafter_kv_layers": d.kv_layers + len(d.kv_attention) if engine == "vllm" else 0,
        "lookahead_tokens_per_request": d.lookahead_tokens,
        "verify_tokens_per_request": d.verify_tokens,
        "not_modelled": d.note if engine == "vllm" else "the draft worker's own KV pool",
    }


def _check_inputs(
    model: ModelSpec, gpu: GPUSpec, par: Parallelism, eng: EngineConfig, kv_dtype: str
) -> None:
    """Refuse flags no engine would start with on this model and GPU (one line each)."""
    model.check_kv_dtype(kv_dtype)
    check_hipblaslt(gpu, eng.hipblaslt)
    if eng.engine == "vllm" and par.pp > 1:
        remainder_last = vllm_remainder_last(eng.engine, eng.version)
        check_vllm_stages(model, pp_layer_split(model.num_layers, par.pp, remainder_last))
    if eng.async_scheduling is not None and eng.engine != "vllm":
        raise KvscopeError(
            "--async-scheduling / --no-async-scheduling are vLLM's flags; "
            f"{eng.engine} has no such switch."
        )
    dcp = eng.decode_context_parallel_size
    if dcp > 1 and par.tp % dcp:
        raise KvscopeError(
            f"--decode-context-parallel-size {dcp} must divide --tensor-parallel-size {par.tp}.",
            "vLLM splits each TP group into DCP groups of that size.",
        )
    in_use = shared_gpu.in_use_bytes(eng)
    if in_use >= gpu.memory_bytes:
        raise KvscopeError(
            f"--gpu-memory-in-use {eng.gpu_memory_in_use_gib:g} GiB is not less than the "
            f"{gpu.memory_bytes / GIB:.2f} GiB of memory of one {gpu.name}.",
            "It is what other processes hold on each GPU before the engine starts, in GiB.",
        )
    kv_bytes = eng.kv_cache_memory_bytes
    if kv_bytes is not None and kv_bytes > gpu.memory_bytes:
        raise KvscopeError(
            f"--kv-cache-memory-bytes {kv_bytes:,} ({kv_bytes / GIB:,.2f} GiB) is more than "
            f"the {gpu.memory_bytes / GIB:.2f} GiB of memory of one {gpu.name}.",
            "It is the KV cache of one GPU, in bytes.",
        )


def _kv_bytes_problem(
    ranks: tuple[vllm_budget.VllmRank, ...], gpu: GPUSpec, eng: EngineConfig, subtract: bool
) -> str | None:
    """Why a given ``--kv-cache-memory-bytes`` cannot be allocated, or None.

    vLLM takes the figure as it is (no profile), so the cache plus the weights, the
    activation peak and the buffers of the fullest stage must fit in the GPU.
    """
    kv_bytes = eng.kv_cache_memory_bytes
    if kv_bytes is None:
        return None
    spent = max(
        r.weights + r.activation + r.non_torch + (r.cudagraph if subtract else 0.0) for r in ranks
    )
    left = gpu.memory_bytes - spent
    if kv_bytes <= left:
        return None
    return (
        f"--kv-cache-memory-bytes asks for {kv_bytes / GIB:.2f} GiB of KV cache per GPU but "
        f"only {max(left, 0.0) / GIB:.2f} GiB of the {gpu.memory_bytes / GIB:.2f} GiB remain "
        "after weights, activations and buffers."
    )


def _shared_gpu_problem(
    r: vllm_budget.VllmRank, gpu: GPUSpec, eng: EngineConfig, blocks: int
) -> str | None:
    """vLLM's verdict on one rank beside other processes' memory (:mod:`shared_gpu`)."""
    held = r.weights + r.non_torch
    return shared_gpu.vllm_problem(gpu, eng, r.requested, held, blocks * r.layout.block_bytes)


def _plan_vllm(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    eng: EngineConfig,
    stages: tuple[RankWeights, ...],
    kv_dtype: str,
    drafter: Drafter | None = None,
) -> MemoryPlan:
    d = vllm_budget.resolve_defaults(model, gpu, eng, par)
    draft_kv = drafter.kv_layers if drafter else 0
    own_kv = drafter.kv_attention if drafter else ()
    ranks = vllm_budget.plan_ranks(model, gpu, par, eng, stages, kv_dtype, d, draft_kv, own_kv)
    blocks = min(r.num_blocks for r in ranks)
    tightest = min(ranks, key=lambda r: r.num_blocks)
    dcp = eng.decode_context_parallel_size
    tokens, conc = vllm_budget.logged_capacity(tightest.layout, blocks, d, eng.version, dcp)
    r0 = ranks[0]
    kv_problem = _kv_bytes_problem(ranks, gpu, eng, d.cudagraph_subtracted)
    need_bytes = tightest.layout.request_bytes(d.max_model_len, d.in_flight_tokens) / dcp
    shared = next(filter(None, (_shared_gpu_problem(r, gpu, eng, blocks) for r in ranks)), None)
    problem = None
    if shared is not None and shared_gpu.vllm_regime(eng.version) == "checked":
        problem = shared  # init_device refuses before it loads anything
    elif r0.weights > r0.requested:
        problem = (
            f"the weights need {r0.weights / GIB:.2f} GiB per GPU but "
            f"gpu_memory_utilization {d.gpu_memory_utilization} allows "
            f"{r0.requested / GIB:.2f} GiB of {gpu.memory_bytes / GIB:.2f} GiB."
        )
    elif kv_problem is not None:
        problem = kv_problem
    elif tightest.available_kv <= 0:
        problem = (
            f"no memory is left for the KV cache ({tightest.available_kv / GIB:.2f} GiB "
            "after weights, activations and buffers)."
        )
    elif conc < 1.0 or need_bytes > tightest.available_kv:
        problem = (
            f"one request of max_model_len {d.max_model_len} needs "
            f"{need_bytes / GIB:.2f} GiB of KV cache but only "
            f"{tightest.available_kv / GIB:.2f} GiB is available."
        )
    problem = problem or shared  # the KV allocation runs out of memory beside others' memory
    per_rank = tuple(
        RankMemory(
            r.pp_rank,
            len(stages[r.pp_rank].layers),
            r.weights / GIB,
            r.available_kv / GIB,
            r.layout.bytes_per_token,
            r.num_blocks,
            vllm_budget.logged_capacity(r.layout, r.num_blocks, d, eng.version, dcp)[0],
        )
        for r in ranks
    )
    return MemoryPlan(
        **_identity("vllm", model, gpu, par, eng, kv_dtype),
        budget_fraction=d.gpu_memory_utilization,
        budget_gib=r0.requested / GIB,
        weights_gib=r0.weights / GIB,
        activation_peak_gib=r0.activation / GIB,
        non_torch_gib=r0.non_torch / GIB,
        cudagraph_gib=r0.cudagraph / GIB,
        cudagraph_subtracted=d.cudagraph_subtracted or extensible_on(eng),  # 0.34: measured
        kv_cache_gib=r0.available_kv / GIB,
        kv_bytes_per_token=r0.layout.bytes_per_token,
        block_size=r0.layout.block_size,
        block_bytes=r0.layout.block_bytes,
        num_kv_groups=len(r0.layout.groups),
        num_gpu_blocks=blocks,
        kv_tokens=tokens,
        max_concurrency=conc,
        max_model_len=d.max_model_len,
        max_num_batched_tokens=d.max_num_batched_tokens,
        in_flight_tokens=d.in_flight_tokens,
        max_num_seqs=d.max_num_seqs,
        fits=problem is None,
        problem=problem,
        ranks=per_rank,
        budget_source=(
            "given"
            if eng.gpu_memory_utilization is not None
            else f"vLLM {eng.version_text} default"
        ),
        activation_peak_logged_gib=vllm_budget.logged_activation(r0, d, eng.version) / GIB,
        warnings=eng.version_warnings(),
        notes=path_note(eng) + unmodelled_note(model, eng),
        attention_backend=eng.attention_backend,
        backend_workspace_gib=_backend_workspace(model, gpu, par, eng, d) / GIB,
    )


def _backend_workspace(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    eng: EngineConfig,
    d: vllm_budget.VllmDefaults,
) -> float:
    """Bytes a GPU the named attention backend keeps beside the pool, unsubtracted."""
    spec = eng.speculative
    k = spec.num_speculative_tokens if spec is not None else 0
    return attention_backend.outside_pool_bytes(
        model, gpu, eng.version, eng.attention_backend, par.tp,
        eng.decode_context_parallel_size, d.max_num_seqs, d.max_model_len, k,
    )  # fmt: skip


def _plan_sglang(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    eng: EngineConfig,
    stages: tuple[RankWeights, ...],
    kv_dtype: str,
) -> MemoryPlan:
    # SGLang's weights figure is the free-memory drop over loading ("mem usage").
    overhead = sglang_budget.load_overhead_bytes(par)
    stages = tuple(with_component(w, "load_overhead", overhead) for w in stages)
    stages = tuple(
        with_component(
            w, "moe_index", sglang_budget.rocm_wna16_index_bytes(model, gpu, par, eng, w.layers)
        )
        for w in stages
    )
    defaults = sglang_budget.engine_defaults(model, gpu, par, eng)
    mfs = defaults.mem_fraction_static
    page = eng.block_size or sglang_budget.default_page_size(model, gpu, eng.version)
    ranks = sglang_budget.plan_ranks(model, gpu, par, eng, stages, kv_dtype, mfs, page)
    tokens = min(r.tokens for r in ranks)
    max_len = eng.max_model_len or model.max_position_embeddings
    seqs = eng.max_num_seqs or 1024
    mamba_cap = None  # resolve_max_num_reqs: running requests capped by the mamba slots
    if ranks[0].mamba_slots:
        ratio = sglang_mamba.slots_per_request(eng.version, eng.enable_prefix_caching, par.pp)
        mamba_cap = min(r.mamba_slots for r in ranks) // ratio
        seqs = min(seqs, max(1, mamba_cap))
    # Chunked prefill off (-1): a prefill batch is bounded by max_prefill_tokens (16384).
    chunk = defaults.chunked_prefill_size if defaults.chunked_prefill_size > 0 else 16384
    act = activation_peak(model, par, chunk, seqs)
    r0 = ranks[0]
    problem = None
    if r0.weights > r0.m0 * mfs:
        problem = (
            f"the weights need {r0.weights / GIB:.2f} GiB per GPU but "
            f"mem_fraction_static {mfs} allows {r0.m0 * mfs / GIB:.2f} GiB."
        )
    elif tokens <= 0:
        problem = "no memory is left for the KV pool after the weights."
    elif mamba_cap == 0:
        problem = "the mamba state pool cannot hold one running request."
    elif floor := swa_floor_problem(model, tokens, page, eng, par, gpu.compute_capability):
        problem = floor
    per_rank = tuple(
        RankMemory(
            r.pp_rank,
            len(stages[r.pp_rank].layers),
            r.weights / GIB,
            max(r.rest, 0.0) / GIB,
            r.cell_bytes,
            r.tokens // page,
            r.tokens,
        )
        for r in ranks
    )
    return MemoryPlan(
        **_identity("sglang", model, gpu, par, eng, kv_dtype),
        budget_fraction=mfs,
        budget_gib=r0.m0 * mfs / GIB,
        weights_gib=r0.weights / GIB,
        activation_peak_gib=act.total_bytes / GIB,
        non_torch_gib=(gpu.memory_bytes - r0.m0) / GIB,
        cudagraph_gib=0.0,
        cudagraph_subtracted=False,
        kv_cache_gib=tokens * r0.cell_bytes / GIB,
        kv_bytes_per_token=r0.cell_bytes,
        block_size=page,
        block_bytes=int(page * r0.cell_bytes),
        num_kv_groups=1,
        num_gpu_blocks=tokens // page,
        kv_tokens=tokens,
        max_concurrency=tokens / max_len,
        max_model_len=max_len,
        max_num_batched_tokens=chunk,
        max_num_seqs=seqs,
        fits=problem is None,
        problem=problem,
        ranks=per_rank,
        budget_source="given" if defaults.rule == "given" else f"SGLang default: {defaults.rule}",
        activation_peak_logged_gib=act.total_bytes / GIB,
        warnings=eng.version_warnings() + sglang_budget.dsv4_warnings(model, eng),
    )
