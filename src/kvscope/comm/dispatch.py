"""``kvscope comm moe``: MoE dispatch all-to-all under skewed routing, and its tail.

For each routing skew the ranks run an all-to-all with *uneven* splits, one fresh seeded
dispatch per iteration (:mod:`kvscope.comm.routing`), so each iteration has its own
imbalance. Each row reports the latency percentiles next to the imbalance the routing
produced, the tail relative to the least-skewed routing measured (``p99_vs_least_skew``),
and the Pearson correlation between an iteration's imbalance and its latency: how much
of the tail imbalance explains.

Bytes are per rank per dispatch (tokens x hidden x element size), bandwidths in GB/s,
times in seconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.comm.bench import (
    ProgressFn,
    check_common,
    check_host_memory,
    fit_dict,
    measure_steps,
    prepare_launch,
)
from kvscope.comm.collectives import DTYPE_BYTES, canonical_dtype
from kvscope.comm.latency import latency_fields, latency_stats
from kvscope.comm.launch import Fault, Step
from kvscope.comm.model import LinkFit, dispatch_cost_terms, fit_cost_terms, predict_dispatch_time_s
from kvscope.comm.routing import RoutingSpec, bottleneck_tokens, dispatch_plan, imbalance
from kvscope.errors import KvscopeError

# Defaults follow Mixtral-8x7B's config.json: num_local_experts 8, num_experts_per_tok 2,
# hidden_size 4096. Tokens per rank: one decode batch of 128 sequences.
DEFAULT_EXPERTS, DEFAULT_TOP_K, DEFAULT_HIDDEN, DEFAULT_TOKENS = 8, 2, 4096, 128


@dataclass(frozen=True)
class MoeConfig:
    """One ``kvscope comm moe`` run: a routing shape measured at several skews."""

    skews: tuple[float, ...]
    world_size: int = 4
    num_experts: int = DEFAULT_EXPERTS
    top_k: int = DEFAULT_TOP_K
    tokens_per_rank: int = DEFAULT_TOKENS
    hidden: int = DEFAULT_HIDDEN
    backend: str = "gloo"
    iters: int = 30
    warmup: int = 5
    dtype: str = "bfloat16"
    seed: int = 0
    timeout_s: float = 60.0
    fault: Fault | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        check_common(self.backend, self.world_size, self.iters, self.warmup, self.timeout_s)
        if not self.skews:
            raise KvscopeError("--skew needs at least one value.")
        if self.num_experts % self.world_size:
            raise KvscopeError(
                f"{self.num_experts} experts do not split evenly over "
                f"{self.world_size} ranks (expert parallelism needs E % world size == 0)."
            )
        for s in self.skews:
            self.spec(s)  # validates top-k, tokens, hidden and skew
        # Worst case per rank: every token to top-k experts sent, and as many from each rank
        # received (all routed to this rank's experts).
        token_bytes = self.hidden * DTYPE_BYTES[self.dtype]
        per_rank = (1 + self.world_size) * self.tokens_per_rank * self.top_k * token_bytes
        check_host_memory(self.backend, float(per_rank), self.world_size, "the dispatch buffers")

    def spec(self, skew: float) -> RoutingSpec:
        return RoutingSpec(self.num_experts, self.top_k, self.tokens_per_rank, self.hidden, skew)


def skew_row(
    config: MoeConfig, skew: float, tokens: np.ndarray, times_s: np.ndarray, wrong: list[int]
) -> dict[str, Any]:
    """One skew's row; ``tokens[iteration, src, dst]`` covers the timed iterations only."""
    stats = latency_stats(times_s)
    token_bytes = config.hidden * DTYPE_BYTES[config.dtype]
    per_iter_imb = np.array([imbalance(t) for t in tokens])
    busiest = np.array([t.sum(axis=0).max() for t in tokens]) * token_bytes
    bottleneck = np.array([bottleneck_tokens(t) for t in tokens]) * token_bytes
    latency = np.asarray(times_s).max(axis=0)
    corr = (
        float(np.corrcoef(per_iter_imb, latency)[0, 1])
        if per_iter_imb.std() > 0 and latency.std() > 0
        else None
    )
    return {
        "op": "all_to_all",
        "pattern": "moe_dispatch",
        "skew": skew,
        "world_size": config.world_size,
        "dtype": config.dtype,
        "bytes_per_rank_mean": float(tokens.sum(axis=2).mean() * token_bytes),
        "busiest_rank_recv_bytes_mean": float(busiest.mean()),
        "bottleneck_bytes_p50": float(np.percentile(bottleneck, 50)),
        "bottleneck_bytes_p99": float(np.percentile(bottleneck, 99)),
        "imbalance_mean": float(per_iter_imb.mean()),
        "imbalance_max": float(per_iter_imb.max()),
        **latency_fields(stats),
        "busiest_rank_gbps": float(busiest.mean() / stats.mean_s / 1e9),
        "corr_imbalance_latency": corr,
        "wrong_ranks": wrong,
    }


