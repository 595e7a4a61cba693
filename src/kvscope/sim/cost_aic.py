"""Step times from NVIDIA AIConfigurator's measured kernel tables (``--cost-model aic``).

A narrow adapter over ``aiconfigurator-core`` (Apache-2.0, the optional extra
``kvscope[aic]``; imported lazily here and nowhere else in :mod:`kvscope.sim`). It maps a
deployment to AIC's names (system yaml, backend, model config, KV quantization, TP and the
MoE split) and prices each simulated step, in seconds, with AIC's own per-step estimators
(``aiconfigurator_core.sdk.engine.EngineHandle``):

* a decode-only step of ``D`` requests attending ``C`` tokens in all is
  ``decode_step_latency(D, isl=c - 1, osl=1)`` with ``c = C / D`` (AIC prices every decode
  at ``s = isl + osl // 2 + 1``, rust_engine_step.py::estimate_decode_step_latency_with_rust);
* a step with ``P`` prefill tokens from ``n`` requests attending ``L`` tokens in all is AIC's
  three-pass mixed step (non-attention over ``P + D`` tokens, context attention of an
  ``isl = L / n`` prompt divided by ``ceil(isl / P)``, decode attention): the first two
  passes from ``mixed_step_breakdown(P, D, isl, 1)``, the decode pass at the decode
  requests' own context from ``mixed_step_breakdown(0, D, c - 1, 1)`` (AIC couples both to
  one ``isl``; the simulator knows both).

Shapes are cached; contexts are bucketed like AIC's own decode stride (32 tokens, its
``run_static(stride=32)``), and above 2,048 to 1/64 of their size; prefill token counts
above 64 to 1/32 of their size (AIC interpolates its GEMM tables between collected sizes
anyway). Where AIC cannot answer (no system, model or perf data for the combination) the
step falls back to the fitted roofline (:mod:`kvscope.sim.roofline`) and a
:class:`AicFallbackWarning` names the combination once.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from kvscope.errors import KvscopeError
from kvscope.sim.cost import CostFallbackWarning, CostModel
from kvscope.sim.roofline import FittedRoofline, step_shape

if TYPE_CHECKING:
    from kvscope.sim.cost import F64
    from kvscope.sim.scheduler import StepPlan

#: kvscope GPU catalogue names -> AIC system yaml (aiconfigurator_core/systems/*.yaml).
AIC_SYSTEMS = {
    "A100-SXM-80GB": "a100_sxm",
    "A100-PCIe-80GB": "a100_pcie",
    "H100-SXM-80GB": "h100_sxm",
    "H100-PCIe-80GB": "h100_pcie",
    "H200-SXM-141GB": "h200_sxm",
    "B200-SXM-180GB": "b200_sxm",
    "B300-SXM-288GB": "b300_sxm",
    "GB200-186GB": "gb200",
    "GB300-288GB": "gb300",
    "L4-24GB": "l4",
    "L40S-48GB": "l40s",
    "RTX-PRO-6000-Blackwell-Server-96GB": "rtx_pro_6000_server",
}
#: kvscope preset ids whose AIC model config has another name (same architecture and
#: shapes; Llama 3.3 70B is Llama 3.1 70B's architecture with new weights).
AIC_MODEL_ALIASES = {
    "meta-llama/Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B",
    "meta-llama/Llama-3.1-405B": "meta-llama/Meta-Llama-3.1-405B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Meta-Llama-3.1-70B",
}
#: Context bucket: AIC samples decode every 32 tokens (run_static's default stride).
CTX_STRIDE = 32


class AicFallbackWarning(CostFallbackWarning):
    """AIConfigurator could not price a combination; the fitted roofline was used."""


@dataclass(frozen=True)
class AicTarget:
    """One deployment in AIC's names."""

    system: str
    backend: str
    model: str
    tp: int
    moe_tp: int
    moe_ep: int
    kvcache_quant: str | None
    attn_dp: int = 1

    def describe(self) -> str:
        kv = f", kv {self.kvcache_quant}" if self.kvcache_quant else ""
        dp = f", attention DP{self.attn_dp}" if self.attn_dp > 1 else ""
        return (
            f"{self.model} on {self.system} ({self.backend}, TP{self.tp}{dp}, "
            f"MoE TP{self.moe_tp}xEP{self.moe_ep}{kv})"
        )


