"""The KV pools and cost-model terms a simulated deployment gets, sized by the planner.

:func:`replica_pools` plans the deployment with :func:`kvscope.plan.memory.plan_memory`
for its full layout (TP, PP, DP, EP, DP attention, engine release), so each engine's pool
is the ``num_gpu_blocks`` ``kvscope plan`` reports (the minimum over pipeline stages, as
vLLM takes the minimum over its workers), and makes one pool per DP rank. Units: blocks,
bytes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kvscope.errors import KvscopeError
from kvscope.sim.cost import HardwareTerms
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.kv_tiers import TierStack, build_stack
from kvscope.sim.layout import KVLayout, layout_for
from kvscope.sim.tier_spec import with_cpu_size

if TYPE_CHECKING:
    from kvscope.plan.config import EngineConfig
    from kvscope.sim.run import SimConfig


def build_pool(cfg: SimConfig) -> tuple[PagedPool, KVLayout, HardwareTerms, dict[str, Any]]:
    """The KV pool one engine of the deployment gets (sized by the planner for the full
    layout: ``kvscope plan``'s ``num_gpu_blocks``, the minimum over pipeline stages), its
    layout and cost-model terms. Each DP replica gets a pool of this size
    (:func:`replica_pools`)."""
    pools, layout, terms, info = replica_pools(cfg, 1)
    return pools[0], layout, terms, info


def engine_config(cfg: SimConfig) -> EngineConfig:
    """The planner's engine settings of ``cfg``, checked by the planner's one validation layer
    (:class:`kvscope.plan.config.EngineConfig`): a flag the engine does not have (vLLM with
    ``--moe-runner-backend``, SGLang with ``--decode-context-parallel-size``, ...) raises
    here. The drafter's weights, KV layers and lookahead slots come out of the pool as vLLM
    sizes it (:mod:`kvscope.plan.drafter`): the plan ``kvscope plan --speculative-config``
    shows."""
    from kvscope.plan.config import EngineConfig

    speculative = None
    if cfg.speculative_config is not None:
        from kvscope.plan.speculative import parse_vllm

        speculative = parse_vllm(cfg.speculative_config)
    return EngineConfig(
        engine=cfg.engine,
        engine_version=cfg.engine_version,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        mem_fraction_static=cfg.mem_fraction_static,
        max_model_len=cfg.max_model_len,
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        block_size=cfg.block_size,
        kv_cache_dtype=cfg.kv_cache_dtype,
        enable_prefix_caching=cfg.enable_prefix_caching,
        async_scheduling=cfg.async_scheduling,
        decode_context_parallel_size=cfg.decode_context_parallel_size,
        mm_encoder_tp_mode=cfg.mm_encoder_tp_mode,
        disable_custom_all_reduce=cfg.disable_custom_all_reduce,
        cold_compile=cfg.cold_compile,
        hipblaslt=cfg.hipblaslt,
        language_model_only=cfg.language_model_only,
        entrypoint=cfg.entrypoint,
        limit_mm_per_prompt=cfg.limit_mm_per_prompt,
        enable_extensible_kv_cache=cfg.enable_extensible_kv_cache,
        gpu_memory_in_use_gib=cfg.gpu_memory_in_use_gib,
        moe_runner_backend=cfg.moe_runner_backend,
        attention_backend=cfg.attention_backend,
        shared_expert_tp1=cfg.shared_expert_tp1,
        max_lora_rank=cfg.max_lora_rank,
        max_loras=cfg.max_loras,
        speculative=speculative,
    )


def replica_pools(
    cfg: SimConfig, replicas: int
) -> tuple[list[PagedPool], KVLayout, HardwareTerms, dict[str, Any]]:
    """``replicas`` KV pools of the planned size (one per DP rank), layout, terms, info."""
    from kvscope.plan.config import check_layout
    from kvscope.plan.memory import plan_memory
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model

    if cfg.engine == "llama.cpp":
        from kvscope.sim import llama_cpp

        if cfg.gpu_memory_in_use_gib:
            raise KvscopeError("--gpu-memory-in-use is modelled for --engine vllm and sglang.")
        return llama_cpp.replica_pools(cfg, replicas)
    if cfg.ctx_size is not None:
        raise KvscopeError("--ctx-size is llama.cpp's -c; it needs --engine llama.cpp.")
    model = load_model(cfg.model, dtype=cfg.dtype, revision=cfg.revision)
    gpu = get_gpu(cfg.gpu)
    par = cfg.parallelism
    check_layout(par, model.is_moe, model.name)
    eng = engine_config(cfg)
    plan = plan_memory(model, gpu, par, eng)
    shape = _shape(par, gpu.name)
    if cfg.num_gpu_blocks_override is None and not plan.fits:
        # The planner's verdict: the engine would refuse to start (e.g. one request of
        # --max-model-len needs more KV than the GPU has), so there is nothing to simulate.
        raise KvscopeError(
            f"{model.name} on {shape} does not start: {plan.problem}",
            hint="Lower --max-model-len, use more GPUs (--tp), or size the pool with "
            "--num-gpu-blocks-override.",
        )
    # Under DCP each rank keeps every DCP-th token of a request, so one block of the engine's
    # table covers block_size x DCP tokens (vLLM's KV cache managers scale their block size
    # by the DCP world size, vllm/v1/core/single_type_kv_cache_manager.py at 0.31.0)
    if cfg.decode_context_parallel_size > 1 and "dsv41" in model.attention_kinds:
        raise KvscopeError(
            "--decode-context-parallel-size: DeepSeek V4.1's replicated window and ring groups "
            "under DCP are not modelled by the simulator; use --dcp 1."
        )
    layout = layout_for(
        model,
        plan.block_size * cfg.decode_context_parallel_size,
        eng.indexer_dtype,
        par.tp,
    )
    blocks = (
        plan.num_gpu_blocks
        if cfg.num_gpu_blocks_override is None
        else (cfg.num_gpu_blocks_override)
    )
    if cfg.engine == "vllm" and model.attention_chunk_size and plan.num_kv_groups > 1:
        # Llama 4's chunked groups (kvscope.plan.vllm_chunked): the simulator keeps its
        # full-history view (kvscope.sim.layout), one block of which spans the same tokens'
        # block in every group
        blocks //= plan.num_kv_groups
    if blocks < 2 and cfg.num_gpu_blocks_override is not None:
        raise KvscopeError(
            f"--num-gpu-blocks-override {blocks}: the KV pool needs at least 2 blocks "
            "(vLLM keeps one as its null block)."
        )
    if blocks < 2:
        raise KvscopeError(
            f"{model.name} on {shape} leaves {blocks} KV blocks "
            f"({plan.kv_cache_gib:.1f} GiB for KV); nothing can run."
            + (f" {plan.problem}" if plan.problem else ""),
            hint="use more GPUs (--tp), a higher --gpu-memory-utilization, or "
            "--num-gpu-blocks-override.",
        )
    specs = with_cpu_size(cfg.kv_offload, cfg.cpu_offload_gib)
    if specs and not cfg.enable_prefix_caching:
        raise KvscopeError(
            "--kv-offload / --cpu-offload-gib need prefix caching (tiers keep cached blocks)."
        )
    # one GPU's block as the planner sizes KV per token (MLA latent, V4 groups, fp8)
    tier_block_bytes = plan.kv_bytes_per_token * plan.block_size

    def tiers() -> TierStack | None:
        if not specs:
            return None
        return build_stack(
            specs, cfg.kv_offload_store, tier_block_bytes, par.tp * par.pp, gpu.pcie_bandwidth
        )

    pools = [
        PagedPool(
            blocks,
            layout,
            enable_caching=cfg.enable_prefix_caching,
            tiers=tiers(),
            window_model=cfg.window_model,
        )
        for _ in range(replicas)
    ]
    terms = HardwareTerms.from_specs(
        model,
        gpu,
        tp=cfg.tp,
        kv_cache_dtype=cfg.kv_cache_dtype,
        par=par,
    )
    if cfg.decode_context_parallel_size > 1:
        # each rank of a DCP group reads its 1/DCP of every request's KV (the query heads are
        # gathered instead, so attention FLOPs per rank stay); the partial-output exchange
        # is not priced
        terms = replace(
            terms, kv_bytes_per_token=terms.kv_bytes_per_token / cfg.decode_context_parallel_size
        )
    info = {
        "num_gpu_blocks": blocks,
        "capacity": pools[0].capacity,
        "block_size": layout.block_size,
        "layout": layout.name,
        "window_blocks_per_request": layout.fixed_blocks_per_request,
        "block_bytes": plan.block_bytes,
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "kv_cache_gib": plan.kv_cache_gib,
        "sized_by": f"kvscope.plan.memory.plan_memory ({cfg.engine} " + plan.engine_version + ")"
        if cfg.num_gpu_blocks_override is None
        else "--num-gpu-blocks-override",
        "max_model_len": plan.max_model_len,
        "max_num_seqs": plan.max_num_seqs,
        "max_num_batched_tokens": plan.max_num_batched_tokens,
        "kv_tokens": plan.kv_tokens,
        "engine_version": plan.engine_version,
        "in_flight_tokens": plan.in_flight_tokens,
        "parallel": {
            "tp": par.tp,
            "pp": par.pp,
            "dp": par.dp,
            "ep_size": par.ep_size if model.is_moe else 1,
            "dp_attention": par.dp_attention,
            "num_gpus": par.world_size,
            "engine_replicas": par.dp,
            "stage_blocks": [r.num_gpu_blocks for r in plan.ranks],
        },
    }
    if pools[0].tiers is not None:
        info["offload_tiers"] = pools[0].tiers.terms()
        info["offload_store"] = cfg.kv_offload_store
    return pools, layout, terms, info


def _shape(par: Any, gpu: str) -> str:
    """``8x H100`` or ``16x H100 (TP8 x PP2)``: the deployment, for one-line errors."""
    n = par.world_size
    if par.pp == 1 and par.dp == 1:
        return f"{n}x {gpu}"
    parts = [f"TP{par.tp}"] + [f"{k}{v}" for k, v in (("PP", par.pp), ("DP", par.dp)) if v > 1]
    return f"{n}x {gpu} ({' x '.join(parts)})"
