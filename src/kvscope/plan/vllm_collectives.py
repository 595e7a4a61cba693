"""Whether vLLM's custom all-reduce runs on a tensor-parallel group, and the non-torch memory
that start-up then grows on one GPU (NCCL, custom all-reduce, lazily loaded CUDA modules),
bytes. PyTorch's cuBLAS workspaces are caching-allocator memory, in the torch peak, not here
(:mod:`kvscope.plan.cublas_workspace`).

The rule, by release (vLLM wheels 0.10.2, 0.11.1, 0.12.0, 0.15.0, 0.20.0, 0.22.0, 0.23.0,
0.25.0, 0.26.0, 0.27.0, 0.31.0):

- ``--disable-custom-all-reduce`` (``ParallelConfig.disable_custom_all_reduce``) turns it off;
  the worker passes ``not disable_custom_all_reduce`` to ``set_custom_all_reduce``
  (vllm/v1/worker/gpu_worker.py), and ``CudaCommunicator`` builds no ``CustomAllreduce``.
- ``ParallelConfig._verify_args`` (vllm/config/parallel.py) also sets it where
  ``current_platform.use_custom_allreduce()`` is False: ROCm builds keep it only on gfx94x /
  gfx95x (MI300-series and MI350-series, CDNA 3 / CDNA 4; vllm/platforms/rocm.py), CUDA keeps
  it. Up to 0.26.0 the same method sets it when ``nnodes > 1``; 0.27.0 drops that line and
  lets ``CustomAllreduce`` run a multi-node group only over MNNVL multicast, else "Custom
  collectives are disabled because this multi-node group does not support MNNVL multicast"
  (vllm/distributed/device_communicators/custom_all_reduce.py of 0.27.0). No catalogue part
  that spans nodes here (DGX Spark) has MNNVL, so a group across nodes has none in any release.
- ``CustomAllreduce.__init__`` (custom_all_reduce.py) stays disabled for a world size outside
  ``_SUPPORTED_WORLD_SIZES`` ([2, 4, 6, 8] up to 0.26.0, [2, 4, 6, 8, 16] from 0.27.0) and for
  more than two GPUs that are not fully connected (PCIe only). Its P2P probe is not decidable
  from the planner's inputs and is not modelled.

Figures, GiB (``Worker.determine_available_memory``'s non-torch growth): ~0.25 at TP1; 2.06-2.21
at TP >= 2 with custom all-reduce over NVLink (custom all-reduce and symmetric-memory
buffers), 0.07 more for the first stage of PP2/PP4 with TP1 (jgchn/llm-d-planner
results_raw.csv, vLLM 0.19 on H100). Where custom all-reduce is off only NCCL's buffers
remain: 0.25 (more than two PCIe GPUs; a 2x DGX Spark TP2 log, "disable_custom_all_reduce=True",
"Using ['PYNCCL'] all-reduce backends"). Releases before 0.11 logged ~0.2-0.25 at TP >= 2
whatever the link: V0 on 2x RTX 4090 0.25 (vllm#13061), 4x 24 GB cards 0.20 (vllm PR #14447).
From 0.27.0 ``memory_profiling`` (vllm/utils/mem_utils.py) no longer measures non-torch growth:
it subtracts the whole free-memory drop since the worker's snapshot (``total_consumed``), which
the engine logs as "GiB for consumed memory (weights + non-torch)" (gpu_worker.py of 0.27.0).
Beside the logged weights that figure holds, at TP1, 0.11-0.15 GiB plus the V2 sampler's tables
(:mod:`kvscope.plan.v2_sampler_buffers`, added on the last stage): Qwen3-8B on a 48 GB RTX
4090 at 8 sequences 0.11 / 0.14 (V2, warm and AWQ) and 0.15 (V1, n-gram); Qwen3-14B and its AWQ
build on an L40S at 256 sequences 0.27 / 0.29 less 0.16 of tables; Llama-3.1-8B on an A100 at
256 sequences 0.26 less 0.13 (vLLM 0.29.0 and 0.31.0 logs: yuanjuju/vllm-lab phase3/results,
samilazrak/vllm-optimization-lab results/raw, public study notes of the A100 start); 0.13 is
their median, the "tp1_consumed" figure (512 sequences on the L40S leave 0.19). The NCCL-only
figure was read on PCIe and across nodes; over NVSwitch NCCL may keep more (its NVLS buffers),
which no log here measures.

The V0 engine from 0.6.5 on (vllm PR #10511's baseline snapshot) charges, on one GPU, only
what non-torch memory grew by since the worker's snapshot: the V0 start-up logs at TP1 print
"non_torch_memory takes" 0.01-0.13 GiB (T4 0.13 and 0.11 at 0.6.6.post1, 0.01 at 0.7.2 and
0.05 at 0.8.2; V100 0.09 at 0.7.1 and 0.8.5; L40 0.08 and A10 0.05 at 0.7.2; A100 40GB 0.01
at 0.7.3), median 0.08 GiB, the "tp1_v0_baseline" figure. 0.6.4 logged the whole non-torch
footprint (0.35 GiB on an RTX 3090, vllm-project/vllm#10517), which the 0.25 figure keeps.

Two GPUs without NVLink (PCIe P2P) do run custom all-reduce, but what it allocates is
megabytes: its metadata plus ``max_size`` (8 MiB) signal buffer, one IPC buffer of the larger of
its all-reduce / all-gather / reduce-scatter limits and an 8 MiB ``rank_data`` table
(``CustomAllreduce.__init__``, custom_all_reduce.py of 0.27.0), and the symmetric-memory
communicator it pairs with on NVLink parts exists only for compute capabilities 9.0 and 10.x
(``SYMM_MEM_ALL_REDUCE_MAX_SIZES``, all_reduce_utils.py of 0.27.0). So the 2.1 GiB read on
NVLink H100s is not custom all-reduce's, and a PCIe pair keeps the NCCL-only 0.25: two RTX PRO
6000 (SM 12.0) at TP2 on vLLM 0.27.1 log 1.66 GiB of non-KV memory beside the weights in all,
for 1.02 GiB of V2-runner profiling peak (kvscope.plan.vllm_runner).

On a PCIe group nothing else grows after the worker's snapshot either (wheels 0.19.0, 0.26.0,
0.27.1): ``CudaCommunicator.__init__`` (cuda_communicator.py) builds its ``PyNcclCommunicator``,
whose constructor runs "a small all_reduce for warmup" (pynccl.py), and every other backend inside
``init_worker_distributed_environment``, before ``init_device`` takes the snapshot; it builds a
``SymmMemCommunicator`` for every TP group whatever ``--disable-custom-all-reduce``
(``VLLM_ALLREDUCE_USE_SYMM_MEM`` defaults to 1), but that one returns before allocating where the
compute capability is not a key of ``SYMM_MEM_ALL_REDUCE_MAX_SIZES`` (8.6, 8.9 and 12.0 are not;
symm_mem.py); FlashInfer's all-reduce is off unless ``VLLM_ALLREDUCE_USE_FLASHINFER=1`` and quick
all-reduce is ROCm-only. So the TP group of GeForce / RTX PRO / L4 / L40S cards keeps the TP1
figure of its card (below), from 0.11 up to 0.26; before 0.11 such groups logged 0.2-0.3 GiB
(L40S TP2 at 0.7.1, TP8 at 0.10.2) and keep the NCCL figure, and from 0.27 the "consumed"
figure of a PCIe pair is larger (0.27.1 2x RTX 3090: 0.6-0.9 GiB beside the weights) and keeps
it too. NVLink Ampere and bridged groups keep NCCL's 0.25 (below).

The one-GPU figure of a part below compute capability 9.0 (Ampere, Ada, Turing, Volta) is
0.08 GiB, not H100's 0.25, where the V1 engine measures growth since its snapshot (0.9.1 to
0.26; 0.8.0-0.9.0 charge the whole non-torch footprint, CUDA context included, see
:mod:`kvscope.plan.shared_gpu`): the engine's own printouts of that growth on such parts read
0.01-0.14 GiB, median 0.08 (the V0 prints above, made by the same ``memory_profiling`` with a
baseline snapshot, and a V1 0.26.0 start on an RTX 4080 that prints 0.06), against 0.13-0.25
on H100 / H200. What grows there is the CUDA modules and local memory the first kernels load,
which scale with the part: the CUDA context itself is ~0.27 GiB before Hopper and ~0.51 on
Hopper (:data:`kvscope.plan.sglang_budget.CONTEXT_GIB`). With 0.25 the 51 start-up logs this
moves (one card or a PCIe group) sat a median 0.16 GiB of KV pool under their logged one; with
0.08, +0.01 (benchmarks/RESULTS.md, "h27: the pre-Hopper one-GPU figure"). Blackwell client parts
(SM 12.x: RTX 5090, RTX PRO 6000, DGX Spark) print no such figure here and keep 0.25.

What the 2.1 GiB matches is NCCL's NVLink SHARP (NVLS) buffers, which NCCL sets up by default
where the GPUs meet in an NVSwitch (``NCCL_NVLS_ENABLE``, NCCL user guide, environment
variables, since 2.17: NVLS needs NVLink4 NVSwitch systems, Hopper and later): on 8x H200 SXM
NCCL logs "NVLS comm ... nvlsTotalSize 2415919104" (2.25 GiB) and ``NCCL_NVLS_ENABLE=0`` buys
back the same order of KV blocks (vllm-project/vllm#9699). Cards joined only by an NVLink bridge
of two or four (H100 NVL, H200 NVL, the PCIe A100 / H100; ``GPUSpec.nvlink_bridge``) have no
NVSwitch, so NCCL builds no NVLS there and such a group keeps the NCCL-only 0.25 GiB beside
custom all-reduce's megabytes.

The 2.1 GiB belongs to NVLink parts of compute capability 9.0 and above (H100/H200/B200
class); NVLink Ampere parts (A100/A800 SXM, SM 8.0) keep the NCCL-only 0.25 in every release.
Neither communicator that could hold gigabytes exists there: the symmetric-memory all-reduce
lists 9.0 and 10.x only (see above), and NCCL's NVLink SHARP (NVLS) buffers need Hopper-era
NVSwitch. Logged: Seed-OSS-36B at TP2 on two A100-SXM4-80GB, vLLM 0.11.2, 71.33 - 33.79
weights - 35.99 KV = 1.55 GiB of activation and non-torch memory in all, for 1.07 planned of
profiling peak (0.48 left for non-torch); MiniMax-M2.7 at TP4 on four A100-SXM4-80GB, vLLM
0.22.1rc1, 14.46 GiB of KV a GPU against 13.15 planned with 2.1 (rows ``intl-zh-2xa100-*``
and ``intl-it-4xa100-*`` of tests/plan/data/engine_logs_h22intl.csv, public Chinese and
Italian write-ups).

Where the 2.1 GiB comes from, and why it stops at 0.26.0: the profiling pass gathers the logits
over the TP group (``LogitsProcessor._gather_logits``: ``use_all_gather`` is True on CUDA). Up
to 0.25.0 ``CudaCommunicator`` has no ``all_gather`` of its own, so the base class calls
``torch.distributed.all_gather_into_tensor`` on the group's device group
(device_communicators/base_device_communicator.py), whose ProcessGroupNCCL starts its NCCL
communicator at that first use, after the worker's snapshot: on an NVSwitch node that new
communicator's buffers are the 2.1 GiB (NCCL's per-channel peer and NVLS buffers: how they
split is NCCL's and changes with its release). From 0.26.0 ``CudaCommunicator.all_gather``
runs on the ``PyNcclCommunicator`` built before the snapshot (cuda_communicator.py of the
0.26.0, 0.27.1, 0.29.0 and 0.31.0 wheels; the 0.20.0, 0.22.0, 0.24.0 and 0.25.0 wheels have no
such override), so no communicator starts inside the measured span and the TP group grows what
one GPU grows. Logged: Llama-3.1-8B on two NVSwitch H100 at vLLM 0.30.0 leaves the same memory
outside the KV pool at TP1 and TP2 (rows ``roy6n23-*`` of tests/plan/data/engine_logs_h26tpa.csv:
the 2.1 GiB planned 2.08 GiB more than the TP2 start used); V4-Flash-0731 at TP8 on 0.31
logs 0.91 GiB of "consumed" beyond the weights, its 0.75 GiB workspace included; a GB200 TP4
start of 0.26.0 logs 0.95 GiB of non-torch memory.
"""

