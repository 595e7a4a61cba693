"""``kvscope report``: one self-contained HTML page for one or more run directories."""

from __future__ import annotations

from pathlib import Path

import typer

from kvscope.cli.output import print_json, stderr


def report(
    run_dirs: list[Path] = typer.Argument(..., help="Run directories (side by side if several)."),
    out: Path = typer.Option(Path("report.html"), "--out", "-o", help="HTML file to write."),
    title: str = typer.Option(None, "--title", help="Page title."),
    json_out: bool = typer.Option(False, "--json", help="Print {path, runs, problems} as JSON."),
) -> None:
    """Render run directories (simulate, bench, watch, memtrace, comm, plan) as one HTML page.

    A folder of simulate --sweep renders as a comparison along the swept value, one
    of bench --find-max-rate as a capacity curve.
    """
    from kvscope.redact import redact_text
    from kvscope.report.loader import load_run
    from kvscope.report.page import render_report, save_report
    from kvscope.validate import writable_file

    writable_file(out, "report")  # before reading runs: a bad --out is one line, at once
    runs = [load_run(d) for d in run_dirs]
    path = save_report(render_report(runs, title), out)
    if json_out:
        print_json(
            {
                "path": str(path),
                "bytes": path.stat().st_size,
                "runs": [
                    {
                        "path": str(r.path),
                        "kind": r.kind,
                        "tables": sorted(r.tables),
                        "problems": r.problems,
                    }
                    for r in runs
                ],
            }
        )
        return
    from rich.markup import escape

    for r in runs:
        for p in r.problems:
            stderr.print(f"[yellow]{escape(r.label)}[/]: {escape(p)}", soft_wrap=True)
    shown = redact_text(str(path))
    typer.echo(f"report written to {shown} ({path.stat().st_size / 1024:.0f} KiB)")