def aic_version() -> str:
    """The installed aiconfigurator-core version; one-line error when the extra is missing."""
    try:
        from importlib.metadata import version

        import aiconfigurator_core  # noqa: F401
    except ImportError:
        raise KvscopeError(
            "--cost-model aic needs AIConfigurator's kernel tables: install kvscope[aic] "
            "(pip install 'kvscope[aic]')."
        ) from None
    return version("aiconfigurator-core")


def _aic_model_ids() -> set[str]:
    """Models AIC reads from its own cached configs (``common.DefaultHFModels``); for any
    other id it would fetch config.json from the Hugging Face Hub."""
    from aiconfigurator_core.sdk.common import DefaultHFModels

    return set(DefaultHFModels)


def resolve_target(
    model: str,
    gpu: str,
    engine: str,
    tp: int,
    kv_cache_dtype: str | None,
    ep: int = 1,
    attn_dp: int = 1,
) -> tuple[AicTarget | None, str]:
    """AIC's names for a deployment, or ``None`` and why AIC cannot take it.

    ``ep`` > 1: experts over ``ep`` ranks (``tp x attn_dp``), else sharded by TP."""
    system = AIC_SYSTEMS.get(gpu)
    if system is None:
        return None, f"AIC has no system for GPU {gpu}"
    aic_model = AIC_MODEL_ALIASES.get(model, model)
    if aic_model not in _aic_model_ids():
        return None, f"AIC has no model config for {model}"
    kv = "fp8" if kv_cache_dtype and kv_cache_dtype.startswith("fp8") else None
    ep = max(1, ep)
    moe_tp = max(1, tp * attn_dp // ep)
    return AicTarget(system, engine, aic_model, tp, moe_tp, ep, kv, max(1, attn_dp)), ""


@cache
def _handle(target: AicTarget) -> Any:
    """AIC's compiled engine for a target (loads its perf tables: seconds, once per target)."""
    import logging

    from aiconfigurator_core.sdk.engine import EngineHandle

    # AIC logs every low-fidelity table it loads at WARNING; kvscope reports its own fallbacks.
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    kw: dict[str, Any] = {"tp_size": target.tp}
    if target.kvcache_quant:
        kw["kvcache_quant_mode"] = target.kvcache_quant
    kw["moe_tp_size"], kw["moe_ep_size"] = target.moe_tp, target.moe_ep
    if target.attn_dp > 1:
        kw["attention_dp_size"] = target.attn_dp
    return EngineHandle.compile(target.model, target.system, target.backend, **kw)


def bucket_ctx(c: float) -> int:
    """A per-request context length on AIC's 32-token stride (1/64 relative above 2,048)."""
    step = CTX_STRIDE if c <= 2048 else 1 << max(5, int(math.log2(c)) - 6)
    return max(1, round(c / step) * step)


def bucket_tokens(n: int) -> int:
    """A prefill token count: exact up to 64, then to 1/32 of its size."""
    if n <= 64:
        return n
    step = 1 << (int(math.log2(n)) - 5)
    return round(n / step) * step


class AicCostModel(CostModel):
    """Seconds per step from AIC's tables; the fitted roofline where AIC has no data."""

    def __init__(self, fallback: FittedRoofline, target: AicTarget, handle: Any) -> None:
        super().__init__(fallback.terms, fallback.coef)
        self.fallback = fallback
        self.target = target
        self.handle = handle
        self.missed = 0  # shapes AIC could not price (the roofline priced them)
        self._decode: dict[tuple[int, int], float] = {}
        self._mixed: dict[tuple[int, int, int, int], float] = {}

    def _miss(self, err: Exception, what: str) -> None:
        if not self.missed:
            warnings.warn(
                AicFallbackWarning(
                    f"AIC has no data for {self.target.describe()} at {what} "
                    f"({_first_line(err)}); those steps use the fitted roofline."
                ),
                stacklevel=3,
            )
        self.missed += 1

    def decode_s(self, d: int, ctx_total: float) -> float:
        """A decode-only step: ``d`` requests attending ``ctx_total`` tokens in all."""
        c = bucket_ctx(ctx_total / d)
        key = (d, c)
        t = self._decode.get(key)
        if t is None:
            try:
                t = self.handle.decode_step_latency(d, c - 1, 1) / 1e3
            except (ValueError, RuntimeError) as err:
                self._miss(err, f"{d} decodes over {c} tokens")
                t = self.fallback.shape_time(0, 0, 0, d, d * c)
            self._decode[key] = t
        return t

    def mixed_s(self, p: int, n: int, ctx_p: int, d: int, ctx_d: int) -> float:
        """A step with ``p`` prefill tokens of ``n`` requests (``ctx_p`` tokens attended)
        and ``d`` decodes (``ctx_d`` tokens attended)."""
        pb = bucket_tokens(p)
        isl = bucket_ctx(ctx_p / max(n, 1))
        c = bucket_ctx(ctx_d / d) if d else 0
        key = (pb, isl, d, c)
        t = self._mixed.get(key)
        if t is None:
            try:
                _, shared, ctx_attn, dec_attn = self.handle.mixed_step_breakdown(pb, d, isl, 1)
                if d:
                    dec_attn = self.handle.mixed_step_breakdown(0, d, c - 1, 1)[3]
                t = (shared + ctx_attn + dec_attn) / 1e3
            except (ValueError, RuntimeError) as err:
                self._miss(err, f"a {pb}-token prefill step with {d} decodes")
                t = self.fallback.shape_time(p, n, ctx_p, d, ctx_d)
            self._mixed[key] = t
        return t

    # -- the CostModel interface: decode-only spans, and whole plans ----------------------
    def step_time(self, tokens: int, context: int, decode: int = -1) -> float:
        """A span step: ``tokens`` decodes over ``context`` attended tokens."""
        if tokens <= 0:
            return 0.0
        return self.decode_s(int(tokens), float(context))

    def step_times(self, tokens: F64, context: F64, decode: F64 | None = None) -> F64:
        out = np.empty(len(tokens), dtype=np.float64)
        ctx = np.broadcast_to(context, tokens.shape).tolist()
        for i, (t, c) in enumerate(zip(tokens.tolist(), ctx, strict=True)):
            out[i] = self.decode_s(int(t), float(c)) if t > 0 else 0.0
        return out

    def plan_time(self, plan: StepPlan) -> float:
        if not plan.prefill_tokens:
            return self.step_time(plan.decode_tokens, plan.context_tokens)
        return self.mixed_s(*step_shape(plan))

    def describe(self) -> dict[str, Any]:
        return {
            "name": "aic",
            "source": f"aiconfigurator-core {aic_version()} measured kernels, "
            f"{self.target.describe()}",
            "shapes_priced": len(self._decode) + len(self._mixed),
            "shapes_on_roofline": self.missed,
        }


def build_aic(
    fallback: FittedRoofline,
    model: str,
    gpu: str,
    engine: str,
    tp: int,
    kv_cache_dtype: str | None,
    ep: int = 1,
    attn_dp: int = 1,
    *,
    dp_attention: bool = False,
) -> CostModel:
    """AIC's cost model for the deployment, or ``fallback`` (warned once) where it has none."""
    aic_version()
    target, why = resolve_target(model, gpu, engine, tp, kv_cache_dtype, ep, attn_dp)
    if dp_attention:  # SGLang's DP attention inside the TP group: not mapped to AIC yet
        target, why = None, "the AIC adapter does not map --enable-dp-attention yet"
    if target is None:
        msg = f"{why}; step times use the fitted roofline."
        warnings.warn(AicFallbackWarning(msg), stacklevel=2)
        return fallback
    try:
        handle = _handle(target)
    except Exception as err:  # AIC's own errors for what it cannot build: a data gap
        warnings.warn(
            AicFallbackWarning(
                f"AIC has no data for {target.describe()} "
                f"({_first_line(err)}); step times use the fitted roofline."
            ),
            stacklevel=2,
        )
        return fallback
    try:  # one batch-1 decode: where even that has no tables, nothing of this target has
        handle.decode_step_latency(1, 1023, 1)
    except (ValueError, RuntimeError) as err:
        warnings.warn(
            AicFallbackWarning(
                f"AIC has no data for {target.describe()} ({_first_line(err)}); "
                "step times use the fitted roofline."
            ),
            stacklevel=2,
        )
        return fallback
    return AicCostModel(fallback, target, handle)


def _first_line(err: Exception) -> str:
    """AIC's message without the perf-table path it ends with."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text.split(" at /")[0][:240]
