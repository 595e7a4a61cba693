"""Report sections: each turns loaded runs into HTML with Vega-Lite charts.

Sections look for the columns they know and skip the rest, so later versions of a table
still render. A column that is not numeric, or holds no finite value (a gauge the server
never exported), is skipped like a missing one. Every axis title carries its unit. Each
chart holds one metric with one line per run (colours from the page's palette), so no chart
carries more series than there are runs.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from kvscope.report.charts import Line, Palette, cdf, line_chart
from kvscope.report.headline import kv_peak, plain
from kvscope.report.loader import KV_GAUGES, LoadedRun
from kvscope.report.vega import chart_div

LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "E2E"))
SLO_KEYS = {
    "ttft_s": ("ttft_p99_s", "ttft_s", "ttft"),
    "tpot_s": ("tpot_p99_s", "tpot_s", "tpot"),
    "itl_s": ("itl_p99_s", "itl_s"),
    "e2e_s": ("e2e_p99_s", "e2e_s"),
}
PERCENTILES = (50, 90, 95, 99, 99.9)


def col(table: pa.Table, name: str) -> np.ndarray | None:
    """Column ``name`` as floats (nulls as NaN); None when absent or not numeric."""
    if name not in table.column_names:
        return None
    try:
        return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=float)
    except (TypeError, ValueError, pa.ArrowException):
        return None


def has_data(v: np.ndarray | None) -> bool:
    """Whether ``v`` holds at least one finite value."""
    return v is not None and bool(np.isfinite(v).any())


def esc(v: object) -> str:
    return html.escape(str(v))


def fmt_value(v: object) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "–" if v != v else plain(v)
    if isinstance(v, int):
        return f"{v:,}"
    return esc(v)


def _slo(run: LoadedRun, metric: str) -> tuple[float, str] | None:
    """The run's SLO on ``metric`` as (seconds, rule name), e.g. (0.2, "TTFT P99")."""
    config = run.summary.get("config")
    slo = run.summary.get("slo") or (config.get("slo") if isinstance(config, dict) else None)
    if isinstance(slo, dict):
        for k in SLO_KEYS[metric]:
            v = slo.get(k)
            if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v):
                which = k.split("_")[1].upper() if "_p" in k else "P99"
                return float(v), f"{metric.split('_')[0].upper()} {which}"
    return None


def itl_gaps(run: LoadedRun) -> np.ndarray | None:
    """Gaps between streamed chunks (s) from ``chunks.parquet`` (bench), or None."""
    t = run.tables.get("chunks")
    if t is None or "chunk_times_s" not in t.column_names:
        return None
    try:
        arr = t.column("chunk_times_s").combine_chunks()
        if not pa.types.is_list(arr.type):
            return None
        flat = arr.flatten()
        vals = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=float)
        lens = np.asarray(arr.value_lengths().fill_null(0).to_numpy(), dtype=int)
    except (TypeError, ValueError, pa.ArrowException):
        return None
    if vals.size < 2 or int(lens.sum()) != vals.size:
        return None
    gaps = np.diff(vals)
    keep = np.ones(gaps.size, dtype=bool)
    ends = np.cumsum(lens)[:-1] - 1  # the last chunk of each request but the last one
    keep[ends[(ends >= 0) & (ends < gaps.size)]] = False
    gaps = gaps[keep]
    return gaps[np.isfinite(gaps) & (gaps >= 0)]


def _latencies(run: LoadedRun, metric: str) -> np.ndarray | None:
    if metric == "itl_s":
        return itl_gaps(run)
    t = run.tables.get("requests")
    if t is None:
        return None
    v = col(t, metric)
    if v is None:
        return None
    if "status" in t.column_names:
        ok = np.asarray([x == "ok" for x in t.column("status").to_pylist()], dtype=bool)
        v = v[ok]
    finite: np.ndarray = v[np.isfinite(v)]
    return finite


