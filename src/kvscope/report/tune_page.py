"""A ``kvscope tune`` folder as a page: the winner and its command, the gain over vLLM's
defaults, every point on cost against rate (the Pareto front marked), the ranked table.

The folder's ``summary.json`` (``"search": "tune"``, :mod:`kvscope.tune.run`) has the
winner, the defaults and the front; ``ranked.json`` every point; the winner's and the
defaults' run directories (``points/<key>/``) are loaded as children, so their latency CDFs
and KV-cache charts are drawn beside each other.
"""

from __future__ import annotations

import json
from typing import Any

from kvscope.report.charts import _base
from kvscope.report.headline import plain, seconds
from kvscope.report.loader import LoadedRun
from kvscope.report.sections import esc
from kvscope.report.vega import chart_div

#: Rows of the ranked table on the page.
TABLE_ROWS = 40


def _ranked(run: LoadedRun) -> list[dict[str, Any]]:
    try:
        data = json.loads((run.path / "ranked.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        run.problems.append("ranked.json is missing or unreadable")
        return []
    return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []


def _rate(r: dict[str, Any], objective: str) -> Any:
    return r.get("max_rate_per_s") if objective == "max-rate" else r.get("goodput_per_s")


def _scatter(rows: list[dict[str, Any]], objective: str) -> str:
    what = "max rate (req/s)" if objective == "max-rate" else "goodput (req/s)"
    data = [
        {
            "usd": r["usd_per_hour"],
            "rate": _rate(r, objective),
            "label": r["label"],
            "ttft_p99_ms": (r.get("ttft_p99_s") or 0) * 1e3,
            "kind": "Pareto front"
            if r.get("pareto")
            else ("meets SLO" if r.get("slo_met") else "misses SLO"),
        }
        for r in rows
        if r.get("status") == "ok" and isinstance(_rate(r, objective), int | float)
    ]
    if not data:
        return ""
    spec = _base(f"Cost against {what}, points of the last rung")
    spec.update(
        data={"values": data},
        mark={"type": "point", "filled": True, "size": 60},
        encoding={
            "x": {"field": "usd", "type": "quantitative", "title": "USD per hour"},
            "y": {"field": "rate", "type": "quantitative", "title": what},
            "color": {"field": "kind", "type": "nominal", "title": None},
            "tooltip": [
                {"field": "label"},
                {"field": "usd", "title": "USD/h"},
                {"field": "rate", "title": what},
                {"field": "ttft_p99_ms", "title": "TTFT P99 (ms)", "format": ".0f"},
            ],
        },
    )
    return chart_div(spec, "Cost against rate")


def _confirm(c: Any) -> str:
    """The winner measured live (``--confirm``) beside its simulated figures."""
    if not isinstance(c, dict):
        return ""
    raw_sim, raw_live = c.get("simulated"), c.get("measured")
    sim: dict[str, Any] = raw_sim if isinstance(raw_sim, dict) else {}
    live: dict[str, Any] = raw_live if isinstance(raw_live, dict) else {}
    rows = []
    for key in sim:
        a, b = sim.get(key), live.get(key)
        fmt = seconds if key.endswith("_s") else plain
        rows.append(
            f"<tr><td>{esc(key)}</td><td>{fmt(a) if isinstance(a, int | float) else '–'}</td>"
            f"<td>{fmt(b) if isinstance(b, int | float) else '–'}</td></tr>"
        )
    return (
        f'<table class="headline"><caption>the winner measured live at {esc(c.get("url"))}'
        f" ({esc(c.get('run_dir'))})</caption><tr><th>figure</th><th>simulated</th>"
        f"<th>measured</th></tr>{''.join(rows)}</table>"
    )


def tune_section(run: LoadedRun) -> str:
    s = run.summary
    objective = str(s.get("objective", ""))
    rows = _ranked(run)
    out = [f"<h2>Tune: {esc(s.get('model'))} ({esc(objective)}) in {esc(run.label)}</h2>"]
    raw_slo = s.get("slo")
    slo: dict[str, Any] = raw_slo if isinstance(raw_slo, dict) else {}
    slo_text = ", ".join(f"{esc(k.removesuffix('_s'))} ≤ {seconds(v)}" for k, v in slo.items())
    engine = "SGLang's" if s.get("engine") == "sglang" else "vLLM's"
    w = s.get("winner") if isinstance(s.get("winner"), dict) else None
    raw_gain = s.get("gain_vs_defaults")
    gain: dict[str, Any] = raw_gain if isinstance(raw_gain, dict) else {}
    if w:
        g = gain.get("goodput")
        gd = gain.get("goodput_per_dollar")
        out.append(
            f'<p class="lead">Winner under {slo_text}: <b>{esc(w.get("label"))}</b>'
            + (
                f"; goodput {g:+.1%}, goodput per dollar {gd:+.1%} against {engine} defaults"
                if isinstance(g, float) and isinstance(gd, float)
                else ""
            )
            + "</p>"
            f"<pre>{esc(w.get('command'))}</pre>"
        )
    else:
        out.append(f'<p class="lead">No configuration met {slo_text}.</p>')
    out.append(
        f'<p class="note">{s.get("space_points", 0):,} points in the space, '
        f"{s.get('pruned_points', 0):,} pruned by the planner, "
        f"{s.get('simulated_points', 0):,} simulated on {esc(s.get('backend'))}.</p>"
    )
    out.append(_confirm(s.get("confirm")))
    last = max((r.get("rung", 0) for r in rows), default=0)
    out.append(_scatter([r for r in rows if r.get("rung") == last], objective))
    head = (
        "<tr><th>#</th><th>configuration</th><th>GPUs</th><th>USD/h</th><th>rate</th>"
        "<th>TTFT P99</th><th>TPOT P99</th><th>SLO</th><th>requests</th></tr>"
    )
    body = []
    for r in rows[:TABLE_ROWS]:
        rate = _rate(r, objective)
        body.append(
            f"<tr><td>{r.get('rank')}</td><td>{esc(r.get('label'))}"
            f"{' ★' if r.get('pareto') else ''}</td><td>{r.get('num_gpus')}</td>"
            f"<td>{plain(r.get('usd_per_hour') or 0)}</td>"
            f"<td>{plain(rate) if isinstance(rate, int | float) else '–'}</td>"
            f"<td>{seconds(v) if isinstance(v := r.get('ttft_p99_s'), float) else '–'}</td>"
            f"<td>{seconds(v) if isinstance(v := r.get('tpot_p99_s'), float) else '–'}</td>"
            f"<td>{'met' if r.get('slo_met') else esc(r.get('status') or 'missed')}</td>"
            f"<td>{r.get('requests_simulated') or 0:,}</td></tr>"
        )
    out.append(
        f'<table class="headline"><caption>ranked points</caption>{head}{"".join(body)}</table>'
    )
    return "".join(out)
