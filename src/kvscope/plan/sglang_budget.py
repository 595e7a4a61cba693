"""SGLang's KV pool size: ``mem_fraction_static`` and ``max_total_num_tokens``.

Paraphrase of SGLang's ``ModelRunner.profile_max_num_token`` / ``init_memory_pool`` (0.5.23:
``mem_cache/kv_cache_configurator.py::_profile_available_bytes``):

    M0   = free memory right after torch.distributed init (minimum over ranks)
    rest = free_after_weights - M0 x (1 - mem_fraction_static) = M0 x mfs - weights
    max_total_num_tokens = floor(rest / cell_size), rounded down to the page size,
                           minimum over PP stages

``mem_fraction_static`` covers weights plus the KV pool; activations and CUDA graphs live in
the remaining ``1 - mfs``, so they are not subtracted here. DeepSeek V4 uses its own
"bytes per full token" (SGLang ``model_executor/pool_configurator.py``,
``DSV4PoolConfigurator._get_bytes_per_full_token``). Units: bytes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

from kvscope.errors import KvscopeError
from kvscope.plan import sglang_mamba, sglang_mm_reserve, sglang_swa
from kvscope.plan._cache import attention_kinds
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.kv_layout import DSV4_BLOCK, sglang_cell_bytes
from kvscope.plan.sglang_defaults import (
    FIRST_MODELLED,
    SglangDefaults,
    sglang_defaults,
    sglang_gpu_mem_mib,
)
from kvscope.plan.shared_gpu import sglang_m0
from kvscope.plan.weights import RankWeights
from kvscope.specs.attention import DS_MLA_FP8_RECORD, DSV4_ENTRY, INDEXER_FP8_ENTRY
from kvscope.specs.hardware import GIB, GPUSpec
from kvscope.specs.model import ModelSpec

#: Memory CUDA and NCCL take before the weights load (total - M0), GiB. The CUDA context:
#: 0.35-0.60 GiB on H100 at TP1 in SGLang logs (79.19 GiB total vs "Load weight begin. avail
#: mem=78.43-78.84 GB": sglang PR #4760, issue #6291, the docs' LoRA notebook) and 0.51 GiB in
#: vLLM's ``init_cuda_memory_gib`` (jgchn/llm-d-planner accuracy/results/v0.19.0/
#: results_raw.csv); 0.27 GiB on older parts. Distributed init adds NCCL and custom
#: all-reduce buffers, which grow with the group: on NVLink 0.92-1.04 GiB at TP2/TP4/PP2/PP4
#: (llm-d, vLLM 0.19) and 1.77-2.01 GiB at TP8 ("Init torch distributed ends. mem usage="
#: on 8x H200, sglang PR #11716 and issue #6017); on PCIe (custom all-reduce off) 0.13 GiB
#: at TP4 on 4x L4 (QwQ-32B row of the test set).
CONTEXT_GIB = {"hopper_or_newer": 0.51, "older": 0.27}
DIST_GIB = {"nvlink": 1.02, "nvlink_8plus": 1.9, "pcie": 0.13}
#: What "Load weight end. ... mem usage" shows beyond the weights themselves, GiB: the drop
#: in free memory while loading also holds kernels' modules and workspaces first used then.
#: Measured: +0.06-0.15 at TP1 (Llama-3.1-8B 15.02-15.11 and Qwen3-8B 15.35 vs 14.96 and
#: 15.26 GiB of weights; Qwen3-32B 61.07 vs 61.02), +0.19-0.25 at TP4 (QwQ-32B 15.54 vs 15.29
#: on 4x L4; Qwen3-14B 7.08 vs 6.89 on 4x RTX 4090).
LOAD_OVERHEAD_GIB = {"single": 0.1, "parallel": 0.22}
#: Last SGLang release with the old V4 formula (MTP layer counted, C128 state scaled with the
#: SWA pool, no PP slicing): SGLang ~v0.5.12 (May 2026), ``DSV4PoolConfigurator``.
DSV4_OLD_FORMULA_UNTIL = (0, 5, 12)
#: Last release whose C128 compressor state still scales with the SWA pool
#: (``c128_state_ratio = c128_ring_size / swa_page_size``), now over the PP stage's slice
#: of ``compress_ratios`` (so without the MTP entry): 0.5.13 and 0.5.14
#: (``srt/model_executor/pool_configurator.py`` in both wheels). From 0.5.15 the state is
#: request-scoped: ``c128_state_ratio = 0`` plus ``_get_c128_state_fixed_bytes``.
DSV4_SCALED_C128_UNTIL = (0, 5, 14)
#: Compressor-state ring rows under speculative decoding (c4, c128), 8 and 128 without:
#: ``mem_cache/deepseek_v4_memory_pool.py::get_compress_state_ring_size`` at 0.5.12-0.5.18.
DSV4_SPEC_RING = (16, 256)
#: ``max_running_requests`` V4 defaults to when unset (``arg_groups/deepseek_v4_hook.py::
#: apply_deepseek_v4_defaults`` at 0.5.12-0.5.18); the configurator divides it by dp_size.
DSV4_DEFAULT_MAX_RUNNING = 256
#: First release whose V4 configurator moves the SWA pool into a per-request cap or ring
#: (``swa_cap_tokens``, ``_fixed_swa_bytes`` in ``pool_configurator.py``: absent at 0.5.18,
#: present at 0.5.20 and 0.5.23); kvscope plans those releases with the 0.5.15-0.5.18 rule.
DSV4_SWA_CAP_SINCE = (0, 5, 20)
#: C128 compressor-state row: 1024 fp32 values (kv + score over 2 x 512).
DSV4_C128_ROW = 4096

#: DeepSeek V3.2 (DSA / NSA) in SGLang's profiled ``cell_size``: the indexer key (132 B a
#: layer) joined it in 0.5.4 (sglang PR #11309: absent from ``ModelRunner.profile_max_num_token``
#: in the 0.5.3 wheel, present in 0.5.4 and already in 0.5.3.post1, which kvscope plans as
#: 0.5.3 since it does not tell .postN releases apart); until 0.5.16 the latent is priced at
#: ``(kv_lora_rank + qk_rope_head_dim) x element size`` (576 B in fp8) though the fp8 pool
#: stores the 656-B record (fp8 latent, 16 B of scales, bf16 rope): ``_compute_cell_size`` in
#: ``model_executor/pool_configurator.py`` at 0.5.12-0.5.16 (``model_runner.py`` /
#: ``model_runner_kv_cache_mixin.py`` before); 0.5.17 prices the record
#: (``calculate_mla_kv_cache_dim``, also at 0.5.18 and 0.5.23).
SGLANG_DSA_INDEXER_IN_CELL_SINCE = (0, 5, 4)
#: DeepSeek V3.2 (DSA / NSA) KV dtype: on a GPU of compute capability 10+ SGLang stores the
#: cache in fp8_e4m3 when ``--kv-cache-dtype`` is ``auto`` (bf16 below; ``server_args.py
#: _handle_model_specific_adjustments`` at 0.5.3-0.5.8, ``_set_default_nsa_kv_cache_dtype`` at
#: 0.5.11-0.5.12, ``arg_groups/overrides.py`` at 0.5.15-0.5.23). 0.5.3 and 0.5.4 force fp8_e4m3
#: there whatever the flag ("for Blackwell, we support fp8 only currently"); 0.5.5 (read again at
#: 0.5.8) rewrites only ``auto``. V3.2 support starts at 0.5.3 (no NSA code in 0.5.2).
SGLANG_DSA_FP8_DEFAULT_SINCE = (0, 5, 3)
SGLANG_DSA_FP8_AUTO_ONLY_SINCE = (0, 5, 5)
SGLANG_DSA_RECORD_IN_CELL_SINCE = (0, 5, 17)

#: First release whose ROCm build runs compressed-tensors WNA16 experts through
#: ``CompressedTensorsWNA16TritonMoE`` (absent from the 0.5.8.post1 wheel, present from 0.5.9 to
#: 0.5.23: ``srt/layers/quantization/compressed_tensors/schemes/compressed_tensors_wNa16_moe.py``).
SGLANG_ROCM_WNA16_TRITON_SINCE = (0, 5, 9)

#: Text model types of the wrappers SGLang serves language-only by default (see
#: :func:`sglang_multimodal`).
SGLANG_LANGUAGE_ONLY = ("gemma3_text", "llama4_text")

#: V4 defaults: ``swa_full_tokens_ratio`` 0.1, compressor ring 8 rows (no spec decoding),
#: window 128, compressor state width 4 x 512 fp32 (attention) and 4 x 128 (indexer).
DSV4_SWA_RATIO = 0.1
DSV4_RING = 8
DSV4_WINDOW = 128


@dataclass(frozen=True)
class SglangRank:
    """One PP stage's SGLang budget, bytes."""

    pp_rank: int
    m0: float
    weights: float
    rest: float
    cell_bytes: float
    tokens: int
    #: ``max_mamba_cache_size`` of a linear-attention hybrid (kvscope.plan.sglang_mamba), else 0
    mamba_slots: int = 0


