"""vLLM 0.34's extensible KV cache: the default that sizes the cache after CUDA-graph capture.

Owns the flag (``--enable-extensible-kv-cache``), ``gpu_memory_utilization``'s default by
release, and the post-warmup block count. Units: bytes. Read in the vllm 0.34.0 wheel (PyPI):

- ``CacheConfig.enable_extensible_kv_cache`` (vllm/config/cache.py): unset = on;
  ``VllmConfig._resolve_extensible_kv_cache`` (vllm/config/vllm.py) keeps it on for CUDA and
  ROCm unless ``kv_cache_memory_bytes`` or ``num_gpu_blocks_override`` is set (asking for it
  with either is a ``ValueError``). ``resolved_gpu_memory_utilization`` is 1.0 with it and
  ``DEFAULT_GPU_MEMORY_UTILIZATION`` (0.92) without.
- ``Worker.determine_available_memory`` (vllm/v1/worker/gpu_worker.py) still profiles, but the
  V2 runner's ``profile_cudagraph_memory`` returns 0 under the flag, so "Available KV cache
  memory" (logged) is only the reserved capacity: budget - weights - transient peak - non-torch.
- ``measure_kv_cache_bytes`` (vllm/v1/worker/extensible_kv_cache.py), after warmup and capture,
  with ``non_kv_used`` = startup free - free now - committed KV (weights, non-torch memory and
  the captured graph pool)::

      margin    = max(KV_CACHE_MARGIN_FLOOR_BYTES (1 GiB CUDA, 3 GiB ROCm), 0.75 x peak)
      available = min(budget - non_kv_used, startup free - non_kv_used - margin)
                  - max(peak, torch reservation growth)

  where ``peak`` is the profiled transient peak (``reserved_headroom_bytes``, raised by the
  warmup steps' own peak: ``record_transient_peak``). ``blocks_within`` rounds each segment
  (one per layer in layer-outermost layouts) up to 2 MiB granules (``granule_size``,
  vllm/utils/extensible_tensor.py), and ``finalize_extensible_kv_cache``
  (vllm/v1/core/kv_cache_planning.py) keeps min(measured over ranks, capacity); "GPU KV cache
  size" is logged once, from that count (``update_kv_cache_capacity``).

Modelled here: the warmup's own peak and torch's reservation growth are taken as the
profiled peak the planner already estimates (:mod:`kvscope.plan.activation`), the graph pool
as its CUDA-graph estimate (:mod:`kvscope.plan.cudagraph`), startup free memory as
:func:`kvscope.plan.shared_gpu.startup_free_bytes`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.errors import KvscopeError
from kvscope.plan.config import VLLM_EXTENSIBLE_KV_SINCE, EngineConfig
from kvscope.plan.kv_layout import KVLayout
from kvscope.specs.hardware import GIB, GPUSpec

#: ``KV_CACHE_MARGIN_FLOOR_BYTES`` (vllm/v1/worker/extensible_kv_cache.py, 0.34.0)
MARGIN_FLOOR_BYTES = {"nvidia": 1 * GIB, "amd": 3 * GIB}
#: ``KV_CACHE_MARGIN_FRACTION``: share of the transient peak the margin scales with
MARGIN_FRACTION = 0.75
#: ``granule_size`` floor (``_MIN_GRANULARITY``, vllm/utils/extensible_tensor.py)
GRANULE_BYTES = 2 << 20
#: ``resolved_gpu_memory_utilization`` with the flag on (vllm/config/cache.py, 0.34.0)
EXTENSIBLE_GPU_MEMORY_UTILIZATION = 1.0
#: ``CacheConfig.gpu_memory_utilization``: 0.9 up to 0.19.1, 0.92 from 0.20.0 (the release
#: that also turned the CUDA-graph estimate on; read in the released wheels)
PROFILED_GPU_MEMORY_UTILIZATION = {(0, 0, 0): 0.9, (0, 20, 0): 0.92}


def check_extensible_flag(eng: EngineConfig) -> None:
    """Refuse ``--[no-]enable-extensible-kv-cache`` where vLLM has no such flag or refuses it."""
    if eng.enable_extensible_kv_cache is None:
        return
    if eng.version < VLLM_EXTENSIBLE_KV_SINCE:
        raise KvscopeError(
            f"--enable-extensible-kv-cache is new in vLLM 0.34.0; {eng.version_text} always "
            "sizes the KV cache from its profiling estimate.",
            "Drop the flag, or plan --engine-version 0.34.0 or later.",
        )
    if eng.enable_extensible_kv_cache and (
        eng.kv_cache_memory_bytes is not None or eng.num_gpu_blocks_override is not None
    ):
        raise KvscopeError(
            "vLLM refuses --enable-extensible-kv-cache with --kv-cache-memory-bytes or "
            "--num-gpu-blocks-override: both replace the measured size.",
            "Drop --enable-extensible-kv-cache.",
        )


def extensible_on(eng: EngineConfig) -> bool:
    """Whether this vLLM start sizes its KV cache after capture (the 0.34 default)."""
    if eng.engine != "vllm" or eng.version < VLLM_EXTENSIBLE_KV_SINCE:
        return False
    if eng.enable_extensible_kv_cache is not None:
        return eng.enable_extensible_kv_cache
    return eng.kv_cache_memory_bytes is None and eng.num_gpu_blocks_override is None


def default_gpu_memory_utilization(eng: EngineConfig) -> float:
    """``gpu_memory_utilization`` when not given: 0.9, 0.92 from 0.20, 1.0 when extensible."""
    if extensible_on(eng):
        return EXTENSIBLE_GPU_MEMORY_UTILIZATION
    since = max(s for s in PROFILED_GPU_MEMORY_UTILIZATION if s <= eng.version)
    return PROFILED_GPU_MEMORY_UTILIZATION[since]


@dataclass(frozen=True)
class ExtensibleSizing:
    """One rank's post-warmup sizing (``measure_kv_cache_blocks``), bytes and blocks."""

    startup_free: float
    non_kv_used: float
    transient_peak: float
    margin: float
    kv_bytes: float
    measured_blocks: int
    capacity_blocks: int

    @property
    def num_blocks(self) -> int:
        """What ``finalize_extensible_kv_cache`` keeps: the measured count within capacity."""
        return min(self.measured_blocks, self.capacity_blocks)


