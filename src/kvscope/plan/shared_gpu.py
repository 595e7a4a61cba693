"""GPU memory other processes hold when the engine starts (``--gpu-memory-in-use``): what each
engine and release does with it. Units: bytes (the flag is GiB, 2^30 bytes).

A desktop session, another server or a notebook on a shared GPU holds memory that
``nvidia-smi`` shows before the server starts. The engines read free memory with
``torch.cuda.mem_get_info``, so that memory reaches their budgets in one of these ways:

SGLang (every release modelled): the pool is sized from free memory. ``M0`` is the free memory
measured after torch.distributed init (``ModelRunner.init_torch_distributed``, which returns
``get_available_gpu_memory``: ``torch.cuda.mem_get_info`` free, python/sglang/srt/utils.py at
v0.4.2; ``pre_model_load_memory`` at v0.5.14) and ``rest = free after the weights - M0 x
(1 - mem_fraction_static)`` (``profile_max_num_token``, model_runner.py at v0.4.2;
``_profile_available_bytes``, model_runner_kv_cache_mixin.py at v0.5.14). Memory held by others
lowers ``M0`` and the free memory after the weights alike, so the pool loses
``in_use x mem_fraction_static`` (:func:`sglang_m0`).

vLLM, by release (:func:`vllm_regime`):

- ``ignored`` (V0 up to 0.6.3): the profile is the drop in free memory from the worker's start
  (``peak_memory = self.init_gpu_memory - free_gpu_memory``, vllm/worker/worker.py at
  v0.6.3.post1), so others' memory leaves the budget ``total x gmu - own peak`` unchanged.
- ``counted`` (V0 0.6.4 to 0.6.4.post1, vllm PR #9352; V1 0.8.0 to 0.9.0): everything on the
  device that this process's torch did not allocate is "non-torch" memory
  (``non_torch_allocations = total_allocated_bytes - torch_allocated_bytes`` with
  ``total_allocated_bytes = total - free``, vllm/worker/worker.py at v0.6.4.post1 and
  vllm/v1/worker/gpu_worker.py at v0.8.0 and v0.9.0), so the KV budget loses all of it (the
  engine-args page of the 0.6.4 docs: half the GPU in use before the start and a fraction of
  0.9 leave the executor 40 % of the GPU).
- ``baseline`` (V0 from 0.6.5): ``memory_profiling`` subtracts a baseline taken before the
  worker initialised (``baseline_memory_in_bytes = total_gpu_memory - self.init_gpu_memory``,
  vllm/worker/worker.py and vllm/utils.py at v0.6.5), so others' memory is not charged again.
- ``checked`` (V1 from 0.9.1, vllm PR #19312): the same baseline (``MemorySnapshot`` at
  ``init_device``), and ``init_device`` refuses to start when the free memory it measures is
  below ``total x gpu_memory_utilization`` ("Free memory on device ... on startup is less than
  desired GPU memory utilization", vllm/v1/worker/gpu_worker.py at v0.9.1 and v0.9.2;
  ``request_memory`` in vllm/v1/worker/utils.py at v0.22.0-v0.31.0).

Where others' memory is not charged (``ignored``, ``baseline``) nothing refuses the start, but
the KV cache is then allocated from what is really free, so it runs out of memory when the
planned cache does not fit beside the others' memory (:func:`vllm_problem`).

The figure applies to every GPU of the deployment; where the GPUs differ, give the busiest
one's: SGLang takes the minimum ``M0`` over ranks and vLLM the fewest blocks over workers.
"""

from __future__ import annotations

from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.vllm_extensible_kv import extensible_on
from kvscope.specs.hardware import GIB, GPUSpec

#: First vLLM release whose profile charges other processes' memory as non-torch memory.
COUNTED_SINCE = (0, 6, 4)
#: First V0 release that subtracts the baseline taken before the worker started.
BASELINE_SINCE = (0, 6, 5)
#: Words every vLLM verdict of :func:`vllm_problem` carries, and the hint that goes with it.
MARK = "held by other processes"
HINT = (
    "Lower --gpu-memory-utilization (vLLM takes it of the total memory, not of what is free), "
    "or free the memory other processes hold."
)
#: First release the planner treats as V1 (the engine default): counted again until 0.9.0.
V1_SINCE = (0, 8, 0)
#: First V1 release with the baseline snapshot and the start-up free-memory check.
CHECKED_SINCE = (0, 9, 1)


def in_use_bytes(eng: EngineConfig) -> float:
    """Bytes other processes hold on each GPU at start (``--gpu-memory-in-use``)."""
    return eng.gpu_memory_in_use_gib * GIB


def vllm_regime(version: tuple[int, int, int]) -> str:
    """How vLLM ``version`` treats memory other processes hold (the module text)."""
    if version < COUNTED_SINCE:
        return "ignored"
    if version < BASELINE_SINCE:
        return "counted"
    if version < V1_SINCE:
        return "baseline"
    if version < CHECKED_SINCE:
        return "counted"
    return "checked"


def vllm_charged_bytes(eng: EngineConfig) -> float:
    """Bytes of others' memory vLLM's profile subtracts from the KV budget (non-torch)."""
    return in_use_bytes(eng) if vllm_regime(eng.version) == "counted" else 0.0


def sglang_m0(m0: float, eng: EngineConfig) -> float:
    """SGLang's ``M0`` (free memory after distributed init) with others' memory taken out."""
    return m0 - in_use_bytes(eng)


def startup_free_bytes(gpu: GPUSpec, eng: EngineConfig) -> float:
    """Free memory vLLM's ``init_device`` measures: the total less others' memory and this
    process's CUDA context (the context estimate of :func:`kvscope.plan.sglang_budget.
    context_bytes` at one GPU: 0.51 GiB on Hopper and newer, 0.27 GiB before)."""
    from kvscope.plan.sglang_budget import context_bytes

    return gpu.memory_bytes - in_use_bytes(eng) - context_bytes(gpu, Parallelism())


def vllm_problem(
    gpu: GPUSpec,
    eng: EngineConfig,
    requested: float,
    held: float,
    kv_bytes: float,
) -> str | None:
    """Why vLLM would not start (or would run out of memory at its KV allocation) beside
    others' memory, or None. ``held``: what the process holds when it allocates the cache
    (weights, buffers, non-torch memory); ``kv_bytes``: the cache it allocates."""
    used = in_use_bytes(eng)
    if used <= 0:
        return None
    regime = vllm_regime(eng.version)
    if regime == "checked":
        free = startup_free_bytes(gpu, eng)
        # 0.34's extensible KV cache takes the budget as a cap, measuring what is free
        # (``request_memory``, vllm/v1/worker/utils.py of the 0.34.0 wheel)
        if free >= requested or extensible_on(eng):
            return None
        gmu = requested / gpu.memory_bytes
        return (
            f"vLLM {eng.version_text} refuses to start: free memory on the device "
            f"({free / GIB:.2f}/{gpu.memory_bytes / GIB:.2f} GiB, "
            f"{used / GIB:.2f} GiB {MARK}) is less than desired GPU memory "
            f"utilization ({gmu:.2f}, {requested / GIB:.2f} GiB)."
        )
    if regime == "counted":
        return None
    left = gpu.memory_bytes - used - held
    if kv_bytes <= left:
        return None
    return (
        f"vLLM {eng.version_text} sizes the KV cache as if the GPU were its own "
        f"({kv_bytes / GIB:.2f} GiB), but with {used / GIB:.2f} GiB {MARK} "
        f"only {max(left, 0.0) / GIB:.2f} GiB are free: the cache allocation runs out of memory."
    )
