"""vLLM's block-FP8 checkpoints on NVIDIA GPUs without FP8 tensor cores (the Marlin path).

Below compute capability 8.9 ``Fp8LinearMethod`` and ``Fp8MoEMethod`` set ``use_marlin``
(``not current_platform.has_device_capability(89)``; off on ROCm) in
vllm/model_executor/layers/quantization/fp8.py of the 0.10.1.1 wheel, and the 0.19 log says
"Selected MarlinFP8ScaledMMLinearKernel" and "Using MARLIN Fp8 MoE backend". After loading,
``prepare_fp8_layer_for_marlin`` and ``prepare_fp8_moe_layer_for_marlin``
(vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py, the same in the 0.10.1.1,
0.20.0, 0.26.0 and 0.27.1 wheels) repack the one-byte weights into int32 words (same bytes)
and turn the fp32 scale of each ``weight_block_size`` block into group scales: "block-wise
quantization -> group-wise quantization", ``scales.repeat_interleave(block_n, ...)`` in
``layer.orig_dtype``, one scale per output channel and ``block[1]`` input channels. The
weights thus hold ``1 + dtype_bytes / block[1]`` bytes a parameter (1 + 2/128 for bf16)
instead of ``1 + 4 / (block[0] x block[1])``: Qwen3-Coder-30B-A3B-Instruct-FP8 on an A100
logs 29.54 GiB, 0.44 GiB above the checkpoint's 29.10. Marlin runs W8A16, so no per-token
fp8 copy of the activations is made (:attr:`Quantization.dense_activation_bytes` is 0 for
these bytes).

Releases: block scales reach Marlin from 0.9.2 (the first wheel read, with
``is_fp8_marlin_supported`` at capability 8.0 and up); from 0.24.0 the scaled-mm kernel
registry's ``MarlinFP8ScaledMMLinearKernel`` (vllm/model_executor/kernels/linear/scaled_mm/
marlin.py of the 0.24.0 and 0.27.1 wheels) also takes Turing (7.5). Qwen3.8-27B-FP8 at TP2 on
two RTX 3090 (0.27.1) logs 14.46 GiB a GPU where the block layout holds 14.17: the group
scales add 0.17 (and M-RoPE's rotary folds 0.09, :mod:`kvscope.plan.mrope_buffers`).
"""

from __future__ import annotations

from dataclasses import replace

from kvscope.plan._cache import per_model_cache
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: ``has_device_capability(89)``: FP8 tensor cores from Ada (8.9) and Hopper (9.0) on.
NATIVE_FP8_CC = (8, 9)
#: First release read with block-FP8 Marlin scales (0.9.2; also 0.10.1.1, 0.24.0, 0.27.1).
MARLIN_FP8_BLOCK_SINCE = (0, 9, 2)
#: First release whose FP8 Marlin kernel also takes compute capability 7.5 (0.24.0 read;
#: 0.9.2 starts at 8.0).
MARLIN_FP8_TURING_SINCE = (0, 24, 0)


def runs_fp8_marlin(gpu: GPUSpec, version: tuple[int, ...]) -> bool:
    """Whether vLLM release ``version`` serves FP8 Linears through Marlin on ``gpu``."""
    cc = gpu.capability
    if gpu.vendor.lower() != "nvidia" or cc is None or tuple(version) < MARLIN_FP8_BLOCK_SINCE:
        return False
    low = (7, 5) if tuple(version) >= MARLIN_FP8_TURING_SINCE else (8, 0)
    return low <= cc < NATIVE_FP8_CC


def uses_fp8_marlin(model: ModelSpec, gpu: GPUSpec, engine: str, version: tuple[int, ...]) -> bool:
    """Whether vLLM runs this block-FP8 checkpoint through Marlin on ``gpu``."""
    q = model.quantization
    if engine != "vllm" or q.method != "fp8" or q.block is None or q.online:
        return False
    return runs_fp8_marlin(gpu, version)


@per_model_cache()
def _marlin_model(model: ModelSpec) -> ModelSpec:
    q = model.quantization
    assert q.block is not None
    marlin = 1.0 + element_bytes(model.dtype) / q.block[1]
    expert = marlin if q.expert_bytes == q.linear_bytes else q.expert_bytes
    return replace(model, quantization=replace(q, linear_bytes=marlin, expert_bytes=expert))


def fp8_marlin_model(
    model: ModelSpec, gpu: GPUSpec, engine: str, version: tuple[int, ...]
) -> ModelSpec:
    """``model`` with the bytes its block-FP8 weights hold after vLLM's Marlin repack."""
    return _marlin_model(model) if uses_fp8_marlin(model, gpu, engine, version) else model
