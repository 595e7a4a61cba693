"""vLLM's attention backend (``--attention-backend``, env ``VLLM_ATTENTION_BACKEND``): the names
each release takes, the KV block size the backend sets, and the memory it holds outside the KV
pool (bytes on one GPU). ``None`` is the engine's automatic choice.

Names: the ``_Backend`` enum (vllm/attention/selector.py at 0.6.4; vllm/platforms/interface.py
at 0.6.5-0.9.2) and ``AttentionBackendEnum`` (vllm/v1/attention/backends/registry.py at 0.22.0-
0.31.0), read in the wheels of :data:`NAMES`. A release between two read wheels takes a name
either of them has; ``CUSTOM`` (a plugin's class) is not modelled.

Block size (tokens):

- the automatic choice (:func:`auto_block_size`): FLASHMLA-sparse 64 for DeepSeek V3.2,
  CUTLASS MLA 128 on Blackwell from 0.11, FlashMLA 64 on Hopper at 0.8-0.18, else 16;
- a named backend up to 0.18: ``CudaPlatform.check_and_update_config`` (vllm/platforms/
  cuda.py, 0.10-0.18) forces FLASHMLA to 64, CUTLASS_MLA to 128 and FLASHINFER_MLA to 64
  (32 kept); 0.9.2 forces only FlashMLA; V0 sets 16;
- from 0.19 ``Platform.update_block_size_for_backend`` (vllm/platforms/interface.py of the
  0.22.0 wheel) takes ``get_preferred_block_size(16)``: 16 when the kernel takes it
  (``get_supported_kernel_block_sizes``: TRITON_MLA, FLASH_ATTN_MLA, TRITON_ATTN multiples of
  16; FLASHINFER 16/32/64), else its smallest size (:data:`PREFERRED_BLOCK_SIZE`); ROCm's
  AITER MLA took blocks of 1 only before (rocm.py of 0.9.2); FlashAttention 4's own sizes
  on SM90 fp8 / head size 256 (0.31.0) are not modelled;
- DeepSeek V4 keeps 256 and V3.2 64 whatever the backend (their indexer caches' sizes).

Memory:

- CUTLASS_MLA (0.22.0-0.31.0 wheels: ``g_sm100_workspace = SM100Workspace(128 MiB)``) and
  FLASHINFER_MLA (0.22.0 and 0.23.0: ``g_fi_workspace``, 128 MiB) allocate a workspace when
  their module is imported, which the first attention layer built in ``load_model`` does
  (the worker sets the block size only after loading, vllm/v1/executor/multiproc_executor.py
  of 0.22.0), so it falls inside "Model loading took" (:func:`load_bytes`);

- V0's FLASHINFER (0.6.4-0.7.2 wheels, vllm/attention/backends/flashinfer.py):
  ``FlashInferState.begin_forward`` runs in the profiling pass too and allocates the 256 MiB
  ``FLASHINFER_WORKSPACE_BUFFER_SIZE`` buffer the state keeps, so it is inside the profiled
  peak and leaves the KV cache (:func:`profile_workspace_bytes`);
- TRITON_MLA from 0.25.0 (vllm/v1/attention/backends/mla/triton_mla.py,
  ``TritonMLAMetadataBuilder._reserve_attn_logits_workspace``) reserves in the worker's
  ``WorkspaceManager`` ``max_num_seqs`` x heads/TP x DCP x ``min(next_pow2(max_model_len //
  512), 2 x SMs)`` x (``kv_lora_rank`` + 1) fp32 (0.31.0: ``max_num_seqs`` x the reorder
  threshold rows). The builder is made in ``_init_minimal_kv_cache_for_profiling``, after
  the profiled torch peak is read and before the CUDA-graph samples
  (vllm/v1/worker/gpu_model_runner.py and gpu_worker.py of the 0.25.0 wheel), so vLLM
  subtracts it nowhere: it is memory held beside the pool (:func:`outside_pool_bytes`).
  0.20.0-0.23.0 allocate the logits per call; V1's FlashInfer workspace is made with the
  builders too, so it is not in the budget either.

CUDA graphs:

- V1's FLASHINFER builder allocates its ``VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE`` workspace
  (394 MiB, vllm/envs.py of the 0.22.0-0.31.0 wheels) on its first ``build``
  (``FlashInferMetadataBuilder._get_workspace_buffer``). ``profile_cudagraph_memory`` makes
  fresh builders for its minimal KV cache, captures PIECEWISE graphs first (no attention
  metadata), then FULL decode graphs, whose warm-up builds metadata (``force_attention``), so
  the first FULL sample holds one workspace per attention group
  (:func:`first_capture_bytes`; kvscope adds it to its one first-capture term, which assumes
  that sample is the larger of the two). Under speculative decoding FlashInfer's
  single-token FULL graphs are not captured, and the V2 runner shares one workspace
  (vllm/v1/worker/gpu/attn_utils.py): neither is given the term.
- FLASHINFER_MLA from 0.25.0 allocates its module-global workspace on its first decode
  (``_get_workspace_buffer``: 128 MiB, 256 MiB when DCP needs the log-sum-exp), i.e. in
  the first FULL warm-up, and keeps it: also a first-capture term.
- A backend whose builder declares no CUDA-graph support (TRITON_MLA before 0.22.0) makes
  vLLM capture PIECEWISE graphs only; kvscope's graph estimate is a fit over graph counts and
  does not take that into account (see benchmarks/RESULTS.md).
"""

