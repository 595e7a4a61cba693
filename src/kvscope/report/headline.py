"""The top of a report: per run kind, the few figures that matter, in human units.

Each figure is read from ``summary.json`` under the key the command writes (see
``kvscope.results.latency_summary``, ``kvscope.sim.outputs.summary_figures``,
``kvscope.bench.run``, ``kvscope.memtrace``, ``kvscope.plan``), shown with its unit (ms, s,
GiB, %, req/s, tokens/s) and a one-line meaning; several runs of a kind sit side by side.
Below them the whole summary stays available as a collapsed table with readable names and
plain numbers (no exponent notation, no Python reprs). The KV-cache peak is
:func:`kv_peak`, the one figure the headline and the KV chart's caption both show.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kvscope.report.loader import KV_GAUGES, LoadedRun

GIB = float(1 << 30)

Fmt = Callable[[float], str]


def _finite(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def plain(v: float) -> str:
    """A number without exponent: 204,111 / 8.48 / 0.0316 / 3.2e-05 as 0.000032."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:,.1f}".rstrip("0").rstrip(".")
    if a >= 0.01:
        return f"{v:.3g}"
    digits = min(20, 2 - math.floor(math.log10(a)))
    return f"{v:.{digits}f}".rstrip("0").rstrip(".")


def seconds(v: float) -> str:
    """Seconds shown as ms below 1 s."""
    return f"{plain(v * 1e3)} ms" if abs(v) < 1 else f"{plain(v)} s"


def pct(v: float) -> str:
    return f"{plain(v * 100)} %"


def gib(v: float) -> str:
    return f"{plain(v)} GiB"


def gib_bytes(v: float) -> str:
    return f"{plain(v / GIB)} GiB" if abs(v) >= GIB / 10 else f"{plain(v / (1 << 20))} MiB"


def count(v: float) -> str:
    return f"{v:,.0f}"


def per_s(unit: str) -> Fmt:
    return lambda v: f"{plain(v)} {unit}/s"


def kv_peak(run: LoadedRun) -> tuple[float, float | None] | None:
    """The KV-cache peak as ``(fraction of capacity, time in s or None)``.

    The summary's ``kv_usage_peak_frac``/``kv_usage_peak_t_s`` (the simulator's exact peak)
    when present; else the highest sample of a KV-usage column of ``steps``/``server``.
    """
    frac = _finite(run.summary.get("kv_usage_peak_frac"))
    if frac is not None:
        at = _finite(run.summary.get("kv_usage_peak_t_s"))
        sampled = _sampled_peak(run) if at is None else None
        return frac, at if sampled is None else sampled[1]
    return _sampled_peak(run)


def _sampled_peak(run: LoadedRun) -> tuple[float, float | None] | None:
    """The highest sample of a KV-usage column (fraction) and its time from the start."""
    for name in ("steps", "server"):
        t = run.tables.get(name)
        if t is None or "t_s" not in t.column_names:
            continue
        for c in t.column_names:
            if c.rsplit("/", 1)[-1] not in KV_GAUGES:
                continue
            try:
                y = np.asarray(t.column(c).to_numpy(zero_copy_only=False), dtype=float)
                x = np.asarray(t.column("t_s").to_numpy(zero_copy_only=False), dtype=float)
            except (TypeError, ValueError):
                continue
            ok = np.isfinite(y) & np.isfinite(x)
            if not ok.any():
                continue
            y, x = y[ok], x[ok]
            i = int(np.argmax(y))
            v = float(y[i]) / (100.0 if c.endswith("_perc") or y.max() > 1.0 else 1.0)
            return v, float(x[i] - (x.min() if x.min() > 1e8 else 0.0))  # unix: from start
    return None


def _kv_peak_text(run: LoadedRun) -> str | None:
    p = kv_peak(run)
    if p is None:
        return None
    frac, t = p
    return pct(frac) + (f" at {plain(t)} s" if t is not None else "")


