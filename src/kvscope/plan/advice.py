"""Advice from a memory plan: what to change, by how much, and the command line to run it.

Everything here re-runs :func:`kvscope.plan.memory.plan_memory` with one flag changed, so each
figure is the engine's own arithmetic, not a rule of thumb:

- the largest ``--max-model-len`` whose one request still fits the KV cache (vLLM's
  "estimated maximum model length" check, ``_check_enough_kv_cache_memory``);
- the ``--max-num-seqs`` the KV budget sustains at a stated context length;
- the capacity gained by an fp8 KV cache, and for single-latent models (MLA, DeepSeek V4)
  by data-parallel attention, whose pools are not replicated across TP ranks;
- warnings: KV cache under 10 % of GPU memory, weights that do not fit (with the smallest
  TP, then PP, that fits);
- a ready-to-paste ``vllm serve`` / ``python -m sglang.launch_server`` line using only flags
  those engines have (vLLM ``EngineArgs``; SGLang ``ServerArgs``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.dsv4_workspace import dsv4_profile_workspace
from kvscope.plan.kv_layout import MLA_CACHE_SINCE, vllm_layout
from kvscope.plan.memory import MemoryPlan, plan_memory
from kvscope.plan.vllm_budget import REPORT_COUNTS_BLOCKS_SINCE
from kvscope.plan.vllm_chunked import chunked_span
from kvscope.plan.vllm_mamba_mode import effective_mamba_cache_mode
from kvscope.plan.weights import pp_layer_split, vllm_remainder_last
from kvscope.specs.dtypes import is_fp8
from kvscope.specs.hardware import GIB, GPUSpec
from kvscope.specs.model import ModelSpec

#: Warn when the KV cache gets less than this share of GPU memory.
KV_SHARE_WARNING = 0.10


@dataclass(frozen=True)
class Advice:
    """Actionable figures; ``None`` where a question does not apply."""

    largest_max_model_len: int
    max_num_seqs_at_context: int
    context_tokens: int
    fp8_kv_tokens: int | None
    fp8_kv_gain: float | None
    dp_attention_tokens_per_replica: int | None
    dp_attention_gain: float | None
    smallest_fit: str | None
    warnings: tuple[str, ...]
    command: str


def _fits(model: ModelSpec, gpu: GPUSpec, par: Parallelism, eng: EngineConfig) -> bool:
    try:
        return plan_memory(model, gpu, par, eng).fits
    except KvscopeError:
        return False


def smallest_fit(
    model: ModelSpec, gpu: GPUSpec, par: Parallelism, eng: EngineConfig
) -> Parallelism | None:
    """The smallest TP (then TP x PP) of powers of two up to 8 x 8 on which the model fits."""
    for pp in (1, 2, 4, 8):
        for tp in (1, 2, 4, 8):
            if tp * pp <= par.tp * par.pp:
                continue
            cand = dataclasses.replace(par, tp=tp, pp=pp)
            if _fits(model, gpu, cand, eng):
                return cand
    return None


def largest_max_model_len(
    model: ModelSpec, gpu: GPUSpec, par: Parallelism, eng: EngineConfig, plan: MemoryPlan
) -> int:
    """The longest request that still gets its blocks (0 if none), by binary search.

    vLLM: the blocks one request needs (all KV groups, window groups with the tokens in
    flight included; DeepSeek V4's drafter layers on the last stage) against
    ``num_gpu_blocks`` of the tightest stage, and the bytes its start-up check asks for
    against the KV memory left (they differ for DeepSeek V4 up to 0.28); SGLang: the token
    pool itself.
    """
    if plan.engine == "sglang" or plan.num_gpu_blocks <= 0:
        return min(plan.kv_tokens, model.max_position_embeddings)
    drafter = int((plan.speculative or {}).get("drafter_kv_layers", 0))
    stages = pp_layer_split(model.num_layers, par.pp, vllm_remainder_last("vllm", eng.version))
    layouts = [
        vllm_layout(
            model,
            layers,
            plan.kv_cache_dtype,
            par.tp,
            plan.block_size,
            eng.indexer_dtype,
            release=eng.version,
            v0_mla_padding=eng.version < (0, 8, 0),
            mla_as_heads=eng.version < MLA_CACHE_SINCE,
            draft_window_layers=drafter if i == len(stages) - 1 else 0,
            mamba_cache_mode=effective_mamba_cache_mode(eng),
            chunk=chunked_span(model, eng),
            num_spec=eng.speculative.num_speculative_tokens if eng.speculative else 0,
        )
        for i, layers in enumerate(stages)
    ]
    in_flight = plan.in_flight_tokens or plan.max_num_batched_tokens
    by_bytes = eng.version < REPORT_COUNTS_BLOCKS_SINCE
    # DeepSeek V4's profiling workspace grows with max_model_len, so its budget is re-planned
    # at each length tried (kvscope.plan.dsv4_workspace).
    grows = dsv4_profile_workspace(model, eng, 1, 1) is not None

    def budget(length: int) -> tuple[int, float]:
        p = plan
        if grows:
            p = plan_memory(model, gpu, par, dataclasses.replace(eng, max_model_len=length))
        return p.num_gpu_blocks, min(r.kv_cache_gib for r in p.ranks) * GIB

    lo, hi = 0, model.max_position_embeddings
    while lo < hi:
        mid = (lo + hi + 1) // 2
        blocks, avail = budget(mid)
        if all(
            lay.reported_blocks_per_request(mid, in_flight, by_bytes) <= blocks
            and lay.request_bytes(mid, in_flight) <= avail
            for lay in layouts
        ):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _kv_flag(engine: str, dtype: str) -> str:
    if engine == "sglang" and dtype in ("fp8", "fp8_e4m3"):
        return "fp8_e4m3"  # SGLang's --kv-cache-dtype choices name the fp8 format
    return dtype


def command_line(
    model_id: str,
    plan: MemoryPlan,
    eng: EngineConfig,
    par: Parallelism,
    online_quantization: str | None = None,
) -> str:
    """A launch command with the planned flags (only flags the engine really has).

    ``online_quantization``: the ``--quantization`` method to repeat when the checkpoint is
    quantized at load time (both engines take ``--quantization fp8``); pre-quantized
    checkpoints are detected from their config, so no flag is written for them.
    """
    kv = plan.kv_cache_dtype
    quant = [f"--quantization {online_quantization}"] if online_quantization else []
    if plan.engine == "sglang":
        parts = ["python -m sglang.launch_server", f"--model-path {model_id}", f"--tp {plan.tp}"]
        if eng.shared_expert_tp1:
            parts.insert(0, "SGLANG_SHARED_EXPERT_TP1=1")
        parts += quant
        if plan.pp > 1:
            parts.append(f"--pp-size {plan.pp}")
        if plan.dp > 1:
            parts.append(f"--dp-size {plan.dp}")
        if par.dp_attention:
            parts.append("--enable-dp-attention")
        if plan.ep:
            parts.append(f"--ep-size {par.ep_size}")
        if eng.block_size is not None:
            parts.append(f"--page-size {plan.block_size}")
        parts += [
            f"--mem-fraction-static {plan.budget_fraction}",
            f"--context-length {plan.max_model_len}",
            f"--max-running-requests {plan.max_num_seqs}",
            f"--chunked-prefill-size {plan.max_num_batched_tokens}",
        ]
        if is_fp8(kv):
            parts.append(f"--kv-cache-dtype {_kv_flag('sglang', 'fp8')}")
        if eng.disable_custom_all_reduce:
            parts.append("--disable-custom-all-reduce")
        if eng.moe_runner_backend != "auto":
            parts.append(f"--moe-runner-backend {eng.moe_runner_backend}")
        return " ".join(parts)
    parts = ["vllm serve", model_id, f"--tensor-parallel-size {plan.tp}", *quant]
    if plan.pp > 1:
        parts.append(f"--pipeline-parallel-size {plan.pp}")
    if plan.dp > 1:
        parts.append(f"--data-parallel-size {plan.dp}")
    if plan.ep:
        parts.append("--enable-expert-parallel")
    parts += [
        f"--gpu-memory-utilization {plan.budget_fraction}",
        f"--max-model-len {plan.max_model_len}",
        f"--max-num-seqs {plan.max_num_seqs}",
        f"--max-num-batched-tokens {plan.max_num_batched_tokens}",
        f"--block-size {plan.block_size}",
    ]
    if is_fp8(kv):
        parts.append("--kv-cache-dtype fp8")
    if eng.enforce_eager:
        parts.append("--enforce-eager")
    if eng.enable_extensible_kv_cache is not None:
        no = "" if eng.enable_extensible_kv_cache else "no-"
        parts.append(f"--{no}enable-extensible-kv-cache")
    if eng.disable_custom_all_reduce:
        parts.append("--disable-custom-all-reduce")
    if eng.attention_backend is not None:
        parts.append(f"--attention-backend {eng.attention_backend}")
    if eng.kv_transfer is not None:
        parts.append(eng.kv_transfer.serve_flag())
    return " ".join(parts)


def advise(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    eng: EngineConfig,
    plan: MemoryPlan,
    model_id: str,
    context_tokens: int | None = None,
) -> Advice:
    """Advice for ``plan`` (computed by :func:`plan_memory` from the same inputs)."""
    context = context_tokens or plan.max_model_len
    warnings: list[str] = []
    fit_text = None
    if not plan.fits:
        cand = smallest_fit(model, gpu, par, eng)
        if cand is not None:
            fit_text = f"--tensor-parallel-size {cand.tp} --pipeline-parallel-size {cand.pp}"
        warnings.append(plan.problem or "does not fit")
    elif plan.kv_cache_gib < KV_SHARE_WARNING * plan.gpu_memory_gib:
        warnings.append(
            f"KV cache is {plan.kv_cache_gib:.1f} GiB, under {KV_SHARE_WARNING:.0%} of the "
            f"{plan.gpu_memory_gib:.0f} GiB GPU: few requests will run at once."
        )
    longest = largest_max_model_len(model, gpu, par, eng, plan) if plan.kv_cache_gib > 0 else 0
    at_ctx = plan_memory(model, gpu, par, dataclasses.replace(eng, max_model_len=context))
    fp8_tokens = fp8_gain = None
    if not is_fp8(plan.kv_cache_dtype) and plan.fits:
        alt = plan_memory(model, gpu, par, dataclasses.replace(eng, kv_cache_dtype="fp8"))
        fp8_tokens = alt.kv_tokens
        fp8_gain = alt.kv_tokens / plan.kv_tokens if plan.kv_tokens else None
    dp_tokens = dp_gain = None
    if model.uses_mla and par.tp > 1 and plan.fits and not par.dp_attention:
        if eng.engine == "sglang":
            # SGLang: --enable-dp-attention --dp TP splits the TP group into TP pools.
            alt_par = dataclasses.replace(par, dp=par.tp, dp_attention=True, ep=model.is_moe)
        else:
            # vLLM: one attention-DP rank per GPU, experts spread over all of them.
            alt_par = Parallelism(tp=1, pp=par.pp, dp=par.tp * par.dp, ep=model.is_moe)
        try:
            dp_plan: MemoryPlan | None = plan_memory(model, gpu, alt_par, eng)
        except KvscopeError:
            dp_plan = None
        if dp_plan is not None and dp_plan.fits:
            dp_tokens = dp_plan.kv_tokens * par.tp
            dp_gain = dp_tokens / plan.kv_tokens if plan.kv_tokens else None
    return Advice(
        largest_max_model_len=longest,
        max_num_seqs_at_context=int(at_ctx.max_concurrency),
        context_tokens=context,
        fp8_kv_tokens=fp8_tokens,
        fp8_kv_gain=fp8_gain,
        dp_attention_tokens_per_replica=dp_tokens,
        dp_attention_gain=dp_gain,
        smallest_fit=fit_text,
        warnings=tuple(warnings),
        command=command_line(
            model_id,
            plan,
            eng,
            par,
            model.quantization.method if model.quantization.online else None,
        ),
    )
