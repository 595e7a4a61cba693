"""Report section of a watch run with KV-cache events: residency, reuse distance, the MRC.

Reads ``summary.json``'s ``kv_events`` (telemetry/kv_events/live.py writes it): the
stored→removed time CDF of blocks (seconds), the prefix stack-distance CDF of prompt blocks
(blocks; first touches never reuse, so the curve ends below 100 %), and the miss-ratio curve
(pool hit rate against pool size in blocks, the pool the stream showed marked). A value
that is not a list of finite number pairs is left out, like a missing one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kvscope.report.charts import Line, Palette, line_chart
from kvscope.report.loader import LoadedRun
from kvscope.report.sections import esc, fmt_value
from kvscope.report.vega import chart_div


def _pairs(v: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``[[x, y], ...]`` as two float arrays, or None when it is anything else."""
    if not isinstance(v, list) or len(v) < 2:
        return None
    try:
        a = np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        return None
    if a.ndim != 2 or a.shape[1] != 2 or not np.isfinite(a).all():
        return None
    return a[:, 0], a[:, 1]


def _events(run: LoadedRun) -> dict[str, Any] | None:
    kv = run.summary.get("kv_events")
    return kv if isinstance(kv, dict) else None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _reuse(kv: dict[str, Any]) -> dict[str, Any]:
    return _dict(kv.get("reuse"))


CHARTS = (
    # title, x title, y title, where the pairs are, y scale
    ("Block residency", "stored → removed (s)", "removed blocks at or below (%)", "res", 1.0),
    (
        "Reuse distance",
        "prefix stack distance (blocks)",
        "prompt blocks at or below (%)",
        "dist",
        1.0,
    ),
    ("Miss-ratio curve", "pool size (blocks)", "prefix-cache hit rate (%)", "mrc", 100.0),
)


def kv_events_section(runs: Sequence[LoadedRun], palette: Palette) -> str:
    have = [(r, kv) for r in runs if (kv := _events(r)) is not None]
    if not have:
        return ""
    out = ["<h2>KV-cache events</h2>"]
    for title, x_title, y_title, what, scale in CHARTS:
        lines, rules = [], []
        for r, kv in have:
            src = {
                "res": kv.get("residency_cdf_s"),
                "dist": _reuse(kv).get("reuse_distance_cdf_blocks"),
                "mrc": _reuse(kv).get("miss_ratio_curve_blocks"),
            }[what]
            xy = _pairs(src)
            if xy is None:
                continue
            lines.append(Line(r.label, xy[0], xy[1] * scale))
            seen = _reuse(kv).get("pool_blocks_seen")
            if what == "mrc" and isinstance(seen, int) and seen > 0 and len(have) == 1:
                rules.append((float(seen), f"pool seen: {seen:,} blocks"))
        if lines:
            spec = line_chart(
                title,
                x_title,
                y_title,
                lines,
                palette,
                step=what != "mrc",
                y_log=False,
                rules_x=rules,
            )
            out.append(chart_div(spec, title))
    rows = []
    for r, kv in have:
        reuse = _reuse(kv)
        curve = _dict(reuse.get("miss_ratio_curve"))
        eps = _dict(kv.get("endpoints"))
        tot = {
            k: sum(v for e in eps.values() if isinstance(v := _dict(e).get(k), int))
            for k in ("events", "lost", "malformed", "restarts")
        }
        rows.append(
            (
                r.label,
                tot["events"],
                tot["lost"],
                tot["malformed"],
                tot["restarts"],
                kv.get("eviction_churn_blocks", "–"),
                reuse.get("engine_hit_rate", float("nan")),
                *(curve.get(k, float("nan")) for k in ("1x", "2x", "4x")),
            )
        )
    head = (
        "run", "events", "lost batches", "malformed", "restarts", "churn blocks",
        "engine hit rate", "MRC 1×", "MRC 2×", "MRC 4×",
    )  # fmt: skip
    out.append(
        '<table class="pct"><tr>'
        + "".join(f"<th>{esc(h)}</th>" for h in head)
        + "</tr>"
        + "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in rows)
        + "</table>"
    )
    return "".join(out)


def _cell(v: Any) -> str:
    if isinstance(v, float) and v == v and 0 <= v <= 1:
        return f"{v:.1%}"
    return fmt_value(v)