#: (summary key, label, formatter, meaning) per run kind.
Figure = tuple[str, str, Fmt, str]
HEADLINES: dict[str, tuple[Figure, ...]] = {
    "simulate": (
        ("request_throughput_per_s", "requests", per_s("req"), "finished requests per second"),
        ("output_token_throughput_per_s", "output", per_s("tokens"), "generated tokens per s"),
        ("ttft_p50_s", "TTFT P50", seconds, "typical wait for the first token"),
        ("ttft_p99_s", "TTFT P99", seconds, "1 request in 100 waits longer than this"),
        ("tpot_p50_s", "TPOT P50", seconds, "time per output token after the first"),
        ("tpot_p99_s", "TPOT P99", seconds, "slowest 1 % of streams"),
        ("prefix_hit_rate", "prefix hits", pct, "prompt tokens served from the prefix cache"),
        ("preemptions", "preemptions", count, "requests evicted when KV memory ran out"),
    ),
    "bench": (
        ("achieved_request_rate_per_s", "offered", per_s("req"), "rate the client sent"),
        ("request_throughput_per_s", "requests", per_s("req"), "finished requests per second"),
        ("goodput_per_s", "goodput", per_s("req"), "finished requests meeting every SLO"),
        ("output_token_throughput_per_s", "output", per_s("tokens"), "generated tokens per s"),
        ("ttft_p99_s", "TTFT P99", seconds, "1 request in 100 waits longer than this"),
        ("tpot_p99_s", "TPOT P99", seconds, "slowest 1 % of streams per token"),
        ("itl_p99_s", "ITL P99", seconds, "gap between streamed chunks, 99th percentile"),
        ("error_rate", "errors", pct, "requests that failed"),
    ),
    "watch": (
        ("duration_s", "watched", lambda v: f"{plain(v)} s", "length of the watch"),
        ("samples", "samples", count, "metric values recorded"),
        ("missed_ticks", "missed ticks", count, "sampling intervals that came too late"),
    ),
    "memtrace": (
        ("peak_allocated_bytes", "peak allocated", gib_bytes, "most memory held by tensors"),
        ("peak_reserved_bytes", "peak reserved", gib_bytes, "most memory the allocator held"),
        ("end_external_frag", "fragmentation", pct, "free memory not usable as one block"),
        ("ooms", "OOMs", count, "out-of-memory events in the snapshot"),
        ("leak_candidates", "leak candidates", count, "call sites whose memory keeps growing"),
    ),
    "comm": (),
    "plan": (
        ("weights_gib", "weights", gib, "model weights per GPU"),
        ("kv_cache_gib", "KV cache", gib, "memory left for the KV cache per GPU"),
        ("kv_tokens", "KV tokens", count, "tokens the KV cache holds"),
        ("max_concurrency", "concurrency", plain, "requests at the full context that fit"),
        ("max_model_len", "context", count, "longest request, in tokens"),
    ),
}


def _cells(run: LoadedRun) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for key, label, fmt, meaning in HEADLINES.get(run.kind, ()):
        v = _finite(run.summary.get(key))
        if v is not None:
            out.append((label, fmt(v), meaning))
    if run.kind in ("simulate", "bench", "watch"):
        kv = _kv_peak_text(run)
        if kv:
            out.insert(min(len(out), 6), ("KV peak", kv, "highest share of KV-cache blocks in use"))
    if run.kind == "simulate":
        cost = _cost_model_text(run.summary.get("cost_model"))
        if cost:
            out.append(("step times", cost, "cost model the run's latencies rest on"))
    if run.kind == "comm":
        fit = run.summary.get("fit")
        if isinstance(fit, dict):
            a, b = _finite(fit.get("alpha_s")), _finite(fit.get("beta_s_per_byte"))
            if a is not None and b is not None:
                out.append(("latency", seconds(a), "fixed cost per step (alpha)"))
                out.append(("bandwidth", f"{plain(1e-9 / max(b, 1e-30))} GB/s", "fitted link"))
    return out