def engine_defaults(
    model: ModelSpec, gpu: GPUSpec, par: Parallelism, eng: EngineConfig
) -> SglangDefaults:
    """SGLang's own ``mem_fraction_static``, ``chunked_prefill_size`` and CUDA-graph limit for
    this launch (:mod:`kvscope.plan.sglang_defaults`), with the user's flags applied.

    SGLang reads the GPU size from nvidia-smi (``GPUSpec.memory_smi_mib``); where that is not
    recorded the CUDA total stands in, a few hundred MiB low. Releases before the oldest one
    read (0.3.6) take its rules: its TP table (0.88 / 0.87 / 0.85 / 0.82 / 0.79) is older.
    """
    kinds = attention_kinds(model)
    mem_mib = sglang_gpu_mem_mib(gpu)
    if mem_mib is None:
        mem_mib = gpu.memory_bytes / (1 << 20)
    try:
        return sglang_defaults(
            mem_mib,
            max(eng.version, FIRST_MODELLED),
            tp=par.tp,
            pp=par.pp,
            dp=par.dp,
            dp_attention=par.dp_attention,
            speculative=_sglang_algorithm(eng),
            speculative_num_draft_tokens=(
                eng.speculative.verify_tokens if eng.speculative else None
            ),
            chunked_prefill_size=eng.max_num_batched_tokens,
            mem_fraction_static=eng.mem_fraction_static,
            max_running_requests=eng.max_num_seqs,
            context_length=eng.max_model_len,
            model_context_len=model.max_position_embeddings,
            rocm=gpu.vendor.lower() == "amd",
            is_multimodal=sglang_multimodal(model),
            vit_num_layers=model.vision_layers or None,
            vit_hidden_size=model.vision_width or None,
            mla=any(k.startswith("mla") for k in kinds),
            deepseek_nsa="mla_sparse" in kinds,
            deepseek_v4=model.is_deepseek_v4,
        )
    except ValueError as err:
        hint = (
            "Pass --data-parallel-size with --enable-dp-attention (usually equal to TP)."
            if "DP attention" in str(err)
            else "Pass the value explicitly, or plan for a newer --engine-version."
        )
        raise KvscopeError(f"SGLang {eng.version_text}: {err}.", hint) from err


