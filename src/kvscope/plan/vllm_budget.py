"""vLLM's KV-cache budget, block count and logged capacity, by engine version.

Paraphrase of ``vllm/v1/worker/gpu_worker.py::Worker.determine_available_memory``,
``vllm/utils/mem_utils.py::memory_profiling`` and ``vllm/v1/core/kv_cache_utils.py``
(releases 0.11.0, 0.19.0, 0.33.0; V0 from 0.7.3; shared/reference/vllm_kv_budget.md):

    requested    = total_memory x gpu_memory_utilization   (ceil from 0.19 on)
    available_kv = requested - weights - activation peak - non-torch [- CUDA-graph estimate]
    num_blocks   = available_kv // block_bytes            (minimum over all ranks)

Version eras, following ``--engine-version``:

- V0 (< 0.8): "# GPU blocks: N"; tokens = N x block_size; MLA entries padded to 256 B.
- V1 0.8 - 0.20: "GPU KV cache size: N tokens" with N = num_blocks // groups x block_size;
  the CUDA-graph estimate (PR #30515, present from ~0.14) is logged, not subtracted.
- V1 >= 0.21: the estimate is subtracted by default ("default since v0.21.0") and
  N = int(max_concurrency x max_model_len) (``get_kv_cache_capacity``).

Max concurrency = num_blocks / blocks one ``max_model_len`` request needs over all groups
(V0: tokens / max_model_len). Units: bytes unless a name says GiB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvscope.plan.activation import activation_peak
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_layout import KVLayout, vllm_layout
from kvscope.plan.weights import RankWeights
from kvscope.specs.hardware import GIB, GPUSpec
from kvscope.specs.model import ModelSpec

DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vllm/config/cache.py CacheConfig
DEFAULT_BLOCK_SIZE = 16  # CacheConfig.DEFAULT_BLOCK_SIZE

#: Non-torch memory grown during start-up (NCCL, custom all-reduce, cuBLAS workspaces), GiB.
#: Read from 0.19 H100 logs: ~0.25 at TP1, ~2.1 at TP >= 2 (custom all-reduce + symmetric
#: memory buffers), ~0.07 more per extra PP stage with TP1 (vllm_kv_budget.md §1.2). Older
#: releases (V0 and V1 before 0.11) logged 0.2-0.7 GiB at TP >= 2 (e.g. vllm PR #14447 logs).
NON_TORCH_GIB = {"tp1": 0.25, "tp_multi": 2.1, "tp_multi_old": 0.6, "pp_only": 0.07}

#: CUDA-graph memory estimate per decoder layer on this GPU, GiB: captured graphs keep
#: per-layer intermediate pools; ~0.4 GiB for a 32-layer model is typical of the
#: "Estimated CUDA graph memory" lines (PR #30515 discussion, issues #45178/#45197).
CUDAGRAPH_GIB_PER_LAYER = 0.0125


@dataclass(frozen=True)
class VllmDefaults:
    """Flags resolved to what vLLM would use for this GPU and version."""

    gpu_memory_utilization: float
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    cudagraph_subtracted: bool


@dataclass(frozen=True)
class VllmRank:
    """One GPU's (one PP stage's) budget terms, bytes."""

    pp_rank: int
    requested: float
    weights: float
    activation: float
    non_torch: float
    cudagraph: float
    available_kv: float
    layout: KVLayout
    num_blocks: int


def resolve_defaults(model: ModelSpec, gpu: GPUSpec, eng: EngineConfig) -> VllmDefaults:
    """Fill in vLLM's defaults (``vllm/engine/arg_utils.py::_set_default_args``)."""
    v = eng.version
    max_len = eng.max_model_len or model.max_position_embeddings
    big = gpu.memory_bytes >= 70 * GIB
    if eng.max_num_batched_tokens is not None:
        tokens = eng.max_num_batched_tokens
    elif v < (0, 8, 0):
        # V0 without chunked prefill profiles one full-length prompt (at least 2048);
        # chunked prefill (default above 32K context) uses 512-token chunks.
        tokens = max(max_len, 2048) if max_len <= 32768 else 512
    else:
        tokens = 8192 if big else 2048  # `vllm serve` (OPENAI_API_SERVER) defaults
    seqs = eng.max_num_seqs or (1024 if big and v >= (0, 8, 0) else 256)
    block = eng.block_size or _default_block_size(model, gpu, v)
    default_subtract = v >= (0, 21, 0)
    subtract = default_subtract if eng.cudagraph_memory is None else eng.cudagraph_memory
    subtract = subtract and not eng.enforce_eager
    gmu = eng.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
    return VllmDefaults(gmu, max_len, tokens, seqs, block, subtract)