def _cost_model_text(cost: object) -> str | None:
    """A simulate run's cost model and, where measured, its expected error (median |r - 1|)."""
    if not isinstance(cost, dict) or not cost.get("name"):
        return None
    text = str(cost["name"])
    err = cost.get("expected_error")
    if isinstance(err, dict) and _finite(err.get("median_abs_err")) is not None:
        text += (
            f" (median error {float(err['median_abs_err']):.0%} vs AIC, {err.get('family', '?')})"
        )
    return text


def headline_section(runs: Sequence[LoadedRun]) -> str:
    """One table per run kind: a row per figure, a column per run, the meaning last."""
    blocks = []
    for kind in dict.fromkeys(r.kind for r in runs):
        group = [r for r in runs if r.kind == kind]
        cells = [dict((c[0], c) for c in _cells(r)) for r in group]
        labels = list(dict.fromkeys(k for c in cells for k in c))
        if not labels:
            continue
        head = "".join(f"<th>{_e(r.label)}</th>" for r in group)
        rows = []
        for lab in labels:
            meaning = next(c[lab][2] for c in cells if lab in c)
            vals = "".join(f"<td>{_e(c[lab][1]) if lab in c else '–'}</td>" for c in cells)
            rows.append(
                f'<tr><th class="fig">{_e(lab)}</th>{vals}<td class="mean">{_e(meaning)}</td>'
            )
        blocks.append(
            f'<table class="headline"><caption>{_e(kind)}</caption><tr><th></th>{head}'
            f"<th></th></tr>{''.join(rows)}</table>"
        )
    return f'<section class="headlines">{"".join(blocks)}</section>' if blocks else ""


#: Words shown for parts of summary keys.
WORDS = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "itl": "ITL",
    "e2e": "E2E",
    "kv": "KV",
    "p50": "P50",
    "p90": "P90",
    "p95": "P95",
    "p99": "P99",
    "p999": "P99.9",
    "gib": "(GiB)",
    "frac": "(fraction)",
    "per": "per",
    "s": "(s)",
    "bytes": "(bytes)",
    "slo": "SLO",
    "gpu": "GPU",
}


def readable(key: str) -> str:
    """``ttft_p99_s`` -> ``TTFT P99 (s)``; ``output_token_throughput_per_s`` -> ``... per s``."""
    parts = key.split("_")
    words = []
    for i, p in enumerate(parts):
        if p == "s" and i > 0 and parts[i - 1] == "per":
            words.append("s")
        else:
            words.append(WORDS.get(p, p))
    text = " ".join(words)
    return text[:1].upper() + text[1:]


def _value(v: object) -> str:
    f = _finite(v)
    if f is not None:
        return f"{int(f):,}" if isinstance(v, int) else plain(f)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(_finite(x) is not None for x in v):
        return ", ".join(plain(float(x)) for x in v)
    return ""


def _flat(d: dict[str, Any], prefix: str = "", depth: int = 0) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for k, v in d.items():
        if k in ("config", "kind") or k.endswith("_unix_s"):
            continue
        if isinstance(v, dict) and depth < 2:
            out.extend(_flat(v, f"{prefix}{k}: ", depth + 1))
        elif _value(v):
            out.append((f"{prefix}{k}", v))
    return out


def summary_details(runs: Sequence[LoadedRun]) -> str:
    """Every scalar figure of every summary, collapsed, with readable names."""
    flat = [dict(_flat(r.summary)) for r in runs]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    if not keys:
        return ""
    head = "".join(f"<th>{_e(r.label)}</th>" for r in runs)
    rows = "".join(
        f"<tr><td>{_e(': '.join(readable(p) for p in k.split(': ')))}</td>"
        + "".join(f"<td>{_e(_value(f[k])) if k in f else ''}</td>" for f in flat)
        + "</tr>"
        for k in keys[:400]
    )
    return (
        "<details><summary>All summary figures</summary>"
        f'<table class="summary"><tr><th>figure</th>{head}</tr>{rows}</table></details>'
    )


def _e(v: object) -> str:
    return html.escape(str(v))
