"""Small, dependency-free SVG charts for self-contained reports.

Every chart is an inline ``<svg>`` string with axis titles that carry units, "nice" ticks
(1-2-5 steps, Heckbert, Graphics Gems 1990) and an optional list of marked points or
horizontal reference lines (SLOs). Long series are downsampled by min/max decimation so
peaks survive; the chart says when it did.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PALETTE = ("#2f6fb0", "#d9622b", "#3a9a5b", "#8e5bb5", "#c2a33a", "#5a5a5a", "#d04f8a")
W, H = 640, 290
ML, MR, MT, MB = (
    64,
    16,
    40,
    44,
)  # legend row sits between title and plot  # margins: left, right, top, bottom


@dataclass(frozen=True)
class Series:
    """One line (or bar set): x and y values and a legend label."""

    label: str
    x: Sequence[float] | np.ndarray
    y: Sequence[float] | np.ndarray
    step: bool = False


@dataclass(frozen=True)
class Chart:
    """What a chart shows; ``render_line`` etc. turn it into SVG."""

    title: str
    x_title: str
    y_title: str
    series: tuple[Series, ...]
    hlines: tuple[tuple[float, str], ...] = ()
    vlines: tuple[tuple[float, str], ...] = ()
    marks: tuple[tuple[float, float, str], ...] = ()
    log_x: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi].

    A range that is empty or below float resolution (every TPOT of a run equal but for the
    last bits) is widened around its value first: stepping by less than the values'
    resolution would never reach ``hi``.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or not math.isfinite(hi - lo):
        return [0.0, 1.0]
    scale = max(abs(lo), abs(hi))
    if scale < 1e-300:
        lo, hi = 0.0, 1.0
    elif hi - lo <= scale * 1e-9:
        mid = (lo + hi) / 2
        lo, hi = (0.0, 2 * mid) if mid > 0 else (mid - scale * 0.05, mid + scale * 0.05)
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step)
    count = math.ceil(hi / step - 1e-9) - first + 1  # last tick at or above hi
    digits = max(0, 3 - math.floor(math.log10(step)))  # trims float noise (0.30000000000000004)
    return [round((first + i) * step, digits) for i in range(max(2, min(count, 4 * n + 2)))]


def fmt(v: float) -> str:
    """Compact tick label: 1.2k, 3.4M, 0.05."""
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:g}G"
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    if a == 0 or a >= 1:
        return f"{v:g}"
    return f"{v:.3g}"


def decimate(
    x: np.ndarray, y: np.ndarray, max_points: int = 1500
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Keep each bucket's min and max so peaks survive downsampling."""
    n = len(x)
    if n <= max_points:
        return x, y, False
    buckets = max_points // 2
    edges = np.linspace(0, n, buckets + 1).astype(int)
    keep: list[int] = []
    for a, b in itertools.pairwise(edges):
        if b <= a:
            continue
        seg = y[a:b]
        finite = np.where(np.isfinite(seg))[0]
        if finite.size == 0:
            continue
        i_min = a + int(finite[np.argmin(seg[finite])])
        i_max = a + int(finite[np.argmax(seg[finite])])
        keep.extend(sorted({i_min, i_max}))
    idx = np.asarray(keep, dtype=int)
    return x[idx], y[idx], True


def _esc(s: str) -> str:
    return html.escape(s, quote=True)