from __future__ import annotations

from kvscope.plan.config import Parallelism
from kvscope.plan.shared_gpu import CHECKED_SINCE
from kvscope.specs.hardware import GIB, GPUSpec

NON_TORCH_GIB = {
    "tp1": 0.25,
    "tp1_consumed": 0.13,
    "tp_custom_ar": 2.1,
    "tp_old": 0.25,
    "tp_pcie": 0.25,
    "pp_only": 0.07,
    "tp1_v0_baseline": 0.08,
    # the same printed growth on parts below SM 9.0, for V1 0.9.1-0.26 (module text)
    "tp1_pre_hopper": 0.08,
}

#: First release whose profiler subtracts the free-memory drop since the worker's snapshot
#: (``total_consumed``, vllm/utils/mem_utils.py of 0.27.0) rather than non-torch growth.
CONSUMED_SINCE = (0, 27, 0)
#: ``CustomAllreduce._SUPPORTED_WORLD_SIZES`` (custom_all_reduce.py): 16 joins in 0.27.0.
SUPPORTED_WORLD_SIZES = (2, 4, 6, 8)
SUPPORTED_WORLD_SIZES_027 = (2, 4, 6, 8, 16)
WORLD_SIZE_16_SINCE = (0, 27, 0)
#: First release whose V0 worker charges non-torch memory as the growth since its baseline
#: snapshot (vllm PR #10511, 0.6.5; ``memory_profiling(baseline_snapshot=...)`` in
#: vllm/worker/worker.py of the 0.6.5-0.9.2 wheels); 0.6.4 charged all non-torch memory.
V0_BASELINE_SINCE = (0, 6, 5)
#: Releases before this one log NCCL-sized non-torch growth at every TP (see the module text).
CUSTOM_AR_GROWTH_SINCE = (0, 11, 0)
#: First NVIDIA compute capability whose NVLink start-ups grow the 2.1 GiB (module text).
NVLINK_GIGABYTES_SINCE_CC = (9, 0)
#: First release whose logits all-gather runs on the communicator built before the worker's
#: snapshot (``CudaCommunicator.all_gather`` over PyNccl, module text): no 2.1 GiB from it on.
PYNCCL_ALL_GATHER_SINCE = (0, 26, 0)
#: ROCm architectures whose platform keeps custom all-reduce (gfx94x, gfx95x).
ROCM_CUSTOM_AR_ARCHS = ("CDNA 3", "CDNA 4")


