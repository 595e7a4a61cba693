"""Which path vLLM's profiling sampler run takes, by release: how many fp32 copies of the
logits it holds at its peak, whether the Triton top-k/top-p kernel runs, and whether the
phase's shape-free bytes are read from the code (:mod:`kvscope.plan.sampler_phase`) or left
to the fitted constant (:mod:`kvscope.plan.activation`).
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig
from kvscope.plan.sampler_phase import CODE_SAMPLER_SINCE, V0_CODE_SAMPLER_SINCE
from kvscope.plan.vllm_runner import greedy_dummy_sampler, runs_v2
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: First release whose V1 sampler leaves FlashInfer's top-k/top-p kernel off unless
#: ``VLLM_USE_FLASHINFER_SAMPLER=1`` (vllm PR #26859; see :func:`sampler_fp32_copies`).
FLASHINFER_SAMPLER_OPT_IN_SINCE = (0, 11, 1)
#: First release whose top-k/top-p masking runs a Triton kernel instead of sorting the
#: vocabulary (vllm PR #33538; see :func:`sampler_fp32_copies`).
TRITON_TOP_K_TOP_P_SINCE = (0, 17, 0)


def sampler_fp32_copies(eng: EngineConfig, v0: bool | None = None) -> int:
    """fp32 vocab-wide tensors the profiling sampler pass holds at its peak, per release.

    The dummy sampler run asks for top-k = vocab - 1 and top-p = 0.9 (``_dummy_sampler_run``).
    FlashInfer's fused top-k/top-p sampling keeps only the fp32 logits (1). Up to 0.16 the
    PyTorch path sorts the vocabulary (``apply_top_k_top_p``: ``logits.sort(dim=-1)``), and
    its peak is inside the sort: the fp32 logits (1), the sorted values (1) and int64 indices
    (2) it returns, plus what PyTorch's segmented sort allocates for the call
    (aten/src/ATen/native/cuda/SortStable.cu ``segmented_sort_pairs``, taken from 128 rows on:
    an int64 index input (2) and cub's alternate key and value buffers in the radix sort's
    temporary storage (1 + 2)): 9 fp32 widths. Published check: vllm PR #32558 measured the
    PyTorch path at 1.25 GB for 256 x 131,072 logits (9.3 widths). From 0.17.0 a Triton
    kernel replaces the sort for batches of 8 rows or more (vllm PR #33538,
    ``apply_top_k_top_p_triton``); it holds 3 (calibrated on vLLM 0.19, see
    :mod:`kvscope.plan.activation`). V0 (< 0.8) sorts the same way: its profiling pass asks
    for top-p 0.99 and top-k = vocab - 1 (``ModelRunner._dummy_run``) and the sampler calls
    ``_apply_top_k_top_p`` (``logits.sort``) unless ``VLLM_USE_FLASHINFER_SAMPLER`` is set (unset
    by default: vllm/envs.py, vllm/model_executor/layers/sampler.py of the 0.7.1 and 0.7.2
    wheels); with FlashInfer it holds the fp32 logits, probabilities and log-probabilities (3).
    ``v0`` says the start runs V0 (:func:`kvscope.plan.vllm_v0_fallback.runs_v0`; by default
    releases before 0.8). Only the driver (TP rank 0) samples in V0
    (``ModelRunner.execute_model`` returns before ``sample`` on other ranks), so its peak is
    the highest and its blocks the ones the executor keeps (the minimum over workers).
    FlashInfer is the V1
    default when installed up to 0.11.0 ("None means True" in ``TopKTopPSampler.__init__``)
    and opt-in from 0.11.1 (vllm PR #26859, merged 2025-10-15: "Users must opt in explicitly
    via VLLM_USE_FLASHINFER_SAMPLER=1" in vllm/v1/sample/ops/topk_topp_sampler.py of the
    0.11.1 wheel; the 0.15.0 wheel still sorts, the 0.20.0 wheel runs the Triton kernel;
    read in the 0.10.2, 0.11.0, 0.11.1, 0.12.0, 0.15.0, 0.19.0 and 0.20.0 wheels).
    """
    v = eng.version
    if v < (0, 8, 0) if v0 is None else v0:  # V0: vllm_v0_fallback
        return 3 if eng.flashinfer_sampler else 9
    flashinfer = eng.flashinfer_sampler
    if flashinfer is None:
        flashinfer = v < FLASHINFER_SAMPLER_OPT_IN_SINCE
    if flashinfer:
        return 1
    return 9 if v < TRITON_TOP_K_TOP_P_SINCE else 3


def code_sampler_phase(model: ModelSpec, eng: EngineConfig, gpu: GPUSpec, v0: bool) -> bool:
    """Whether the sampler phase's shape-free bytes come from the code
    (:mod:`kvscope.plan.sampler_phase`) instead of the fitted constant, on NVIDIA GPUs: V0
    starts from 0.6.3 and V1-runner starts from 0.9.2 (V1 0.8.0-0.9.1, older V0, the V2
    runner and ROCm keep the constant; see that module)."""
    if gpu.vendor != "nvidia":
        return False
    if v0:
        return eng.version >= V0_CODE_SAMPLER_SINCE
    return eng.version >= CODE_SAMPLER_SINCE and not runs_v2(model, eng, gpu)


def triton_top_k_top_p(model: ModelSpec, eng: EngineConfig, gpu: GPUSpec, v0: bool) -> bool:
    """Whether the profiling sampler run masks top-k / top-p with the Triton kernel and keeps
    its row buffer (:func:`kvscope.plan.sampler_phase.triton_buffer_bytes`): a V1-runner
    start from 0.17.0 on the native sampler (``VLLM_USE_FLASHINFER_SAMPLER`` unset or 0:
    :func:`sampler_fp32_copies` gives 3), not a greedy dummy run."""
    if v0 or runs_v2(model, eng, gpu) or greedy_dummy_sampler(model, eng, gpu):
        return False
    return eng.version >= TRITON_TOP_K_TOP_P_SINCE and sampler_fp32_copies(eng) == 3