def sglang_multimodal(model: ModelSpec) -> bool:
    """Whether SGLang serves ``model`` as multimodal by default (``ModelConfig.is_multimodal``).

    A wrapper with a vision tower is, except the architectures SGLang starts language-only
    unless ``--enable-multimodal`` is given (``mm_disabled_models`` in
    ``srt/configs/model_config.py``: Gemma 3 and Llama 4 from 0.4.9 to 0.5.23, with Step3-VL
    and Inkling added later, which kvscope does not parse). A multimodal model takes
    ``adjust_mem_fraction_for_vlm``'s factor on its default ``mem_fraction_static``.
    """
    return model.vision_params > 0 and model.model_type not in SGLANG_LANGUAGE_ONLY


def rocm_wna16_index_bytes(
    model: ModelSpec, gpu: GPUSpec, par: Parallelism, eng: EngineConfig, layers: tuple[int, ...]
) -> float:
    """Bytes of the activation-order index tensors SGLang keeps beside WNA16 experts on ROCm.

    ``CompressedTensorsWNA16MoE.create_weights`` registers, per MoE layer, ``w13_weight_g_idx``
    and ``w13_g_idx_sort_indices`` (experts x hidden, int32) and their ``w2`` pair (experts x
    per-rank intermediate, int32). The CUDA (Marlin) path swaps them for empty tensors after
    loading; the ROCm subclass ``CompressedTensorsWNA16TritonMoE`` only repacks weights and
    scales, so they stay in "Load weight end ... mem usage" (0.5.9-0.5.23). 0 elsewhere.
    """
    if not (
        gpu.vendor.lower() == "amd"
        and model.quantization.weight_only_int
        and model.quantization.expert_bytes is not None
        and eng.version >= SGLANG_ROCM_WNA16_TRITON_SINCE
    ):
        return 0.0
    total = 0
    for i in layers:
        ffn = model.layers[i].ffn
        if not ffn.is_moe:
            continue
        experts = ffn.num_experts // (par.ep_size if par.ep else 1)
        width = ffn.expert_intermediate_size // (1 if par.ep else par.tp)
        total += experts * 2 * (ffn.hidden_size + width) * 4
    return float(total)


