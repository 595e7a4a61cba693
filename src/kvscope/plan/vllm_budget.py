"""vLLM's KV-cache budget, block count and logged capacity, by engine version.

Paraphrase of ``vllm/v1/worker/gpu_worker.py::Worker.determine_available_memory``,
``vllm/utils/mem_utils.py::memory_profiling`` and ``vllm/v1/core/kv_cache_utils.py``
(PyPI source releases 0.11.0, 0.19.0, 0.33.0; V0 from 0.7.3):

    requested    = total_memory x gpu_memory_utilization   (ceil from 0.19 on)
    available_kv = requested - weights - activation peak - non-torch [- CUDA-graph estimate]
    num_blocks   = available_kv // block_bytes            (minimum over all ranks)

Version eras, following ``--engine-version``:

- V0 (< 0.8, and 0.8 - 0.10.1 below compute capability 8.0: :mod:`kvscope.plan.vllm_v0_fallback`):
  "# GPU blocks: N"; tokens = N x block_size; MLA entries padded to 256 B.
- V1 0.8 - 0.20: "GPU KV cache size: N tokens" with N = num_blocks // groups x block_size;
  the CUDA-graph estimate (PR #30515, present from ~0.14) is logged, not subtracted, until
  0.20.0 subtracts it by default (its log says "default since v0.21.0"; the 0.20.0 wheel's
  envs.py already defaults to "1") and raises gpu_memory_utilization's default to 0.92.
- V1 >= 0.21: N = int(max_concurrency x max_model_len) (``get_kv_cache_capacity``,
  vllm/v1/core/kv_cache_utils.py of 0.21.0).

Max concurrency = num_blocks / blocks one ``max_model_len`` request needs over all groups
(V0: tokens / max_model_len; up to 0.26 each group's blocks weighed by its page bytes over
the first group's, which only DeepSeek V4's unequal groups feel). A sliding-window group
(DeepSeek V4's window and compressor groups, gpt-oss, Gemma) needs
``cdiv(min(window - 1 + in-flight tokens, max_model_len), block) + 1`` blocks
(``SlidingWindowSpec.max_memory_usage_bytes``). The in-flight tokens are
``max_num_batched_tokens`` up to 0.25; from 0.26.0 they are
``VllmConfig.max_in_flight_tokens`` = ``max_concurrent_batches x max_num_batched_tokens``,
where ``max_concurrent_batches`` is ``pp + 1`` with asynchronous scheduling (on by default)
on the V2 model runner, 2 with it on the V1 runner without PP, and the pipeline depth otherwise
(vllm/config/vllm.py and vllm/v1/kv_cache_interface.py of the 0.26.0 and 0.31.0 wheels; the
0.25.0 wheel still adds the batched tokens alone; :mod:`kvscope.plan.vllm_scheduling`). DeepSeek
V4's load-time buffers: :mod:`kvscope.plan.dsv4_buffers`. Units: bytes unless a name says GiB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvscope.plan._cache import is_moe
from kvscope.plan.activation import activation_peak
from kvscope.plan.adaptive_verification import profiling_cache_bytes
from kvscope.plan.attention_backend import block_size as backend_block_size
from kvscope.plan.attention_backend import (
    check_fits_model,
    first_capture_bytes,
    load_bytes,
    profile_workspace_bytes,
)
from kvscope.plan.compile_peak import cold_compile_peak_bytes, compiles_cold
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.cublas_workspace import workspace_saving_bytes
from kvscope.plan.cudagraph import (
    FIT_GRAPH_UNITS,
    capture_sizes,
    dsv4_first_capture_bytes,
    estimate_bytes,
    graph_units,
)
from kvscope.plan.drafter import aux_capture_layers
from kvscope.plan.dsv4_activation import dsv4_attention_peak
from kvscope.plan.dsv4_buffers import dsv4_buffer_bytes
from kvscope.plan.dsv4_workspace import (
    dsv4_profile_workspace,
    dsv32_profile_workspace,
    with_profile_workspace,
)
from kvscope.plan.encoder_profile import encoder_profile, phase_bytes, profiles_on_stage
from kvscope.plan.kv_layout import MLA_CACHE_SINCE, KVLayout, vllm_layout
from kvscope.plan.mrope_buffers import deepstack_buffer_bytes
from kvscope.plan.pp_buffers import CONSUMED_SINCE, intermediate_tensor_bytes
from kvscope.plan.rejection_profile import rejection_pass_bytes
from kvscope.plan.rocm_blas import hipblaslt_bytes
from kvscope.plan.sampler_phase import (
    sampler_shape_free_bytes,
)
from kvscope.plan.shared_gpu import vllm_charged_bytes
from kvscope.plan.spec_buffers import dspark_speculator_bytes
from kvscope.plan.v0_cached_segments import charged_reserved_bytes
from kvscope.plan.v2_draft_graphs import drafting_graph_bytes
from kvscope.plan.v2_sampler_buffers import v2_sampler_bytes
from kvscope.plan.vllm_auto_backend import auto_attention_backend
from kvscope.plan.vllm_batch_defaults import batch_defaults, capped_defaults
from kvscope.plan.vllm_chunked import chunked_span
from kvscope.plan.vllm_collectives import non_torch_bytes
from kvscope.plan.vllm_extensible_kv import default_gpu_memory_utilization, extensible_on, size_rank
from kvscope.plan.vllm_mamba_mode import effective_mamba_cache_mode
from kvscope.plan.vllm_mxfp4 import hopper_triton
from kvscope.plan.vllm_runner import (
    graphs_by_capture_list,
    graphs_profiled,
    greedy_dummy_sampler,
    runs_v2,
)
from kvscope.plan.vllm_sampler import (
    code_sampler_phase,
    sampler_fp32_copies,
    triton_top_k_top_p,
)
from kvscope.plan.vllm_scheduling import async_scheduling, in_flight_tokens
from kvscope.plan.vllm_v0_fallback import runs_v0
from kvscope.plan.weights import RankWeights
from kvscope.specs.attention import AttentionLayer
from kvscope.specs.dtypes import element_bytes
from kvscope.specs.hardware import GPUSpec
from kvscope.specs.model import ModelSpec

#: ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` "0" in 0.19.1's vllm/envs.py, "1" in 0.20.0's
#: (gpu_memory_utilization's default by release: :mod:`kvscope.plan.vllm_extensible_kv`).
CUDAGRAPH_ESTIMATE_DEFAULT_SINCE = (0, 20, 0)
#: From 0.27.0 the logged "peak activation" is the transient peak plus the applied CUDA-graph
#: estimate (``Worker.determine_available_memory``; 0.26.0 logs the profiling pass alone).
PEAK_ACTIVATION_HOLDS_GRAPHS_SINCE = (0, 27, 0)
#: Releases before this one call the Triton fused-MoE kernel directly for unquantized and
#: fp8 experts (see :func:`moe_scratch_persists`).
DIRECT_FUSED_EXPERTS_UNTIL = (0, 12, 0)

#: First release whose logged concurrency counts each group's blocks; up to 0.26 it weighs
#: them by the group's page bytes over the first group's (``get_max_concurrency_for_kv_cache_
#: config``, vllm/v1/core/kv_cache_utils.py of 0.21.0-0.26.0 vs 0.27.0; only DeepSeek V4's
#: groups have unequal pages).
REPORT_COUNTS_BLOCKS_SINCE = (0, 27, 0)

#: Non-torch memory (NCCL, custom all-reduce): :mod:`kvscope.plan.vllm_collectives`.


@dataclass(frozen=True)
class VllmDefaults:
    """Flags resolved to what vLLM would use for this GPU and version."""

    gpu_memory_utilization: float
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    cudagraph_subtracted: bool
    #: tokens a sliding-window group reserves beyond its window (see the module text)
    in_flight_tokens: int = 0
    #: the start runs the V0 engine (:mod:`kvscope.plan.vllm_v0_fallback`)
    v0: bool = False


@dataclass(frozen=True)
class VllmRank:
    """One GPU's (one PP stage's) budget terms, bytes."""

    pp_rank: int
    requested: float
    weights: float
    activation: float
    non_torch: float
    cudagraph: float
    available_kv: float
    layout: KVLayout
    num_blocks: int


def resolve_defaults(
    model: ModelSpec, gpu: GPUSpec, eng: EngineConfig, par: Parallelism | None = None
) -> VllmDefaults:
    """Fill in vLLM's defaults (``vllm/engine/arg_utils.py::_set_default_args``)."""
    v = eng.version
    max_len = eng.max_model_len or model.max_position_embeddings
    # vLLM tiers its defaults by device memory (:mod:`kvscope.plan.vllm_batch_defaults`)
    v0 = runs_v0(v, gpu) if eng.use_v1 is None else not eng.use_v1
    default_tokens, default_seqs = batch_defaults(gpu, v, eng.entrypoint)
    if eng.max_num_batched_tokens is not None:
        tokens = eng.max_num_batched_tokens
    elif v0:
        # V0 without chunked prefill profiles one full-length prompt (at least 2048);
        # chunked prefill (on by default above 32K context) used 512-token chunks until
        # 0.6 and 2048 for the API server afterwards (vllm/engine/arg_utils.py).
        tokens = max(max_len, 2048) if max_len <= 32768 else (2048 if v >= (0, 6, 0) else 512)
    else:
        tokens = default_tokens  # the entry point's (OPENAI_API_SERVER or LLM_CLASS) defaults
    seqs = eng.max_num_seqs or default_seqs
    if not v0:
        tokens, seqs = capped_defaults(eng, v, tokens, seqs, max_len)
    check_fits_model(model, v, eng.attention_backend)
    block = eng.block_size or backend_block_size(model, gpu, v, eng.attention_backend)
    default_subtract = v >= CUDAGRAPH_ESTIMATE_DEFAULT_SINCE
    subtract = default_subtract if eng.cudagraph_memory is None else eng.cudagraph_memory
    subtract = subtract and not eng.enforce_eager and not extensible_on(eng)  # 0.34: measured
    gmu = eng.gpu_memory_utilization or default_gpu_memory_utilization(eng)
    pp = (par or Parallelism()).pp
    v2 = runs_v2(model, eng, gpu)
    in_flight = in_flight_tokens(tokens, pp, v, async_scheduling(eng), v2)
    return VllmDefaults(gmu, max_len, tokens, seqs, block, subtract, in_flight, v0)


