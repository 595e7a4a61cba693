"""The report's fleet section: one row per replica of a ``simulate --replicas/--cluster`` run.

Reads the summary's ``replicas`` list (:mod:`kvscope.fleet.run`): pool, requests routed,
prefix-hit rate, TTFT P50/P99 (s), KV peak (fraction of the replica's blocks), busy seconds;
with autoscaling, the replica-count timeline and replica-seconds.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from kvscope.report.charts import Palette
from kvscope.report.loader import LoadedRun
from kvscope.report.sections import fmt_value

COLUMNS = (
    ("replica", "replica"),
    ("pool", "pool"),
    ("requests", "requests"),
    ("completed", "done"),
    ("prefix_hit_rate", "prefix hit"),
    ("ttft_p50_s", "TTFT p50 s"),
    ("ttft_p99_s", "TTFT p99 s"),
    ("kv_usage_peak_frac", "KV peak"),
    ("preemptions", "preempt"),
    ("busy_s", "busy s"),
)


def _cell(key: str, v: Any) -> str:
    if key in ("prefix_hit_rate", "kv_usage_peak_frac") and isinstance(v, (int, float)):
        return f"{v:.1%}"
    return html.escape(fmt_value(v))


def fleet_section(runs: Sequence[LoadedRun], palette: Palette) -> str:
    """Per-replica tables of the fleet runs among ``runs`` ('' when none is a fleet)."""
    out = []
    for r in runs:
        reps = r.summary.get("replicas")
        if not isinstance(reps, list) or not reps or not isinstance(reps[0], dict):
            continue
        head = "".join(f"<th>{t}</th>" for _k, t in COLUMNS)
        rows = "".join(
            "<tr>" + "".join(f"<td>{_cell(k, x.get(k))}</td>" for k, _t in COLUMNS) + "</tr>"
            for x in reps
        )
        router = html.escape(str(r.summary.get("router", "")))
        note = f'<p class="note">{html.escape(r.label)}: {len(reps)} replicas, router {router}'
        auto = r.summary.get("autoscale")
        if isinstance(auto, dict):
            steps = ", ".join(
                f"{fmt_value(s.get('t_s'))} s: {s.get('replicas')}"
                for s in auto.get("timeline", [])[:20]
            )
            note += f"; replicas over time {html.escape(steps)}; replica-seconds "
            note += html.escape(fmt_value(auto.get("replica_seconds")))
        out.append(f"{note}</p><table><tr>{head}</tr>{rows}</table>")
    return "<h2>Fleet: per replica</h2>" + "".join(out) if out else ""
