"""The weight scales vLLM's FP8 Marlin kernel keeps where a GPU has no FP8 tensor cores.

A block-FP8 checkpoint (``quantization_config.weight_block_size`` [128, 128], Qwen's and
DeepSeek's ``-FP8`` releases) stores one float32 ``weight_scale_inv`` per 128 x 128 block of
every converted Linear: 4 / 16384 bytes a weight. On an NVIDIA GPU below compute capability
8.9 (Ampere and Turing: no FP8 tensor cores) vLLM serves those Linears weight-only through
Marlin and rewrites the scales when it loads them:

- ``Fp8LinearMethod`` picks Marlin below capability 8.9: ``use_marlin = not
  current_platform.has_device_capability(89)`` (vllm/model_executor/layers/quantization/fp8.py
  of the 0.9.2 wheel, with ``is_fp8_marlin_supported`` at 8.0 and up); from the scaled-mm
  kernel registry on, ``MarlinFP8ScaledMMLinearKernel.is_supported`` takes it below 89
  (vllm/model_executor/kernels/linear/scaled_mm/marlin.py of the 0.24.0 and 0.27.1 wheels,
  capability 7.5 and up) and ``Fp8LinearMethod.process_weights_after_loading`` hands the layer
  to it (fp8.py of 0.24.0 and 0.27.1).
- ``prepare_fp8_layer_for_marlin`` (utils/marlin_utils_fp8.py of the 0.9.2, 0.24.0 and 0.27.1
  wheels) turns the block scales into group scales: ``scales = weight_scale_inv.to(
  layer.orig_dtype)``, transposed and ``repeat_interleave(block_n, 1)`` to (K / 128, N), then
  padded, permuted and put back in place of ``weight_scale_inv`` (``replace_parameter``), so a
  Linear keeps 2 / 128 bytes of scales a weight (bf16 / fp16) instead of 4 / 16384.

The engine's "Model loading took" figure is read after ``process_weights_after_loading``, so it
carries the rewritten scales: Qwen3.8-27B-FP8 at TP2 on two RTX 3090 logs 14.46 GiB a GPU
(github.com/mitchross/talos-argocd-proxmox, benchmarks/ai-realworld-load/README.md at
b96011c3) where the block layout holds 14.17. Only the dense Linear components (attention and
linear-attention projections, dense FFN, shared experts) are counted here: the MoE path
(``Fp8MoEMethod``) is not read for this rule.
"""

from __future__ import annotations

from kvscope.plan.weights import RankWeights
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: First release read with block-FP8 Marlin scales (0.9.2; also 0.24.0 and 0.27.1).
MARLIN_FP8_BLOCK_SINCE = (0, 9, 2)
#: First release whose FP8 Marlin kernel also takes compute capability 7.5 (0.24.0 wheel read;
#: 0.9.2 starts at 8.0).
MARLIN_FP8_TURING_SINCE = (0, 24, 0)
#: Components an FP8 checkpoint converts with ``Fp8LinearMethod`` (dense Linears).
DENSE_LINEAR_COMPONENTS = ("attention", "dense_ffn", "shared_experts")


def runs_fp8_marlin(gpu: GPUSpec, version: tuple[int, int, int]) -> bool:
    """Whether vLLM release ``version`` serves FP8 Linears through Marlin on ``gpu``."""
    if gpu.vendor != "nvidia" or not gpu.compute_capability or version < MARLIN_FP8_BLOCK_SINCE:
        return False
    major, _, minor = gpu.compute_capability.partition(".")
    cc = (int(major), int(minor or 0))
    low = (7, 5) if version >= MARLIN_FP8_TURING_SINCE else (8, 0)
    return low <= cc < (8, 9)


def marlin_scale_bytes(
    model: ModelSpec, gpu: GPUSpec, version: tuple[int, int, int], w: RankWeights
) -> float:
    """Bytes the Marlin group scales add on ``w``'s GPU beside the block layout's, 0 where
    the rule does not apply (module text)."""
    q = model.quantization
    if q.method != "fp8" or q.block is None or not runs_fp8_marlin(gpu, version):
        return 0.0
    if q.linear_bytes is None:
        return 0.0
    block_n, block_k = q.block
    per_weight = 2.0 / block_k - 4.0 / (block_n * block_k)
    converted = [c for c in DENSE_LINEAR_COMPONENTS if c not in q.unconverted]
    weights = sum(w.by_component.get(c, 0.0) for c in converted) / q.linear_bytes
    return weights * per_weight