def context_bytes(gpu: GPUSpec, par: Parallelism, custom_all_reduce_off: bool = False) -> float:
    """Estimated total - M0 on one GPU (see :data:`CONTEXT_GIB`, :data:`DIST_GIB`).

    ``custom_all_reduce_off``: SGLang's ``--disable-custom-all-reduce`` (``ServerArgs.
    disable_custom_all_reduce``, srt/server_args.py of 0.5.12): the group keeps the figure
    read where custom all-reduce cannot run (PCIe), NCCL's buffers only.
    """
    newer = gpu.architecture.lower() in ("hopper", "blackwell")
    gib = CONTEXT_GIB["hopper_or_newer" if newer else "older"]
    group = par.tp * par.pp
    if group > 1:
        if gpu.nvlink_bandwidth <= 0 or (custom_all_reduce_off and par.tp > 1):
            gib += DIST_GIB["pcie"]
        else:
            gib += DIST_GIB["nvlink_8plus" if group >= 8 else "nvlink"]
    return gib * GIB


def load_overhead_bytes(par: Parallelism) -> float:
    """Bytes "mem usage" at "Load weight end" adds to the weights (:data:`LOAD_OVERHEAD_GIB`)."""
    return LOAD_OVERHEAD_GIB["parallel" if par.tp * par.pp > 1 else "single"] * GIB


def dsv4_bytes_per_full_token(
    model: ModelSpec,
    layers: tuple[int, ...],
    old: bool,
    speculative: bool = False,
    scaled_c128: bool | None = None,
) -> float:
    """SGLang's V4 "bytes per full token".

    Sum over the stage's layers of the SWA share (``r x 584``), compressed C4/C128 entries,
    the C4 indexer key (132 B, hard-coded fp8 size) and the C4 compressor rings (attention
    4 x 512 and indexer 4 x 128 fp32 values per row, ``ring/window`` rows per SWA token).
    The old formula (``old``) also counts the MTP layers' SWA share; it and 0.5.13-0.5.14
    (``scaled_c128``, default: ``old``) scale the C128 state rows with the SWA pool
    (``c128_ring/128`` rows of 4096 B per SWA token). Flash gives 7,705.45 B (new) and
    15,955.85 B (old), Pro 10,993.84 B and 23,749.84 B.

    Under speculative decoding the rings grow to 16 / 256 rows and the sum is inflated by
    ``(T + 1) / T``, ``T`` the layers it ran over (``compress_ratios`` whole up to 0.5.12,
    the stage's slice after): "Reserve memory for the speculative draft worker"
    (``DSV4PoolConfigurator.__init__`` at 0.5.12, 0.5.13, 0.5.14 and 0.5.15).
    """
    kinds = Counter(model.layers[i].attention.kind for i in layers)
    n, n4, n128 = len(layers), kinds.get("dsv4_csa", 0), kinds.get("dsv4_hca", 0)
    r = DSV4_SWA_RATIO
    c4_ring, c128_ring = DSV4_SPEC_RING if speculative else (DSV4_RING, DSV4_WINDOW)
    ring = c4_ring / DSV4_WINDOW
    swa_layers = n + model.num_mtp_layers if old else n
    bpft = r * DSV4_ENTRY * swa_layers + DSV4_ENTRY * n4 / 4 + DSV4_ENTRY * n128 / 128
    bpft += INDEXER_FP8_ENTRY * n4 / 4
    bpft += r * ring * (4 * 512 * 4) * n4 + r * ring * (4 * 128 * 4) * n4
    if old if scaled_c128 is None else scaled_c128:
        bpft += r * (c128_ring / DSV4_WINDOW) * DSV4_C128_ROW * n128
    if speculative:
        bpft *= (swa_layers + 1) / swa_layers
    return bpft


def dsv4_c128_reservation(
    model: ModelSpec, layers: tuple[int, ...], max_running: int, speculative: bool = False
) -> float:
    """0.5.15+ fixed C128 state (``_get_c128_state_fixed_bytes``): ``slots x ring + ring + 1``
    rows rounded up to 128, ``slots = max_running + 1``, 4096 B per row per HCA layer."""
    n128 = sum(model.layers[i].attention.kind == "dsv4_hca" for i in layers)
    ring = DSV4_SPEC_RING[1] if speculative else DSV4_WINDOW
    rows = math.ceil(((max_running + 1) * ring + ring + 1) / 128) * 128
    return float(rows * DSV4_C128_ROW * n128)