def moe_scratch_persists(model: ModelSpec, eng: EngineConfig, gpu: GPUSpec, dp: int = 1) -> bool:
    """Whether the fused-MoE scratch of the profiling pass stays allocated between layers.

    Direct kernel calls allocate their intermediate caches per call (``torch.empty`` in
    ``fused_experts_impl``, vllm/model_executor/layers/fused_moe/fused_moe.py, and in
    ``_fused_marlin_moe``, fused_marlin_moe.py), so the scratch is freed when the MoE layer
    returns. Up to 0.11 the unquantized and fp8 methods call ``fused_experts`` directly
    (``UnquantizedFusedMoEMethod.forward_cuda``, ``Fp8MoEMethod.apply`` of the 0.11.1
    wheel); from 0.15 they run the modular kernel, whose workspace the worker's
    ``WorkspaceManager`` keeps (``modular_kernel.py``, 0.15.0 and 0.20.0 wheels). The
    compressed-tensors int4/int8 weight-only ("WNA16") experts stay a direct
    ``fused_marlin_moe`` call in 0.11.1, 0.15.0 and 0.20.0
    (``CompressedTensorsWNA16MarlinMoEMethod.apply``, no caches passed). Block-fp8 experts
    on Hopper and Blackwell may take DeepGEMM's modular kernel (shared buffers) in 0.11 as
    well, and 0.12-0.14 are not read: both keep the persistent rule, as do ROCm GPUs (AITER
    kernels). MXFP4 experts on Hopper's Triton path (:func:`kvscope.plan.vllm_mxfp4.
    hopper_triton`, 0.12-0.31) call ``triton_kernel_moe_forward``, which allocates its own
    buffers per call: directly from ``Mxfp4MoEMethod.apply`` (quantization/mxfp4.py of the
    0.12.0, 0.13.0 and 0.17.0 wheels) and through ``OAITritonMxfp4ExpertsMonolithic``, the
    class the MXFP4 oracle tries first (fused_moe/oracle/mxfp4.py of 0.19.0, 0.20.0, 0.24.0,
    0.26.0 and 0.29.0), which takes no workspace from the worker's manager; it declines
    data parallelism (``_supports_parallel_config``: ``dp_size <= 1``, no all2all, no EPLB),
    so ``dp`` > 1 keeps the modular ``OAITritonExperts`` and the persistent rule. Logged:
    gpt-oss-20b on H100 at 0.19 (2.87 GiB at TP1 and TP2, jgchn/llm-d-planner
    results_raw.csv) and 0.14 (7.38 GiB, llm-d-benchmark config_explorer) are the sampler
    pass alone, 0.5 GiB under the persistent rule's figure.
    """
    if not is_moe(model) or gpu.architecture.startswith("CDNA"):
        return True
    quant = model.quantization
    if quant.method == "compressed-tensors" and quant.weight_only_int:
        return False
    if quant.method == "mxfp4" and hopper_triton(gpu, eng.version) and dp <= 1:
        return False
    deep_gemm = quant.block is not None and gpu.architecture.startswith(("Hopper", "Blackwell"))
    return not (eng.version < DIRECT_FUSED_EXPERTS_UNTIL and not deep_gemm)