def _default_block_size(model: ModelSpec, gpu: GPUSpec, v: tuple[int, int, int]) -> int:
    """Block size the attention backend forces (``vllm/platforms/cuda.py``, 0.11 / 0.19)."""
    kinds = model.attention_kinds
    if any(k.startswith("dsv4") for k in kinds):
        return 256  # sparse-SWA backend; the recipes pass --block-size 256
    if "mla_sparse" in kinds:
        return 64  # FLASHMLA_SPARSE
    if "mla" in kinds:
        if gpu.architecture.lower().startswith("blackwell") and v >= (0, 11, 0):
            return 128  # CUTLASS_MLA
        if gpu.architecture.lower() == "hopper" and (0, 8, 0) <= v < (0, 19, 0):
            return 64  # FlashMLA forced its block size until the 0.19 backend selection
    return DEFAULT_BLOCK_SIZE


def non_torch_bytes(par: Parallelism, v: tuple[int, int, int]) -> float:
    """Estimated non-torch memory growth on one GPU (see :data:`NON_TORCH_GIB`)."""
    if par.tp > 1:
        gib = NON_TORCH_GIB["tp_multi"] if v >= (0, 11, 0) else NON_TORCH_GIB["tp_multi_old"]
    else:
        gib = NON_TORCH_GIB["tp1"] + (NON_TORCH_GIB["pp_only"] if par.pp > 1 else 0.0)
    return gib * GIB


def plan_ranks(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    eng: EngineConfig,
    stage_weights: tuple[RankWeights, ...],
    kv_dtype: str,
    defaults: VllmDefaults,
) -> tuple[VllmRank, ...]:
    """Budget of every pipeline stage (TP ranks of a stage are identical)."""
    v = eng.version
    if v >= (0, 19, 0):
        requested = float(math.ceil(gpu.memory_bytes * defaults.gpu_memory_utilization))
    else:
        requested = gpu.memory_bytes * defaults.gpu_memory_utilization
    attn_tp = par.tp
    out = []
    for w in stage_weights:
        last = w.pp_rank == par.pp - 1
        act = activation_peak(
            model, par, defaults.max_num_batched_tokens, defaults.max_num_seqs, last
        )
        non_torch = non_torch_bytes(par, v)
        graphs = CUDAGRAPH_GIB_PER_LAYER * len(w.layers) * GIB
        if eng.enforce_eager:
            graphs = 0.0
        spent = w.total_bytes + act.total_bytes + non_torch
        if defaults.cudagraph_subtracted:
            spent += graphs
        available = requested - spent
        if eng.kv_cache_memory_bytes is not None:
            available = float(eng.kv_cache_memory_bytes)
        layout = vllm_layout(
            model,
            w.layers,
            kv_dtype,
            attn_tp,
            defaults.block_size,
            eng.indexer_dtype,
            dsv4_packed=v >= (0, 24, 0),
            v0_mla_padding=v < (0, 8, 0),
        )
        blocks = max(0, int(available // layout.block_bytes)) if layout.block_bytes else 0
        if eng.num_gpu_blocks_override is not None:
            blocks = eng.num_gpu_blocks_override
        out.append(
            VllmRank(
                w.pp_rank,
                requested,
                w.total_bytes,
                act.total_bytes,
                non_torch,
                graphs,
                available,
                layout,
                blocks,
            )
        )
    return tuple(out)


def logged_capacity(
    layout: KVLayout, num_blocks: int, defaults: VllmDefaults, v: tuple[int, int, int]
) -> tuple[int, float]:
    """("GPU KV cache size" tokens, "Maximum concurrency") as the version logs them."""
    length = defaults.max_model_len
    if v < (0, 8, 0):
        tokens = num_blocks * layout.block_size
        return tokens, tokens / length
    need = layout.blocks_per_request(length, defaults.max_num_batched_tokens)
    concurrency = num_blocks / need if need else 0.0
    if v >= (0, 21, 0):
        return int(concurrency * length), concurrency
    tokens = num_blocks // len(layout.groups) * min(g.block_size for g in layout.groups)
    return tokens, concurrency