def dsa_kv_dtype(
    model: ModelSpec, gpu: GPUSpec, eng: EngineConfig, kinds: Collection[str], kv_dtype: str
) -> str:
    """The KV dtype SGLang runs DeepSeek V3.2 (DSA) with: ``kv_dtype`` (the resolved flag)
    unless the release turns it into fp8_e4m3 on compute capability 10+ (see
    :data:`SGLANG_DSA_FP8_DEFAULT_SINCE`). V4 keeps its own record; other models pass through."""
    cap = gpu.capability
    if model.is_deepseek_v4 or "mla_sparse" not in kinds or cap is None or cap[0] < 10:
        return kv_dtype
    v = eng.version
    if v < SGLANG_DSA_FP8_DEFAULT_SINCE:
        return kv_dtype
    flag = (eng.kv_cache_dtype or "auto").lower()
    if flag == "auto" or v < SGLANG_DSA_FP8_AUTO_ONLY_SINCE:
        return "fp8_e4m3"
    return kv_dtype


def dsa_profiled_cell(
    model: ModelSpec,
    layers: tuple[int, ...],
    kv_dtype: str,
    version: tuple[int, ...],
    cell: float,
) -> float:
    """The ``cell_size`` SGLang divides the pool budget by, where it differs from ``cell``
    (the bytes its pool allocates per token): DeepSeek V3.2's sparse-MLA layers before 0.5.17
    (see :data:`SGLANG_DSA_RECORD_IN_CELL_SINCE`). The pool then allocates more than
    ``rest``: at 0.5.4-0.5.16 V3.2 with an fp8 cache counts 708 B a layer and allocates 788."""
    sparse = [model.layers[i].attention for i in layers]
    sparse = [a for a in sparse if a.kind == "mla_sparse"]
    if not sparse:
        return cell
    if kv_dtype == "fp8_ds_mla" and version < SGLANG_DSA_RECORD_IN_CELL_SINCE:
        att = sparse[0]
        cell -= len(sparse) * (DS_MLA_FP8_RECORD - (att.kv_lora_rank + att.qk_rope_head_dim))
    if version < SGLANG_DSA_INDEXER_IN_CELL_SINCE:
        cell -= len(sparse) * INDEXER_FP8_ENTRY
    return cell


