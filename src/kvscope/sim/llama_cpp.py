"""llama.cpp ``llama-server`` mode: N parallel slots, one continuous batch of n_batch tokens.

What the mode models (llama.cpp as vendored in llama-cpp-python 0.3.36,
``tools/server/server-context.cpp``: ``server_context::update_slots`` / ``pre_decode``,
``n_ctx_slot``; flags in ``common/arg.cpp``):

* ``-np N`` slots cap the requests in flight (the scheduler's ``max_num_seqs``); a request
  that finds every slot busy waits in the task queue, first come first served.
* Each iteration builds one batch: first the sampled token of every generating slot, then
  the pending prompt tokens of the slots still processing their prompt, in slot order, until
  the batch holds ``-b`` (n_batch, default 2048) tokens; a prompt longer than what is left is
  continued in the next iteration (prompt processing is chunked). That is vLLM's
  decode-first chunked prefill with ``max_num_batched_tokens = n_batch``, so the vLLM
  scheduler runs it; ``-ub`` (n_ubatch, default 512) only splits the batch into compute
  graphs inside ``llama_decode`` and is not a scheduling decision.
* ``-c`` tokens of KV; without ``--kv-unified`` every slot owns ``c / N`` of them
  (``llama_n_ctx_seq``), so a slot can never run out while another holds memory: no
  preemption, and a prompt of ``c / N`` tokens or more is refused (the server's
  "exceeds the available context size" error).

Not modelled: the per-slot prompt cache (``cache_prompt``: a slot reuses the common prefix of
its previous prompt; kvscope bench prompts share none), context shift, speculative decoding,
``--kv-unified`` (one shared pool: slots could then exhaust it).
"""

from __future__ import annotations

from typing import Any

from kvscope.errors import KvscopeError

#: llama-server's defaults (common/common.h as vendored in llama-cpp-python 0.3.36).
DEFAULT_N_BATCH = 2048
DEFAULT_N_UBATCH = 512
DEFAULT_PARALLEL = 4
DEFAULT_CTX = 4096
#: Tokens per KV block in kvscope's pool for this mode (llama.cpp's KV cells are single tokens;
#: slots own fixed ranges, so the block size only rounds the slot's range).
BLOCK_SIZE = 16


def slot_context(ctx_size: int, parallel: int) -> int:
    """Tokens of KV one slot owns: ``-c`` split evenly over ``-np`` slots."""
    per = ctx_size // parallel
    if per < 2:
        raise KvscopeError(
            f"--ctx-size {ctx_size} over {parallel} slots leaves {per} tokens per slot; "
            "llama-server needs at least 2."
        )
    return per


def replica_pools(cfg: Any, replicas: int) -> tuple[list[Any], Any, Any, dict[str, Any]]:
    """Pools, layout, cost terms and pool info for a llama.cpp deployment (``cfg`` a
    SimConfig): what :func:`kvscope.sim.deployment.replica_pools` returns for vLLM and
    SGLang. llama-server is one engine on one device: one replica, no TP/PP/DP."""
    from kvscope.sim.cost import HardwareTerms
    from kvscope.sim.kv_pool import PagedPool
    from kvscope.sim.layout import layout_for
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model

    check_config(cfg)
    if replicas != 1 or cfg.tp != 1 or cfg.pp != 1 or cfg.dp != 1:
        raise KvscopeError("--engine llama.cpp is one llama-server: --tp, --pp and --dp must be 1.")
    model = load_model(cfg.model, dtype=cfg.dtype, revision=cfg.revision)
    gpu = get_gpu(cfg.gpu)
    parallel = cfg.max_num_seqs or DEFAULT_PARALLEL
    ctx = cfg.ctx_size or DEFAULT_CTX
    per_slot = slot_context(ctx, parallel)
    n_batch = cfg.max_num_batched_tokens or DEFAULT_N_BATCH
    layout = layout_for(model, BLOCK_SIZE)
    blocks = parallel * -(-per_slot // BLOCK_SIZE) + 1  # +1: the pool's null block
    pool = PagedPool(blocks, layout, enable_caching=False)
    terms = HardwareTerms.from_specs(model, gpu, kv_cache_dtype=cfg.kv_cache_dtype)
    info = {
        "num_gpu_blocks": blocks,
        "capacity": pool.capacity,
        "block_size": BLOCK_SIZE,
        "layout": layout.name,
        "window_blocks_per_request": layout.fixed_blocks_per_request,
        "block_bytes": 0,
        "kv_cache_gib": 0.0,
        "sized_by": f"llama.cpp -c {ctx} over -np {parallel} slots ({per_slot} tokens each)",
        "max_model_len": per_slot,
        "max_num_seqs": parallel,
        "max_num_batched_tokens": n_batch,
        "ctx_size": ctx,
        "kv_tokens": parallel * per_slot,
    }
    return [pool], layout, terms, info


def check_config(cfg: Any) -> None:
    """Flags that mean nothing to llama-server are refused rather than silently ignored."""
    offload = cfg.cpu_offload_gib or cfg.kv_offload
    if cfg.allocator != "paged" or offload or cfg.preemption_mode != "recompute":
        raise KvscopeError(
            "--engine llama.cpp has fixed per-slot KV: --allocator, --kv-offload, "
            "--cpu-offload-gib and --preemption-mode do not apply."
        )
    if cfg.scheduling_policy != "fcfs":
        raise KvscopeError("--engine llama.cpp serves its task queue first come first served.")
