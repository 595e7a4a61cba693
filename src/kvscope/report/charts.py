"""Vega-Lite specs for the report's charts: lines over time, CDFs, value-vs-x, bars, heatmaps.

Every spec built here has axis titles with units, hover tooltips, a legend outside the plot
that never shortens a label (``labelLimit: 0``), and one colour per run taken from the page's
:class:`Palette`, so a run has the same colour on every chart. Numeric axes become
logarithmic when their positive values span more than :data:`LOG_SPAN` (two decades).
Series are thinned with :func:`decimate` (each bucket's min and max survive, so peaks do).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Tableau 10: distinct hues, readable on white (Vega's own default categorical scheme).
COLORS = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#eeca3b",
    "#b279a2",
    "#ff9da6",
    "#9d755d",
    "#bab0ac",
)
#: Ratio of largest to smallest positive value above which an axis is logarithmic.
LOG_SPAN = 100.0
#: Points kept per series (min and max of ~750 buckets).
MAX_POINTS = 1500
WIDTH, HEIGHT = 560, 230


@dataclass(frozen=True)
class Palette:
    """One colour per series name, fixed for the whole page."""

    names: tuple[str, ...]

    def color(self, name: str) -> str:
        i = self.names.index(name) if name in self.names else len(self.names)
        return COLORS[i % len(COLORS)]

    def extended(self, names: Sequence[str]) -> Palette:
        """This palette with ``names`` it does not hold yet appended (new colours)."""
        return Palette(self.names + tuple(n for n in dict.fromkeys(names) if n not in self.names))

    def scale(self, names: Sequence[str]) -> dict[str, Any]:
        """A colour scale holding exactly ``names`` (one legend entry each)."""
        return {"domain": list(names), "range": [self.color(n) for n in names]}


@dataclass(frozen=True)
class Line:
    """One series: ``name`` (its legend entry) and its points."""

    name: str
    x: np.ndarray
    y: np.ndarray


def decimate(
    x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Keep each bucket's min and max so peaks survive downsampling."""
    n = len(x)
    if n <= max_points:
        return x, y, False
    edges = np.linspace(0, n, max_points // 2 + 1).astype(int)
    keep: list[int] = []
    for a, b in itertools.pairwise(edges):
        if b <= a:
            continue
        seg = y[a:b]
        finite = np.where(np.isfinite(seg))[0]
        if finite.size == 0:
            continue
        keep.extend(
            sorted(
                {a + int(finite[np.argmin(seg[finite])]), a + int(finite[np.argmax(seg[finite])])}
            )
        )
    idx = np.asarray(keep, dtype=int)
    return x[idx], y[idx], True


def cdf(values: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted finite values and their cumulative fractions (0, 1]."""
    v = np.sort(np.asarray(values, dtype=float))
    v = v[np.isfinite(v)]
    return v, np.arange(1, v.size + 1) / max(1, v.size)


def wants_log(values: Sequence[np.ndarray]) -> bool:
    """Whether positive values span more than :data:`LOG_SPAN` (and none is <= 0)."""
    parts = [np.asarray(v, dtype=float) for v in values]
    allv = np.concatenate(parts) if parts else np.zeros(0)
    allv = allv[np.isfinite(allv)]
    if allv.size == 0 or (allv <= 0).any():
        return False
    return bool(allv.max() / allv.min() > LOG_SPAN)


def _num(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _g(v: float) -> float:
    """``v`` to 5 significant digits (what a chart can show; keeps the page small)."""
    return float(f"{v:.5g}")


def _rows(lines: Sequence[Line], log_x: bool, log_y: bool) -> list[dict[str, Any]]:
    """One row per series with its ``x`` and ``y`` lists (flattened by the spec)."""
    rows: list[dict[str, Any]] = []
    for s in lines:
        x = np.asarray(s.x, dtype=float)
        y = np.asarray(s.y, dtype=float)
        ok = np.isfinite(x) & np.isfinite(y)
        if log_x:
            ok &= x > 0
        if log_y:
            ok &= y > 0
        x, y, _ = decimate(x[ok], y[ok])
        rows.append(
            {"s": s.name, "x": [_g(a) for a in x.tolist()], "y": [_g(b) for b in y.tolist()]}
        )
    return rows


def _axis_scale(log: bool, zero: bool = False) -> dict[str, Any]:
    return {"type": "log"} if log else {"zero": zero, "nice": True}


def _legend() -> dict[str, Any]:
    return {"orient": "bottom", "direction": "vertical", "labelLimit": 0, "title": None}


def _base(title: str, subtitle: Sequence[str] = ()) -> dict[str, Any]:
    t: dict[str, Any] = {"text": title, "anchor": "start", "limit": 0}
    if subtitle:
        t["subtitle"] = list(subtitle)
        t["subtitleColor"] = "#555"
    return {
        "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
        "title": t,
        "width": WIDTH,
        "height": HEIGHT,
        "config": {"axis": {"labelLimit": 0, "titleLimit": 0}, "view": {"stroke": "#ddd"}},
    }


def line_chart(
    title: str,
    x_title: str,
    y_title: str,
    lines: Sequence[Line],
    palette: Palette,
    *,
    step: bool = False,
    zoom: bool = True,
    x_log: bool | None = None,
    y_log: bool | None = None,
    zero: bool = True,
    rules_x: Sequence[tuple[float, str]] = (),
    rules_y: Sequence[tuple[float, str]] = (),
    marks: Sequence[tuple[float, float, str]] = (),
    subtitle: Sequence[str] = (),
    points: bool = False,
) -> dict[str, Any]:
    """Lines (one per series, coloured by name) with hover values, zoom and reference lines.

    ``rules_x``/``rules_y``: labelled reference lines (an SLO, a budget); ``marks``: labelled
    points (a peak). Log axes when asked, or (``None``) when the values span two decades.
    """
    lx = wants_log([s.x for s in lines]) if x_log is None else x_log
    ly = wants_log([s.y for s in lines]) if y_log is None else y_log
    names = [s.name for s in lines]
    x_enc = {"field": "x", "type": "quantitative", "title": x_title, "scale": _axis_scale(lx)}
    y_enc = {
        "field": "y",
        "type": "quantitative",
        "title": y_title,
        "scale": _axis_scale(ly, zero and not ly),
    }
    color = {
        "field": "s",
        "type": "nominal",
        "scale": palette.scale(names),
        "legend": _legend(),
        "title": None,
    }
    tip = [
        {"field": "s", "title": "series"},
        {"field": "x", "title": x_title, "format": ",.4~g"},
        {"field": "y", "title": y_title, "format": ",.4~g"},
    ]
    line_mark: dict[str, Any] = {"type": "line", "strokeWidth": 1.5, "clip": True}
    if step:
        line_mark["interpolate"] = "step-after"
    if points:
        line_mark["point"] = True
    hover: dict[str, Any] = {
        "name": "hover",
        "select": {"type": "point", "encodings": ["x"], "nearest": True, "on": "pointermove"},
    }
    layers: list[dict[str, Any]] = [
        {"mark": line_mark, "encoding": {"x": x_enc, "y": y_enc, "color": color}},
        {
            "mark": {"type": "point", "filled": True, "size": 40, "clip": True},
            "params": [hover],
            "encoding": {
                "x": x_enc,
                "y": y_enc,
                "color": {**color, "legend": None},
                "opacity": {
                    "condition": {"param": "hover", "empty": False, "value": 1},
                    "value": 0,
                },
                "tooltip": tip,
            },
        },
    ]
    if zoom:
        layers[0]["params"] = [
            {"name": "zoom", "select": {"type": "interval", "encodings": ["x"]}, "bind": "scales"}
        ]
    for value, label in rules_x:
        layers.append(_rule("x", value, label, x_title, _late(value, [s.x for s in lines], lx)))
    for value, label in rules_y:
        layers.append(_rule("y", value, label, y_title, _late(value, [s.y for s in lines], ly)))
    if marks:
        layers.append(
            {
                "data": {"values": [{"x": a, "y": b, "label": t} for a, b, t in marks]},
                "mark": {"type": "point", "shape": "triangle-down", "size": 80, "color": "#c33"},
                "encoding": {
                    "x": {"field": "x", "type": "quantitative"},
                    "y": {"field": "y", "type": "quantitative"},
                    "tooltip": [{"field": "label", "title": "mark"}],
                },
            }
        )
    return {
        **_base(title, subtitle),
        "data": {"values": _rows(lines, lx, ly)},
        "transform": [{"flatten": ["x", "y"]}],
        "layer": layers,
        "resolve": {"legend": {"color": "shared"}},
    }


def _late(value: float, data: Sequence[np.ndarray], log: bool) -> bool:
    """Whether ``value`` lies in the upper part of the axis (its label then goes before it)."""
    v = np.concatenate([np.asarray(d, dtype=float) for d in data] + [np.asarray([value])])
    v = v[np.isfinite(v) & ((v > 0) if log else True)]
    if v.size == 0:
        return False
    lo, hi = float(v.min()), float(v.max())
    if log and lo > 0:
        lo, hi, value = math.log10(lo), math.log10(hi), math.log10(max(value, 1e-300))
    return hi > lo and value > lo + 0.6 * (hi - lo)


def _rule(axis: str, value: float, label: str, title: str, late: bool) -> dict[str, Any]:
    """A dashed reference line with its label written inside the plot, never cut: right of
    the line (above it for a horizontal one), or left of (below) it when ``late``."""
    text_enc: dict[str, Any] = {
        axis: {"datum": value, "type": "quantitative"},
        "text": {"value": label},
    }
    if axis == "x":
        text_enc["y"] = {"value": 0}
    else:
        text_enc["x"] = {"value": WIDTH}
    return {
        "data": {"values": [{}]},  # one rule and one label, not one per row of the chart
        "layer": [
            {
                "mark": {"type": "rule", "color": "#c33", "strokeDash": [4, 3]},
                "encoding": {
                    axis: {"datum": value, "type": "quantitative"},
                    "tooltip": {"value": f"{label} ({title})"},
                },
            },
            {
                "mark": {
                    "type": "text",
                    "color": "#c33",
                    "align": ("right" if late else "left") if axis == "x" else "right",
                    "baseline": "top" if axis == "x" else ("top" if late else "bottom"),
                    "dx": (-4 if late else 4) if axis == "x" else -4,
                    "dy": 4 if axis == "x" else (3 if late else -3),
                    "limit": 0,
                },
                "encoding": text_enc,
            },
        ],
    }


def bar_chart(
    title: str,
    y_title: str,
    bars: Sequence[tuple[str, Sequence[tuple[str, float]]]],
    palette: Palette,
    total: tuple[float, str] | None = None,
) -> dict[str, Any]:
    """Horizontal stacked bars: one per run, segments coloured by part (``palette`` names)."""
    rows = [
        {"run": run, "part": part, "v": float(v), "order": i}
        for run, segs in bars
        for i, (part, v) in enumerate(segs)
    ]
    parts = list(dict.fromkeys(part for _run, segs in bars for part, _v in segs))
    layers: list[dict[str, Any]] = [
        {
            "mark": {"type": "bar"},
            "encoding": {
                "y": {"field": "run", "type": "nominal", "title": None, "sort": None},
                "x": {"field": "v", "type": "quantitative", "title": y_title, "stack": "zero"},
                "color": {
                    "field": "part",
                    "type": "nominal",
                    "scale": palette.scale(parts),
                    "legend": _legend(),
                },
                "order": {"field": "order"},
                "tooltip": [
                    {"field": "run"},
                    {"field": "part"},
                    {"field": "v", "title": y_title, "format": ",.2f"},
                ],
            },
        }
    ]
    if total is not None:
        layers.append(_rule("x", total[0], f"{total[1]} {total[0]:,.1f}", y_title, True))
    spec = {**_base(title), "data": {"values": rows}, "layer": layers}
    spec["height"] = max(40, 36 * len(bars))
    return spec


def heatmap(
    title: str,
    x_title: str,
    y_title: str,
    matrix: np.ndarray,
    x_span: tuple[float, float],
    value_title: str,
) -> dict[str, Any]:
    """Cells of ``matrix`` (rows x cols) as coloured rectangles; NaN cells are left out."""
    cols_n = matrix.shape[1]
    dx = (x_span[1] - x_span[0]) / max(cols_n, 1)
    values = [
        {"x": x_span[0] + j * dx, "x2": x_span[0] + (j + 1) * dx, "y": i, "y2": i + 1, "v": v}
        for (i, j), v in np.ndenumerate(matrix)
        if math.isfinite(v)
    ]
    return {
        **_base(title),
        "data": {"values": values},
        "mark": {"type": "rect"},
        "encoding": {
            "x": {"field": "x", "type": "quantitative", "title": x_title},
            "x2": {"field": "x2"},
            "y": {
                "field": "y",
                "type": "quantitative",
                "title": y_title,
                "scale": {"reverse": True},
            },
            "y2": {"field": "y2"},
            "color": {
                "field": "v",
                "type": "quantitative",
                "title": value_title,
                "scale": {"scheme": "blues", "domain": [0, 1]},
                "legend": {"orient": "right", "titleLimit": 0},
            },
            "tooltip": [
                {"field": "y", "title": y_title},
                {"field": "x", "title": x_title, "format": ",.1f"},
                {"field": "v", "title": value_title, "format": ".2f"},
            ],
        },
    }
