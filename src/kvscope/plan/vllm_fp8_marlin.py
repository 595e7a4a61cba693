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
"""

from __future__ import annotations

from dataclasses import replace

from kvscope.plan._cache import per_model_cache
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: ``has_device_capability(89)``: FP8 tensor cores from Ada (8.9) and Hopper (9.0) on.
NATIVE_FP8_CC = (8, 9)


def uses_fp8_marlin(model: ModelSpec, gpu: GPUSpec, engine: str) -> bool:
    """Whether vLLM runs this block-FP8 checkpoint through Marlin on ``gpu``."""
    q = model.quantization
    if engine != "vllm" or q.method != "fp8" or q.block is None or q.online:
        return False
    if gpu.vendor.lower() != "nvidia" or not gpu.compute_capability:
        return False
    major, _, minor = gpu.compute_capability.partition(".")
    return (int(major), int(minor or 0)) < NATIVE_FP8_CC


@per_model_cache()
def _marlin_model(model: ModelSpec) -> ModelSpec:
    q = model.quantization
    assert q.block is not None
    marlin = 1.0 + element_bytes(model.dtype) / q.block[1]
    expert = marlin if q.expert_bytes == q.linear_bytes else q.expert_bytes
    return replace(model, quantization=replace(q, linear_bytes=marlin, expert_bytes=expert))


def fp8_marlin_model(model: ModelSpec, gpu: GPUSpec, engine: str) -> ModelSpec:
    """``model`` with the bytes its block-FP8 weights hold after vLLM's Marlin repack."""
    return _marlin_model(model) if uses_fp8_marlin(model, gpu, engine) else model