def measured_kv_bytes(
    requested: float, startup_free: float, non_kv_used: float, peak: float, margin: float
) -> float:
    """``measure_kv_cache_bytes`` with nothing committed yet and growth = ``peak``."""
    available = min(requested - non_kv_used, startup_free - non_kv_used - margin) - peak
    return max(available, 0.0)


def blocks_within(num_bytes: float, block_bytes: int, segments: int) -> int:
    """``ExtensibleKVCache.blocks_within`` for ``segments`` equal segments (one per layer):
    the most blocks whose segments, each rounded up to whole granules, fit in ``num_bytes``."""
    if block_bytes <= 0 or num_bytes <= 0:
        return 0
    segments = max(segments, 1)
    stride = block_bytes / segments
    per_segment = int(num_bytes // segments) // GRANULE_BYTES * GRANULE_BYTES
    return int(per_segment // stride)


def size_rank(
    eng: EngineConfig,
    gpu: GPUSpec,
    requested: float,
    used: float,
    transient_peak: float,
    layout: KVLayout,
    segments: int,
    capacity_blocks: int,
) -> ExtensibleSizing:
    """The block count one rank ends with after warmup and capture (see the module text).

    ``used``: what stays resident beside the cache (weights, non-torch memory, the captured
    graph pool); ``segments``: the rank's KV layers; ``capacity_blocks``: the reservation.
    """
    from kvscope.plan.shared_gpu import startup_free_bytes  # it imports this module

    free = startup_free_bytes(gpu, eng)
    floor = MARGIN_FLOOR_BYTES["amd" if gpu.vendor == "amd" else "nvidia"]
    margin = max(floor, MARGIN_FRACTION * transient_peak)
    kv = measured_kv_bytes(requested, free, used, transient_peak, margin)
    measured = blocks_within(kv, layout.block_bytes, segments)
    return ExtensibleSizing(free, used, transient_peak, margin, kv, measured, capacity_blocks)


def path_note(eng: EngineConfig) -> tuple[str, ...]:
    """One line for the plan output saying which sizing path the release runs."""
    if eng.engine != "vllm" or eng.version < VLLM_EXTENSIBLE_KV_SINCE:
        return ()
    if extensible_on(eng):
        return (
            f"vLLM {eng.version_text} sizes the KV cache after warmup and CUDA-graph capture "
            "(extensible KV cache): free memory less the captured graphs, the transient peak "
            "and a margin of max(1 GiB, 3 on ROCm, 0.75 x peak); gpu_memory_utilization "
            "defaults to 1.0. "
            "--no-enable-extensible-kv-cache plans the profiling estimate (default 0.92).",
        )
    return (
        f"vLLM {eng.version_text} with the extensible KV cache off: the profiling estimate "
        "sizes the KV cache (gpu_memory_utilization default 0.92).",
    )
