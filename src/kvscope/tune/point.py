"""One tune point in a worker: simulate a configuration on a slice of the workload.

:func:`simulate_point` is the executor's job function (top level, so a process pool or Ray
can ship it by reference). The slice is the first ``requests`` requests, sped up by
``factor``. With ``max_rate`` the point searches the highest factor whose run meets every
SLO: the factor doubles from ``factor`` until a run misses, then bisects until the bracket is
within ``tolerance`` (relative) or ``max_probes`` runs were spent, stopping early when even a
sixteenth of the start misses -- the shape of ``bench --find-max-rate``
(:mod:`kvscope.bench.search`) over simulated runs. The run directory kept is the fastest
passing probe's (else the last probe's). A configuration the engine would refuse (the exact
budget, :func:`kvscope.sim.deployment.replica_pools`) is a failed point with its reason, not
an error of the whole job.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.executor.store import PointResult
from kvscope.fleet import FleetConfig, simulate
from kvscope.sim.run import SimConfig, SimResult
from kvscope.workload import Workload

#: Figures that depend on the machine's speed, left out of tables that must be identical.
TIMING_KEYS = ("wall_s", "cpu_s", "speedup_vs_real_time")
#: The lowest factor a max-rate search tries, relative to its start.
MIN_FACTOR_SHARE = 1 / 16


@dataclass(frozen=True)
class PointJob:
    """A point's work: ``cfg`` on the first ``requests`` requests sped up by ``factor``;
    ``slo`` maps summary keys (``ttft_p99_s``) to limits in seconds."""

    cfg: SimConfig | FleetConfig
    requests: int
    factor: float
    slo: tuple[tuple[str, float], ...]
    max_rate: bool = False
    tolerance: float = 0.05
    max_probes: int = 8
    max_factor: float = 1024.0


def slo_check(figures: Mapping[str, Any], slo: Mapping[str, float]) -> tuple[bool, float]:
    """(every SLO met and nothing rejected, the worst value / limit ratio; inf if missing)."""
    worst = 0.0
    for key, limit in slo.items():
        v = figures.get(key)
        ratio = v / limit if isinstance(v, int | float) and math.isfinite(v) else math.inf
        worst = max(worst, ratio)
    rejected = int(figures.get("rejected") or 0)
    return worst <= 1.0 and rejected == 0 and figures.get("completed", 0) > 0, worst


def _run(w: Workload, cfg: SimConfig | FleetConfig) -> SimResult:
    res: SimResult = simulate(w, cfg)
    return res


def _result(res: SimResult, w: Workload, extra: Mapping[str, Any]) -> PointResult:
    cfg = {**asdict(res.config), "pool": res.pool_info, "workload": dict(w.spec)}
    figures = {**res.figures, **extra, "offered_rate_per_s": w.mean_rate_per_s}
    return PointResult(cfg, figures, {"requests": res.requests, "steps": res.steps})


def _failed(cfg: SimConfig | FleetConfig, err: KvscopeError) -> PointResult:
    return PointResult(asdict(cfg), {"status": "failed", "error": err.one_line()})


def simulate_point(job: PointJob, workload: Workload) -> PointResult:
    """The executor's function: one configuration, one slice (and with ``max_rate`` the
    probes of its bisection)."""
    base = workload.limit(job.requests) if job.requests < len(workload) else workload
    slo = dict(job.slo)
    try:
        if not job.max_rate:
            w = base.speedup(job.factor) if job.factor != 1 else base
            res = _run(w, job.cfg)
            met, worst = slo_check(res.figures, slo)
            return _result(res, w, {"status": "ok", "slo_met": met, "slo_excess": worst})
        return _max_rate(job, base, slo)
    except KvscopeError as err:
        return _failed(job.cfg, err)


def _max_rate(job: PointJob, base: Workload, slo: dict[str, float]) -> PointResult:
    start = job.factor
    low, high = 0.0, math.inf
    f = start
    probes: list[dict[str, Any]] = []
    best: tuple[SimResult, Workload] | None = None
    last: tuple[SimResult, Workload] | None = None
    stopped = ""
    for _ in range(job.max_probes):
        w = base.speedup(f)
        res = _run(w, job.cfg)
        met, worst = slo_check(res.figures, slo)
        probes.append(
            {
                "factor": f,
                "rate_per_s": w.mean_rate_per_s,
                "ttft_p99_s": res.figures.get("ttft_p99_s"),
                "tpot_p99_s": res.figures.get("tpot_p99_s"),
                "slo_excess": worst,
                "verdict": "pass" if met else "slo-missed",
            }
        )
        last = (res, w)
        if met:
            low, best = f, (res, w)
        else:
            high = f
        if math.isinf(high):
            if f >= job.max_factor:
                stopped = f"passed up to {job.max_factor:g}x the workload's rate"
                break
            f = min(f * 2, job.max_factor)
        else:
            if low > 0 and high - low <= job.tolerance * high:
                break
            if low == 0 and high / 2 < start * MIN_FACTOR_SHARE:
                stopped = f"no rate down to {high / start:g}x the start met the SLO"
                break
            f = (low + high) / 2 if low > 0 else high / 2
    res, w = best or last  # type: ignore[misc]
    rate = base.mean_rate_per_s
    extra = {
        "status": "ok",
        "slo_met": best is not None,
        "slo_excess": min(p["slo_excess"] for p in probes),
        "max_rate_factor": low if best is not None else 0.0,
        "max_rate_per_s": low * rate if best is not None else 0.0,
        "bracket_factor": [low, None if math.isinf(high) else high],
        "probes": probes,
        "stopped": stopped,
    }
    return _result(res, w, extra)
