"""vLLM's tiered defaults for the token budget and sequence cap, by GPU, release and entry point.

Paraphrase of ``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py; read in the PyPI
wheels 0.22.0, 0.23.0, 0.25.0, 0.27.0, 0.28.0, 0.30.0, 0.31.0, 0.32.0, 0.33.0 and 0.34.0) and of
its forerunners in ``EngineArgs`` (``_override_v1_engine_args`` of 0.7.1 and 0.7.3,
``_set_default_args_v1`` of 0.8.0-0.8.5, 0.9.0, 0.9.1, 0.10.1, 0.11.0). Units: tokens
(``max_num_batched_tokens``) and sequences (``max_num_seqs``).

Each table has a column per usage context. ``vllm serve`` is ``OPENAI_API_SERVER``; the offline
``LLM()`` class (and ``vllm bench throughput``, which drives it) is ``LLM_CLASS``, whose token
budget is larger on every tier: 16384 where the server takes 8192 or 16384, 8192 where it takes
2048. The sequence cap is the same for both. The tier:

- 0.7.1-0.8.4 (vllm PR #12369): large where the CUDA device name holds "h100" or "h200"
  (H100, H200, GH200), small on every other GPU, whatever its memory (H20, H800, B200, MI300X).
  0.8.0-0.8.3 cap sequences at 1024 on every GPU, 0.8.4 at 1024 / 256 by tier.
- From 0.8.5 the device total decides (``current_platform.get_device_total_memory()``, the
  figure the GPU catalogue keeps as ``memory_bytes``): >= 70 GiB is large; from 0.9.0 an A100
  is small whatever its memory (vllm PR #17885: "Use small max_num_batched_tokens for A100").
- 0.9.0 up to 0.27.x: >= 70 GiB and not an A100 ("For GPUs like H100 and H200"): 8192 / 1024;
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

from typing import TYPE_CHECKING

from kvscope.plan.vllm_v0_fallback import runs_v0
from kvscope.specs.hardware import GIB, GPUSpec

if TYPE_CHECKING:
    from kvscope.plan.config import EngineConfig

#: First release with the >= 160 GiB tier (16384 batched tokens for ``vllm serve``).
LARGEST_TIER_SINCE = (0, 28, 0)
#: First release whose tier follows the device's memory, not its name (0.8.5 wheel).
MEMORY_TIER_SINCE = (0, 8, 5)
#: First release that keeps an A100 in the small tier (vllm PR #17885; 0.9.0 wheel).
A100_SMALL_SINCE = (0, 9, 0)
#: First release whose V1 sequence cap follows the tier (0.8.4 wheel; 0.8.0-0.8.3: 1024).
SEQS_BY_TIER_SINCE = (0, 8, 4)
#: First release that caps a defaulted token budget at ``max_num_seqs x max_model_len`` and a
#: defaulted sequence cap at the token budget (``EngineArgs._set_default_max_num_seqs_and_
#: batched_tokens_args``, vllm/engine/arg_utils.py of 0.12.0, 0.13.0, 0.17.0, 0.19.0, 0.27.1
#: and 0.31.0; absent from 0.11.0).
CAPPED_DEFAULTS_SINCE = (0, 12, 0)
#: The GB10 (SM 12.1): NVML's memory query fails on it (to 0.32.x), ``is_gb10`` from 0.33.0.
GB10_COMPUTE_CAPABILITY = "12.1"


def large_tier(gpu: GPUSpec, version: tuple[int, int, int]) -> bool:
    """Whether ``gpu`` takes the large (H100-class) defaults at ``version`` (module text)."""
    if version < MEMORY_TIER_SINCE:
        name = gpu.name.lower()  # the catalogue keeps the CUDA name's "H100" / "H200" / "GH200"
        return "h100" in name or "h200" in name
    if gpu.compute_capability == GB10_COMPUTE_CAPABILITY:
        return False  # small tier in every release
    a100 = version >= A100_SMALL_SINCE and gpu.name.upper().startswith("A100")
    return gpu.memory_bytes >= 70 * GIB and not a100


def serve_batch_defaults(gpu: GPUSpec, version: tuple[int, int, int]) -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` that ``vllm serve`` at ``version`` picks on
    ``gpu`` when neither flag is given (the batched-token figure applies to V1 only)."""
    large = large_tier(gpu, version)
    if version >= LARGEST_TIER_SINCE and gpu.memory_bytes >= 160 * GIB:
        tokens, seqs = 16384, 1024
    elif large:
        tokens, seqs = 8192, 1024
    else:
        tokens, seqs = 2048, 256
    if runs_v0(version, gpu):
        seqs = 256
    elif version < SEQS_BY_TIER_SINCE:
        seqs = 1024  # 0.8.0-0.8.3: one cap for every GPU
    return tokens, seqs


def batch_defaults(
    gpu: GPUSpec, version: tuple[int, int, int], entrypoint: str = "serve"
) -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)`` for ``entrypoint``: ``serve`` (``vllm
    serve``, OPENAI_API_SERVER) or ``offline`` (the ``LLM()`` class, LLM_CLASS)."""
    tokens, seqs = serve_batch_defaults(gpu, version)
    if entrypoint == "offline":
        tokens = 16384 if tokens >= 8192 else 8192
    return tokens, seqs


def capped_defaults(
    eng: EngineConfig, version: tuple[int, int, int], tokens: int, seqs: int, max_model_len: int
) -> tuple[int, int]:
    """The V1 engine's token budget and sequence cap after the release's caps on defaults: a
    token budget not given is at most ``seqs x max_model_len`` (so ``--max-num-seqs 1
    --max-model-len 4096`` batches 4,096 tokens, not 8,192), and a sequence cap not given is
    at most the token budget (:data:`CAPPED_DEFAULTS_SINCE`)."""
    if version < CAPPED_DEFAULTS_SINCE:
        return tokens, seqs
    if eng.max_num_batched_tokens is None:
        tokens = min(tokens, seqs * max_model_len)
    if eng.max_num_seqs is None:
        seqs = min(seqs, tokens)
    return tokens, seqs