def logged_activation(rank: VllmRank, defaults: VllmDefaults, v: tuple[int, int, int]) -> float:
    """The "peak activation" figure this release prints for ``rank``, bytes."""
    holds_graphs = defaults.cudagraph_subtracted and v >= PEAK_ACTIVATION_HOLDS_GRAPHS_SINCE
    return rank.activation + (rank.cudagraph if holds_graphs else 0.0)


def plan_ranks(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    eng: EngineConfig,
    stage_weights: tuple[RankWeights, ...],
    kv_dtype: str,
    defaults: VllmDefaults,
    draft_kv_layers: int = 0,
    draft_kv_attention: tuple[AttentionLayer, ...] = (),
) -> tuple[VllmRank, ...]:
    """Budget of every pipeline stage (TP ranks of a stage are identical).

    ``draft_kv_layers`` drafter attention layers of the target's shape sit on the last stage
    and join its KV group (:mod:`kvscope.plan.drafter`); on DeepSeek V4 they are window-only
    layers (MTP layer, DSpark stages) that join the window bucket. ``draft_kv_attention``
    are drafter layers of another page that join the target's one full-attention group with
    their own pages.
    """
    v = eng.version
    if v >= (0, 19, 0):
        requested = float(math.ceil(gpu.memory_bytes * defaults.gpu_memory_utilization))
    else:
        requested = gpu.memory_bytes * defaults.gpu_memory_utilization
    attn_tp = par.tp
    # The estimate follows the graphs of the capture list (first capture plus per-graph
    # terms) on the V1 runner and under an explicit cap; the V2 runner keeps the fit
    # (vllm_runner.graphs_by_capture_list; benchmarks/RESULTS.md, "Issue 17 rows: CUDA-graph
    # estimate by capture list" and "... as the V1 runner's default").
    spec = eng.speculative
    k = spec.num_speculative_tokens if spec is not None else 0
    sizes = capture_sizes(
        defaults.max_num_seqs,
        defaults.max_num_batched_tokens,
        v,
        k,
        eng.max_cudagraph_capture_size,
        gpu,
    )
    listed_units = graph_units(sizes, defaults.max_num_seqs, k)
    by_list = graphs_by_capture_list(model, eng, gpu)
    units = listed_units if by_list else FIT_GRAPH_UNITS
    # the backend whose workspace the first capture builds: vLLM's own pick where it holds one
    # (vllm_auto_backend); the same on every rank
    backend = eng.attention_backend or auto_attention_backend(model, gpu, v, kv_dtype)
    backend_eng = replace(eng, attention_backend=backend)
    # the multimodal encoder's profiling pass is the same on every rank: built once
    mml, mnbt, seqs = defaults.max_model_len, defaults.max_num_batched_tokens, defaults.max_num_seqs
    v2 = runs_v2(model, eng, gpu)
    first_encoder = encoder_profile(model, v, mml, mnbt, seqs, eng.limit_mm_per_prompt, v2)
    first_enc = phase_bytes(model, first_encoder, gpu, par.tp, v)
    code_v1 = code_sampler_phase(model, eng, gpu, defaults.v0)
    out = []
    for w in stage_weights:
        last = w.pp_rank == par.pp - 1
        on_stage = profiles_on_stage(v2, w.pp_rank)  # V2: the first stage alone
        encoder, enc = (first_encoder, first_enc) if on_stage else (None, 0.0)
        act = activation_peak(
            model,
            par,
            defaults.max_num_batched_tokens,
            defaults.max_num_seqs,
            last,
            sampler_fp32_copies=0
            if greedy_dummy_sampler(model, eng, gpu)
            else sampler_fp32_copies(eng, defaults.v0),
            moe_persistent=moe_scratch_persists(model, eng, gpu, par.dp),
        )
        # torch's cuBLAS workspace below SM 9.0 is smaller than on the H100 read (cublas_workspace)
        act = replace(act, runtime=act.runtime - workspace_saving_bytes(gpu, v))
        if last:  # the speculative branch's rejection-sampler pass (kvscope.plan.rejection_profile)
            rej = rejection_pass_bytes(model, eng, gpu, defaults.max_num_batched_tokens, seqs)
            act = replace(act, sampler=max(act.sampler, rej))
        if last and code_v1:  # the sampler phase's workspace, row copies and Triton buffer
            rows = min(defaults.max_num_seqs, defaults.max_num_batched_tokens)
            triton = triton_top_k_top_p(model, eng, gpu, defaults.v0)
            b = element_bytes(model.dtype)
            extra = sampler_shape_free_bytes(model, gpu, v, rows, b, triton, defaults.v0)
            act = replace(act, sampler_extra=extra)
        ws = dsv4_profile_workspace(
            model, eng, defaults.max_model_len, defaults.max_num_batched_tokens
        )
        if ws is None and gpu.vendor == "nvidia":
            # V3.2's indexer and FlashMLA-sparse reservations (the CUDA backend's)
            ws = dsv32_profile_workspace(
                model,
                eng,
                kv_dtype,
                attn_tp,
                defaults.max_model_len,
                defaults.max_num_batched_tokens,
            )
        if ws is not None:
            act = with_profile_workspace(act, ws)
        mtp = last and spec is not None and spec.method == "mtp"
        aux = aux_capture_layers(model, spec) if last else ()
        t, fp4 = defaults.max_num_batched_tokens, eng.indexer_dtype == "fp4"
        v4 = dsv4_attention_peak(model, gpu, attn_tp, t, v, fp4, mtp, aux)
        if v4 is not None:
            # the mHC streams and V4's attention tensors, padded heads included, with a DSpark
            # drafter's captures; the MTP drafter's layer with the inputs its dummy run holds
            layer = max(act.attention, v4.layer) + v4.aux
            act = replace(
                act, residual=max(act.residual, v4.stream), attention=max(layer, v4.draft)
            )
        # buffers the named attention backend makes inside the profiling pass
        act = replace(act, held=act.held + profile_workspace_bytes(v, eng.attention_backend))
        held = encoder.kept_bytes if encoder is not None else 0.0
        if enc:  # the tower's own peak, before anything is parked (kvscope.plan.vit_peak)
            act = replace(act, encoder_peak=act.runtime + act.held + enc)
        if last:  # the V2 runner's DSpark speculator buffers (kvscope.plan.spec_buffers)
            held += dspark_speculator_bytes(model, eng, defaults.max_num_seqs, t)
        act = replace(act, held=act.held + held)  # + parked encoder outputs (encoder_profile)
        # V0 to 0.6.3 charges the free-memory drop: torch's cached segments, not its peak
        act = replace(act, cached_segments=charged_reserved_bytes(model, par, t, v))
        if compiles_cold(model, eng, w.pp_rank):
            peak = cold_compile_peak_bytes(model, par, defaults.max_num_batched_tokens)
            act = replace(act, compile_peak=peak)
        non_torch = non_torch_bytes(gpu, par, v, eng.disable_custom_all_reduce, defaults.v0)
        non_torch += vllm_charged_bytes(eng) + hipblaslt_bytes(gpu, eng.engine, eng.hipblaslt)
        if last:  # V2 sampler tables, in 0.27's "consumed memory (weights + non-torch)"
            non_torch += v2_sampler_bytes(model, eng, gpu, defaults.max_num_seqs)
        # a later stage's receive buffer (kvscope.plan.pp_buffers): consumed memory from 0.27
        recv = intermediate_tensor_bytes(model, eng, gpu, t, w.pp_rank == 0)
        if v >= CONSUMED_SINCE:
            non_torch += recv
        else:  # made inside the V1 profiling pass: in its peak
            act = replace(act, held=act.held + recv)
        kv_layers = w.layers
        dsv4 = _is_dsv4(model, w.layers)
        if last and draft_kv_layers and not dsv4:
            kv_layers = (*w.layers, *[model.num_layers - 1] * draft_kv_layers)
        layout = vllm_layout(
            model,
            kv_layers,
            kv_dtype,
            attn_tp,
            defaults.block_size,
            eng.indexer_dtype,
            release=v,
            v0_mla_padding=defaults.v0,
            mla_as_heads=v < MLA_CACHE_SINCE,
            extra=draft_kv_attention if last else (),
            draft_window_layers=draft_kv_layers if last and dsv4 else 0,
            mamba_cache_mode=effective_mamba_cache_mode(eng),
            chunk=chunked_span(model, eng),
            num_spec=k,
        )
        first = dsv4_first_capture_bytes(model, w.layers, v, gpu)
        graphs = first + estimate_bytes(
            len(w.layers), is_moe(model), listed_units if first else units
        )
        graphs += first_capture_bytes(model, backend_eng, gpu, layout)  # the backend's workspace
        # DSpark adaptive verification's eager profiling runs (kvscope.plan.adaptive_verification)
        graphs += profiling_cache_bytes(model, gpu, par, eng, seqs, mnbt, last)
        if not by_list:
            # the graphs drafting adds to the V2 runner's fit (kvscope.plan.v2_draft_graphs)
            moe = is_moe(model)
            graphs += drafting_graph_bytes(
                model, eng, gpu, len(w.layers), moe, seqs, mnbt, mml, last
            )
        if eng.enforce_eager or not graphs_profiled(model, eng, gpu):
            graphs = 0.0
        buffers = dsv4_buffer_bytes(model, eng, defaults.max_num_batched_tokens, last)
        if w.pp_rank == 0:  # Qwen3-VL's deepstack inputs, beside the tower (mrope_buffers)
            buffers += deepstack_buffer_bytes(model, defaults.max_num_batched_tokens)
        weights = w.total_bytes + buffers + load_bytes(v, eng.attention_backend)
        spent = weights + act.total_bytes + non_torch
        if defaults.cudagraph_subtracted:
            spent += graphs
        available = requested - spent
        if eng.kv_cache_memory_bytes is not None:
            available = float(eng.kv_cache_memory_bytes)
        blocks = max(0, int(available // layout.block_bytes)) if layout.block_bytes else 0
        if eng.num_gpu_blocks_override is not None:
            blocks = eng.num_gpu_blocks_override
        if extensible_on(eng):  # sized after warmup and capture, within the capacity above
            used, segments = weights + non_torch + graphs, len(kv_layers)
            ext = size_rank(eng, gpu, requested, used, act.total_bytes, layout, segments, blocks)
            available, blocks = min(ext.kv_bytes, available), ext.num_blocks
        out.append(
            VllmRank(
                w.pp_rank,
                requested,
                weights,
                act.total_bytes,
                non_torch,
                graphs,
                available,
                layout,
                blocks,
            )
        )
    return tuple(out)


def logged_capacity(
    layout: KVLayout,
    num_blocks: int,
    defaults: VllmDefaults,
    v: tuple[int, int, int],
    dcp: int = 1,
) -> tuple[int, float]:
    """("GPU KV cache size" tokens, "Maximum concurrency") as the version logs them.

    Under decode context parallelism each rank of a DCP group keeps every ``dcp``-th token of
    a request, so vLLM multiplies the token figure by ``dcp`` (``get_kv_cache_config``,
    vllm/v1/core/kv_cache_utils.py, 0.11: "Multiplying the GPU KV cache size by the
    dcp_world_size") and the concurrency with it.
    """
    length = defaults.max_model_len
    if v < (0, 8, 0) or defaults.v0:
        tokens = num_blocks * layout.block_size
        return tokens, tokens / length
    by_bytes = v < REPORT_COUNTS_BLOCKS_SINCE
    need = layout.reported_blocks_per_request(length, defaults.in_flight_tokens, by_bytes)
    concurrency = dcp * num_blocks / need if need else 0.0
    if v >= (0, 21, 0):
        return int(concurrency * length), concurrency
    tokens = num_blocks // len(layout.groups) * min(g.block_size for g in layout.groups)
    return tokens * dcp, concurrency


def _is_dsv4(model: ModelSpec, layers: tuple[int, ...]) -> bool:
    return any(model.layers[i].attention.kind.startswith("dsv4") for i in layers)
