"""Which attention backend vLLM picks on its own for a non-MLA model on an NVIDIA GPU, where
that choice holds memory the planner counts (the backend's name, or None when it is not
modelled).

``CudaPlatform`` ranks the backends (``_get_backend_priorities``, vllm/platforms/cuda.py of the
0.22.0, 0.23.0, 0.24.0, 0.25.0 and 0.27.0 wheels) and takes the first whose checks pass: on
compute capability 10.x FLASHINFER first, elsewhere FLASH_ATTN, then FLASHINFER, TRITON_ATTN.
``FlashAttentionBackend.supports_kv_cache_dtype`` (vllm/v1/attention/backends/flash_attn.py,
same wheels) takes an fp8 KV cache only with FlashAttention 3 on compute capability 9.x ("FP8
KV cache requires FA3 on SM90 or FA4 on SM100" at 0.27.0) and no other quantized cache, so an
fp8 cache on an Ampere, Ada or 12.x (RTX 5090, RTX PRO 6000, GB10) card falls through to
FLASHINFER, whose checks (vllm/v1/attention/backends/flashinfer.py of 0.25.0) take the fp8
caches, head sizes 64 / 128 / 256 / 512 and, off 10.x, no attention sinks (``supports_sink``:
"only on the SM100 trtllm-gen path"); a model it refuses goes on to TRITON_ATTN.

What the choice costs is :func:`kvscope.plan.attention_backend.first_capture_bytes` (V1
FlashInfer's workspace in the CUDA-graph estimate). Not modelled, so None: 10.x (FlashInfer
first, with its TRT-LLM paths and their own workspaces), releases before 0.22.0 (not read),
MLA and DeepSeek V4 models (their own backends), ROCm.
"""

from __future__ import annotations

from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: First wheel read with this selection order and FlashAttention's fp8 check.
READ_SINCE = (0, 22, 0)
#: ``FlashInferBackend.get_supported_head_sizes`` (flashinfer.py of 0.25.0).
FLASHINFER_HEAD_SIZES = frozenset({64, 128, 256, 512})
#: Layer kinds FLASH_ATTN / FLASHINFER serve (softmax attention over paged K and V).
_SOFTMAX_KINDS = frozenset({"full", "sliding"})
#: Kinds that keep no paged K/V and need no attention backend (linear attention's state).
_STATE_KINDS = frozenset({"gdn"})


def auto_attention_backend(
    model: ModelSpec, gpu: GPUSpec, v: tuple[int, int, int], kv_cache_dtype: str
) -> str | None:
    """The backend vLLM at ``v`` picks for ``model`` on ``gpu`` with ``kv_cache_dtype`` when no
    ``--attention-backend`` is given, where the module text models it; else None."""
    cap = gpu.capability
    if gpu.vendor != "nvidia" or v < READ_SINCE or cap is None or cap[0] == 10:
        return None
    layers = [layer.attention for layer in model.layers if layer.attention.kind not in _STATE_KINDS]
    if not layers or any(a.kind not in _SOFTMAX_KINDS for a in layers):
        return None
    quantized = kv_cache_dtype.startswith("fp8")
    fa_takes_fp8 = cap[0] == 9 and kv_cache_dtype in ("fp8", "fp8_e4m3")
    if not quantized or fa_takes_fp8 or cap < (8, 0):
        return None  # FLASH_ATTN (or a card FlashInfer is not run on here)
    if any(a.sinks for a in layers):
        return None  # FlashInfer refuses sinks off 10.x: TRITON_ATTN
    if any(a.head_dim not in FLASHINFER_HEAD_SIZES for a in layers):
        return None
    return "FLASHINFER"