def plan_ranks(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    eng: EngineConfig,
    stage_weights: tuple[RankWeights, ...],
    kv_dtype: str,
    mfs: float,
    page_size: int,
) -> tuple[SglangRank, ...]:
    """Budget of every pipeline stage."""
    hybrid = "gdn" in attention_kinds(model)
    if model.model_type == "kimi_linear":
        raise KvscopeError(
            f"SGLang's pools for {model.name} (Kimi Linear: KDA state beside MLA) are not "
            "modelled here.",
            "Plan it for vLLM (--engine vllm), whose KDA + MLA layout kvscope follows.",
        )
    if hybrid and (_sglang_algorithm(eng) is not None or not sglang_mamba.modelled(eng.version)):
        raise KvscopeError(
            f"SGLang's budget for {model.name} is not modelled here: its linear-attention "
            "layers keep state in a separate mamba pool (max_mamba_cache_size), which kvscope "
            "sizes for SGLang 0.5.6-0.5.23 without speculative decoding only.",
            "Plan it for vLLM (--engine vllm), or pass --kv-cache-memory-bytes.",
        )
    # memory other processes hold is not free at distributed init (kvscope.plan.shared_gpu)
    m0 = sglang_m0(gpu.memory_bytes - context_bytes(gpu, par, eng.disable_custom_all_reduce), eng)
    attn_tp = par.attn_tp
    dsv4 = model.is_deepseek_v4
    old = eng.version <= DSV4_OLD_FORMULA_UNTIL
    scaled = eng.version <= DSV4_SCALED_C128_UNTIL
    spec = _sglang_algorithm(eng) is not None
    # requested_max_running_requests_per_worker: the V4 default 256 when unset, over dp_size
    running = max(1, (eng.max_num_seqs or DSV4_DEFAULT_MAX_RUNNING) // max(1, par.dp))
    out = []
    # post-sizing multimodal caches, reserved out of rest (kvscope.plan.sglang_mm_reserve)
    mm = sglang_mm_reserve.reserved_bytes(eng.version, sglang_multimodal(model))
    two_pools = sglang_swa.two_pools(model, eng, par, gpu.compute_capability)
    for w in stage_weights:
        rest = m0 * mfs - w.total_bytes - mm
        slots = 0
        if hybrid:  # the mamba pool's share of rest (kvscope.plan.sglang_mamba)
            stages = tuple(s.layers for s in stage_weights)
            attn_dp = par.dp if par.dp_attention else 1
            fixed = sglang_mamba.fixed_slots(
                eng.version, eng.enable_prefix_caching, eng.max_num_seqs, attn_dp
            )
            slots, rest = sglang_mamba.kv_split(model, stages, attn_tp, eng.version, rest, fixed)
        if dsv4 and old:
            # No PP slicing in the old formula: every stage divides by all layers.
            cell = dsv4_bytes_per_full_token(model, tuple(range(model.num_layers)), True, spec)
        elif dsv4:
            cell = dsv4_bytes_per_full_token(model, w.layers, False, spec, scaled)
            if not scaled:
                rest -= dsv4_c128_reservation(model, w.layers, running, spec)
        elif two_pools:  # full pool + SWA share (kvscope.plan.sglang_swa)
            swa = sglang_swa.swa_cell(model, w.layers, kv_dtype, attn_tp, eng.version)
            cell = swa.cell_bytes
        else:
            cell = sglang_cell_bytes(model, w.layers, kv_dtype, attn_tp)
        priced = dsa_profiled_cell(model, w.layers, kv_dtype, eng.version, cell)
        tokens = max(0, math.floor(rest / priced)) if priced else 0
        if two_pools and not sglang_swa.is_gemma4(model):
            one_pool = sglang_cell_bytes(model, w.layers, kv_dtype, attn_tp)
            tokens = sglang_swa.pool_tokens(rest, swa, one_pool, eng.version)
        tokens = tokens // page_size * page_size
        out.append(SglangRank(w.pp_rank, m0, w.total_bytes, rest, cell, tokens, slots))
    return tuple(out)


def dsv4_warnings(model: ModelSpec, eng: EngineConfig) -> tuple[str, ...]:
    """A warning where the V4 pool rule of ``eng``'s release is not the one planned."""
    if eng.version < DSV4_SWA_CAP_SINCE:
        return ()
    if not model.is_deepseek_v4:
        return ()
    return (
        f"SGLang {eng.version_text} sizes DeepSeek V4's SWA pool by a per-request cap "
        "(pool_configurator.py, 0.5.20+), which kvscope does not model: the KV pool is "
        "planned with the 0.5.15-0.5.18 rule.",
    )


def default_page_size(
    model: ModelSpec, gpu: GPUSpec | None = None, version: tuple[int, ...] = (0, 5, 23)
) -> int:
    """SGLang page size: 1 by default, 64 for the V3.2 NSA backend, 256 for V4, 64 for Gemma 4
    on SM100 from 0.5.13, gpt-oss on SM100 and Llama 4 on SM100 from 0.5.6 (``trtllm_mha``,
    :mod:`kvscope.plan.sglang_swa`)."""
    kinds = attention_kinds(model)
    if model.is_deepseek_v4:
        return DSV4_BLOCK
    if sglang_swa.is_gemma4(model) and gpu is not None:
        return sglang_swa.page_size(gpu.compute_capability, version)
    if model.model_type == sglang_swa.GPT_OSS and gpu is not None:
        return sglang_swa.gpt_oss_page_size(gpu.compute_capability)
    if model.model_type == sglang_swa.LLAMA4 and gpu is not None:
        return sglang_swa.llama4_page_size(gpu.compute_capability, version)
    if "mla_sparse" in kinds:
        return 64
    return 1


def _sglang_algorithm(eng: EngineConfig) -> str | None:
    """SGLang's ``--speculative-algorithm`` for ``eng`` (an MTP count alone reads as EAGLE)."""
    spec = eng.speculative
    if spec is None:
        return "EAGLE" if eng.speculative_layers else None
    if spec.method == "dspark":
        # sized as any algorithm by the V4 configurator (kvscope.plan.sglang_dspark)
        return "DSPARK"
    names = {"mtp": "EAGLE", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft_model": "STANDALONE"}
    return names.get(spec.method, "NGRAM")
