"""Folders of runs: a ``simulate --sweep`` as a comparison, a ``--find-max-rate`` as a curve.

A sweep folder holds one simulate run per point, named ``FLAG=VALUE[,FLAG2=VALUE2]`` (see
``kvscope.cli.simulate``); the page plots each headline figure against the first swept
flag's value (one line per combination of the other flags). A find-max-rate folder's
``summary.json`` lists its probes (``rate_per_s``, ``ttft_p99_s``, ``tpot_p99_s``,
``verdict``; ``kvscope.bench.search``) and each probe is a bench run in ``probe_NN_RATE/``;
the page draws latency percentiles and goodput against the offered rate, with the rate the
search found marked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kvscope.report.charts import Line, Palette, line_chart
from kvscope.report.headline import kv_peak, pct, plain, seconds
from kvscope.report.loader import LoadedRun
from kvscope.report.sections import esc
from kvscope.report.vega import chart_div

#: Figures compared along a sweep: (summary key or "kv_peak", chart, y title, scale).
SWEEP_FIGURES: tuple[tuple[str, str, str, float], ...] = (
    ("output_token_throughput_per_s", "Output throughput", "output tokens per s", 1.0),
    ("ttft_p50_s", "TTFT", "TTFT (ms)", 1e3),
    ("ttft_p99_s", "TTFT", "TTFT (ms)", 1e3),
    ("tpot_p50_s", "TPOT", "TPOT (ms)", 1e3),
    ("tpot_p99_s", "TPOT", "TPOT (ms)", 1e3),
    ("kv_peak", "KV-cache peak", "KV usage peak (% of capacity)", 100.0),
    ("preemptions", "Preemptions", "preempted requests", 1.0),
)


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _point(label: str) -> list[tuple[str, str]]:
    """``"max-num-seqs=32,block-size=16"`` -> ``[("max-num-seqs", "32"), ...]``."""
    out = []
    for part in label.split(","):
        k, _, v = part.partition("=")
        out.append((k, v))
    return out


def _figure(run: LoadedRun, key: str) -> float | None:
    if key == "kv_peak":
        p = kv_peak(run)
        return None if p is None else p[0]
    return _num(run.summary.get(key))


def sweep_section(sweep: LoadedRun, palette: Palette) -> str:
    """Each headline figure against the swept value, and a table of the points."""
    points = sweep.children
    if not points:
        return ""
    parsed = [_point(r.label) for r in points]
    flag = parsed[0][0][0]
    xs_text = [p[0][1] for p in parsed]
    numeric = all(_num(_as_float(v)) is not None for v in xs_text)
    xs = [float(v) if numeric else float(i) for i, v in enumerate(xs_text)]
    groups = [",".join(f"{k}={v}" for k, v in p[1:]) for p in parsed]
    out = [f"<h2>Sweep of --{esc(flag)} ({len(points)} points) in {esc(sweep.label)}</h2>"]
    out.append(_sweep_table(sweep, points))
    charts: dict[str, tuple[str, list[Line]]] = {}
    for key, chart, y_title, scale in SWEEP_FIGURES:
        for g in dict.fromkeys(groups):
            idx = [i for i, gg in enumerate(groups) if gg == g]
            vals = [_figure(points[i], key) for i in idx]
            if all(v is None for v in vals):
                continue
            x = np.asarray([xs[i] for i in idx], dtype=float)
            y = np.asarray([np.nan if v is None else v * scale for v in vals], dtype=float)
            which = key.split("_")[1].upper() if key.endswith(("_p50_s", "_p99_s")) else ""
            name = " ".join(s for s in (which, g) if s) or chart
            charts.setdefault(chart, (y_title, []))[1].append(Line(name, x, y))
    for chart, (y_title, lines) in charts.items():
        lines = lines[:5]
        if y_title.endswith("(ms)") and max(np.nanmax(ln.y) for ln in lines) >= 1e4:
            y_title = y_title.replace("(ms)", "(s)")  # a queue of many seconds
            lines = [Line(ln.name, ln.x, ln.y / 1e3) for ln in lines]
        x_title = f"--{flag}" if numeric else f"--{flag} (point)"
        spec = line_chart(
            f"{chart} vs --{flag}",
            x_title,
            y_title,
            lines,
            palette.extended([ln.name for ln in lines]),
            zoom=False,
            points=True,
            zero=chart in ("Preemptions", "KV-cache peak", "Output throughput"),
        )
        if not numeric:
            spec["layer"][0]["encoding"]["x"]["axis"] = {
                "values": xs,
                "labelExpr": _label_expr(xs_text),
            }
        out.append(chart_div(spec, f"{chart} vs --{flag}"))
    return "".join(out)


def _as_float(v: str) -> float | None:
    try:
        return float(v)
    except ValueError:
        return None


def _label_expr(texts: Sequence[str]) -> str:
    import json

    return f"{json.dumps(list(texts))}[datum.value] || ''"


def _sweep_table(sweep: LoadedRun, points: Sequence[LoadedRun]) -> str:
    cols: list[tuple[str, Any]] = [
        ("output tokens/s", lambda r: plain(v) if (v := _figure(r, SWEEP_FIGURES[0][0])) else "–"),
        ("TTFT P50", lambda r: _s(r, "ttft_p50_s")),
        ("TTFT P99", lambda r: _s(r, "ttft_p99_s")),
        ("TPOT P50", lambda r: _s(r, "tpot_p50_s")),
        ("TPOT P99", lambda r: _s(r, "tpot_p99_s")),
        ("KV peak", lambda r: pct(p[0]) if (p := kv_peak(r)) else "–"),
        (
            "preemptions",
            lambda r: f"{int(v):,}" if (v := _figure(r, "preemptions")) is not None else "–",
        ),
    ]
    head = "".join(f"<th>{esc(c)}</th>" for c, _ in cols)
    rows = "".join(
        f"<tr><td>{esc(r.label)}</td>"
        + "".join(f"<td>{esc(fn(r))}</td>" for _, fn in cols)
        + "</tr>"
        for r in points
    )
    return f'<table class="headline"><tr><th>point</th>{head}</tr>{rows}</table>'


def _s(run: LoadedRun, key: str) -> str:
    v = _num(run.summary.get(key))
    return "–" if v is None else seconds(v)


def _sentence(text: object) -> str:
    t = str(text or "").strip()
    return t[:1].upper() + t[1:] + ("" if not t or t.endswith(".") else ".")


def max_rate_section(search: LoadedRun, palette: Palette) -> str:
    """Latency and goodput against the offered rate, the rate found marked; the probes."""
    s = search.summary
    probes = [p for p in s.get("probes") or [] if isinstance(p, dict)]
    if not probes:
        return ""
    by_dir = {c.label: c for c in search.children}
    best = _num(s.get("max_rate_per_s"))
    raw_slo = s.get("slo")
    slo: dict[str, Any] = raw_slo if isinstance(raw_slo, dict) else {}
    slo_text = ", ".join(
        f"{k.removesuffix('_s').replace('_', ' ').upper()} ≤ {seconds(v)}"
        for k, v in slo.items()
        if _num(v) is not None
    )
    out = [f"<h2>Capacity curve: {esc(search.label)}</h2>"]
    found = f"{plain(best)} req/s" if best is not None else "none"
    out.append(
        f'<p class="lead">Highest offered rate meeting every SLO ({esc(slo_text or "none set")}):'
        f" <b>{esc(found)}</b>. {esc(_sentence(s.get('stopped')))}</p>"
    )
    rows: list[dict[str, Any]] = []
    for p in probes:
        rate = _num(p.get("rate_per_s"))
        if rate is None:
            continue
        name = str(p.get("run_dir") or "").replace("\\", "/").rsplit("/", 1)[-1]
        child = by_dir.get(name)
        cs = child.summary if child else {}
        rows.append(
            {
                "rate": rate,
                "verdict": str(p.get("verdict", "")),
                "ttft_p50": _num(cs.get("ttft_p50_s")),
                "ttft_p99": _num(p.get("ttft_p99_s")),
                "tpot_p99": _num(p.get("tpot_p99_s")),
                "itl_p99": _num(cs.get("itl_p99_s")),
                "goodput": _num(cs.get("goodput_per_s")),
                "throughput": _num(cs.get("request_throughput_per_s")),
                "achieved": _num(p.get("achieved_request_rate_per_s")),
                "errors": _num(p.get("error_rate")),
            }
        )
    rows.sort(key=lambda r: r["rate"])
    x = np.asarray([r["rate"] for r in rows], dtype=float)

    def line(name: str, key: str, scale: float = 1.0) -> Line | None:
        y = np.asarray([np.nan if r[key] is None else r[key] * scale for r in rows], dtype=float)
        return Line(name, x, y) if np.isfinite(y).any() else None

    rules = [(best, f"max rate {plain(best)} req/s")] if best is not None else []
    lat = [
        ln
        for ln in (
            line("TTFT P50", "ttft_p50", 1e3),
            line("TTFT P99", "ttft_p99", 1e3),
            line("TPOT P99", "tpot_p99", 1e3),
            line("ITL P99", "itl_p99", 1e3),
        )
        if ln is not None
    ]
    names = ["TTFT P50", "TTFT P99", "TPOT P99", "ITL P99", "goodput", "finished", "offered"]
    pal = Palette(tuple(names))
    slo_rules = [
        (
            float(v) * 1e3,
            f"SLO {k.removesuffix('_s').replace('_', ' ').upper()} {plain(float(v) * 1e3)} ms",
        )
        for k, v in slo.items()
        if _num(v) is not None
    ]
    if lat:
        spec = line_chart(
            "Latency vs offered rate",
            "offered request rate (req/s)",
            "latency (ms)",
            lat,
            pal,
            zoom=False,
            points=True,
            rules_x=rules,
            rules_y=slo_rules[:2],
        )
        out.append(chart_div(spec, "Latency vs offered rate"))
    rate_lines = [
        ln
        for ln in (
            line("goodput", "goodput"),
            line("finished", "throughput"),
            line("offered", "achieved"),
        )
        if ln is not None
    ]
    if rate_lines:
        spec = line_chart(
            "Goodput vs offered rate",
            "offered request rate (req/s)",
            "requests per s",
            rate_lines,
            pal,
            zoom=False,
            points=True,
            rules_x=rules,
        )
        out.append(chart_div(spec, "Goodput vs offered rate"))
    head = (
        "<tr><th>offered (req/s)</th><th>sent (req/s)</th><th>TTFT P99</th><th>TPOT P99</th>"
        "<th>goodput (req/s)</th><th>errors</th><th>verdict</th></tr>"
    )
    body = "".join(
        "<tr>"
        f"<td>{plain(r['rate'])}</td>"
        f"<td>{plain(r['achieved']) if r['achieved'] is not None else '–'}</td>"
        f"<td>{seconds(r['ttft_p99']) if r['ttft_p99'] is not None else '–'}</td>"
        f"<td>{seconds(r['tpot_p99']) if r['tpot_p99'] is not None else '–'}</td>"
        f"<td>{plain(r['goodput']) if r['goodput'] is not None else '–'}</td>"
        f"<td>{pct(r['errors']) if r['errors'] is not None else '–'}</td>"
        f"<td>{esc(r['verdict'])}</td></tr>"
        for r in rows
    )
    out.append(f'<table class="headline"><caption>probes</caption>{head}{body}</table>')
    return "".join(out)
