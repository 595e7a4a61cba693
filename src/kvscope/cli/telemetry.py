"""``kvscope telemetry``: work with a telemetry store (export, retention)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import typer

from kvscope.cli.output import print_json, stdout
from kvscope.errors import KvscopeError
from kvscope.redact import redact_text
from kvscope.validate import finite, writable_file

app = typer.Typer(help="Work with a telemetry store.", no_args_is_help=True)

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_since(text: str, now_s: float | None = None, flag: str = "--since") -> float:
    """'90s', '15m', '2h', '7d' (ago), or a Unix time in seconds -> Unix time.

    NaN and infinities are refused: as a retention horizon ``inf`` deletes every row and
    ``nan`` matches none, and either would be reported as a success.
    """
    now = time.time() if now_s is None else now_s
    hint = "Use 30s, 15m, 2h, 7d or a Unix time."
    shown = (redact_text(text) or "")[:60]  # echoed back: never a URL's password
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd])\s*", text)
    try:
        value = now - float(m.group(1)) * _UNITS[m.group(2)] if m else float(text)
    except (ValueError, OverflowError):
        raise KvscopeError(f"cannot read {flag} {shown!r}.", hint) from None
    try:
        return finite(value, f"{flag} {shown!r}")
    except KvscopeError as err:
        raise KvscopeError(err.message, hint) from None


def shown(path: object) -> str:
    """A path (or any user text) as it may be printed: no credentials in it."""
    text = str(path)
    return redact_text(text) or text


@app.command("export")
def export(
    store: Path = typer.Option(Path("kvscope.duckdb"), "--store", help="DuckDB store to read."),
    since: str = typer.Option("0", "--since", help="Rows newer than: 15m, 2h, 7d or Unix time."),
    fmt_flag: str | None = typer.Option(
        None,
        "--format",
        help="parquet, csv or jsonl.",
        show_default="from --out's extension (.parquet, .csv, .jsonl, .ndjson)",
    ),
    out: Path = typer.Option(..., "--out", help="File to write (.parquet, .csv, .jsonl)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Export samples (t_s, source, metric, labels, value, res_s) to Parquet, CSV or JSONL."""
    from kvscope.telemetry.export_format import export_format
    from kvscope.telemetry.store import Store

    since_s = parse_since(since)
    writable_file(out, "export file")  # before reading the store, not after
    fmt = export_format(out, fmt_flag)
    with Store(store, read_only=True) as st:
        n = st.export(out, fmt, since_s)
    # Paths echoed back are redacted: a path may hold a URL's user:password@ (a typo).
    result = {
        "store": shown(store),
        "out": shown(out),
        "format": fmt,
        "rows": n,
        "since_s": since_s,
    }
    if json_out:
        print_json(result)
    else:
        stdout.print(f"wrote {n} rows to {shown(out)} ({fmt})")


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
    from kvscope.telemetry.store import MIN_BUCKET_S, Store

    # Every value is read before the store is opened, and both steps are one transaction:
    # a bad flag or a failure half-way leaves the history as it was.
    down = (
        None
        if downsample_older is None
        else parse_since(downsample_older, flag="--downsample-older-than")
    )
    drop = None if drop_older is None else parse_since(drop_older, flag="--drop-older-than")
    if down is not None:
        finite(bucket, "--bucket", low=MIN_BUCKET_S)
    with Store(store, create=False) as st:
        result = st.maintain(downsample_before_s=down, bucket_s=bucket, drop_before_s=drop)
        result["rows_now"] = st.count()
    if json_out:
        print_json(result)
    else:
        stdout.print(", ".join(f"{k.replace('_', ' ')}: {v:,}" for k, v in result.items()))