from __future__ import annotations

from kvscope.errors import KvscopeError
from kvscope.plan._cache import attention_kinds
from kvscope.plan.config import EngineConfig
from kvscope.plan.kv_layout import MLA_CACHE_SINCE, KVLayout
from kvscope.plan.vllm_runner import runs_v2
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

_V064 = (
    "FLASH_ATTN FLASH_ATTN_VLLM_V1 XFORMERS ROCM_FLASH TORCH_SDPA OPENVINO FLASHINFER HPU_ATTN "
    "PALLAS IPEX NO_ATTENTION"
)
_V071 = _V064 + " TRITON_MLA BLOCK_SPARSE_FLASH_ATTN"
_V092 = (
    "FLASH_ATTN FLASH_ATTN_VLLM_V1 TRITON_ATTN_VLLM_V1 XFORMERS ROCM_FLASH ROCM_AITER_MLA "
    "ROCM_AITER_MLA_VLLM_V1 TORCH_SDPA FLASHINFER FLASHINFER_VLLM_V1 TRITON_MLA "
    "TRITON_MLA_VLLM_V1 FLASHMLA_VLLM_V1 FLASHMLA CUTLASS_MLA_VLLM_V1 HPU_ATTN PALLAS "
    "PALLAS_VLLM_V1 IPEX BLOCK_SPARSE_FLASH_ATTN DUAL_CHUNK_FLASH_ATTN NO_ATTENTION "
    "FLEX_ATTENTION"
)
_V022 = (
    "FLASH_ATTN FLASH_ATTN_DIFFKV TRITON_ATTN ROCM_ATTN ROCM_AITER_MLA ROCM_AITER_TRITON_MLA "
    "ROCM_AITER_FA ROCM_AITER_MLA_SPARSE XPU_MLA_SPARSE TORCH_SDPA FLASHINFER FLASHINFER_MLA "
    "TOKENSPEED_MLA FLASHINFER_MLA_SPARSE TRITON_MLA CUTLASS_MLA FLASHMLA FLASHMLA_SPARSE "
    "FLASH_ATTN_MLA NO_ATTENTION FLEX_ATTENTION ROCM_AITER_UNIFIED_ATTN CPU_ATTN TURBOQUANT"
)
_V023 = _V022 + " FLASHMLA_SPARSE_DSV4 FLASHINFER_MLA_SPARSE_DSV4 ROCM_FLASHMLA_SPARSE_DSV4"
_V025 = _V023 + (
    " TRITON_ATTN_DIFFKV FLASHINFER_MLA_SPARSE_SM120 FLASH_ATTN_MLA_SPARSE MINIMAX_M3_SPARSE "
    "HPC_ATTN"
)
_V027 = _V025 + " CUTLASS_MSA TRITON_MSA"
_V030 = _V027 + (
    " TRITON_FLASH_ATTN TRITON_FLASHINFER FLASHINFER_MLA_SPARSE_SM90 FLASHMLA_SPARSE_DSV41 "
    "FLASHINFER_MLA_SPARSE_DSV41 B12X CPU_MLA AMX_MLA"
)
_V031 = _V030 + " FLASHMLA_MEGA_ATTN_DSV41"

