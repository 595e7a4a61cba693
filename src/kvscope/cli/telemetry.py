"""``kvscope telemetry``: work with a telemetry store (export, retention)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import typer

from kvscope.cli.output import print_json, stdout
from kvscope.errors import KvscopeError

app = typer.Typer(help="Work with a telemetry store.", no_args_is_help=True)

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_since(text: str, now_s: float | None = None) -> float:
    """'90s', '15m', '2h', '7d' (ago), or a Unix time in seconds -> Unix time."""
    now = time.time() if now_s is None else now_s
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        return float(text)
    except ValueError as err:
        raise KvscopeError(
            f"cannot read --since '{text}'.", "Use 30s, 15m, 2h, 7d or a Unix time."
        ) from err


@app.command("export")
def export(
    store: Path = typer.Option(Path("kvscope.duckdb"), "--store", help="DuckDB store to read."),
    since: str = typer.Option("0", "--since", help="Rows newer than: 15m, 2h, 7d or Unix time."),
    fmt: str = typer.Option("parquet", "--format", help="parquet or csv."),
    out: Path = typer.Option(..., "--out", help="File to write."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Export samples (t_s, source, metric, labels, value, res_s) to Parquet or CSV."""
    from kvscope.telemetry.store import Store

    since_s = parse_since(since)
    with Store(store, read_only=True) as st:
        n = st.export(out, fmt, since_s)
    result = {"store": str(store), "out": str(out), "format": fmt, "rows": n, "since_s": since_s}
    if json_out:
        print_json(result)
    else:
        stdout.print(f"wrote {n} rows to {out} ({fmt})")


@app.command("retain")
def retain(
    store: Path = typer.Option(Path("kvscope.duckdb"), "--store", help="DuckDB store."),
    downsample_older: str | None = typer.Option(
        None, "--downsample-older-than", help="Average raw rows older than this (e.g. 1h)."
    ),
    bucket: float = typer.Option(60.0, "--bucket", help="Downsampling bucket in seconds."),
    drop_older: str | None = typer.Option(
        None, "--drop-older-than", help="Delete rows older than this (e.g. 30d)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Downsample old raw samples to bucket means and drop rows past the horizon."""
    from kvscope.telemetry.store import Store

    result: dict[str, int] = {}
    with Store(store) as st:
        if downsample_older is not None:
            result["rows_downsampled_away"] = st.downsample(parse_since(downsample_older), bucket)
        if drop_older is not None:
            result["rows_dropped"] = st.retain(parse_since(drop_older))
        result["rows_now"] = st.count()
    if json_out:
        print_json(result)
    else:
        stdout.print(", ".join(f"{k}: {v}" for k, v in result.items()))
