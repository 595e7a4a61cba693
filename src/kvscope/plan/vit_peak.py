"""The transient peak of a Qwen3-VL-style (or Qwen2-VL / Qwen2.5-VL) vision tower while vLLM's
profiling pass (V1, or V2 from 0.27) runs it on its dummy items, one GPU, bytes; the pass's peak
is the larger of this encoder phase and the language model's phase (which holds the parked outputs:
:mod:`kvscope.plan.encoder_profile`).

Units: bytes. Source: ``Qwen3_VisionTransformer.forward`` and its blocks
(vllm/model_executor/models/qwen3_vl.py), ``Qwen2_5_VisionAttention.forward``
(qwen2_5_vl.py), ``MMEncoderAttention._forward_fa`` (model_executor/layers/attention/
mm_encoder_attention.py), ``flash_attn_maxseqlen_wrapper`` (v1/attention/ops/
vit_attn_wrappers.py) and ``ApplyRotaryEmb.forward_cuda`` (model_executor/layers/
rotary_embedding/common.py), read identical for these paths at v0.19.0, v0.22.0, v0.23.0,
v0.24.0, v0.25.0, v0.27.0 and v0.28.0 (0.20, 0.21 and 0.26 taken to match; 0.19 interpolates
``pos_embeds`` in torch rather than Triton, a transient of a few rows before the blocks; 0.28
stages the rotary position ids in pinned host memory, and decorates the vision blocks with
``@support_torch_compile(enable_if=should_torch_compile_mm_encoder)``, which compiles only
under ``compile_mm_encoder``; mm_encoder_attention.py and ``get_vit_attn_backend`` are
0.27.0's; 0.29.0, 0.30.0 and 0.31.0 are 0.28.0's for these paths and for the patch embedding,
the blocks' and the attention's constructors and FlashAttention's capability and head-size
checks, bar a cache of the host position ids (0.29) and an ``out`` buffer the wrapper passes
only while a CUDA graph is captured (0.31); 0.32.0, 0.33.0 and 0.34.0 are 0.31.0's for the
blocks, MLP, patch embedding and merger of ``Qwen3_VisionTransformer``, the Qwen2-VL and
Qwen2.5-VL towers, mm_encoder_attention.py (0.34 changes only the FP8 scales' loading hook),
rotary_embedding/common.py, ``get_vit_attn_backend`` and FlashAttention's ``supports_head_size``
/ ``supports_compute_capability`` (0.33 adds an XPU branch); from 0.32
``flash_attn_maxseqlen_wrapper`` passes FlashAttention an ``out`` tensor shaped like q, the
bytes its own output took; the tower's input normalization from 0.32 is
:mod:`kvscope.plan.encoder_releases`'s).
``CompilationConfig.compile_mm_encoder`` is False by default, so the tower runs
eagerly and every named tensor lives until its function returns:

* the tower keeps the metadata dict's ``pos_embeds`` (``L x width``) and the rotary
  ``cos``/``sin`` (``L x head_dim / 2`` each, ``partial_rotary_factor`` 0.5) through all blocks,
  and each deepstack merger's output (``L / merge**2 x out_hidden_size``) once made;
* ``CudaPlatform.get_vit_attn_backend`` (platforms/cuda.py) takes the first supported of
  FLASH_ATTN, TRITON_ATTN, TORCH_SDPA: FlashAttention supports compute capability >= 8.0 and a
  head size that is a multiple of 8 up to 256 (v1/attention/backends/flash_attn.py), so the
  ViT runs ``flash_attn_varlen_func`` over ``cu_seqlens``: no ``[heads, seq, seq]`` scores
  (its fp32 log-sum-exp, one a head and patch, is freed before the projection);
* an attention block holds its input ``x`` and ``norm1(x)`` (the caller's argument), the qkv
  projection (``3 x width / tp``), the ``(two b) s head head_dim`` copy of q and k (einops
  rearrange of a transposed view; ``2 / tp``), the rotated q and k (a new tensor, ``2 / tp``),
  FlashAttention's output (``1 / tp``) and the projection's output (the full ``width`` after
  the row-parallel all-reduce): ``3 + 8 / tp`` rows of ``width`` a patch, all live while
  ``self.proj`` runs;
* the MLP holds ``x``, ``norm2(x)``, ``linear_fc1``'s output and the activation's
  (``intermediate / tp`` each; fc1's output is dropped once the activation returns), then
  the activation's and fc2's: ``max(2 x width + 2 x inter / tp, 3 x width + inter / tp)``.

Qwen2-VL's ``Qwen2VisionBlock`` (qwen2_vl.py) has the same block and MLP shape but no learned
positions; Qwen2.5-VL's ``Qwen2_5_VisionBlock`` (qwen2_5_vl.py, the forward read identical at
v0.22.0-v0.31.0, 0.19's differing only in FlashInfer arguments) fuses the second norm with the
residual add (``x``, ``x_attn``, the residual sum and the normed rows, ``4 x width``) and runs
a gate/up SwiGLU MLP whose ``gate_up`` (``2 x inter / tp``), activation (``inter / tp``) and
``down_proj`` output (``width``) stay live until it returns: ``5 x width + 3 x inter / tp``;
its window reordering copies the patch rows once before the blocks.

``L`` is every patch of the dummy items (one ``flash_attn_varlen_func`` call covers them).
The pixel values are counted by :mod:`kvscope.plan.encoder_profile`. Not modelled: other
releases, other towers, non-NVIDIA or pre-Ampere GPUs (TORCH_SDPA / Triton / ROCm paths),
``--mm-encoder-tp-mode data`` and ``--mm-encoder-attn-backend``, and the caching allocator's
rounding.
"""

