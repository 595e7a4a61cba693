"""Report sections for run kinds with their own tables: memtrace, comm and plan.

Registered in :data:`kvscope.report.page.KIND_SECTIONS`. Column names follow the tables
``kvscope memtrace analyze --out``, ``kvscope comm bench --out`` and ``kvscope plan --out``
write; a missing column or table simply leaves its plot out, and so does one whose values
cannot be what that command writes (heatmap cells outside a bounded grid, a link fit that
is not a pair of finite numbers).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvscope.report.charts import Line, Palette, bar_chart, heatmap, line_chart
from kvscope.report.loader import LoadedRun
from kvscope.report.sections import col, esc, fmt_value
from kvscope.report.vega import chart_div

GIB = float(1 << 30)
#: Largest heatmap grid drawn (memtrace writes 64 x 128): a bigger one is not from memtrace.
MAX_HEATMAP_SIDE = 4096


def _finite_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and bool(np.isfinite(v))


def _heatmap_matrix(rows: np.ndarray, cols_: np.ndarray, vals: np.ndarray) -> np.ndarray | None:
    """The cell matrix of a heatmap table, or None when its cells are not a bounded grid."""
    if rows.size == 0 or not (rows.size == cols_.size == vals.size):
        return None
    if not (np.isfinite(rows).all() and np.isfinite(cols_).all()):
        return None
    if rows.min() < 0 or cols_.min() < 0 or max(rows.max(), cols_.max()) >= MAX_HEATMAP_SIDE:
        return None
    m = np.full((int(rows.max()) + 1, int(cols_.max()) + 1), np.nan)
    m[rows.astype(int), cols_.astype(int)] = vals
    return m


def memtrace_section(runs: Sequence[LoadedRun], palette: Palette) -> str:
    out = ["<h2>GPU memory (PyTorch snapshot)</h2>"]
    series: list[Line] = []
    frag: list[Line] = []
    for r in runs:
        t = r.tables.get("timeline")
        if t is not None:
            x = col(t, "t_s")
            for name in ("allocated_bytes", "reserved_bytes"):
                y = col(t, name)
                if x is not None and y is not None:
                    series.append(Line(f"{r.label}: {name.removesuffix('_bytes')}", x, y / GIB))
        f = r.tables.get("fragmentation")
        if f is not None:
            x, y = col(f, "t_s"), col(f, "external_frag")
            if x is not None and y is not None:
                frag.append(Line(r.label, x, y))
    if series:
        pal = palette.extended([s.name for s in series])
        spec = line_chart(
            "Memory timeline", "time (s)", "memory (GiB)", series[:6], pal, step=True, y_log=False
        )
        out.append(chart_div(spec, "Memory timeline"))
    if frag:
        spec = line_chart(
            "External fragmentation",
            "time (s)",
            "1 − largest free / total free",
            frag,
            palette,
            step=True,
            y_log=False,
        )
        out.append(chart_div(spec, "External fragmentation"))
    for r in runs:
        h = r.tables.get("heatmap")
        if h is None:
            continue
        rows, cols_, vals = col(h, "row"), col(h, "col"), col(h, "allocated_frac")
        if rows is None or cols_ is None or vals is None:
            continue
        m = _heatmap_matrix(rows, cols_, vals)
        if m is None:
            continue
        cell = col(h, "cell_bytes")
        span = float(m.shape[1])
        if cell is not None and cell.size and np.isfinite(cell[0]):
            span = float(cell[0]) * m.shape[1] / (1 << 20)
        title = f"Segment blocks: {r.label}"
        spec = heatmap(
            title, "offset in row (MiB)", "address-space row", m, (0.0, span), "allocated fraction"
        )
        out.append(chart_div(spec, title))
    rep = [r for r in runs if r.summary.get("ooms") or r.summary.get("leak_candidates")]
    for r in rep:
        out.append(
            f"<p>{esc(r.label)}: {fmt_value(r.summary.get('ooms', 0))} OOM event(s), "
            f"{fmt_value(r.summary.get('leak_candidates', 0))} leak candidate(s), top "
            f"leak slope {fmt_value(r.summary.get('top_leak_mb_per_min', 0.0))} MB/min</p>"
        )
    return "".join(out) if len(out) > 1 else ""


def comm_section(runs: Sequence[LoadedRun], palette: Palette) -> str:
    out = ["<h2>Collectives</h2>"]
    lat: list[Line] = []
    bw: list[Line] = []
    for r in runs:
        t = r.tables.get("comm")
        if t is None:
            continue
        size = col(t, "size_bytes")
        if size is None:
            continue
        for name, label in (("lat_p50_s", "P50"), ("lat_p99_s", "P99"), ("predicted_s", "model")):
            y = col(t, name)
            if y is not None:
                lat.append(Line(f"{r.label}: {label}", size, y * 1e6))
        y = col(t, "busbw_gbps")
        if y is not None:
            bw.append(Line(r.label, size, y))
    if lat:
        pal = palette.extended([s.name for s in lat])
        spec = line_chart(
            "Collective latency vs size",
            "message size (bytes)",
            "latency (µs)",
            lat[:6],
            pal,
            x_log=True,
            points=True,
        )
        out.append(chart_div(spec, "Collective latency vs size"))
    if bw:
        spec = line_chart(
            "Bus bandwidth vs size",
            "message size (bytes)",
            "bus bandwidth (GB/s, nccl-tests definition)",
            bw,
            palette,
            x_log=True,
            points=True,
        )
        out.append(chart_div(spec, "Bus bandwidth vs size"))
    for r in runs:
        fit = r.summary.get("fit")
        if not isinstance(fit, dict):
            continue
        alpha, beta = fit.get("alpha_s"), fit.get("beta_s_per_byte")
        if _finite_number(alpha) and _finite_number(beta):
            assert isinstance(alpha, int | float) and isinstance(beta, int | float)
            out.append(
                f"<p>{esc(r.label)}: fitted link alpha = {alpha * 1e6:.1f} µs "
                f"per step, bandwidth = {1e-9 / max(beta, 1e-30):.2f} GB/s</p>"
            )
    return "".join(out) if len(out) > 1 else ""


PLAN_PARTS = (
    ("weights_gib", "weights"),
    ("activation_peak_gib", "activations"),
    ("non_torch_gib", "non-torch"),
    ("cudagraph_gib", "CUDA graphs"),
    ("kv_cache_gib", "KV cache"),
)


def plan_section(runs: Sequence[LoadedRun], palette: Palette) -> str:
    bars = []
    total = None
    for r in runs:
        s = r.summary
        segs = [(label, float(s[k])) for k, label in PLAN_PARTS if _finite_number(s.get(k))]
        if segs:
            bars.append((r.label, segs))
            if _finite_number(s.get("gpu_memory_gib")):
                total = (float(s["gpu_memory_gib"]), "GPU memory (CUDA total)")
    if not bars:
        return ""
    title = "Memory per GPU as the engine budgets it"
    pal = Palette(tuple(label for _k, label in PLAN_PARTS))  # parts, not runs, are coloured
    spec = bar_chart(title, "memory per GPU (GiB)", bars, pal, total)
    return "<h2>Memory per GPU (plan)</h2>" + chart_div(spec, title)


def register() -> None:
    from kvscope.report.fleet import fleet_section
    from kvscope.report.kv_events import kv_events_section
    from kvscope.report.page import KIND_SECTIONS

    KIND_SECTIONS.update(
        memtrace=memtrace_section,
        comm=comm_section,
        plan=plan_section,
        watch=kv_events_section,
        simulate=fleet_section,
    )
