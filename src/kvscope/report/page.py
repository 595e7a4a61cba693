"""Assemble a self-contained HTML report from one or more run directories.

The output path is checked before any run is read (a parent that is a file, a directory in
its place, no permission: one error line), and the page is written to a temporary file and
renamed, so a failed write never leaves half a report.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kvscope import __version__
from kvscope.redact import redact_text
from kvscope.report import headline, sections, sweeps
from kvscope.report.charts import Palette
from kvscope.report.loader import LoadedRun, load_run
from kvscope.report.vega import page_script
from kvscope.validate import writable_file, write_text_atomic

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1360px;color:#222;
padding:0 12px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
figure.plot{display:inline-block;margin:8px 6px;vertical-align:top;min-width:640px}
.note{font-size:12px;color:#666;margin:2px 4px}.lead{font-size:15px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:right}td:first-child,th:first-child{text-align:left}
section.headlines{display:flex;flex-wrap:wrap;gap:16px}
table.headline caption{font-weight:600;text-align:left;padding:2px 0}
table.headline th.fig{text-align:left;white-space:nowrap}
table.headline td{font-variant-numeric:tabular-nums;white-space:nowrap}
table.headline td.mean{text-align:left;color:#666;white-space:normal;font-size:12px}
.problems{background:#fff6e5;border:1px solid #f0c36d;padding:4px 12px}
pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:400px}
"""

#: Extra sections by run kind; packages register theirs here (memtrace, comm, plan, ...).
KIND_SECTIONS: dict[str, Callable[[Sequence[LoadedRun], Palette], str]] = {}
#: Sweeps with more points than this show the comparison only (not every point's charts).
MAX_SWEEP_RUNS = 5


def build_report(run_dirs: Sequence[str | Path], title: str | None = None) -> str:
    """The HTML of a report over ``run_dirs`` (side by side when several)."""
    return render_report([load_run(d) for d in run_dirs], title)


def render_report(runs: Sequence[LoadedRun], title: str | None = None) -> str:
    """The HTML of a report over loaded runs."""
    title = redact_text(title)  # a page is sent to others: no credential pasted into it
    from kvscope.report import kinds as kind_sections

    kind_sections.register()
    shown: list[LoadedRun] = []  # runs whose own tables are drawn
    points: set[int] = set()  # sweep points: their figures are in the sweep's table
    folders: list[str] = []
    for r in runs:
        if r.kind == "sweep":
            folders.append(sweeps.sweep_section(r, Palette(tuple(c.label for c in r.children))))
            if len(r.children) <= MAX_SWEEP_RUNS:
                shown.extend(r.children)
                points.update(id(c) for c in r.children)
        elif r.kind == "max-rate":
            folders.append(sweeps.max_rate_section(r, Palette(())))
        elif r.kind == "tune":
            from kvscope.report.tune_page import tune_section

            folders.append(tune_section(r))
            shown.extend(r.children)
        else:
            shown.append(r)
    drawn = sorted(shown, key=lambda r: r.kind in ("plan", "comm"))  # runs with lines first
    palette = Palette(tuple(dict.fromkeys(r.label for r in drawn)))
    kinds = list(dict.fromkeys(r.kind for r in shown))
    body = [
        f"<h1>{html.escape(title or 'kvscope report')}</h1>",
        f'<p class="note">{len(runs)} run(s): '
        + ", ".join(f"{html.escape(r.label)} ({html.escape(r.kind)})" for r in runs)
        + f"; kvscope {__version__}; generated {time.strftime('%Y-%m-%d %H:%M:%S')}</p>",
        sections.problems_section([*runs, *(c for r in runs for c in r.children)]),
        headline.headline_section([r for r in shown if id(r) not in points]),
        *folders,
        sections.latency_section(shown, palette),
        sections.timeseries_section(shown, "steps", palette),
        sections.timeseries_section(shown, "server", palette),
    ]
    for kind in kinds:
        fn = KIND_SECTIONS.get(kind)
        if fn:
            body.append(fn([r for r in shown if r.kind == kind], palette))
    body.append(headline.summary_details(shown))
    body.append(sections.config_section(shown))
    page = "".join(b for b in body if b)
    if 'class="vl-chart' in page:
        page += page_script()
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>"
        + html.escape(title or "kvscope report")
        + f"</title><style>{CSS}</style></head>"
        "<body>" + page + "</body></html>"
    )


def write_report(run_dirs: Sequence[str | Path], out: str | Path, title: str | None = None) -> Path:
    """Write the report to ``out`` (atomic) and return its path."""
    writable_file(out, "report")
    return save_report(build_report(run_dirs, title), out)


def save_report(page: str, out: str | Path) -> Path:
    """Write ``page`` to ``out`` through a temporary file; one error line if it cannot."""
    return write_text_atomic(out, page, "report")
