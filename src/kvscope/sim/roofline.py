"""The fitted roofline (``--cost-model fitted``): step seconds with the terms measured kernels need.

The plain roofline (:mod:`kvscope.sim.cost`) has two efficiencies and a per-step overhead.
Measured kernel tables (NVIDIA AIConfigurator, ``aiconfigurator-core``) show what it misses:
a fixed cost per layer and step (kernel launches, norms, routers: 50-200 us per layer at
batch 1 on MoE and MLA models), grouped expert GEMMs that reach their efficiency only with
enough tokens per expert, and attention that streams KV at a bandwidth that grows with the
context. Per GPU, for a step of ``P`` prefill tokens from ``n`` requests (``Lp`` tokens
attended) and ``D`` decodes (``Ld`` attended), ``T = P + D``:

* memory = (dense weights + touched experts) / (BW x mbu)
  + KV bytes x (Lp + Ld) / (BW x attn_mbu x c / (c + attn_half_ctx)), c = Ld / D;
* compute = dense FLOPs / (peak x mfu) + expert FLOPs / (peak x mfu x e / (e + moe_half_tpe))
  with e = T x k / E tokens per expert, + attention FLOPs / (peak x attn_mfu), where a prefill
  chunk's queries attend ``Lp / n - P / 2n`` keys on average;
* t = layers x layer_s + max(compute, memory).

The seven constants are fitted per model family (dense, moe, mla, v4) by
``benchmarks/fit_roofline.py`` against AIC's step estimates and shipped in
``roofline_fit.json`` with the AIC version, the grid and the held-out error.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from kvscope.errors import KvscopeError
from kvscope.sim.cost import CostCoefficients, CostFallbackWarning, CostModel, HardwareTerms

if TYPE_CHECKING:
    from kvscope.sim.cost import F64
    from kvscope.sim.scheduler import StepPlan

FAMILIES = ("dense", "moe", "mla", "v4")
#: The fitted constants, in the order the fit script's parameter vector uses.
PARAMS = ("layer_s", "mfu", "mbu", "moe_half_tpe", "attn_mbu", "attn_half_ctx", "attn_mfu")


@dataclass(frozen=True)
class FitConstants:
    """One family's fitted constants (seconds, fractions, tokens)."""

    layer_s: float = 0.0
    mfu: float = 0.45
    mbu: float = 0.8
    moe_half_tpe: float = 0.0
    attn_mbu: float = 0.8
    attn_half_ctx: float = 0.0
    attn_mfu: float = 0.45

    def __post_init__(self) -> None:
        for name in PARAMS:
            v = getattr(self, name)
            if not isinstance(v, int | float) or not v >= 0 or v == float("inf"):
                raise KvscopeError(f"roofline fit: {name} must be a finite number >= 0.")
        if not (self.mfu > 0 and self.mbu > 0 and self.attn_mbu > 0 and self.attn_mfu > 0):
            raise KvscopeError("roofline fit: efficiencies must be > 0.")


def family_of(model: Any) -> str:
    """dense, moe, mla (MLA/DSA attention) or v4 (DeepSeek V4's compressed attention)."""
    kinds = {layer.attention.kind for layer in model.layers}
    if any(k.startswith("dsv4") for k in kinds):
        return "v4"
    if kinds & {"mla", "mla_sparse"}:
        return "mla"
    return "moe" if model.moe_layer else "dense"


