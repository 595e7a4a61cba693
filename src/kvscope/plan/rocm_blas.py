"""hipBLASLt's device memory on an AMD GPU under vLLM, bytes.

On ROCm, PyTorch sends its GEMMs through hipBLASLt unless ``TORCH_BLAS_PREFER_HIPBLASLT=0``
picks rocBLAS (``at::Context::blasPreferredBackend``, aten/src/ATen/Context.cpp: hipBLASLt is
the preferred backend on the Instinct architectures it supports; the env var, or
``torch.backends.cuda.preferred_blas_library``, overrides it). The first GEMM loads
hipBLASLt's kernel libraries onto the device, outside torch's caching allocator. vLLM's
profiling pass runs that first GEMM after the worker's memory baseline, so the pool pays for
it in every release:

- V0 (vllm/worker/worker.py ``determine_num_available_blocks``, 0.5.5 to 0.6.6): the peak is
  the free-memory drop since start-up (to 0.6.3) or the torch peak plus memory outside torch
  after ``empty_cache`` (0.6.4+); either way the libraries are in it.
- V1 (vllm/v1/worker/gpu_worker.py ``determine_available_memory``): non-torch growth since
  the worker's snapshot (to 0.26), the whole free-memory drop since it (0.27+).

The size, 1.72 GiB a GPU, is a with/without measurement on one MI300X (gfx942), taken twice
with the same result: Llama 2 7B at TP1 logged 20,186 blocks of 8 MiB with hipBLASLt and
20,406 without (220 blocks), and at TP8 167,700 blocks of 1 MiB with it against 169,460 with
``TORCH_BLAS_PREFER_HIPBLASLT=0`` (1,760 blocks): github.com/AUGMXNT/llm-tracker.info-vault at
b56234c, "MI300X Testing.md", and github.com/AUGMXNT/MI300-testing at 032bd4d,
inference-vllm-gemm-tuning.ipynb. It is the size of the library build, not of the model. Two
other Llama 3 8B TP1 starts on MI300X by other hosts and builds leave 2.09 and 2.13 GiB outside
torch beyond the NVIDIA figure, which holds it (github.com/ROCm/rocm-blogs, vllm-optimize).
Other Instinct parts (gfx90a, gfx950) load their own builds of the library; no start measures
them, so the gfx942 figure stands for them.

SGLang sizes its pool from the free memory after loading the weights, before any GEMM has run
(``ModelRunner.profile_max_num_token``), so the libraries land in its headroom, not in the pool.
"""

from __future__ import annotations

from kvscope.errors import KvscopeError
from kvscope.specs.hardware import GIB, GPUSpec

#: hipBLASLt's kernel libraries on one MI300X (module text), GiB.
HIPBLASLT_GIB = 1.72


def check_hipblaslt(gpu: GPUSpec, hipblaslt: bool) -> None:
    """Refuse ``--no-hipblaslt`` on a GPU without ROCm: it would be silently ignored."""
    if not hipblaslt and gpu.vendor.lower() != "amd":
        raise KvscopeError(
            f"--no-hipblaslt is a ROCm setting; the {gpu.name} runs CUDA, where it has no effect.",
            "Drop it, or plan an AMD GPU.",
        )


def hipblaslt_bytes(gpu: GPUSpec, engine: str, hipblaslt: bool) -> float:
    """Device memory hipBLASLt's libraries take from ``engine``'s pool on ``gpu``, bytes."""
    if engine != "vllm" or not hipblaslt or gpu.vendor.lower() != "amd":
        return 0.0
    return HIPBLASLT_GIB * GIB
