"""Ranking tune points by the objective, and their Pareto front (cost, latency, rate).

Objectives (all under the SLO: a point whose percentiles miss it ranks below every point
that meets it, the closest first, by its worst value / limit ratio):

* ``goodput-per-dollar``: good requests per dollar, ``goodput x 3600 / USD per hour``, where
  goodput counts completed requests per second meeting the per-request TTFT and TPOT targets
  (DistServe, Zhong et al., OSDI 2024; :func:`kvscope.results.stats.goodput`);
* ``max-rate``: the highest request rate meeting the SLO (:mod:`kvscope.tune.point`);
* ``min-gpus``: the fewest GPUs, then the lowest cost, then the highest goodput.

Ties fall to fewer GPUs, then the label, so the same points always rank the same. The
Pareto front is over the points of the last rung: no other point is at most as costly, at
most as slow (TTFT P99) and at least as fast (rate), and better in one of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

OBJECTIVES = ("goodput-per-dollar", "max-rate", "min-gpus")


def _num(v: Any, default: float = math.nan) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else default


def rate_of(row: Mapping[str, Any], objective: str) -> float:
    """The rate a point serves: its max rate (``max-rate``), else its goodput (req/s)."""
    key = "max_rate_per_s" if objective == "max-rate" else "goodput_per_s"
    return _num(row.get(key), 0.0)


def score(row: Mapping[str, Any], objective: str) -> float:
    """The objective's figure of a point (higher is better; ``min-gpus``: minus GPUs)."""
    if objective == "goodput-per-dollar":
        usd = _num(row.get("usd_per_hour"))
        return rate_of(row, objective) * 3600.0 / usd if usd > 0 else 0.0
    if objective == "max-rate":
        return rate_of(row, objective)
    return -float(row.get("num_gpus") or 0)


def _key(row: Mapping[str, Any], objective: str) -> tuple[Any, ...]:
    failed = row.get("status") != "ok"
    met = bool(row.get("slo_met"))
    excess = _num(row.get("slo_excess"), math.inf)
    usd = _num(row.get("usd_per_hour"), math.inf)
    gpus = int(row.get("num_gpus") or 0)
    s = score(row, objective)
    if objective == "min-gpus":
        inner: tuple[Any, ...] = (gpus, usd, -rate_of(row, objective))
    elif objective == "max-rate":
        inner = (-s, usd, gpus)
    else:
        inner = (-s, -rate_of(row, objective), gpus)
    return (
        failed,
        -int(row.get("requests_simulated") or 0),
        not met,
        inner if met else (excess,),
        row.get("label", ""),
    )


def rank(rows: Sequence[Mapping[str, Any]], objective: str) -> list[dict[str, Any]]:
    """Rows best first (points simulated on more requests before those cut earlier), each
    with its ``rank`` (from 1) and ``score``."""
    out = [dict(r) for r in sorted(rows, key=lambda r: _key(r, objective))]
    for i, r in enumerate(out, 1):
        r["rank"] = i
        r["score"] = score(r, objective) if r.get("status") == "ok" else None
    return out


def pareto(rows: Sequence[Mapping[str, Any]], objective: str) -> list[str]:
    """Keys of the non-dominated points: cost down, TTFT P99 down, rate up."""
    ok = [r for r in rows if r.get("status") == "ok"]
    vals = [
        (
            _num(r.get("usd_per_hour"), math.inf),
            _num(r.get("ttft_p99_s"), math.inf),
            -rate_of(r, objective),
        )
        for r in ok
    ]
    front = []
    for i, a in enumerate(vals):
        dominated = any(
            all(b[k] <= a[k] for k in range(3)) and any(b[k] < a[k] for k in range(3))
            for j, b in enumerate(vals)
            if j != i
        )
        if not dominated:
            front.append(str(ok[i]["key"]))
    return front
