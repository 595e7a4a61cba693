"""A bench run's headline figures: latency percentiles, errors, client health, SLOs.

Definitions (vLLM's benchmark, vllm/benchmarks/serve.py, is the reference):
TTFT = first chunk with text − arrival (the scheduled release, so client queueing under a
concurrency cap counts, as it would for a user); TPOT = (end − first token) / (output tokens −
1), per request; ITL = every gap between consecutive chunks of a successful request; E2E =
end − arrival. Statistics use only ``ok`` requests of the measured window (after warm-up,
before cool-down); errors are counted by class apart from them. Goodput is DistServe's
(Zhong et al., OSDI 2024): completed requests per second meeting every per-request SLO.

Client health: ``scheduled_request_rate_per_s`` and ``achieved_request_rate_per_s`` use the
same estimator ((n − 1) / span) over scheduled and actual release times; ``dispatch_lag_*``
are percentiles of send − target (the moment the request went to the connection pool).
The client is flagged as the limit when the achieved rate falls more than 1 % short of the
scheduled one or the P99 dispatch lag exceeds 5 ms. ``requested_request_rate_per_s`` is the
rate the user asked for (``poisson:rate=20`` is 20/s) when the arrival process has one, else
the scheduled rate: a Poisson schedule of 53 requests drawn at 20/s may span 18.5/s, and
that is sampling, not the client falling short.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from kvscope.errors import KvscopeError
from kvscope.results import latency_summary, percentiles
from kvscope.results.stats import DEFAULT_QUANTILES

#: The client is called the bottleneck past these (the acceptance bar of issue 6): more than
#: 1 % of releases later than 5 ms (P99 over the limit) -- and more than one of them, since in a
#: short probe (a few dozen requests) the P99 is the single worst release, one scheduler
#: hiccup of the host rather than a client that cannot keep up.
RATE_SHORTFALL_FRAC = 0.01
DISPATCH_LAG_P99_LIMIT_S = 0.005

_SLO_KEY = re.compile(r"^(ttft|tpot|itl|e2e)_p(\d+(?:\.\d+)?)$")


def parse_slo(text: str | None) -> dict[str, float]:
    """``ttft_p99=0.5,tpot_p99=50ms`` -> ``{"ttft_p99_s": 0.5, "tpot_p99_s": 0.05}``."""
    if not text:
        return {}
    out: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, val = part.partition("=")
        key, val = key.strip().lower(), val.strip().lower()
        m = _SLO_KEY.match(key)
        if not sep or not m:
            raise KvscopeError(
                f"--slo: '{part.strip()}' is not METRIC_pNN=SECONDS.",
                hint="e.g. --slo ttft_p99=0.5,tpot_p99=50ms (metrics: ttft, tpot, itl, e2e).",
            )
        scale = 1.0
        if val.endswith("ms"):
            val, scale = val[:-2], 1e-3
        elif val.endswith("s"):
            val = val[:-1]
        try:
            seconds = float(val) * scale
        except ValueError:
            raise KvscopeError(f"--slo: '{part.strip()}' has no number of seconds.") from None
        if not (math.isfinite(seconds) and seconds > 0):  # inf would be written as Infinity
            raise KvscopeError(f"--slo: '{part.strip()}' must be a positive time.")
        if float(m.group(2)) not in DEFAULT_QUANTILES:
            # any other percentile is not in the summary, so the SLO could never be met
            known = ", ".join(f"p{q:g}" for q in DEFAULT_QUANTILES)
            raise KvscopeError(f"--slo: '{part.strip()}': the summary reports {known}.")
        q = f"{float(m.group(2)):g}".replace(".", "")  # p99.0 is p99
        out[f"{m.group(1)}_p{q}_s"] = seconds
    return out


def asked_rate_of(spec: Mapping[str, Any]) -> float | None:
    """The request rate (req/s) a workload's arrival flags ask for, or None when they name
    none (a trace's own times, a time-varying shape, a closed loop).

    ``poisson:rate=R``, ``gamma:rate=R,...`` and ``constant:rate=R`` ask for R, a sum of them
    for the sum; ``--speedup`` multiplies a synthetic schedule (a re-timed trace's arrivals
    are drawn after the speed-up, so it does not change them).
    """
    from kvscope.workload import arrivals as A
    from kvscope.workload.spec import parse_arrival

    arrival = spec.get("arrival")
    if not isinstance(arrival, str) or spec.get("closed_loop"):
        return None
    try:
        proc = parse_arrival(arrival)
    except KvscopeError:
        return None
    parts = proc.parts if isinstance(proc, A.Sum) else (proc,)
    if not all(isinstance(p, A.Constant | A.Renewal) for p in parts):
        return None
    rate = float(sum(p.rate for p in parts))  # type: ignore[union-attr]
    speedup = spec.get("speedup")
    if spec.get("source") == "synthetic" and isinstance(speedup, int | float) and speedup > 0:
        rate *= float(speedup)
    return rate


def _rate(times: np.ndarray) -> float:
    t = np.sort(times[np.isfinite(times)])
    if t.size < 2 or t[-1] <= t[0]:
        return float("nan")
    return float((t.size - 1) / (t[-1] - t[0]))


def _col(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def summarize(
    rows: Sequence[Mapping[str, Any]],
    schema: pa.Schema,
    itl_gaps: Sequence[float],
    *,
    open_loop: bool,
    capped: bool,
    slo: Mapping[str, float],
    max_error_rate: float,
    asked_rate: float | None = None,
) -> dict[str, Any]:
    """Figures for ``summary.json`` from the completed rows; ``asked_rate`` is the request
    rate the arrival flags asked for (req/s), when they name one (:func:`asked_rate_of`)."""
    table = pa.Table.from_pylist(list(rows), schema=schema)
    phase = np.asarray(table.column("phase").to_pylist(), dtype=object)
    measured = table.filter(pa.array(phase == "measure"))
    figures: dict[str, Any] = {
        "requests_total": table.num_rows,
        "requests_warmup": int((phase == "warmup").sum()),
        "requests_cooldown": int((phase == "cooldown").sum()),
    }
    released = _col(measured, "released_s")
    ends = _col(measured, "finish_s")
    window = (
        float(np.nanmax(ends) - np.nanmin(released))
        if measured.num_rows and np.isfinite(ends).any()
        else 0.0
    )
    per_request = {k.split("_p")[0] + "_s": v for k, v in slo.items() if not k.startswith("itl")}
    base = latency_summary(measured, per_request or None, window if window > 0 else None)
    figures.update(base)
    for k, v in percentiles(np.asarray(itl_gaps, dtype=np.float64)).items():
        if k != "count":
            figures[f"itl_{k}_s"] = v
    figures["itl_gaps"] = len(itl_gaps)

    kinds = Counter(str(k) for k in table.column("error_kind").to_pylist() if k)
    statuses = Counter(measured.column("status").to_pylist())
    figures["errors_by_kind"] = dict(sorted(kinds.items()))
    http = Counter(
        int(c)
        for c, k in zip(
            table.column("http_status").to_pylist(),
            table.column("error_kind").to_pylist(),
            strict=True,
        )
        if k == "http_status"
    )
    figures["errors_by_http_status"] = {str(k): v for k, v in sorted(http.items())}
    # runs written before the column existed have no resends
    resends = table.column("resends").to_pylist() if "resends" in table.column_names else []
    figures["resends"] = int(sum(r or 0 for r in resends))
    n_meas = measured.num_rows
    figures["error_rate"] = statuses.get("error", 0) / n_meas if n_meas else 0.0
    figures["max_error_rate"] = max_error_rate
    figures["error_rate_exceeded"] = figures["error_rate"] > max_error_rate

    # client health
    sched = _col(measured, "arrival_s")
    lag = _col(measured, "dispatch_lag_s")
    requested = _rate(sched) if open_loop else float("nan")
    achieved = _rate(released)
    asked = asked_rate if open_loop and asked_rate is not None else requested
    figures["requested_request_rate_per_s"] = asked
    figures["scheduled_request_rate_per_s"] = requested
    figures["achieved_request_rate_per_s"] = achieved
    for k, v in percentiles(lag, (50.0, 90.0, 99.0, 99.9)).items():
        if k != "count":
            figures[f"dispatch_lag_{k}_s"] = v
    send_gap = _col(measured, "sent_s") - released
    figures["send_overhead_p99_s"] = percentiles(send_gap, (99.0,))["p99"]
    if capped:
        figures["cap_delay_max_s"] = float(np.nanmax(_col(measured, "cap_delay_s"), initial=0.0))
    warnings: list[str] = []
    if open_loop and np.isfinite(requested) and np.isfinite(achieved):
        short = 1 - achieved / requested
        lag99 = figures["dispatch_lag_p99_s"]
        late = int(np.sum(lag > DISPATCH_LAG_P99_LIMIT_S))
        lag_limited = late > max(1.0, 0.01 * np.count_nonzero(np.isfinite(lag)))
        if capped and short > RATE_SHORTFALL_FRAC:
            warnings.append(
                f"achieved {achieved:.2f} req/s of {requested:.2f} scheduled: the "
                f"--max-concurrency cap held requests back (schedule slid by up to "
                f"{figures['cap_delay_max_s']:.3f} s)"
            )
        elif short > RATE_SHORTFALL_FRAC or lag_limited:
            warnings.append(
                f"the client limited this run: achieved {achieved:.2f} of {requested:.2f} "
                f"req/s scheduled, P99 dispatch lag {lag99 * 1e3:.1f} ms (limits: 1 %, 5 ms)"
            )
    figures["client_limited"] = bool(warnings) and not capped
    early = kinds.get("early_stop", 0)
    if table.num_rows and early / table.num_rows > 0.1:
        warnings.append(
            f"{early} requests stopped before max_tokens although ignore_eos was asked: the "
            "server may not honour it (their latencies are left out; try --no-ignore-eos)"
        )
    # prompt length accuracy (target vs the server's usage.prompt_tokens)
    usage = _col(measured, "usage_prompt_tokens")
    target = _col(measured, "target_prompt_tokens")
    have = usage >= 0
    if have.any():
        diff = usage[have] - target[have]
        rel = diff / np.maximum(target[have], 1)
        figures["prompt_tokens_error"] = {
            "requests_with_usage": int(have.sum()),
            "mean_abs_tokens": float(np.abs(diff).mean()),
            "p50_rel": float(np.percentile(rel, 50)),
            "p99_abs_rel": float(np.percentile(np.abs(rel), 99)),
            "exact_share": float((diff == 0).mean()),
        }
    else:
        figures["prompt_tokens_error"] = {"requests_with_usage": 0}
    if slo:
        met = {}
        for key, limit in slo.items():
            value = figures.get(key)
            met[key] = bool(value is not None and np.isfinite(value) and value <= limit)
        figures["slo_met"] = met
        figures["slo_all_met"] = all(met.values())
    figures["warnings"] = warnings
    return figures