def render_line(chart: Chart) -> str:
    """A line (or step) chart with axes, legend, reference lines and marks."""
    xs, ys, series, downsampled = [], [], [], False
    for s in chart.series:
        x = np.asarray(s.x, dtype=float)
        y = np.asarray(s.y, dtype=float)
        ok = np.isfinite(x) & np.isfinite(y)
        if chart.log_x:
            ok &= x > 0
        x, y = x[ok], y[ok]
        x, y, d = decimate(x, y)
        downsampled |= d
        series.append((s, x, y))
        if x.size:
            xs.append(x)
            ys.append(y)
    if not xs:
        return _empty(chart.title, "no data")
    xall, yall = np.concatenate(xs), np.concatenate(ys)
    y_extra = [v for v, _ in chart.hlines] + [m[1] for m in chart.marks]
    y_lo = min(0.0, float(yall.min()), *y_extra) if y_extra else min(0.0, float(yall.min()))
    y_hi = max(float(yall.max()), *y_extra) if y_extra else float(yall.max())
    yt = nice_ticks(y_lo, y_hi)
    if chart.log_x:
        lx = np.log10(xall)
        x_lo, x_hi = math.floor(lx.min()), math.ceil(lx.max())
        x_hi = max(x_hi, x_lo + 1)
        xt = [10.0**e for e in range(int(x_lo), int(x_hi) + 1)]
    else:
        x_extra = [v for v, _ in chart.vlines]
        xt = nice_ticks(
            min(float(xall.min()), *x_extra) if x_extra else float(xall.min()),
            max(float(xall.max()), *x_extra) if x_extra else float(xall.max()),
        )
        x_lo, x_hi = xt[0], xt[-1]

    def px(v: Any) -> Any:  # scalar or array in, same out
        vv = np.log10(v) if chart.log_x else v
        return ML + (vv - x_lo) / ((x_hi - x_lo) or 1) * (W - ML - MR)

    def py(v: Any) -> Any:
        return H - MB - (v - yt[0]) / ((yt[-1] - yt[0]) or 1) * (H - MT - MB)

    parts = [_frame(chart.title, chart.x_title, chart.y_title)]
    for t in yt:
        y = py(t)
        parts.append(
            f'<line x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{ML - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(t)}</text>'
        )
    for t in xt:
        x = px(t)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{MT}" y2="{H - MB}" class="grid"/>'
            f'<text x="{x:.1f}" y="{H - MB + 16}" text-anchor="middle">{fmt(t)}</text>'
        )
    for i, (s, x, y) in enumerate(series):
        if not x.size:
            continue
        color = PALETTE[i % len(PALETTE)]
        X, Y = px(x), py(y)
        if s.step:
            pts = []
            for j in range(len(X)):
                if j:
                    pts.append(f"{X[j]:.1f},{Y[j - 1]:.1f}")
                pts.append(f"{X[j]:.1f},{Y[j]:.1f}")
        else:
            pts = [f"{a:.1f},{b:.1f}" for a, b in zip(X, Y, strict=True)]
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
            f'points="{" ".join(pts)}"><title>{_esc(s.label)}</title></polyline>'
        )
        parts.append(
            f'<rect x="{ML + 8 + 150 * i}" y="{MT - 16}" width="10" height="10" '
            f'fill="{color}"/><text x="{ML + 22 + 150 * i}" y="{MT - 7}">'
            f"{_esc(s.label[:22])}</text>"
        )
    for v, label in chart.hlines:
        y = py(v)
        parts.append(
            f'<line x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}" class="ref"/>'
            f'<text x="{W - MR - 4}" y="{y - 4:.1f}" text-anchor="end" class="ref">'
            f"{_esc(label)}</text>"
        )
    for v, label in chart.vlines:
        if chart.log_x and v <= 0:
            continue
        x = px(v)
        if ML <= x <= W - MR:
            parts.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{MT}" y2="{H - MB}" class="ref"/>'
                f'<text x="{x + 4:.1f}" y="{MT + 12}" class="ref">{_esc(label)}</text>'
            )
    for mx, my, label in chart.marks:
        parts.append(
            f'<circle cx="{px(mx):.1f}" cy="{py(my):.1f}" r="4" class="mark">'
            f"<title>{_esc(label)}</title></circle>"
        )
    notes = list(chart.notes) + (["downsampled (min/max per bucket)"] if downsampled else [])
    return _close(parts, notes)