@cache
def fit_data() -> dict[str, Any]:
    """The shipped fit (``roofline_fit.json``): constants, provenance and errors by family."""
    text = resources.files("kvscope.sim").joinpath("roofline_fit.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    return doc


def constants(family: str) -> FitConstants:
    fams = fit_data().get("families", {})
    if family not in fams:
        return FitConstants()
    return FitConstants(**{k: float(fams[family]["constants"][k]) for k in PARAMS})


def expected_error(cost_model: str, family: str) -> dict[str, Any] | None:
    """Held-out median and P90 |kvscope/AIC - 1| of a cost model for a family, if measured."""
    err = fit_data().get("families", {}).get(family, {}).get("held_out", {}).get(cost_model)
    if not err:
        return None
    return {
        "against": f"aiconfigurator-core {fit_data().get('aic_version', '?')} (held-out grid)",
        "family": family,
        **err,
    }


@dataclass(frozen=True)
class FitTerms:
    """What the fitted roofline needs beyond :class:`HardwareTerms` (one GPU)."""

    base: HardwareTerms
    layers: int
    expert_flops_per_token: float  # 2 x k x one routed expert's parameters x MoE layers
    family: str

    @classmethod
    def from_specs(
        cls, model: Any, gpu: Any, *, tp: int = 1, kv_cache_dtype: str | None = None
    ) -> FitTerms:
        base = HardwareTerms.from_specs(model, gpu, tp=tp, kv_cache_dtype=kv_cache_dtype)
        moe = model.moe_layer
        e_flops = 0.0
        if moe and moe.num_experts:
            e_flops = 2.0 * moe.experts_per_token * model.params["routed_experts"] / moe.num_experts
        return cls(base, model.num_layers, e_flops, family_of(model))


def step_shape(plan: StepPlan) -> tuple[int, int, int, int, int]:
    """(prefill tokens, prefill requests, their attended tokens, decodes, decode attended)
    of a scheduled step; requests are classified as ``Scheduler.schedule`` does (after it)."""
    n = ctx_p = 0
    if plan.prefill_tokens:
        for seq, k in plan.scheduled:
            if not (k == 1 and seq.outputs > 0 and seq.computed == seq.num_tokens):
                n += 1
                ctx_p += seq.computed
    return plan.prefill_tokens, n, ctx_p, plan.decode_tokens, plan.context_tokens - ctx_p


class FittedRoofline(CostModel):
    """The roofline with fitted per-layer, expert-GEMM and attention terms."""

    def __init__(self, terms: FitTerms, fit: FitConstants | None = None) -> None:
        super().__init__(
            terms.base,
            CostCoefficients(
                overhead_s=0.0, source=f"fitted roofline ({terms.family}, roofline_fit.json)"
            ),
        )
        self.fit_terms = terms
        self.fit = fit or constants(terms.family)

    def shape_times(self, p: F64, n: F64, ctx_p: F64, d: F64, ctx_d: F64) -> F64:
        """Seconds per step for arrays of step shapes (see the module docstring)."""
        import numpy as np

        h, f, x = self.terms, self.fit, self.fit_terms
        t = p + d
        weights = np.full_like(t, h.dense_weight_bytes)
        exp_flops = x.expert_flops_per_token * t / h.tp
        dense_flops = 2.0 * h.active_params * t / h.tp - exp_flops
        exp_time = np.zeros_like(t)
        if h.num_experts and h.expert_weight_bytes:
            miss = (1.0 - h.experts_per_token / h.num_experts) ** t
            weights = weights + h.expert_weight_bytes * (1.0 - miss)
            tpe = t * h.experts_per_token / h.num_experts
            eff = tpe / (tpe + f.moe_half_tpe)
            exp_time = exp_flops / (h.peak_flops * f.mfu * np.maximum(eff, 1e-9))
        c = np.where(d > 0, ctx_d / np.maximum(d, 1.0), 0.0)
        kv_eff = np.where(c > 0, c / (c + f.attn_half_ctx + 1e-9), 1.0)
        kv_time = h.kv_bytes_per_token * (ctx_p + ctx_d) / (h.hbm_bandwidth * f.attn_mbu)
        kv_time = kv_time / np.maximum(kv_eff, 1e-9)
        nn = np.maximum(n, 1.0)
        keys = ctx_d + p * np.maximum(ctx_p / nn - p / (2.0 * nn), 1.0)
        attn_time = h.attn_flops_per_ctx_token * keys / h.tp / (h.peak_flops * f.attn_mfu)
        compute = dense_flops / (h.peak_flops * f.mfu) + exp_time + attn_time
        memory = weights / (h.hbm_bandwidth * f.mbu) + kv_time
        out: F64 = x.layers * f.layer_s + np.maximum(compute, memory)
        return out

    def shape_time(self, p: float, n: float, ctx_p: float, d: float, ctx_d: float) -> float:
        """One step in plain floats: :meth:`shape_times`' formula without numpy's call cost
        (tests hold the two equal)."""
        h, f, x = self.terms, self.fit, self.fit_terms
        t = float(p + d)
        weights = h.dense_weight_bytes
        exp_flops = x.expert_flops_per_token * t / h.tp
        dense_flops = 2.0 * h.active_params * t / h.tp - exp_flops
        exp_time = 0.0
        if h.num_experts and h.expert_weight_bytes:
            miss = (1.0 - h.experts_per_token / h.num_experts) ** t
            weights = weights + h.expert_weight_bytes * (1.0 - miss)
            tpe = t * h.experts_per_token / h.num_experts
            eff = tpe / (tpe + f.moe_half_tpe)
            exp_time = exp_flops / (h.peak_flops * f.mfu * max(eff, 1e-9))
        c = ctx_d / max(d, 1.0) if d > 0 else 0.0
        kv_eff = c / (c + f.attn_half_ctx + 1e-9) if c > 0 else 1.0
        kv_time = h.kv_bytes_per_token * (ctx_p + ctx_d) / (h.hbm_bandwidth * f.attn_mbu)
        kv_time = kv_time / max(kv_eff, 1e-9)
        nn = max(n, 1.0)
        keys = ctx_d + p * max(ctx_p / nn - p / (2.0 * nn), 1.0)
        attn_time = h.attn_flops_per_ctx_token * keys / h.tp / (h.peak_flops * f.attn_mfu)
        compute = dense_flops / (h.peak_flops * f.mfu) + exp_time + attn_time
        memory = weights / (h.hbm_bandwidth * f.mbu) + kv_time
        return x.layers * f.layer_s + max(compute, memory)

    def step_times(self, tokens: F64, context: F64, decode: F64 | None = None) -> F64:
        """Decode-only steps (the engine's spans): ``tokens`` decodes over ``context``."""
        import numpy as np

        tokens = np.asarray(tokens, dtype=np.float64)
        context = np.broadcast_to(np.asarray(context, dtype=np.float64), tokens.shape)
        z = np.zeros_like(tokens)
        return self.shape_times(z, z, z, tokens, context)

    def step_time(self, tokens: int, context: int, decode: int = -1) -> float:
        return self.shape_time(0, 0, 0, tokens, context)

    def plan_time(self, plan: StepPlan) -> float:
        return self.shape_time(*step_shape(plan))

    def describe(self) -> dict[str, Any]:
        return {
            "name": "fitted",
            "source": f"fitted roofline, {self.fit_terms.family} constants from "
            f"aiconfigurator-core {fit_data().get('aic_version', '?')} (roofline_fit.json)",
        }


def cost_model_for(cfg: Any, roofline: CostModel) -> CostModel:
    """The cost model ``cfg.cost_model`` names for one engine (``roofline`` is the one given).

    The fitted roofline and AIC price one TP group's step (``SimConfig`` refuses them with
    pipeline stages); under expert parallelism AIC gets the experts over ``tp x dp`` ranks
    and, with DP, attention data-parallel over ``dp`` (vLLM's DP + EP layout).
    """
    if cfg.cost_model == "roofline":
        return roofline
    # The fitted terms and AIC's estimators price one TP group's plain forward pass: neither
    # has pipeline stages (bubbles, stage hand-offs) nor a drafter's propose-and-verify steps.
    # Those runs keep the roofline, which models both, and say so once.
    unpriced = []
    if getattr(cfg, "pp", 1) > 1:
        unpriced.append(f"{cfg.pp} pipeline stages")
    if cfg.spec_decode() is not None:
        unpriced.append("speculative decoding's draft and verify steps")
    if unpriced:
        warnings.warn(
            CostFallbackWarning(
                f"--cost-model {cfg.cost_model} does not price {' or '.join(unpriced)}; "
                "step times use the roofline."
            ),
            stacklevel=2,
        )
        return roofline
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model

    model = load_model(cfg.model, dtype=cfg.dtype, revision=cfg.revision)
    gpu = get_gpu(cfg.gpu)
    fitted = FittedRoofline(
        FitTerms.from_specs(model, gpu, tp=cfg.tp, kv_cache_dtype=cfg.kv_cache_dtype)
    )
    if cfg.cost_model == "fitted":
        return fitted
    from kvscope.sim.cost_aic import build_aic

    ep = cfg.tp * cfg.dp if cfg.enable_expert_parallel else 1
    attn_dp = cfg.dp if cfg.enable_expert_parallel else 1
    return build_aic(
        fitted, cfg.model, gpu.name, cfg.engine, cfg.tp, cfg.kv_cache_dtype, ep, attn_dp,
        dp_attention=cfg.enable_dp_attention,
    )  # fmt: skip


def cost_summary(cost: CostModel, cfg: Any) -> dict[str, Any]:
    """The run summary's ``cost_model``: name, source and, where measured, expected error."""
    from kvscope.specs.registry import load_model

    family = family_of(load_model(cfg.model, dtype=cfg.dtype, revision=cfg.revision))
    info = cost.describe()
    # A calibrated roofline (--cost) is no longer the one measured against AIC.
    calibrated = info["name"] == "roofline" and cost.coef != CostCoefficients()
    err = None if calibrated else expected_error(info["name"], family)
    info["expected_error"] = err
    return info
