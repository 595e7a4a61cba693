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
- From 0.33.0 the GB10 (DGX Spark, compute capability 12.1) stays in the small tier whatever
  its 121.69 GiB of unified memory ("has the memory but not the compute of a large discrete
  GPU"; ``is_gb10`` first appears in the 0.33.0 wheel): 2048 / 256.
- V0 (< 0.8) capped sequences at 256 on every GPU; its token budget follows other rules
  (:func:`kvscope.plan.vllm_budget.resolve_defaults`).
"""

from __future__ import annotations

from kvscope.specs.hardware import GIB, GPUSpec

#: First release with the >= 160 GiB tier (16384 batched tokens for ``vllm serve``).
LARGEST_TIER_SINCE = (0, 28, 0)
#: First release that keeps the GB10 (SM 12.1) in the small tier.
GB10_SMALL_TIER_SINCE = (0, 33, 0)
V1_SINCE = (0, 8, 0)


def serve_batch_defaults(gpu: GPUSpec, version: tuple[int, int, int]) -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` that ``vllm serve`` at ``version`` picks on
    ``gpu`` when neither flag is given (the batched-token figure applies to V1 only)."""
    total = gpu.memory_bytes
    gb10 = gpu.compute_capability == "12.1" and version >= GB10_SMALL_TIER_SINCE
    if version >= LARGEST_TIER_SINCE and total >= 160 * GIB:
        tokens, seqs = 16384, 1024
    elif total >= 70 * GIB and not gpu.name.upper().startswith("A100") and not gb10:
        tokens, seqs = 8192, 1024
    else:
        tokens, seqs = 2048, 256
    return tokens, (seqs if version >= V1_SINCE else 256)
