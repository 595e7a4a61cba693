"""``kvscope dashboards``: Grafana dashboards over the real metric names."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from kvscope.cli.output import print_json, stdout
from kvscope.cli.telemetry import shown
from kvscope.errors import KvscopeError
from kvscope.redact import redact_text
from kvscope.validate import writable_file

app = typer.Typer(help="Grafana dashboards.", no_args_is_help=True)


@app.command("export")
def export(
    out: Path | None = typer.Option(None, "--out", help="File to write (default: stdout)."),
    title: str = typer.Option("kvscope: KV cache and GPU memory", "--title", help="Title."),
    json_out: bool = typer.Option(False, "--json", help="Print a summary as JSON."),
) -> None:
    """Write the Grafana dashboard JSON (KV waveform, preemptions, latency, GPU, leak slope)."""
    from kvscope.alerts.dashboard import dashboard

    if out is not None:
        writable_file(out, "dashboard file")  # a directory or a file-as-folder: one line
    # The title is free text that lands in a file others import: no credentials in it.
    doc = dashboard(redact_text(title) or title)
    text = json.dumps(doc, indent=2) + "\n"
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as err:
        raise KvscopeError(f"{out}: cannot write the dashboard ({err.strerror}).") from None
    n = sum(len(p["targets"]) for p in doc["panels"])
    if json_out:
        print_json({"file": shown(out), "panels": len(doc["panels"]), "queries": n})
    else:
        stdout.print(f"wrote {shown(out)}: {len(doc['panels'])} panels, {n} queries")