def add_dispatch_model(
    rows: list[dict[str, Any]], points: list[tuple[float, float]], world_size: int
) -> LinkFit | None:
    """Fit the link to every dispatch, then predict each skew's P50 and P99 from its bytes.

    ``p99_over_predicted`` near 1 means the tail is the traffic the imbalance puts on
    the busiest rank; well above 1, the tail comes from somewhere else (scheduling,
    contention) and balancing the experts would not remove it.
    """
    try:
        fit = fit_cost_terms(
            [dispatch_cost_terms(b, world_size) for b, _ in points], [t for _, t in points]
        )
    except KvscopeError:
        fit = None
    for r in rows:
        for q in ("p50", "p99"):
            r[f"predicted_{q}_s"] = (
                None
                if fit is None
                else predict_dispatch_time_s(
                    r[f"bottleneck_bytes_{q}"],
                    world_size,
                    fit.link.alpha_s,
                    fit.link.beta_s_per_byte,
                )
            )
        pred = r["predicted_p99_s"]
        r["p99_over_predicted"] = r["lat_p99_s"] / pred if pred else None
    return fit


@dataclass(frozen=True)
class MoeResult:
    config: MoeConfig
    rows: list[dict[str, Any]]
    environment: dict[str, Any]
    fit: LinkFit | None = None
    rank: int = 0  # under torchrun, the rank this process played; only rank 0 has rows

    def summary(self) -> dict[str, Any]:
        return moe_summary(self.config, self.rows, self.environment, self.fit)


def moe_summary(
    config: MoeConfig,
    rows: list[dict[str, Any]],
    env: dict[str, Any],
    fit: LinkFit | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    cfg = dataclasses.asdict(config)
    cfg["skews"] = list(config.skews)
    headline: dict[str, Any] = {}
    if rows:
        worst = max(rows, key=lambda r: r["lat_p99_s"])
        headline = {
            "lat_p99_s_worst": worst["lat_p99_s"],
            "skew_of_worst_p99": worst["skew"],
            "p99_vs_least_skew_max": max(r.get("p99_vs_least_skew") or 1.0 for r in rows),
            "imbalance_max": max(r["imbalance_max"] for r in rows),
        }
    return {
        "status": "error" if error else "ok",
        "error": error,
        "pattern": "moe_dispatch",
        "config": cfg,
        "environment": env,
        "headline": headline,
        "fit": fit_dict(fit),
        "fit_note": "alpha-beta on every timed dispatch: (n-1) steps + the busiest rank's "
        "off-rank bytes",
        "rows": rows,
    }


def run_moe(
    config: MoeConfig,
    out_dir: str | Path | None = None,
    progress: ProgressFn | None = None,
    *,
    force: bool = False,
) -> MoeResult:
    """Measure the dispatch all-to-all at every skew; rows arrive in the run dir as measured
    (an existing run there is refused unless ``force``)."""
    config, env, run_dir = prepare_launch(config, out_dir, force)
    n_iter = config.warmup + config.iters
    plans = [
        dispatch_plan(config.spec(s), config.world_size, n_iter, config.seed)[0]
        for s in config.skews
    ]
    token_bytes = config.hidden * DTYPE_BYTES[config.dtype]
    steps = tuple(
        Step(
            "all_to_all",
            int(p.sum(axis=2).max() * token_bytes),
            config.dtype,
            config.warmup,
            config.iters,
            tokens=p,
            hidden=config.hidden,
        )
        for p in plans
    )
    points: list[tuple[float, float]] = []  # (bottleneck bytes, latency s) per dispatch

    def make_row(index: int, times: np.ndarray, wrong: list[int]) -> dict[str, Any]:
        timed = plans[index][config.warmup :]
        points.extend(
            (bottleneck_tokens(t) * token_bytes, float(lat))
            for t, lat in zip(timed, times.max(axis=0), strict=True)
        )
        return skew_row(config, config.skews[index], timed, times, wrong)

    rows, rank = measure_steps(
        config,
        steps,
        run_dir,
        progress,
        make_row,
        lambda done, message: moe_summary(config, done, env, None, message),
    )
    if rows:
        base = min(rows, key=lambda r: r["skew"])["lat_p99_s"]
        for r in rows:
            r["p99_vs_least_skew"] = r["lat_p99_s"] / base if base > 0 else None
    fit = add_dispatch_model(rows, points, config.world_size)
    result = MoeResult(config, rows, env, fit, rank)
    if run_dir is not None:
        run_dir.finish(rows, result.summary())
    return result