def custom_all_reduce_runs(
    gpu: GPUSpec, par: Parallelism, v: tuple[int, int, int], disabled: bool = False
) -> bool:
    """Whether vLLM release ``v`` builds a working custom all-reduce for ``par``'s TP group
    (``disabled``: ``--disable-custom-all-reduce``)."""
    tp = par.tp
    if disabled or tp <= 1:
        return False
    if gpu.architecture.startswith("CDNA") and gpu.architecture not in ROCM_CUSTOM_AR_ARCHS:
        return False  # ROCmPlatform.use_custom_allreduce: gfx94x / gfx95x only
    if gpu.spans_nodes(tp * par.pp):
        return False  # nnodes > 1 (<= 0.26); no MNNVL multicast on a catalogue part (0.27+)
    sizes = SUPPORTED_WORLD_SIZES_027 if v >= WORLD_SIZE_16_SINCE else SUPPORTED_WORLD_SIZES
    if tp not in sizes:
        return False
    # more than two GPUs must be fully connected (NVLink, or XGMI in the catalogue's field)
    return not (tp > 2 and gpu.nvlink_bandwidth <= 0)


def non_torch_bytes(
    gpu: GPUSpec,
    par: Parallelism,
    v: tuple[int, int, int],
    disable_custom_all_reduce: bool = False,
    v0: bool = False,
) -> float:
    """Estimated non-torch memory growth on one GPU (see :data:`NON_TORCH_GIB`); ``v0``: the
    start runs the V0 engine (:mod:`kvscope.plan.vllm_v0_fallback`)."""
    if v0 and par.tp == 1 and par.pp == 1 and v >= V0_BASELINE_SINCE:
        return NON_TORCH_GIB["tp1_v0_baseline"] * GIB
    if par.tp > 1 and v < CUSTOM_AR_GROWTH_SINCE:
        gib = NON_TORCH_GIB["tp_old"]
    elif par.tp > 1 and v >= PYNCCL_ALL_GATHER_SINCE and _nvlink_gigabytes(gpu):
        # from 0.26.0 no communicator starts in the profiled span, with or without custom
        # all-reduce: the group grows what one GPU grows (module text)
        gib = _one_gpu(v, par, gpu, v0)
    elif custom_all_reduce_runs(gpu, par, v, disable_custom_all_reduce):
        # the 2.1 GiB was read over NVSwitch on SM 9.0+; a PCIe pair, a bridged group and
        # NVLink Ampere keep NCCL's figure (module text)
        gib = NON_TORCH_GIB["tp_custom_ar"] if _nvlink_gigabytes(gpu) else _no_nvls(gpu, par, v, v0)
    elif par.tp > 1:
        gib = _no_nvls(gpu, par, v, v0)  # custom all-reduce off: NCCL's buffers only
    else:
        gib = _one_gpu(v, par, gpu, v0)
    return gib * GIB


