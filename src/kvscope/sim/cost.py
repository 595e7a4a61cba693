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
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from kvscope.errors import KvscopeError
from kvscope.validate import load_json, write_text_atomic

if TYPE_CHECKING:
    from kvscope.sim.scheduler import StepPlan

F64 = NDArray[np.float64]


@dataclass(frozen=True)
class CostCoefficients:
    """The three calibratable numbers of the step-time model."""

    overhead_s: float = 0.003
    mfu: float = 0.45  # the planner's default (kvscope.plan.roofline.Efficiency.flops)
    mbu: float = 0.8  # the planner's default (kvscope.plan.roofline.Efficiency.hbm)
    source: str = "defaults (kvscope.plan.roofline.Efficiency; 3 ms per-step overhead)"

    def __post_init__(self) -> None:
        problem = "cost coefficients need 0 < mfu <= 1, 0 < mbu <= 1 and overhead_s >= 0"
        for name in ("overhead_s", "mfu", "mbu"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise KvscopeError(f"{problem}; {name} is {value!r}.")
        # NaN fails every comparison, so it is refused here too; an infinite overhead is not
        # a step time.
        if not (0 < self.mfu <= 1 and 0 < self.mbu <= 1 and 0 <= self.overhead_s < float("inf")):
            raise KvscopeError(problem + ".")
        if not isinstance(self.source, str):
            raise KvscopeError(f"cost coefficients: source must be text, not {self.source!r}.")

    def save(self, path: str | Path) -> Path:
        """Write the coefficients as JSON (atomically: a reader never sees half a file)."""
        return write_text_atomic(
            path, json.dumps(asdict(self), indent=2) + "\n", "cost coefficients"
        )

    @classmethod
    def load(cls, path: str | Path) -> CostCoefficients:
        p = Path(path)
        doc = load_json(p, "cost coefficients file")
        if not isinstance(doc, dict):
            raise KvscopeError(f"{p}: cost coefficients must be a JSON object.")
        known = {"overhead_s", "mfu", "mbu", "source"}
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

    @classmethod
    def from_specs(
        cls, model: Any, gpu: Any, *, tp: int = 1, kv_cache_dtype: str | None = None
    ) -> HardwareTerms:
        """Figures from the planner's step costs (:mod:`kvscope.plan.step_costs`).

        Weights and linear-layer FLOPs are the planner's (activated parameters, routed experts
        sharded by TP, head on every rank); KV read bytes and attention FLOPs per context
        token are the planner's per-sequence figures at a 4,096-token reference context,
        applied linearly to the batch's total context (exact for full attention; windowed
        and compressed caches make them an average).
        """
        from kvscope.plan.roofline import compute_flops_peak
        from kvscope.plan.step_costs import attention_flops, kv_read_bytes, step_costs
        from kvscope.specs.dtypes import resolve_kv_dtype

        c = step_costs(model)
        kv = resolve_kv_dtype(kv_cache_dtype, model.dtype)
        ref = 4096
        return cls(
            dense_weight_bytes=c.body_bytes / tp + c.replicated_bytes + c.head_bytes / tp,
            expert_weight_bytes=c.num_experts * c.expert_bytes * c.moe_layers / tp,
            num_experts=c.num_experts,
            experts_per_token=c.experts_per_token,
            active_params=(c.body_flops_per_token + c.head_flops_per_token) / 2.0,
            kv_bytes_per_token=kv_read_bytes(model, ref, kv, tp) / ref,
            attn_flops_per_ctx_token=attention_flops(model, ref) / ref,
            tp=tp,
            peak_flops=compute_flops_peak(c, gpu),
            hbm_bandwidth=float(gpu.hbm_bandwidth),
            pcie_bandwidth=float(gpu.pcie_bandwidth),
        )


class CostModel:
    """Step time in seconds for arrays of (new tokens, attended context tokens)."""

    def __init__(self, terms: HardwareTerms, coef: CostCoefficients | None = None) -> None:
        self.terms = terms
        self.coef = coef or CostCoefficients()

    def bytes_and_flops(self, tokens: F64, context: F64) -> tuple[F64, F64]:
        """Per-GPU bytes moved and FLOPs for each step."""
        h = self.terms
        weights = np.full_like(tokens, h.dense_weight_bytes)
        if h.num_experts and h.expert_weight_bytes:
            miss = (1.0 - h.experts_per_token / h.num_experts) ** tokens
            weights = weights + h.expert_weight_bytes * (1.0 - miss)
        nbytes = weights + context * h.kv_bytes_per_token
        flops = (2.0 * h.active_params * tokens + h.attn_flops_per_ctx_token * context) / h.tp
        return nbytes, flops

    def step_times(self, tokens: F64, context: F64) -> F64:
        """Seconds per step (vectorised); zero-token steps cost the overhead only."""
        nbytes, flops = self.bytes_and_flops(tokens, context)
        h, c = self.terms, self.coef
        compute = flops / (h.peak_flops * c.mfu)
        memory = nbytes / (h.hbm_bandwidth * c.mbu)
        out: F64 = c.overhead_s + np.maximum(compute, memory)
        return out

    def step_time(self, tokens: int, context: int) -> float:
        """One step, in plain floats: the same operations in the same order as
        :meth:`step_times` (IEEE-754 gives the same result), without numpy's call overhead."""
        h, c = self.terms, self.coef
        t = float(tokens)
        ctx = float(context)
        weights = h.dense_weight_bytes
        if h.num_experts and h.expert_weight_bytes:
            miss = (1.0 - h.experts_per_token / h.num_experts) ** t
            weights = weights + h.expert_weight_bytes * (1.0 - miss)
        nbytes = weights + ctx * h.kv_bytes_per_token
        flops = (2.0 * h.active_params * t + h.attn_flops_per_ctx_token * ctx) / h.tp
        compute = flops / (h.peak_flops * c.mfu)
        memory = nbytes / (h.hbm_bandwidth * c.mbu)
        return c.overhead_s + (compute if compute > memory else memory)

    def plan_time(self, plan: StepPlan) -> float:
        """One scheduled step (the engine's call): this roofline needs only its totals;
        measured-kernel models (:mod:`kvscope.sim.cost_aic`) split prefill from decode."""
        return self.step_time(plan.tokens, plan.context_tokens)

    def describe(self) -> dict[str, Any]:
        """The cost model's name and source, for the run's summary."""
        return {"name": "roofline", "source": self.coef.source}
