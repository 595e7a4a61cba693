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
from kvscope.report import sections
from kvscope.report.loader import LoadedRun, load_run
from kvscope.validate import writable_file, write_text_atomic

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1320px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
figure.plot{display:inline-block;margin:8px;vertical-align:top;width:640px}
svg.chart{width:640px;height:290px;background:#fff;border:1px solid #eee}
svg text{font-size:11px;fill:#333}svg text.title{font-size:13px;font-weight:600}
.grid{stroke:#eee}.axis{stroke:#888}.ref{stroke:#c33;stroke-dasharray:4 3;fill:#c33}
.mark{fill:#c33}.note{font-size:12px;color:#666;margin:2px 4px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;
text-align:right}td:first-child,th:first-child{text-align:left}
.problems{background:#fff6e5;border:1px solid #f0c36d;padding:4px 12px}
pre{background:#f7f7f7;padding:8px;overflow:auto;max-height:400px}
"""

#: Extra sections by run kind; packages register theirs here (memtrace, comm, plan, ...).
KIND_SECTIONS: dict[str, Callable[[Sequence[LoadedRun]], str]] = {}


def build_report(run_dirs: Sequence[str | Path], title: str | None = None) -> str:
    """The HTML of a report over ``run_dirs`` (side by side when several)."""
    return render_report([load_run(d) for d in run_dirs], title)


def render_report(runs: Sequence[LoadedRun], title: str | None = None) -> str:
    """The HTML of a report over loaded runs."""
    title = redact_text(title)  # a page is sent to others: no credential pasted into it
    from kvscope.report import kinds as kind_sections

    kind_sections.register()
    kinds = sorted({r.kind for r in runs})
    body = [
        f"<h1>{html.escape(title or 'kvscope report')}</h1>",
        f'<p class="note">{len(runs)} run(s): '
        + ", ".join(f"{html.escape(r.label)} ({html.escape(r.kind)})" for r in runs)
        + f"; kvscope {__version__}; generated {time.strftime('%Y-%m-%d %H:%M:%S')}</p>",
        sections.problems_section(runs),
        sections.summary_table(runs),
        sections.latency_section(runs),
        sections.timeseries_section(runs, "steps"),
        sections.timeseries_section(runs, "server"),
    ]
    for kind in kinds:
        fn = KIND_SECTIONS.get(kind)
        if fn:
            body.append(fn([r for r in runs if r.kind == kind]))
    body.append(sections.config_section(runs))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>"
        + html.escape(title or "kvscope report")
        + f"</title><style>{CSS}</style></head>"
        "<body>" + "".join(b for b in body if b) + "</body></html>"
    )


def write_report(run_dirs: Sequence[str | Path], out: str | Path, title: str | None = None) -> Path:
    """Write the report to ``out`` (atomic) and return its path."""
    writable_file(out, "report")
    return save_report(build_report(run_dirs, title), out)


def save_report(page: str, out: str | Path) -> Path:
    """Write ``page`` to ``out`` through a temporary file; one error line if it cannot."""
    return write_text_atomic(out, page, "report")
