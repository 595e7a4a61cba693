"""The cuBLAS workspace PyTorch gives each (handle, stream), which vLLM's profile counts as torch
memory, by GPU architecture. Units: bytes on one GPU.

PyTorch sets the workspace itself: ``getCurrentCUDABlasHandle`` calls
``setWorkspaceForHandle``, which allocates ``getChosenWorkspaceSize()`` bytes through the CUDA
caching allocator (``getNewWorkspace``) and keeps them for the life of the process in
``cublas_handle_stream_to_workspace`` (aten/src/ATen/cuda/CublasHandlePool.cpp, pytorch/pytorch
at 26a39059; the same allocation since pytorch/pytorch#86167). The default size
(``parseChosenWorkspaceSize``, without ``CUBLAS_WORKSPACE_CONFIG``) is 32 MiB (``:4096:8``) on
compute capability 9.0 and 8.125 MiB (``:4096:2:16:8``) on every other CUDA part, since
pytorch/pytorch#91564 (PyTorch 2.0); the cuBLASLt pool beside it is 1 MiB
(``parseCUDABlasLtWorkspaceSize``) on all of them.

Being caching-allocator memory, the workspace is in ``memory_reserved()`` and in
``allocated_bytes.all.peak``, so vLLM's ``memory_profiling`` (vllm/utils/mem_utils.py; V0's
worker since 0.6.5, V1's, 0.27's ``total_consumed``) never reads it as non-torch memory: the
first GEMM of the profiling pass makes it, inside the torch peak (or, from 0.27.0, inside the
consumed memory, once). The planner's shape-independent profiling buffers
(:data:`kvscope.plan.activation.RUNTIME_BYTES`) were read from vLLM 0.19 on H100 (SM 9.0), so
they hold the 32 MiB workspace; a part below SM 9.0 makes 23.875 MiB less.

Blackwell (SM 10.x / 12.x) got the 32 MiB default in pytorch/pytorch#175344 (merged
2026-02-19); the vLLM 0.27.1 and 0.29.0 wheels pin torch 2.13.0, so Blackwell takes 32 MiB from
vLLM 0.27.0 and 8.125 MiB before (the 0.20.0-0.26.0 wheels pin torch 2.11.0, not read for the
change). ROCm builds size their hipBLAS workspace otherwise (32 MiB, 128 MiB on gfx94x /
gfx95x; pytorch/pytorch#138791) and keep the Hopper figure. None of this explains the
non-torch figure: the V0 logs' 0.01-0.16 GiB of ``non_torch_memory`` at TP1 are CUDA's own
growth (lazily loaded kernel modules, local memory), which no engine or PyTorch code sizes
(:mod:`kvscope.plan.vllm_collectives`).
"""

from __future__ import annotations

from kvscope.specs.hardware import GPUSpec

#: ``parseChosenWorkspaceSize`` defaults (CublasHandlePool.cpp): SM 9.0 (and Blackwell from
#: :data:`BLACKWELL_32MIB_SINCE`), every other CUDA part (``:4096:2:16:8``).
HOPPER_WORKSPACE_BYTES = 4096 * 8 * 1024
DEFAULT_WORKSPACE_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8
#: First vLLM release read to pin a torch (2.13.0) after pytorch/pytorch#175344.
BLACKWELL_32MIB_SINCE = (0, 27, 0)


def cublas_workspace_bytes(gpu: GPUSpec, v: tuple[int, int, int]) -> float:
    """torch's default cuBLAS workspace on NVIDIA ``gpu`` under the torch vLLM ``v`` pins."""
    major = gpu.capability[0] if gpu.capability else 0
    if major == 9 or (major in (10, 12) and v >= BLACKWELL_32MIB_SINCE):
        return float(HOPPER_WORKSPACE_BYTES)
    return float(DEFAULT_WORKSPACE_BYTES)


def workspace_saving_bytes(gpu: GPUSpec, v: tuple[int, int, int]) -> float:
    """Bytes of cuBLAS workspace ``gpu`` does not make against the H100 the profiling
    buffers were read on; 0 on ROCm and where the part is unknown (module text)."""
    if gpu.vendor != "nvidia" or gpu.capability is None:
        return 0.0
    return float(HOPPER_WORKSPACE_BYTES) - cublas_workspace_bytes(gpu, v)