#: Backend names of each read release (wheel), ascending.
NAMES: tuple[tuple[tuple[int, int, int], frozenset[str]], ...] = tuple(
    (v, frozenset(text.split()))
    for v, text in (
        ((0, 6, 4), _V064),
        ((0, 6, 6), _V064),
        ((0, 7, 1), _V071),
        ((0, 7, 2), _V071),
        ((0, 9, 2), _V092),
        ((0, 22, 0), _V022),
        ((0, 23, 0), _V023),
        ((0, 25, 0), _V025),
        ((0, 27, 0), _V027),
        ((0, 30, 0), _V030),
        ((0, 31, 0), _V031),
    )
)

#: ``CacheConfig.DEFAULT_BLOCK_SIZE`` (vllm/config/cache.py), tokens.
DEFAULT_BLOCK_SIZE = 16
#: First release whose block size follows the backend's preferred size (0.19's selection).
PREFERRED_BLOCK_SIZE_SINCE = (0, 19, 0)
#: First release whose cuda.py forces CUTLASS MLA's and FlashInfer MLA's block sizes.
FORCED_MLA_SIZES_SINCE = (0, 10, 0)
#: V0's FlashInfer workspace (``FLASHINFER_WORKSPACE_BUFFER_SIZE``), bytes.
V0_FLASHINFER_WORKSPACE = 256 << 20
#: ``VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE`` default (vllm/envs.py, 0.22.0-0.31.0), bytes.
FLASHINFER_WORKSPACE = 394 << 20
#: First wheel read whose CUDA-graph profile builds FlashInfer metadata on fresh builders.
FLASHINFER_GRAPH_WORKSPACE_SINCE = (0, 22, 0)
#: CUTLASS MLA's and FlashInfer MLA's workspace (cutlass_mla.py, flashinfer_mla.py), bytes.
MLA_WORKSPACE = 128 << 20
#: FlashInfer MLA's workspace when DCP returns the log-sum-exp (flashinfer_mla.py, 0.25.0).
MLA_LSE_WORKSPACE = 256 << 20
#: First wheel read holding the import-time MLA workspaces (0.9.2's cutlass_mla.py has none).
LOAD_WORKSPACE_SINCE = (0, 22, 0)
#: First wheel whose FlashInfer MLA workspace is made on the first decode (0.23.0: at import).
FLASHINFER_MLA_LAZY_SINCE = (0, 25, 0)
#: First wheel whose TRITON_MLA builder reserves its logits workspace (absent in 0.23.0).
TRITON_MLA_WORKSPACE_SINCE = (0, 25, 0)
#: First wheel whose reservation covers ``max_num_seqs`` x the reorder threshold rows.
TRITON_MLA_SPEC_ROWS_SINCE = (0, 31, 0)
#: ``_MIN_WORK_PER_SPLIT`` and ``_SPLIT_OCCUPANCY_MULTIPLIER`` (triton_mla.py, 0.25.0-0.31.0).
MIN_WORK_PER_SPLIT = 512
SPLIT_OCCUPANCY = 2


def _release_names(v: tuple[int, int, int]) -> frozenset[str]:
    below = [names for r, names in NAMES if r <= v]
    above = [names for r, names in NAMES if r >= v]
    lo = below[-1] if below else NAMES[0][1]
    hi = above[0] if above else NAMES[-1][1]
    return lo | hi


def canonical(name: str) -> str:
    """The backend a name selects (0.9's V1 aliases drop their ``_VLLM_V1`` suffix)."""
    return name.upper().removesuffix("_VLLM_V1")


