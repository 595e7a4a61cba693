"""vLLM's hardware-tiered ``vllm serve`` defaults for the token budget and sequence cap, by release.

Paraphrase of ``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py; read in the PyPI
wheels 0.22.0, 0.23.0, 0.25.0, 0.27.0, 0.28.0, 0.30.0, 0.31.0, 0.32.0, 0.33.0 and 0.34.0). The
tier follows the device total (``current_platform.get_device_total_memory()``, the figure the
GPU catalogue keeps as ``memory_bytes``); only the ``OPENAI_API_SERVER`` column is modelled.
Units: tokens (``max_num_batched_tokens``) and sequences (``max_num_seqs``).

- V1 up to 0.27.x: >= 70 GiB and not an A100 ("For GPUs like H100 and H200"): 8192 / 1024;
  any other GPU: 2048 / 256.
- From 0.28.0 a tier above it: >= 160 GiB ("for GPUs like B200/B300 with >= 160GB memory, use
  the largest defaults"): 16384 / 1024, which B200/B300, GB200/GB300 and MI300X/MI325X/MI355X
  reach (the 0.27.0 wheel has no such branch, the 0.28.0 wheel has it).
- The GB10 (DGX Spark, compute capability 12.1) is in the small tier in every release, whatever
  its 121.69 GiB of unified memory: 2048 / 256.
  - Up to 0.32.x, ``NvmlCudaPlatform.get_device_total_memory`` asks NVML
    (``nvmlDeviceGetMemoryInfo``), which integrated parts do not implement: on a GB10 it raises
    ``NVMLError_NotSupported`` (nvidia-smi shows "Not Supported" for memory). That propagates
    to ``get_batch_defaults``, whose ``except Exception`` sets ``device_memory = 0``, so the
    small tier applies and nothing is logged (vllm/platforms/cuda.py and
    vllm/engine/arg_utils.py of the 0.27.1 wheel; vllm-project/vllm#57378 prints
    "resolved max_num_batched_tokens API=2048" on a GB10 before its fix).
  - 0.33.0 falls back to torch's total when NVML refuses (the comment names "GB10 / DGX
    Spark"), and the same release keeps the part small on purpose (``is_gb10``: "has the
    memory but not the compute of a large discrete GPU").
- V0 (< 0.8, and 0.8-0.10.1 below compute capability 8.0: :mod:`kvscope.plan.vllm_v0_fallback`)
  capped sequences at 256 on every GPU; its token budget follows other rules
  (:func:`kvscope.plan.vllm_budget.resolve_defaults`).
"""

from __future__ import annotations

from kvscope.plan.vllm_v0_fallback import runs_v0
from kvscope.specs.hardware import GIB, GPUSpec

#: First release with the >= 160 GiB tier (16384 batched tokens for ``vllm serve``).
LARGEST_TIER_SINCE = (0, 28, 0)
#: The GB10 (SM 12.1): NVML's memory query fails on it (to 0.32.x), ``is_gb10`` from 0.33.0.
GB10_COMPUTE_CAPABILITY = "12.1"


def serve_batch_defaults(gpu: GPUSpec, version: tuple[int, int, int]) -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` that ``vllm serve`` at ``version`` picks on
    ``gpu`` when neither flag is given (the batched-token figure applies to V1 only)."""
    total = gpu.memory_bytes
    gb10 = gpu.compute_capability == GB10_COMPUTE_CAPABILITY  # small tier in every release
    if version >= LARGEST_TIER_SINCE and total >= 160 * GIB:
        tokens, seqs = 16384, 1024
    elif total >= 70 * GIB and not gpu.name.upper().startswith("A100") and not gb10:
        tokens, seqs = 8192, 1024
    else:
        tokens, seqs = 2048, 256
    return tokens, (256 if runs_v0(version, gpu) else seqs)
