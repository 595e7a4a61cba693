"""``kvscope workload from-events``: a watch capture of KV-cache events as a workload file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kvscope.cli.workload import ForceOpt, JsonOpt, SeedOpt, output_file


def from_events(
    store: Annotated[Path, typer.Argument(help="DuckDB store of kvscope watch --kv-events.")],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Output file: .parquet or .jsonl (omit to only describe)."),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option("--endpoint", help="Only this --kv-events endpoint's events [default: all]."),
    ] = None,
    output_len: Annotated[
        str | None,
        typer.Option(
            "--output-len",
            help="Output tokens, same forms as for generate (the stream has none). Default 1.",
            show_default=False,
        ),
    ] = None,
    seed: SeedOpt = None,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Requests with arrival, prompt length and the engine's block hashes, from a capture."""
    from kvscope.cli.output import print_json, stdout
    from kvscope.telemetry.kv_events.table import read_capture
    from kvscope.workload.kv_reuse.reconstruct import chains
    from kvscope.workload.kv_reuse.replay import workload_from_chains
    from kvscope.workload.spec import parse_length

    dist = None if output_len is None else parse_length(output_len, column="output")
    if out is not None:
        output_file(out, force)
    rows = read_capture(store, endpoint)
    src = {"path": str(store), "endpoint": endpoint, "rows": len(rows)}
    w = workload_from_chains(chains(rows), dist, seed or 0, src)
    result: dict[str, Any] = {
        "out": str(w.save(out)) if out is not None else None,
        "requests": len(w),
        "duration_s": w.duration_s,
        "spec": w.spec,
    }
    if json_out:
        print_json(result)
        return
    s = w.spec
    stdout.print(
        f"{len(w):,} requests over {w.duration_s:,.1f} s, {s['distinct_blocks']:,} distinct "
        f"{s['block_size']}-token blocks, engine hit rate {s['engine_hit_rate']:.1%}"
        + (f"; wrote {result['out']}" if out is not None else " (pass --out to write them)")
    )