def check_attention_backend(engine: str, version: tuple[int, int, int], name: str | None) -> None:
    """Refuse a backend name the engine or release does not have (one sentence)."""
    if name is None:
        return
    if engine != "vllm":
        raise KvscopeError(
            "--attention-backend is modelled for vLLM only; SGLang's --attention-backend "
            "(its own names) is not.",
            "Drop --attention-backend with --engine sglang.",
        )
    text = ".".join(str(p) for p in version)
    if name.upper() == "CUSTOM":
        raise KvscopeError(
            "--attention-backend CUSTOM runs a plugin's backend, which kvscope cannot model.",
            "Leave --attention-backend out to plan vLLM's automatic choice.",
        )
    names = _release_names(version)
    if name.upper() not in names:
        raise KvscopeError(
            f"--attention-backend '{name}' is not a backend of vLLM {text} "
            f"(it has {', '.join(sorted(names))}).",
            "Leave it out for vLLM's automatic choice.",
        )


def _is_mla_backend(name: str) -> bool:
    return "MLA" in name or name.endswith(("_DSV4", "_DSV41"))


def check_fits_model(model: ModelSpec, v: tuple[int, int, int], name: str | None) -> None:
    """Refuse an MLA backend for a model without MLA layers and the reverse, as vLLM's
    selector does ("not valid for this configuration", vllm/platforms/cuda.py); before
    MLA's release vLLM ran DeepSeek's latent attention as ordinary heads."""
    if name is None:
        return
    kinds = attention_kinds(model)
    mla = model.is_deepseek_v4 or any(k.startswith("mla") for k in kinds)
    mla = mla and v >= MLA_CACHE_SINCE
    if mla != _is_mla_backend(canonical(name)):
        need = "an MLA backend (TRITON_MLA, FLASHMLA, ...)" if mla else "a non-MLA backend"
        raise KvscopeError(
            f"--attention-backend {name} cannot run {model.name}: it needs {need}.",
            "Leave --attention-backend out for vLLM's automatic choice.",
        )


def auto_block_size(model: ModelSpec, gpu: GPUSpec, v: tuple[int, int, int]) -> int:
    """Block size of vLLM's automatic backend (``vllm/platforms/cuda.py``, 0.11 / 0.19)."""
    kinds = attention_kinds(model)
    if model.is_deepseek_v4:
        return 256  # sparse-SWA backend; the recipes pass --block-size 256
    if "mla_sparse" in kinds:
        return 64  # FLASHMLA_SPARSE
    if "mla" in kinds:
        # CUTLASS MLA runs on compute capability 10.x only (``CutlassMLABackend``
        # ``supports_compute_capability``); on 12.x (RTX PRO 6000, RTX 5090, GB10) the
        # selector falls through to TRITON_MLA (``_get_backend_priorities``, cuda.py of 0.22.0)
        sm12 = gpu.compute_capability.startswith("12.")
        if gpu.architecture.lower().startswith("blackwell") and v >= (0, 11, 0) and not sm12:
            return 128  # CUTLASS_MLA
        if gpu.architecture.lower() == "hopper" and (0, 8, 0) <= v < PREFERRED_BLOCK_SIZE_SINCE:
            return 64  # FlashMLA forced its block size until the 0.19 backend selection
    return DEFAULT_BLOCK_SIZE


#: From 0.19, the backends whose kernels do not take 16-token blocks and the size
#: ``get_preferred_block_size(16)`` then returns: the smallest of
#: ``get_supported_kernel_block_sizes`` (wheels 0.22.0, 0.25.0, 0.31.0), or the override
#: (ROCM_AITER_UNIFIED_ATTN: 64).
PREFERRED_BLOCK_SIZE = {
    "CUTLASS_MLA": 128,
    "FLASHMLA": 64,
    "FLASHMLA_SPARSE": 64,
    "FLASH_ATTN_MLA_SPARSE": 64,
    "FLASHINFER_MLA_SPARSE_SM120": 64,
    "HPC_ATTN": 64,
    "ROCM_AITER_UNIFIED_ATTN": 64,
    "FLASHINFER_MLA": 32,
    "FLASHINFER_MLA_SPARSE": 32,
    "TOKENSPEED_MLA": 32,
}


