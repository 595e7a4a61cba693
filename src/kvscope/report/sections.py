"""Report sections: each turns a loaded run (or several) into HTML with plots.

Sections look for the columns they know and skip the rest, so later versions of a table
still render. A column that is not numeric, or holds no finite value (a gauge the server
never exported), is skipped like a missing one. Every axis title carries its unit.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from kvscope.report.loader import KV_GAUGES, LoadedRun
from kvscope.report.svg import Chart, Series, cdf, render_line

LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
SLO_KEYS = {"ttft_s": ("ttft_s", "ttft"), "tpot_s": ("tpot_s", "tpot"), "e2e_s": ("e2e_s",)}


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
    if isinstance(v, float):
        if v != v:
            return "–"
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return esc(v)


def summary_table(runs: Sequence[LoadedRun]) -> str:
    """Headline figures side by side (scalars only; units are in the key names)."""
    keys: list[str] = []
    for r in runs:
        for k, v in r.summary.items():
            if (
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and k not in keys
                and not k.endswith("_unix_s")
            ):
                keys.append(k)
    if not keys:
        return ""
    head = "".join(f"<th>{esc(r.label)}</th>" for r in runs)
    rows = "".join(
        f"<tr><td>{esc(k)}</td>"
        + "".join(f"<td>{fmt_value(r.summary.get(k, ''))}</td>" for r in runs)
        + "</tr>"
        for k in keys[:80]
    )
    return f'<table class="summary"><tr><th>figure</th>{head}</tr>{rows}</table>'


def _slo(run: LoadedRun, metric: str) -> float | None:
    config = run.summary.get("config")
    slo = run.summary.get("slo") or (config.get("slo") if isinstance(config, dict) else None)
    if isinstance(slo, dict):
        for k in SLO_KEYS[metric]:
            v = slo.get(k)
            if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v):
                return float(v)
    return None


def latency_section(runs: Sequence[LoadedRun]) -> str:
    """Latency CDFs (one line per run) with SLO lines, and a percentile table."""
    with_req = [r for r in runs if "requests" in r.tables]
    if not with_req:
        return ""
    out = ["<h2>Request latency</h2>"]
    rows = []
    for metric, name in LATENCIES:
        series = []
        for r in with_req:
            t = r.tables["requests"]
            v = col(t, metric)
            if v is None:
                continue
            status = t.column("status").to_pylist() if "status" in t.column_names else None
            if status is not None:
                v = v[np.asarray([x == "ok" for x in status], dtype=bool)]
            x, y = cdf(v)
            series.append(Series(r.label, x, y * 100))
            if x.size:
                q = np.percentile(x, [50, 90, 95, 99, 99.9])
                rows.append((name, r.label, int(x.size), *q))
        slo = _slo(with_req[0], metric)
        vlines = ((slo, f"SLO {slo:g} s"),) if slo else ()
        svg = render_line(
            Chart(
                f"{name} distribution",
                f"{name} (s)",
                "requests at or below (%)",
                tuple(series),
                vlines=vlines,
            )
        )
        out.append(svg)
    if rows:
        out.append(
            '<table class="pct"><tr><th>metric</th><th>run</th><th>n</th><th>P50 (s)</th>'
            "<th>P90 (s)</th><th>P95 (s)</th><th>P99 (s)</th><th>P99.9 (s)</th></tr>"
        )
        out.extend(
            "<tr>" + "".join(f"<td>{fmt_value(c)}</td>" for c in row) + "</tr>" for row in rows
        )
        out.append("</table>")
    return "".join(out)


#: Columns that count events per sample interval (the simulator's ``steps`` table); the
#: report shows their running total so they read like engines' ``*_total`` counters.
PER_INTERVAL_COUNTS = frozenset({"preemptions", "prefix_hit_tokens", "prefix_hits"})

#: Time-series columns plotted when present, grouped into charts: (title, y title, columns).
SERIES_CHARTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("KV cache usage", "KV usage (% of capacity)", KV_GAUGES),
    (
        "Requests running and waiting",
        "requests",
        (
            "running",
            "num_running",
            "requests_running",
            "waiting",
            "num_waiting",
            "requests_waiting",
        ),
    ),
    (
        "KV blocks",
        "blocks",
        (
            "kv_blocks_used",
            "kv_blocks_cached",
            "kv_blocks_free",
            "blocks_used",
            "blocks_cached",
            "blocks_free",
        ),
    ),
    (
        "Preemptions",
        "preemptions (cumulative)",
        ("preemptions", "preemptions_total", "num_preemptions_total"),
    ),
    (
        "Prefix-cache hits",
        "cached prompt tokens (cumulative)",
        ("prefix_hit_tokens", "prefix_hits", "prefix_cache_hits_total"),
    ),
    ("Batch", "tokens per step", ("batch_tokens", "prefill_tokens", "decode_tokens")),
    ("Step time", "step time (s)", ("step_time_s",)),
    ("Internal waste", "tokens in partially filled blocks", ("internal_waste_tokens",)),
    (
        "Fragmentation",
        "external fragmentation (fraction)",
        ("fragmentation", "external_fragmentation"),
    ),
    ("GPU memory", "memory (GiB)", ("gpu_memory_used_bytes", "memory_used_bytes")),
)


def timeseries_section(runs: Sequence[LoadedRun], table: str) -> str:
    """Known time-series columns of ``steps``/``server`` tables, one chart per concept."""
    have = [r for r in runs if table in r.tables and "t_s" in r.tables[table].column_names]
    if not have:
        return ""
    out = [f"<h2>Over time ({esc(table)})</h2>"]
    for title, y_title, names in SERIES_CHARTS:
        series, marks = [], []
        for r in have:
            t = r.tables[table]
            x = col(t, "t_s")
            if not has_data(x):
                continue
            assert x is not None
            for column, n in _columns_named(t.column_names, names):
                y = col(t, column)
                if y is None or not has_data(y):
                    continue  # e.g. a gauge this server does not export: all null
                if n.endswith("_bytes"):
                    y = y / 2**30
                if n in PER_INTERVAL_COUNTS:
                    y = np.cumsum(np.nan_to_num(y))  # per-sample counts -> running total
                if title == "KV cache usage" and np.nanmax(y, initial=0) <= 1.0:
                    y = y * 100
                label = column if len(have) == 1 else f"{r.label}: {column}"
                series.append(Series(label, x, y, step=True))
                if title == "KV cache usage" and has_data(y):
                    i = int(np.nanargmax(y))
                    marks.append((float(x[i]), float(y[i]), f"peak {y[i]:.1f}% at {x[i]:.1f} s"))
        if series:
            notes = tuple(m[2] for m in marks)
            out.append(
                render_line(
                    Chart(
                        title,
                        "time since start (s)",
                        y_title,
                        tuple(series),
                        marks=tuple(marks),
                        notes=notes,
                    )
                )
            )
    return "".join(out) if len(out) > 1 else ""


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
