"""``kvscope dmon parse``: read nvidia-smi dmon / --query-gpu CSV logs into samples."""

from __future__ import annotations

from pathlib import Path

import typer

from kvscope.cli.output import print_json, stdout
from kvscope.cli.telemetry import shown
from kvscope.errors import KvscopeError
from kvscope.validate import writable_file

app = typer.Typer(help="Read nvidia-smi logs.", no_args_is_help=True)


@app.command("parse")
def parse(
    file: Path = typer.Argument(..., help="nvidia-smi dmon output or a --query-gpu CSV log."),
    json_out: bool = typer.Option(False, "--json", help="Print samples as JSON."),
    out: Path | None = typer.Option(None, "--out", help="Write samples to a Parquet file."),
) -> None:
    """Parse a log into samples (base units: bytes, watts, hertz, ratios)."""
    from kvscope.telemetry.dmon import parse_smi_log

    if out is not None:
        writable_file(out, "samples file")
    log = parse_smi_log(file)
    if out is not None:
        import pyarrow.parquet as pq

        from kvscope.telemetry.store import samples_table

        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            # A file object, not the path: pyarrow reads 'a:b' in a path as a URI scheme.
            with out.open("wb") as f:
                pq.write_table(samples_table(log.samples), f)
        except OSError as err:
            raise KvscopeError(f"{out}: cannot write the samples ({err}).") from None
    if json_out:
        print_json(
            {
                "format": log.format,
                "rows": log.rows,
                "columns": log.columns,
                "missing_values": log.missing_values,
                "samples": [
                    {"t_s": s.t_s, "source": s.source, "metric": s.metric, "value": s.value}
                    for s in log.samples
                ],
            }
        )
        return
    from rich.table import Table

    stats: dict[tuple[str, str], list[float]] = {}
    for s in log.samples:
        stats.setdefault((s.source, s.metric), []).append(s.value)
    table = Table(
        title=f"{shown(file.name)}: {log.format}, {log.rows} rows, {log.missing_values} missing"
    )
    for col in ("source", "metric", "n", "min", "mean", "max"):
        table.add_column(col, justify="left" if col in ("source", "metric") else "right")
    for (src, metric), vs in sorted(stats.items()):
        table.add_row(
            src,
            metric,
            str(len(vs)),
            f"{min(vs):.4g}",
            f"{sum(vs) / len(vs):.4g}",
            f"{max(vs):.4g}",
        )
    stdout.print(table)