from __future__ import annotations

from kvscope.specs.hardware import GPUSpec
from kvscope.specs.vision_output import VisionOutput

#: releases whose ViT code paths were read identical (0.19.0-0.34.x; the module docstring)
READ = ((0, 19, 0), (0, 35, 0))
#: towers with rotary positions only (Qwen2-VL, Qwen2.5-VL: no ``pos_embed`` table)
ROTARY_ONLY_KINDS = frozenset({"qwen2_vl", "qwen2_5_vl"})
#: ``Qwen2_5_VisionBlock``: ``norm2(x, residual=x_attn)`` then a gate/up SwiGLU MLP
FUSED_RESIDUAL_SWIGLU_KINDS = frozenset({"qwen2_5_vl"})
#: 0.11.0's ``Qwen2_5_VisionAttention.forward`` (qwen2_5_vl.py) rotates in float32:
#: ``apply_rotary_pos_emb_vision`` (qwen2_vl.py) takes ``t.float()`` of ``cat([q, k])``, runs
#: vllm_flash_attn's rotary kernel into a new float32 tensor and casts it back, all live at once
#: beside the contiguous q/k/v copies (the 0.14.1 wheel already has 0.19's bf16 path)
FP32_ROTARY = ((0, 11, 0), (0, 12, 0))
FP32_ROTARY_KINDS = frozenset({"qwen2_5_vl"})
#: FlashAttention's ``supports_compute_capability``: capability >= 8.0
FLASH_ATTN_MIN_CC = (8, 0)
#: FlashAttention's ``supports_head_size`` below FA4: a multiple of 8, at most 256
FLASH_ATTN_MAX_HEAD = 256


def _capability(gpu: GPUSpec) -> tuple[int, int] | None:
    try:
        major, minor = gpu.compute_capability.split(".")
        return int(major), int(minor)
    except ValueError:
        return None


def vit_transient_bytes(
    tower: VisionOutput,
    patches: int,
    gpu: GPUSpec,
    tp: int,
    version: tuple[int, int, int],
    dtype_bytes: float,
) -> float:
    """Peak bytes the tower allocates over its input while it runs on ``patches`` patches (all
    dummy items), one GPU of a ``tp``-way tensor-parallel group; 0 where not modelled."""
    fp32_rotary = tower.kind in FP32_ROTARY_KINDS and FP32_ROTARY[0] <= version < FP32_ROTARY[1]
    if not (READ[0] <= version < READ[1] or fp32_rotary) or gpu.vendor != "nvidia":
        return 0.0
    if min(tower.depth, tower.width, tower.intermediate, tower.heads, patches) <= 0:
        return 0.0
    cc = _capability(gpu)
    head = tower.width // tower.heads
    if cc is None or cc < FLASH_ATTN_MIN_CC or head % 8 or head > FLASH_ATTN_MAX_HEAD:
        return 0.0  # the Triton / SDPA paths are not modelled
    tp = max(1, tp)
    d, inter = tower.width, tower.intermediate
    attention = 3 * d + 8 * d / tp  # while self.proj runs (FlashAttention's lse is freed)
    mlp = max(2 * d + 2 * inter / tp, 3 * d + inter / tp)
    kept = d + head  # pos_embeds, and rotary cos + sin of head_dim / 2 each
    if tower.kind in ROTARY_ONLY_KINDS:
        kept = head  # no learned positions: the rotary cos + sin alone
    if fp32_rotary:
        # x, norm1(x), qkv, the q/k/v copies, the q+k concatenation, its float32 copy and the
        # float32 rotated result (two rows each), then their bf16 cast
        attention = 2 * d + 18 * d / tp
    if tower.kind in FUSED_RESIDUAL_SWIGLU_KINDS:
        # x, x_attn, the fused norm's residual and output, then gate_up, its activation and
        # down_proj's output, all live until the MLP returns
        mlp = 5 * d + 3 * inter / tp
    rows = patches * (kept + max(attention, mlp))
    deepstack = tower.deepstack * patches // tower.merge_size**2 * tower.merger_width
    return (rows + deepstack) * dtype_bytes