def latency_section(runs: Sequence[LoadedRun], palette: Palette) -> str:
    """Latency CDFs (one line per run) with SLO lines, and a percentile table in ms."""
    with_req = [r for r in runs if "requests" in r.tables]
    if not with_req:
        return ""
    out = ["<h2>Request latency</h2>"]
    rows = []
    for metric, name in LATENCIES:
        lines = []
        found = [(r, v) for r in with_req if (v := _latencies(r, metric)) is not None and v.size]
        if not found:
            continue
        # milliseconds, unless the slowest run's values reach 10 s (a queue): then seconds
        scale, unit = (1.0, "s") if max(float(v.max()) for _, v in found) >= 10 else (1e3, "ms")
        for r, v in found:
            x, y = cdf(v)
            n = x.size
            keep = np.unique(
                np.concatenate([np.linspace(0, n - 1, min(n, 500)), np.arange(max(0, n - 100), n)])
            ).astype(int)  # thinned evenly, and the slowest 100 kept: the tail is the story
            lines.append(Line(r.label, x[keep] * scale, y[keep] * 100))
            q = np.percentile(x, PERCENTILES) * 1e3
            rows.append((name, r.label, int(n), *q, float(x.mean() * 1e3)))
        slo = _slo(with_req[0], metric)
        rules = [(slo[0] * scale, f"SLO {slo[1]} {plain(slo[0] * scale)} {unit}")] if slo else []
        title = f"{name} distribution"
        spec = line_chart(
            title,
            f"{name} ({unit})",
            "requests at or below (%)",
            lines,
            palette,
            zoom=True,
            rules_x=rules,
            zero=True,
            y_log=False,
        )
        out.append(chart_div(spec, title))
    if rows:
        head = "".join(f"<th>P{plain(p)} (ms)</th>" for p in PERCENTILES)
        out.append(
            f'<table class="pct"><tr><th>metric</th><th>run</th><th>n</th>{head}'
            "<th>mean (ms)</th></tr>"
        )
        out.extend(
            "<tr>" + "".join(f"<td>{fmt_value(c)}</td>" for c in row) + "</tr>" for row in rows
        )
        out.append("</table>")
    return "".join(out)


@dataclass(frozen=True)
class Metric:
    """One time-series chart: its title, y title and the column names that carry it."""

    title: str
    y_title: str
    names: tuple[str, ...]
    how: str = ""  # "", "pct", "cumsum", "per_step", "gib", "ms"


#: Time-series columns plotted when present: one chart per metric, one line per run.
METRICS: tuple[Metric, ...] = (
    Metric("KV cache usage", "KV usage (% of capacity)", KV_GAUGES, "pct"),
    Metric("Requests running", "requests", ("running", "num_running", "requests_running")),
    Metric("Requests waiting", "requests", ("waiting", "num_waiting", "requests_waiting")),
    Metric(
        "Preemptions",
        "preemptions (cumulative)",
        ("preemptions", "preemptions_total", "num_preemptions_total"),
        "cumsum",
    ),
    Metric(
        "Prefix-cache hits",
        "cached prompt tokens (cumulative)",
        ("prefix_hit_tokens", "prefix_hits", "prefix_cache_hits_total"),
        "cumsum",
    ),
    Metric("Batch: tokens per step", "tokens per engine step", ("batch_tokens",), "per_step"),
    Metric(
        "Prefill tokens per step", "prompt tokens per engine step", ("prefill_tokens",), "per_step"
    ),
    Metric(
        "Decode tokens per step", "output tokens per engine step", ("decode_tokens",), "per_step"
    ),
    Metric("Step time", "mean step time (ms)", ("step_time_s",), "ms"),
    Metric("KV blocks used", "blocks", ("kv_blocks_used", "blocks_used")),
    Metric("KV blocks cached (free, reusable)", "blocks", ("kv_blocks_cached", "blocks_cached")),
    Metric("Blocks resident (KV events)", "blocks", ("kv_events_resident_blocks",)),
    Metric("Internal waste", "tokens in partially filled blocks", ("internal_waste_tokens",)),
    Metric(
        "Fragmentation",
        "external fragmentation (fraction)",
        ("fragmentation", "external_fragmentation"),
    ),
    Metric("GPU memory", "memory (GiB)", ("gpu_memory_used_bytes", "memory_used_bytes"), "gib"),
    Metric(
        "Generation throughput (server)",
        "output tokens per s",
        ("generation_tokens_per_second",),
    ),
)
#: Columns that count events per sample interval (the simulator's ``steps`` table).
PER_INTERVAL_COUNTS = frozenset({"preemptions", "prefix_hit_tokens", "prefix_hits"})