def render_heatmap(
    title: str,
    x_title: str,
    y_title: str,
    matrix: np.ndarray,
    x_extent: tuple[float, float],
    y_extent: tuple[float, float],
    value_title: str,
    max_cells: int = 160,
) -> str:
    """A heatmap (rows = y, columns = x); downsampled to at most ``max_cells`` per side."""
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2 or m.size == 0 or not np.isfinite(m).any():
        return _empty(title, "no data")
    notes = []
    if m.shape[0] > max_cells or m.shape[1] > max_cells:
        r = math.ceil(m.shape[0] / max_cells)
        c = math.ceil(m.shape[1] / max_cells)
        pad = np.full((math.ceil(m.shape[0] / r) * r, math.ceil(m.shape[1] / c) * c), np.nan)
        pad[: m.shape[0], : m.shape[1]] = m
        m = np.nanmean(pad.reshape(pad.shape[0] // r, r, pad.shape[1] // c, c), axis=(1, 3))
        notes.append(f"downsampled {r}x{c} (mean per cell)")
    lo, hi = float(np.nanmin(m)), float(np.nanmax(m))
    rows, cols = m.shape
    cw, ch = (W - ML - MR) / cols, (H - MT - MB) / rows
    parts = [_frame(title, x_title, y_title)]
    for i in range(rows):
        for j in range(cols):
            v = m[i, j]
            if not np.isfinite(v):
                continue
            t = 0.0 if hi == lo else (v - lo) / (hi - lo)
            color = f"rgb({int(240 - 200 * t)},{int(245 - 150 * t)},{int(255 - 80 * t)})"
            parts.append(
                f'<rect x="{ML + j * cw:.2f}" y="{MT + (rows - 1 - i) * ch:.2f}" '
                f'width="{cw + 0.3:.2f}" height="{ch + 0.3:.2f}" fill="{color}"/>'
            )
    for k, t in enumerate(np.linspace(x_extent[0], x_extent[1], 5)):
        x = ML + k * (W - ML - MR) / 4
        parts.append(f'<text x="{x:.1f}" y="{H - MB + 16}" text-anchor="middle">{fmt(t)}</text>')
    for k, t in enumerate(np.linspace(y_extent[0], y_extent[1], 5)):
        y = H - MB - k * (H - MT - MB) / 4
        parts.append(f'<text x="{ML - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
    notes.append(f"colour: {value_title} from {fmt(lo)} (light) to {fmt(hi)} (dark)")
    return _close(parts, notes)


def render_stacked_bar(
    title: str,
    y_title: str,
    bars: Sequence[tuple[str, Sequence[tuple[str, float]]]],
    total_line: tuple[float, str] | None = None,
) -> str:
    """Vertical stacked bars: ``bars`` = [(bar label, [(segment label, value), ...]), ...]."""
    if not bars:
        return _empty(title, "no data")
    top = max(sum(v for _, v in segs) for _, segs in bars)
    if total_line:
        top = max(top, total_line[0])
    yt = nice_ticks(0, top)
    labels = list(dict.fromkeys(lbl for _, segs in bars for lbl, _ in segs))
    bw = (W - ML - MR) / len(bars)

    def py(v: float) -> float:
        return H - MB - v / (yt[-1] or 1) * (H - MT - MB)

    parts = [_frame(title, "", y_title)]
    for t in yt:
        parts.append(
            f'<line x1="{ML}" x2="{W - MR}" y1="{py(t):.1f}" y2="{py(t):.1f}" '
            f'class="grid"/><text x="{ML - 6}" y="{py(t) + 4:.1f}" '
            f'text-anchor="end">{fmt(t)}</text>'
        )
    for i, (name, segs) in enumerate(bars):
        base = 0.0
        x = ML + i * bw + bw * 0.2
        for lbl, v in segs:
            color = PALETTE[labels.index(lbl) % len(PALETTE)]
            parts.append(
                f'<rect x="{x:.1f}" y="{py(base + v):.1f}" width="{bw * 0.6:.1f}" '
                f'height="{max(0.0, py(base) - py(base + v)):.1f}" fill="{color}">'
                f"<title>{_esc(lbl)}: {v:.3g}</title></rect>"
            )
            base += v
        parts.append(
            f'<text x="{x + bw * 0.3:.1f}" y="{H - MB + 16}" text-anchor="middle">'
            f"{_esc(name)}</text>"
        )
    for k, lbl in enumerate(labels):
        color = PALETTE[k % len(PALETTE)]
        parts.append(
            f'<rect x="{ML + 8 + 110 * k}" y="{MT - 16}" width="10" height="10" '
            f'fill="{color}"/><text x="{ML + 22 + 110 * k}" y="{MT - 7}">'
            f"{_esc(lbl[:14])}</text>"
        )
    if total_line:
        y = py(total_line[0])
        parts.append(
            f'<line x1="{ML}" x2="{W - MR}" y1="{y:.1f}" y2="{y:.1f}" class="ref"/>'
            f'<text x="{W - MR - 4}" y="{y - 4:.1f}" text-anchor="end" class="ref">'
            f"{_esc(total_line[1])}</text>"
        )
    return _close(parts, [])


def cdf(values: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted finite values and their cumulative fractions (0, 1]."""
    v = np.sort(np.asarray(values, dtype=float))
    v = v[np.isfinite(v)]
    return v, np.arange(1, v.size + 1) / max(1, v.size)


def _frame(title: str, x_title: str, y_title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" '
        f'class="chart" role="img" aria-label="{_esc(title)}">'
        f'<text x="{W / 2}" y="14" text-anchor="middle" class="title">{_esc(title)}</text>'
        f'<line x1="{ML}" y1="{H - MB}" x2="{W - MR}" y2="{H - MB}" class="axis"/>'
        f'<line x1="{ML}" y1="{MT}" x2="{ML}" y2="{H - MB}" class="axis"/>'
        f'<text x="{(ML + W - MR) / 2}" y="{H - 8}" text-anchor="middle">{_esc(x_title)}'
        f'</text><text transform="translate(14,{(MT + H - MB) / 2}) rotate(-90)" '
        f'text-anchor="middle">{_esc(y_title)}</text>'
    )


def _close(parts: list[str], notes: list[str]) -> str:
    svg = "".join(parts) + "</svg>"
    if notes:
        svg += '<p class="note">' + "; ".join(_esc(n) for n in notes) + "</p>"
    return '<figure class="plot">' + svg + "</figure>"


def _empty(title: str, why: str) -> str:
    return f'<figure class="plot empty"><p><b>{_esc(title)}</b>: {_esc(why)}</p></figure>'