def _one_gpu(v: tuple[int, int, int], par: Parallelism, gpu: GPUSpec, v0: bool) -> float:
    """What one GPU's start grows outside torch at release ``v``, GiB (module text)."""
    if v >= CONSUMED_SINCE:
        tp1 = NON_TORCH_GIB["tp1_consumed"]
    elif _pre_hopper_growth(gpu, v, v0):
        tp1 = NON_TORCH_GIB["tp1_pre_hopper"]
    else:
        tp1 = NON_TORCH_GIB["tp1"]
    return tp1 + (NON_TORCH_GIB["pp_only"] if par.pp > 1 else 0.0)


def _no_nvls(gpu: GPUSpec, par: Parallelism, v: tuple[int, int, int], v0: bool) -> float:
    """A TP group that builds no NVLS buffers, GiB: NCCL's 0.25, except a group of pre-Hopper
    cards with no NVLink at all from 0.11 to 0.26, which grows what one such card grows
    (module text)."""
    if gpu.nvlink_bandwidth <= 0 and _pre_hopper_growth(gpu, v, v0):
        return _one_gpu(v, par, gpu, v0)
    return NON_TORCH_GIB["tp_pcie"]


def _pre_hopper_growth(gpu: GPUSpec, v: tuple[int, int, int], v0: bool) -> bool:
    """Whether the V1 engine of release ``v`` measures non-torch growth since its snapshot
    (0.9.1 to 0.26) on an NVIDIA part below compute capability 9.0 (module text)."""
    if v0 or not CHECKED_SINCE <= v < CONSUMED_SINCE:
        return False
    cap = gpu.capability
    return gpu.vendor == "nvidia" and cap is not None and cap < NVLINK_GIGABYTES_SINCE_CC


def _nvlink_gigabytes(gpu: GPUSpec) -> bool:
    """Whether a TP group with custom all-reduce on ``gpu`` grows the 2.1 GiB (module text):
    an NVLink (or XGMI) part, other than an NVIDIA one below compute capability 9.0 or one joined
    only by an NVLink bridge (no NVSwitch, so no NVLS)."""
    if gpu.nvlink_bandwidth <= 0 or gpu.nvlink_bridge:
        return False
    if gpu.vendor != "nvidia" or gpu.capability is None:
        return True
    return gpu.capability >= NVLINK_GIGABYTES_SINCE_CC