def block_size(model: ModelSpec, gpu: GPUSpec, v: tuple[int, int, int], name: str | None) -> int:
    """The KV block size (tokens) vLLM at ``v`` sets for backend ``name`` (the module text)."""
    if name is None or model.is_deepseek_v4 or "mla_sparse" in attention_kinds(model):
        return auto_block_size(model, gpu, v)
    b = canonical(name)
    if v >= PREFERRED_BLOCK_SIZE_SINCE:
        return PREFERRED_BLOCK_SIZE.get(b, DEFAULT_BLOCK_SIZE)
    if b in ("FLASHMLA", "FLASHMLA_SPARSE"):
        return 64
    if b == "CUTLASS_MLA" and v >= FORCED_MLA_SIZES_SINCE:
        return 128
    if b == "FLASHINFER_MLA" and v >= FORCED_MLA_SIZES_SINCE:
        return 64
    if b == "ROCM_AITER_MLA":
        return 1  # its only size (vllm/platforms/rocm.py of 0.9.2 refuses any other)
    return DEFAULT_BLOCK_SIZE


def load_bytes(v: tuple[int, int, int], name: str | None) -> float:
    """Backend buffers made while vLLM loads the model (bytes, inside "Model loading took")."""
    b = canonical(name) if name is not None else None
    if v >= LOAD_WORKSPACE_SINCE and (
        b == "CUTLASS_MLA" or (b == "FLASHINFER_MLA" and v < FLASHINFER_MLA_LAZY_SINCE)
    ):
        return float(MLA_WORKSPACE)
    return 0.0


def profile_workspace_bytes(v: tuple[int, int, int], name: str | None) -> float:
    """Backend buffers made inside vLLM's profiling pass, so inside its peak (bytes)."""
    if name is not None and canonical(name) == "FLASHINFER" and v < (0, 8, 0):
        return float(V0_FLASHINFER_WORKSPACE)
    return 0.0


def first_capture_bytes(
    model: ModelSpec, eng: EngineConfig, gpu: GPUSpec, layout: KVLayout
) -> float:
    """Backend buffers inside the first FULL sample of vLLM's CUDA-graph estimate (bytes):
    V1 FlashInfer's workspace, one per attention group of ``layout``, or FlashInfer MLA's
    (the module text)."""
    v, name, spec = eng.version, eng.attention_backend, eng.speculative
    if name is not None and canonical(name) == "FLASHINFER_MLA" and v >= FLASHINFER_MLA_LAZY_SINCE:
        return float(MLA_LSE_WORKSPACE if eng.decode_context_parallel_size > 1 else MLA_WORKSPACE)
    if name is None or canonical(name) != "FLASHINFER" or v < FLASHINFER_GRAPH_WORKSPACE_SINCE:
        return 0.0
    if spec is not None or runs_v2(model, eng, gpu):
        return 0.0
    groups = sum(1 for g in layout.groups if g.kind != "linear_state")
    return float(FLASHINFER_WORKSPACE * groups)


def outside_pool_bytes(
    model: ModelSpec,
    gpu: GPUSpec,
    v: tuple[int, int, int],
    name: str | None,
    tp: int,
    dcp: int,
    max_num_seqs: int,
    max_model_len: int,
    speculative_tokens: int = 0,
) -> float:
    """Backend buffers vLLM keeps but subtracts nowhere, beside the KV pool (bytes, one GPU):
    TRITON_MLA's logits workspace from 0.25.0 (the module text)."""
    if name is None or canonical(name) != "TRITON_MLA" or v < TRITON_MLA_WORKSPACE_SINCE:
        return 0.0
    att = next((layer.attention for layer in model.layers if layer.attention.kv_lora_rank), None)
    sms = gpu.sm_count  # ``num_compute_units``: the catalogue's SMs (NVIDIA) or CUs (AMD)
    if att is None or sms is None:
        return 0.0
    rows = max_num_seqs * ((1 + speculative_tokens) if v >= TRITON_MLA_SPEC_ROWS_SINCE else 1)
    heads = max(1, att.num_heads // tp) * dcp
    ideal = 1 << max(0, (max(1, max_model_len // MIN_WORK_PER_SPLIT) - 1).bit_length())
    splits = min(ideal, SPLIT_OCCUPANCY * sms)
    return float(rows * heads * splits * (att.kv_lora_rank + 1) * 4)