def _series(t: pa.Table, metric: Metric) -> list[tuple[str, np.ndarray]]:
    """``(source prefix, values)`` of the columns of ``t`` carrying ``metric``."""
    out = []
    for column, n in _columns_named(t.column_names, metric.names):
        y = col(t, column)
        if y is None or int(np.isfinite(y).sum()) < 2:
            continue  # e.g. a gauge this server does not export: all null (or one value)
        if metric.how == "per_step":
            steps = col(t, "steps")
            if steps is None:
                continue  # the sum over a sample is not a per-step figure: show nothing
            with np.errstate(invalid="ignore", divide="ignore"):
                y = np.where(steps > 0, y / steps, np.nan)
        elif metric.how == "cumsum" and n in PER_INTERVAL_COUNTS:
            y = np.cumsum(np.nan_to_num(y))
        elif metric.how == "pct":
            y = y if n.endswith("_perc") or np.nanmax(y, initial=0) > 1.0 else y * 100
        elif metric.how == "gib":
            y = y / 2**30
        elif metric.how == "ms":
            y = y * 1e3
        out.append((column.rsplit("/", 1)[0] if "/" in column else "", y))
    return out[:5]


def timeseries_section(runs: Sequence[LoadedRun], table: str, palette: Palette) -> str:
    """Known time-series columns of ``steps``/``server`` tables, one chart per metric."""
    have = [r for r in runs if table in r.tables and has_data(col(r.tables[table], "t_s"))]
    if not have:
        return ""
    what = "simulated engine" if table == "steps" else "server metrics"
    out = [f"<h2>Over time ({what})</h2>"]
    for m in METRICS:
        lines, marks, notes = [], [], []
        for r in have:
            t = r.tables[table]
            x = col(t, "t_s")
            assert x is not None
            x = x - np.nanmin(x) if np.nanmin(x) > 1e8 else x  # unix time: from the start
            found = _series(t, m)
            for source, y in found:
                name = r.label if len(found) == 1 else f"{r.label} {source}"
                lines.append(Line(name, x, y))
            if m.how == "pct" and found:
                p = kv_peak(r)
                if p is not None:
                    frac, at = p
                    when = f" at {plain(at)} s" if at is not None else ""
                    notes.append(f"{r.label}: peak {plain(frac * 100)}%{when}")
                    if at is not None:
                        marks.append((at, frac * 100, notes[-1]))
        if not lines:
            continue
        rules_y = []
        if m.how == "per_step" and m.names[0] == "batch_tokens":
            budgets = {_budget(r) for r in have} - {None}
            if len(budgets) == 1:
                b = budgets.pop()
                assert b is not None
                rules_y.append((b, f"--max-num-batched-tokens {b:,.0f}"))
        spec = line_chart(
            m.title,
            "time since start (s)",
            m.y_title,
            lines,
            palette.extended([ln.name for ln in lines]),
            step=True,
            x_log=False,
            y_log=False,
            marks=marks,
            rules_y=rules_y,
            subtitle=notes,
        )
        out.append(chart_div(spec, m.title))
    return "".join(out) if len(out) > 1 else ""


def _budget(run: LoadedRun) -> float | None:
    cfg: Any = run.summary.get("config")
    v = cfg.get("max_num_batched_tokens") if isinstance(cfg, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


def _columns_named(columns: Sequence[str], names: Sequence[str]) -> list[tuple[str, str]]:
    """``(column, base name)`` for each column whose name, or the part after its source
    prefix (``watch`` writes ``engine:host:port/kv_cache_usage_ratio``), is in ``names``."""
    out = []
    for n in names:
        for c in columns:
            if c == n or c.rsplit("/", 1)[-1] == n:
                out.append((c, n))
    return out


def problems_section(runs: Sequence[LoadedRun]) -> str:
    items = [f"<li><b>{esc(r.label)}</b>: {esc(p)}</li>" for r in runs for p in r.problems]
    return (
        f'<div class="problems"><h2>Missing or partial</h2><ul>{"".join(items)}</ul></div>'
        if items
        else ""
    )


def config_section(runs: Sequence[LoadedRun]) -> str:
    """Each run's configuration as JSON; credentials (an API key or a URL password a run
    directory should not hold, but an older or foreign one might) are masked."""
    import json

    from kvscope.redact import redact_text

    blocks = []
    for r in runs:
        cfg: Any = r.summary.get("config")
        if cfg:
            text = redact_text(json.dumps(cfg, indent=2)[:20000]) or ""
            blocks.append(
                f"<details><summary>{esc(r.label)}: configuration</summary><pre>"
                f"{esc(text)}</pre></details>"
            )
    return "".join(blocks)
