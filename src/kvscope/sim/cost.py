"""Step time of one engine iteration: a roofline bound plus a fixed per-step overhead.

``t = overhead_s + max(flops / (peak_flops x mfu), bytes / (hbm_bandwidth x mbu))`` per
GPU of one tensor-parallel replica, where for a batch of ``tokens`` new tokens attending
``context`` KV tokens in all:

* bytes = weights read once per step (dense part, plus the routed experts the batch
  touches: each of E experts is hit by some of the ``tokens x k`` routings with probability
  ``1 - (1 - k/E)^tokens``) + ``context x kv_bytes_per_token`` of KV reads;
* flops = ``2 x active_params x tokens`` (matmuls) + ``4 x context x q_dim`` per layer
  (attention scores and values), over the TP ranks.

The byte and FLOP terms and the default efficiencies are the planner's
(:mod:`kvscope.plan.step_costs`, :class:`kvscope.plan.roofline.Efficiency`: HBM 0.8 after
AIConfigurator, FLOPs 0.45 after BLIS), so ``kvscope plan`` and ``kvscope simulate`` agree
on a step. The per-step overhead (scheduler, sampler, input preparation: Vidur's "CPU
overheads", microsoft/vidur and its MLSys'24 paper) defaults to 3 ms, a kvscope
choice meant to be calibrated: ``kvscope simulate --calibrate`` fits all three from a
measured run. Everything is vectorised so a span of decode steps costs one numpy call.

Parallel layouts (:meth:`HardwareTerms.from_specs` with a
:class:`kvscope.plan.config.Parallelism`): the step adds the communication the planner
computes (:func:`kvscope.plan.comm.step_comm_seconds`: TP all-reduces, EP dispatch and
combine, PP send/recv), affine in the step's tokens, not overlapped. Under expert
parallelism each GPU holds ``E / ep`` whole experts, touched by the tokens of the whole EP
group (``dp`` ranks' batches, each assumed as loaded as this one). With
``pp`` pipeline stages one simulated step is ``pp`` micro-batches (vLLM 0.33.0
``vllm/config/vllm.py::VllmConfig.max_concurrent_batches``: PP keeps ``pp`` batches in flight,
and a decoding request is in one of them at a time), each of ``1/m`` of the step's tokens and
context (``m = min(pp, tokens)`` micro-batches carry work; the rest are the bubble): its time
is ``pp`` stage times, a stage holding ``1/pp`` of the layers. vLLM groups requests into
micro-batches by when they were scheduled, not evenly; where a stage time is affine in tokens
and context (memory-bound decode) the sum over micro-batches is the same either way. The
scheduler gets ``pp`` times the token budget per step: a long prompt's chunks fill
consecutive micro-batches (pinned against vLLM's Scheduler with ``pp`` batches in flight,
tests/sim/test_parallel_layouts.py).

Speculative decoding (:class:`DrafterCost`): the verification pass is the step above with
every draft token in ``tokens``; the drafter adds its own passes over the requests that sample:
MTP and EAGLE one forward of a single decoder layer per draft token (1/L of the target's
roofline, L its layers; DeepSeek's MTP module is one layer beside the shared head), a draft
model its own roofline per draft token, n-gram and suffix matching nothing (host-side).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvscope.errors import KvscopeError
from kvscope.validate import load_json, write_text_atomic

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    from kvscope.sim.scheduler import StepPlan

    F64 = NDArray[np.float64]

# numpy is imported inside the vectorised methods: `plan` prices its steps in plain floats and
# should not pay numpy's import (about 0.15 s, a third of its 0.5 s budget).


@dataclass(frozen=True)
class CostCoefficients:
    """The calibratable numbers of the step-time model, and the engine's per-request latency."""

    overhead_s: float = 0.003
    mfu: float = 0.45  # the planner's default (kvscope.plan.roofline.Efficiency.flops)
    mbu: float = 0.8  # the planner's default (kvscope.plan.roofline.Efficiency.hbm)
    source: str = "defaults (kvscope.plan.roofline.Efficiency; 3 ms per-step overhead)"
    #: Host seconds per decoded token on top of the roofline (sampling, detokenising,
    #: streaming each sequence's token); 0 unless fitted. Written to the file only when set,
    #: so files without it read as before.
    decode_token_s: float = 0.0
    #: Seconds between a request's arrival at the server and the engine seeing it (HTTP
    #: parsing, tokenising, the hand-off to the engine loop); TTFT and E2E still count from
    #: the arrival. 0 unless fitted; written to the file only when set.
    request_s: float = 0.0

    def __post_init__(self) -> None:
        problem = (
            "cost coefficients need 0 < mfu <= 1, 0 < mbu <= 1, overhead_s >= 0, "
            "decode_token_s >= 0 and request_s >= 0"
        )
        for name in ("overhead_s", "mfu", "mbu", "decode_token_s", "request_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise KvscopeError(f"{problem}; {name} is {value!r}.")
        # NaN fails every comparison, so it is refused here too; an infinite overhead is not
        # a step time.
        if not (0 < self.mfu <= 1 and 0 < self.mbu <= 1 and 0 <= self.overhead_s < float("inf")):
            raise KvscopeError(problem + ".")
        if not (0 <= self.decode_token_s < float("inf") and 0 <= self.request_s < float("inf")):
            raise KvscopeError(problem + ".")
        if not isinstance(self.source, str):
            raise KvscopeError(f"cost coefficients: source must be text, not {self.source!r}.")

    def host_terms_text(self) -> str:
        """The fitted host terms that are set, for a CLI line: ", 0.020 ms a decoded token,
        2.10 ms a request" (empty when both are 0)."""
        parts = []
        if self.decode_token_s:
            parts.append(f", {self.decode_token_s * 1e3:.3f} ms a decoded token")
        if self.request_s:
            parts.append(f", {self.request_s * 1e3:.2f} ms a request")
        return "".join(parts)

    def save(self, path: str | Path) -> Path:
        """Write the coefficients as JSON (atomically: a reader never sees half a file)."""
        doc = asdict(self)
        for optional in ("decode_token_s", "request_s"):
            if not doc[optional]:
                del doc[optional]
        return write_text_atomic(path, json.dumps(doc, indent=2) + "\n", "cost coefficients")

    @classmethod
    def load(cls, path: str | Path) -> CostCoefficients:
        p = Path(path)
        doc = load_json(p, "cost coefficients file")
        if not isinstance(doc, dict):
            raise KvscopeError(f"{p}: cost coefficients must be a JSON object.")
        known = {"overhead_s", "mfu", "mbu", "source", "decode_token_s", "request_s"}
        unknown = set(doc) - known
        if unknown:
            raise KvscopeError(
                f"{p}: unknown field(s) {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(known))}."
            )
        try:
            return cls(**{k: doc[k] for k in known if k in doc})
        except TypeError as err:
            raise KvscopeError(f"{p}: {err}.") from None
        except KvscopeError as err:  # name the file the bad coefficient came from
            raise KvscopeError(f"{p}: {err.message}", err.hint) from None


@dataclass(frozen=True)
class HardwareTerms:
    """Per-GPU constants of one deployment that the step time scales."""

    dense_weight_bytes: float  # weights every step reads, one GPU
    expert_weight_bytes: float  # routed-expert weights, one GPU (0 for dense models)
    num_experts: int
    experts_per_token: int
    active_params: float  # per token, whole model
    kv_bytes_per_token: float  # one GPU
    attn_flops_per_ctx_token: float  # 4 x q_dim x layers, whole model
    tp: int
    peak_flops: float
    hbm_bandwidth: float
    pcie_bandwidth: float = 64e9  # bytes/s host <-> GPU (swap, offload)
    pp: int = 1  # pipeline stages: a step is pp micro-batches of one stage each
    expert_tokens_scale: float = 1.0  # EP group tokens per local token (dp under DP + EP)
    comm_fixed_s: float = 0.0  # per step (per micro-batch under PP): collective latencies
    comm_s_per_token: float = 0.0  # per token of the step (micro-batch): link bytes

    @classmethod
    def from_specs(
        cls,
        model: Any,
        gpu: Any,
        *,
        tp: int = 1,
        kv_cache_dtype: str | None = None,
        par: Any = None,
    ) -> HardwareTerms:
        """Figures from the planner's step costs (:mod:`kvscope.plan.step_costs`).

        Weights and linear-layer FLOPs are the planner's (activated parameters, routed experts
        sharded by TP, head on every rank); KV read bytes and attention FLOPs per context
        token are the planner's per-sequence figures at a 4,096-token reference context,
        applied linearly to the batch's total context (exact for full attention; windowed
        and compressed caches make them an average).

        ``par`` (a :class:`kvscope.plan.config.Parallelism`) replaces ``tp``: one DP rank's
        attention spans ``par.attn_tp`` GPUs, a stage ``1/pp`` of the layers, experts split
        by ``par.ep_size``; its communication terms come from the planner's comm model.
        """
        from kvscope.plan.roofline import compute_flops_peak
        from kvscope.plan.step_costs import attention_flops, kv_read_bytes, step_costs
        from kvscope.specs.dtypes import resolve_kv_dtype

        c = step_costs(model)
        kv = resolve_kv_dtype(kv_cache_dtype, model.dtype)
        ref = 4096
        pp, ep, scale = 1, 1, 1.0
        fixed = per_token = 0.0
        if par is not None:
            tp, pp = par.attn_tp, par.pp
            ep = par.ep_size if c.is_moe else 1
            scale = float(par.dp) if ep > 1 else 1.0
            fixed, per_token = _comm_terms(c, gpu, tp, pp, ep)
        experts = c.num_experts * c.expert_bytes * c.moe_layers / (ep if ep > 1 else tp)
        dense = c.body_bytes / tp + c.replicated_bytes + c.head_bytes / tp
        if par is not None and par.dp_attention and par.attn_tp != par.tp:
            # SGLang DP attention: attention is split over attn_tp ranks, the dense and
            # shared-expert MLPs and the head over the whole TP group.
            attn = float(model.weight_bytes["attention"])
            rest = c.body_bytes - attn
            dense = attn / tp + rest / par.tp + c.replicated_bytes + c.head_bytes / par.tp
        return cls(
            dense_weight_bytes=dense / pp,
            expert_weight_bytes=experts / pp,
            num_experts=c.num_experts,
            experts_per_token=c.experts_per_token,
            active_params=(c.body_flops_per_token + c.head_flops_per_token) / 2.0 / pp,
            kv_bytes_per_token=kv_read_bytes(model, ref, kv, tp) / ref / pp,
            attn_flops_per_ctx_token=attention_flops(model, ref) / ref / pp,
            tp=tp,
            peak_flops=compute_flops_peak(c, gpu),
            hbm_bandwidth=float(gpu.hbm_bandwidth),
            pcie_bandwidth=float(gpu.pcie_bandwidth),
            pp=pp,
            expert_tokens_scale=scale,
            comm_fixed_s=fixed,
            comm_s_per_token=per_token,
        )


def _comm_terms(c: Any, gpu: Any, tp: int, pp: int, ep: int) -> tuple[float, float]:
    """(seconds per step, seconds per token) of the planner's communication in one step of
    one stage: :func:`kvscope.plan.comm.step_comm_seconds` is affine in the tokens, over the
    catalogue links :func:`kvscope.plan.comm.comm_volume` uses for each group."""
    from kvscope.plan.comm import DEFAULT_ALPHA_S, LinkModel, step_comm_seconds

    betas = (
        LinkModel.for_gpu(gpu, tp).beta_s_per_byte,
        LinkModel.for_gpu(gpu, ep).beta_s_per_byte,
        LinkModel.for_gpu(gpu, tp * pp).beta_s_per_byte,
    )
    at0 = float(step_comm_seconds(c, tp, pp, ep, 0.0, DEFAULT_ALPHA_S, *betas))
    at1 = float(step_comm_seconds(c, tp, pp, ep, 1.0, DEFAULT_ALPHA_S, *betas))
    return at0, at1 - at0


class CostFallbackWarning(UserWarning):
    """The cost model asked for cannot price this deployment's steps; a simpler one was used.

    Raised once per run (the CLI prints it as one ``kvscope: warning:`` line), naming what
    could not be priced and which model priced it instead."""


class CostModel:
    """Step time in seconds for arrays of (new tokens, attended context tokens)."""

    def __init__(self, terms: HardwareTerms, coef: CostCoefficients | None = None) -> None:
        self.terms = terms
        self.coef = coef or CostCoefficients()
        self._comm = terms.comm_fixed_s > 0 or terms.comm_s_per_token > 0
        self._pp = terms.pp
        self.drafter: DrafterCost | None = None  # speculative decoding's proposer

    def bytes_and_flops(self, tokens: F64, context: F64) -> tuple[F64, F64]:
        """Per-GPU bytes moved and FLOPs for each step (each micro-batch under PP)."""
        import numpy as np

        h = self.terms
        weights = np.full_like(tokens, h.dense_weight_bytes)
        if h.num_experts and h.expert_weight_bytes:
            miss = (1.0 - h.experts_per_token / h.num_experts) ** (tokens * h.expert_tokens_scale)
            weights = weights + h.expert_weight_bytes * (1.0 - miss)
        nbytes = weights + context * h.kv_bytes_per_token
        flops = (2.0 * h.active_params * tokens + h.attn_flops_per_ctx_token * context) / h.tp
        return nbytes, flops

    def step_times(self, tokens: F64, context: F64, decode: F64 | None = None) -> F64:
        """Seconds per step (vectorised); zero-token steps cost the overhead only.
        ``decode``: decoded tokens of each step (default: all of ``tokens``), for the
        per-decode-token host cost."""
        import numpy as np

        if self._pp > 1:
            m = np.clip(tokens, 1.0, float(self._pp))
            stage: F64 = self._stage_times(tokens / m, context / m)
            out: F64 = self._pp * stage
        else:
            out = self._stage_times(tokens, context)
        d = self.coef.decode_token_s
        if d:
            out = out + d * (tokens if decode is None else decode)
        return out

    def _stage_times(self, tokens: F64, context: F64) -> F64:
        import numpy as np

        nbytes, flops = self.bytes_and_flops(tokens, context)
        h, c = self.terms, self.coef
        compute = flops / (h.peak_flops * c.mfu)
        memory = nbytes / (h.hbm_bandwidth * c.mbu)
        out: F64 = c.overhead_s + np.maximum(compute, memory)
        if self._comm:
            out = out + np.where(tokens > 0, h.comm_fixed_s + h.comm_s_per_token * tokens, 0.0)
        return out

    def step_time(self, tokens: int, context: int, decode: int = -1) -> float:
        """One step, in plain floats: the same operations in the same order as
        :meth:`step_times` (IEEE-754 gives the same result), without numpy's call overhead."""
        if self._pp > 1:
            m = min(max(float(tokens), 1.0), float(self._pp))
            out = self._pp * self._stage_time(tokens / m, context / m)
        else:
            out = self._stage_time(float(tokens), float(context))
        d = self.coef.decode_token_s
        if d:
            out = out + d * float(tokens if decode < 0 else decode)
        return out

    def _stage_time(self, t: float, ctx: float) -> float:
        h, c = self.terms, self.coef
        weights = h.dense_weight_bytes
        if h.num_experts and h.expert_weight_bytes:
            miss = (1.0 - h.experts_per_token / h.num_experts) ** (t * h.expert_tokens_scale)
            weights = weights + h.expert_weight_bytes * (1.0 - miss)
        nbytes = weights + ctx * h.kv_bytes_per_token
        flops = (2.0 * h.active_params * t + h.attn_flops_per_ctx_token * ctx) / h.tp
        compute = flops / (h.peak_flops * c.mfu)
        memory = nbytes / (h.hbm_bandwidth * c.mbu)
        out = c.overhead_s + (compute if compute > memory else memory)
        if self._comm and t > 0:
            out = out + (h.comm_fixed_s + h.comm_s_per_token * t)
        return out

    def plan_time(self, plan: StepPlan) -> float:
        """One scheduled step (the engine's call): this roofline needs only its totals;
        measured-kernel models (:mod:`kvscope.sim.cost_aic`) split prefill from decode."""
        return self.step_time(plan.tokens, plan.context_tokens, plan.decode_tokens)

    def describe(self) -> dict[str, Any]:
        """The cost model's name and source, for the run's summary."""
        return {"name": "roofline", "source": self.coef.source}

    def roofline_time(self, tokens: int, context: int) -> float:
        """One pass without the per-step overhead (a drafter's pass inside a step)."""
        return self.step_time(tokens, context) - self.coef.overhead_s


@dataclass(frozen=True)
class DrafterCost:
    """A speculative drafter's time in one step: ``passes`` forwards over the proposers."""

    passes: int  # forward passes per step (k sequential drafts; 1 if drafted in parallel)
    fraction: float = 0.0  # of the target's pass (MTP/EAGLE: one layer of the target's L)
    model: CostModel | None = None  # a separate draft model's own roofline

    def time(self, target: CostModel, requests: int, context: int) -> float:
        """Seconds the drafter adds to a step in which ``requests`` requests sample."""
        if not self.passes or not requests:
            return 0.0
        if self.model is not None:
            return self.passes * self.model.roofline_time(requests, context)
        return self.passes * self.fraction * target.roofline_time(requests, context)
