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
    """Render run directories (simulate, bench, watch, memtrace, comm, plan) as one HTML page."""
    from kvscope.report import write_report
    from kvscope.report.loader import load_run

    path = write_report(run_dirs, out, title)
    runs = [load_run(d) for d in run_dirs]
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
    for r in runs:
        for p in r.problems:
            stderr.print(f"[yellow]{r.label}[/]: {p}")
    typer.echo(f"report written to {path} ({path.stat().st_size / 1024:.0f} KiB)")
