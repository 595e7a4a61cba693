"""Successive halving over tune points: a short slice for all, the whole workload for the best.

Rung sizes grow by ``eta`` up to the whole workload (1,000 requests, ``eta`` 3, at least 100
a rung: 111, 333, 1,000). Every point runs on the first rung; after each rung the points are
ranked by the objective (:mod:`kvscope.tune.rank`) and the best ``1/eta`` (at least
:data:`MIN_KEEP`) go on to the next, with half as many more that have the most SLO headroom
(``slo_excess``: a short slice flatters cheap points whose queue only builds on the whole
workload, so the best by the objective alone can all miss at the end) and vLLM's defaults
always among them, so the winner is compared with them on the whole workload. With
``max-rate`` each point's search starts at the rate its previous rung found. Each rung is one
batch for the executor (:func:`kvscope.executor.run_points`), which skips points a previous
run already saved; a deadline (``--max-time``) ends the search after the rung it falls in,
with the points finished so far.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kvscope.executor import Backend, PointStore, PointTask, run_points
from kvscope.fleet import FleetConfig, single_pool
from kvscope.sim.run import SimConfig
from kvscope.tune.point import PointJob, simulate_point
from kvscope.tune.rank import rank, score
from kvscope.tune.space import Point
from kvscope.workload import Workload

#: Points kept after every rung, at least (so the last rung still compares some).
MIN_KEEP = 3
#: Summary figures a ranked row carries (the point's run directory has them all).
ROW_FIGURES = (
    "status",
    "error",
    "requests",
    "completed",
    "rejected",
    "goodput_per_s",
    "request_throughput_per_s",
    "output_token_throughput_per_s",
    "offered_rate_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p99_s",
    "preemptions",
    "kv_usage_peak_frac",
    "prefix_hit_rate",
    "slo_met",
    "slo_excess",
    "max_rate_per_s",
    "max_rate_factor",
)


@dataclass(frozen=True)
class Candidate:
    """A point to tune, its simulator config, its price and whether it is the defaults."""

    point: Point
    cfg: SimConfig
    usd_per_hour: float
    is_default: bool = False

    @property
    def label(self) -> str:
        text = self.point.label()
        return f"{text} (defaults)" if self.is_default else text

    def job_cfg(self) -> SimConfig | FleetConfig:
        """What a point simulates: one engine, or its replicas behind its router."""
        if self.point.replicas == 1:
            return self.cfg
        return single_pool(self.cfg, self.point.replicas, router=self.point.router or "round-robin")


@dataclass(frozen=True)
class Settings:
    """How the search runs: the objective, the SLO, the halving schedule, bisection."""

    objective: str
    slo: tuple[tuple[str, float], ...]
    eta: int = 3
    min_requests: int = 100
    tolerance: float = 0.05
    max_probes: int = 8


def rung_sizes(n: int, eta: int, min_requests: int) -> list[int]:
    """Request counts of the rungs, smallest first, the last ``n``."""
    sizes = [n]
    if eta > 1:
        while math.ceil(sizes[-1] / eta) >= min_requests:
            sizes.append(math.ceil(sizes[-1] / eta))
    return sizes[::-1]


def point_key(job: PointJob) -> str:
    """A folder name that changes with anything that changes the point's figures."""
    doc = {"cfg": asdict(job.cfg), "job": {k: v for k, v in asdict(job).items() if k != "cfg"}}
    digest = hashlib.sha1(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
    return f"n{job.requests:07d}-{digest[:12]}"


def _row(c: Candidate, key: str, figures: Mapping[str, Any], rung: int) -> dict[str, Any]:
    row: dict[str, Any] = {
        "key": key,
        "label": c.label,
        "default": c.is_default,
        "rung": rung,
        "requests_simulated": figures.get("requests") or 0,
        "num_gpus": c.point.num_gpus,
        "usd_per_hour": c.usd_per_hour,
        "flags": {
            k: v
            for k, v in asdict(c.point).items()
            if k not in ("replicas", "router") or c.point.replicas > 1
        },
        "run_dir": f"points/{key}",
    }
    row.update({k: figures.get(k) for k in ROW_FIGURES if k in figures})
    return row


def halving(
    cands: Sequence[Candidate],
    workload: Workload,
    settings: Settings,
    store: PointStore,
    backend: Backend,
    *,
    deadline: float | None = None,
    on_stage: Callable[[str, int], None] | None = None,
    on_point: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run the schedule; every candidate's row from the last rung it reached, unranked."""
    sizes = rung_sizes(len(workload), settings.eta, settings.min_requests)
    alive = list(cands)
    latest: dict[int, dict[str, Any]] = {}  # candidate index -> its latest row
    factor = {i: 1.0 for i in range(len(cands))}
    index = {id(c): i for i, c in enumerate(cands)}
    max_rate = settings.objective == "max-rate"
    for r, n in enumerate(sizes):
        tasks, owner = [], {}
        for c in alive:
            i = index[id(c)]
            job = PointJob(
                c.job_cfg(),
                n,
                factor[i],
                settings.slo,
                max_rate,
                settings.tolerance,
                settings.max_probes,
            )
            key = point_key(job)
            if key in owner:
                continue  # the same configuration twice (the defaults, listed in the space)
            owner[key] = i
            tasks.append(PointTask(key, job, c.label))
        if on_stage:
            on_stage(f"rung {r + 1}/{len(sizes)}: {n:,} requests", len(tasks))

        def done(
            task: PointTask,
            figures: dict[str, Any],
            resumed: bool,
            rung: int = r,
            owner: dict[str, int] = owner,
        ) -> None:
            i = owner[task.key]
            latest[i] = _row(cands[i], task.key, figures, rung)
            if on_point:
                on_point(latest[i])

        run_points(simulate_point, tasks, workload, store, backend, on_done=done, deadline=deadline)
        if r == len(sizes) - 1 or (deadline is not None and time.monotonic() >= deadline):
            break
        rows = [latest[i] for i in owner.values() if latest.get(i, {}).get("rung") == r]
        ranked = [x for x in rank(rows, settings.objective) if x.get("status") == "ok"]
        keep = max(math.ceil(len(ranked) / settings.eta), MIN_KEEP)
        chosen = {x["key"] for x in ranked[:keep]}
        headroom = sorted(ranked, key=lambda x: _excess(x.get("slo_excess")))
        chosen.update(x["key"] for x in headroom[: max(1, keep // 2)])
        key_of = {i: k for k, i in owner.items()}
        alive = [
            c
            for c in alive
            if (k := key_of.get(index[id(c)])) is not None and (k in chosen or c.is_default)
        ]
        for c in alive:
            i = index[id(c)]
            f = latest[i].get("max_rate_factor")
            if max_rate and isinstance(f, int | float) and f > 0:
                factor[i] = float(f)
    return list(latest.values())


def _excess(v: Any) -> float:
    """A row's worst SLO value / limit (inf when unknown)."""
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else math.inf


def best_text(rows: Sequence[Mapping[str, Any]], objective: str) -> str:
    """``H100x2 tp2 (12.3 good req/$)`` for the progress bar."""
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        return "-"
    top = rank(ok, objective)[0]
    s = score(top, objective)
    unit = {"goodput-per-dollar": " good req/$", "max-rate": " req/s", "min-gpus": " GPUs"}
    shown = -s if objective == "min-gpus" else s
    met = "" if top.get("slo_met") else ", SLO missed"
    return f"{top['label']} ({shown:,.4g}{unit[objective]}{met})"
