"""Percentiles and latency summaries over per-request records.

Percentiles use linear interpolation between order statistics (numpy's default, the same
method vLLM's ``benchmark_serving`` reports). Keys carry units: ``ttft_p99_s``.
Goodput (DistServe, Zhong et al., OSDI 2024) = completed requests per second that meet every
latency SLO.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

DEFAULT_QUANTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


def _qname(q: float) -> str:
    return f"p{q:g}".replace(".", "")  # 99.9 -> p999


def percentiles(
    values: Iterable[float] | np.ndarray, quantiles: Iterable[float] = DEFAULT_QUANTILES
) -> dict[str, float]:
    """``{"p50": .., "p99": .., "mean": .., "max": .., "count": ..}`` over finite values."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    qs = tuple(quantiles)
    if arr.size == 0:
        out = {_qname(q): float("nan") for q in qs}
        out.update(mean=float("nan"), max=float("nan"), count=0.0)
        return out
    vals = np.percentile(arr, qs)
    out = {_qname(q): float(v) for q, v in zip(qs, vals, strict=True)}
    out.update(mean=float(arr.mean()), max=float(arr.max()), count=float(arr.size))
    return out


def _col(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def goodput(table: pa.Table, slo: Mapping[str, float], duration_s: float) -> float:
    """Requests per second that finished ok and met every SLO (``{"ttft_s": 0.5, ...}``)."""
    if duration_s <= 0 or table.num_rows == 0:
        return 0.0
    ok = np.asarray(table.column("status").to_pylist()) == "ok"
    for metric, limit in slo.items():
        vals = _col(table, metric)
        ok &= np.isfinite(vals) & (vals <= limit)
    return float(ok.sum()) / duration_s


def latency_summary(
    table: pa.Table, slo: Mapping[str, float] | None = None, duration_s: float | None = None
) -> dict[str, Any]:
    """Headline figures of a requests table: counts, throughput, latency percentiles."""
    status = np.asarray(table.column("status").to_pylist(), dtype=object)
    ok = status == "ok"
    arrival = _col(table, "arrival_s")
    finish = _col(table, "finish_s")
    if duration_s is None:
        ends = finish[np.isfinite(finish)]
        duration_s = float(ends.max() - arrival.min()) if ends.size and arrival.size else 0.0
    out_tokens = np.asarray(table.column("output_tokens").to_numpy(), dtype=np.float64)
    in_tokens = np.asarray(table.column("prompt_tokens").to_numpy(), dtype=np.float64)
    summary: dict[str, Any] = {
        "requests": int(table.num_rows),
        "completed": int(ok.sum()),
        "errors": int((status == "error").sum()),
        "rejected": int((status == "rejected").sum()),
        "incomplete": int((status == "incomplete").sum()),
        "duration_s": duration_s,
    }
    if duration_s > 0:
        summary["request_throughput_per_s"] = float(ok.sum()) / duration_s
        summary["output_token_throughput_per_s"] = float(out_tokens[ok].sum()) / duration_s
        summary["total_token_throughput_per_s"] = (
            float((out_tokens[ok] + in_tokens[ok]).sum()) / duration_s
        )
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        vals = _col(table, metric)[ok]
        base = metric.removesuffix("_s")
        for k, v in percentiles(vals).items():
            if k != "count":
                summary[f"{base}_{k}_s"] = v
    if slo:
        summary["goodput_per_s"] = goodput(table, slo, duration_s)
        summary["slo"] = dict(slo)
    return summary
