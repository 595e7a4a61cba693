"""``kvscope memtrace``: analyse, compare, generate and record PyTorch CUDA memory snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kvscope.cli.output import print_json, stderr, stdout

if TYPE_CHECKING:
    from kvscope.memtrace.analysis import MemtraceReport
    from kvscope.memtrace.compare import SnapshotDiff

app = typer.Typer(
    help="Explain fragmentation, leaks and OOMs from PyTorch CUDA memory snapshots.",
    no_args_is_help=True,
)


_FORCE = typer.Option(False, "--force", help="Replace --out when it already holds a run.")


# Site names, file names and actions come from the snapshot (anyone's file): every such
# string is escaped, so a name like "[/bold]" prints as it is instead of breaking the markup.


def escape(text: str) -> str:
    """Rich markup escaped (``[/x]`` in a frame name prints as is); rich is imported on use."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _load(path: Path, use_cache: bool) -> tuple[Any, str]:
    """The snapshot's columns and the line that says what was read (printed once all loaded,
    so a later error is still the only line on stderr)."""
    from kvscope.memtrace.load import load_snapshot

    with stderr.status(f"reading {escape(str(path))} ..."):
        cols, cached = load_snapshot(path, use_cache=use_cache)
    said = f"{escape(str(path))}: {len(cols.trace):,} trace entries" + (
        " (from cache)" if cached else ""
    )
    return cols, said


@app.command("analyze")
def analyze_cmd(
    file: Path = typer.Argument(..., help="Snapshot pickle from torch.cuda.memory._dump_snapshot."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    since: float | None = typer.Option(
        None,
        "--since",
        help="Window start, s from the first trace entry (entry number if the "
        "snapshot has no time_us).",
        show_default="the first entry",
    ),
    until: float | None = typer.Option(
        None, "--until", help="Window end, same unit as --since.", show_default="the last entry"
    ),
    compare_with: Path | None = typer.Option(
        None, "--compare", help="A second snapshot: report what changed from FILE to it."
    ),
    out: Path | None = typer.Option(None, "--out", help="Write a run directory here."),
    force: bool = _FORCE,
    top: int = typer.Option(10, "--top", min=1, help="Rows in the site tables."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Ignore and do not write the cache."),
) -> None:
    """Timeline, fragmentation, OOMs, retries, leak candidates, top sites, categories."""
    from kvscope.errors import KvscopeError
    from kvscope.memtrace.analysis import analyze
    from kvscope.validate import fresh_run_dir

    if since is not None and until is not None and until < since:
        # Before the snapshot is read, so this is the only line on stderr.
        raise KvscopeError(f"--until ({until:g}) is before --since ({since:g}).")
    if out is not None:
        if compare_with is not None:
            raise KvscopeError("--out writes the run of one snapshot; it cannot go with --compare.")
        fresh_run_dir(out, force=force)  # before reading a snapshot that may take minutes
    cols, said = _load(file, not no_cache)
    if compare_with is not None:
        from kvscope.memtrace.compare import compare

        other, said_other = _load(compare_with, not no_cache)
        stderr.print(said)
        stderr.print(said_other)
        diff = compare(cols, other, top=top)
        if json_out:
            print_json(diff)
        else:
            _print_diff(diff, file, compare_with)
        return
    stderr.print(said)
    report = analyze(cols, since_s=since, until_s=until, top=top, source=str(file))
    if out is not None:
        from kvscope.memtrace.rundir import write_run

        write_run(report, cols, out, force=force)
        stderr.print(f"run directory: {escape(str(out))}")
    if json_out:
        print_json({"kind": "memtrace", **report.headline(), "report": report})
    else:
        _print_report(report)


@app.command("generate")
def generate_cmd(
    out: Path = typer.Option(..., "--out", help="Snapshot pickle to write."),
    scenario: str = typer.Option("steady", "--scenario", help="steady, leak, fragmentation, oom."),
    steps: int = typer.Option(500, "--steps", min=1, help="Decode steps (steady, leak)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same snapshot)."),
    devices: int = typer.Option(1, "--devices", min=1, help="CUDA devices in the snapshot."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Write a synthetic snapshot in PyTorch's format (see kvscope.memtrace.generator)."""
    from kvscope.memtrace.generator import GeneratorConfig, write_snapshot
    from kvscope.validate import writable_file

    writable_file(out, "snapshot file")
    p = write_snapshot(
        GeneratorConfig(scenario=scenario, steps=steps, seed=seed, devices=devices), out
    )
    info = {"path": str(p), "scenario": scenario, "bytes": p.stat().st_size}
    if json_out:
        print_json(info)
    else:
        stdout.print(
            f"wrote {escape(str(p))} ({info['bytes']:,} bytes, scenario {escape(scenario)})"
        )


@app.command("record", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def record_cmd(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="Snapshot pickle to write."),
    max_entries: int = typer.Option(1_000_000, "--max-entries", min=1, help="Trace ring buffer."),
    force: bool = typer.Option(
        False, "--force", help="Replace --out when it already holds a snapshot."
    ),
) -> None:
    """Run `-- python script.py args...` with memory history on; dump on exit or OOM."""
    from kvscope.memtrace.record import record_script

    p = record_script(list(ctx.args), out, max_entries, force=force)
    stderr.print(f"snapshot written: {escape(str(p))}")


def _print_report(r: MemtraceReport) -> None:
    from rich.table import Table

    t = Table(title=f"memory over time ({r.entries_in_window:,} of {r.trace_entries:,} entries)")
    for c in ("device", "span s", "peak allocated", "at s", "peak reserved", "OOMs", "retries"):
        t.add_column(c, justify="right")
    for d in r.devices:
        t.add_row(
            str(d.device),
            f"{d.start_t_s:.1f}-{d.end_t_s:.1f}",
            _mib(d.peak_allocated_bytes),
            f"{d.peak_allocated_t_s:.2f}",
            _mib(d.peak_reserved_bytes),
            str(d.ooms),
            str(d.alloc_retries),
        )
    stdout.print(t)
    t = Table(title="fragmentation at the end (1 - largest free / total free)")
    for c in (
        "scope",
        "reserved",
        "allocated",
        "free",
        "largest free",
        "external",
        "internal waste",
    ):
        t.add_column(c, justify="right")
    for f in r.fragmentation:
        t.add_row(
            f.scope,
            _mib(f.reserved_bytes),
            _mib(f.allocated_bytes),
            _mib(f.free_bytes),
            _mib(f.largest_free_bytes),
            f"{f.external_frag:.1%}",
            _mib(f.internal_waste_bytes),
        )
    stdout.print(t)
    if r.fragmentation_course:
        worst = max(r.fragmentation_course, key=lambda p: p.external_frag)
        stdout.print(
            f"worst external fragmentation over time: {worst.external_frag:.1%} "
            f"at {worst.t_s:.2f} s (device {worst.device})"
        )
    for o in r.ooms:
        stdout.print(
            f"[bold red]OOM[/] at {o.t_s:.2f} s on device {o.device}: asked "
            f"{_mib(o.requested_bytes)}, CUDA free {_mib(o.device_free_bytes)}, free in "
            f"reserved {_mib(o.free_in_reserved_bytes)}, largest free block "
            f"{_mib(o.largest_free_bytes)} -> {o.verdict}"
        )
    if any(o.verdict == "fragmentation" for o in r.ooms):
        stdout.print(
            "  the memory existed but in pieces: try PYTORCH_CUDA_ALLOC_CONF="
            "expandable_segments:True (lets free blocks of a segment grow and merge)"
        )
    if r.leaks:
        t = Table(title="leak candidates (live at the end, same site, growing)")
        for c in ("site", "live", "live bytes", "MB/min", "r2"):
            t.add_column(c, justify="right")
        for lk in r.leaks:
            t.add_row(
                escape(lk.site),
                str(lk.live_count),
                _mib(lk.live_bytes),
                f"{lk.slope_mb_per_min:.2f}",
                f"{lk.r2:.3f}",
            )
        stdout.print(t)
    else:
        stdout.print("no leak candidates")
    t = Table(title="top allocation sites by bytes")
    for c in ("site", "count", "bytes", "live at end"):
        t.add_column(c, justify="right")
    for s in r.top_sites_by_bytes:
        t.add_row(escape(s.site), f"{s.count:,}", _mib(s.bytes), _mib(s.live_at_end_bytes))
    stdout.print(t)
    t = Table(title="categories (a guess from frames, sizes and lifetimes)")
    for c in ("category", "count", "bytes", "live at end"):
        t.add_column(c, justify="right")
    for cs in r.categories:
        t.add_row(escape(cs.category), f"{cs.count:,}", _mib(cs.bytes), _mib(cs.live_at_end_bytes))
    stdout.print(t)
    if r.unknown_actions:
        stdout.print(
            "unknown trace actions (counted, not analysed): "
            + ", ".join(f"{escape(k)} x{v}" for k, v in r.unknown_actions.items())
        )


def _print_diff(d: SnapshotDiff, a: Path, b: Path) -> None:
    from rich.table import Table

    t = Table(title=escape(f"{a.name} -> {b.name}"))
    for c in ("", "A", "B", "B - A"):
        t.add_column(c, justify="right")
    for name, x, y in (
        ("reserved", d.a.reserved_bytes, d.b.reserved_bytes),
        ("allocated", d.a.allocated_bytes, d.b.allocated_bytes),
        ("free in reserved", d.a.free_bytes, d.b.free_bytes),
        ("largest free", d.a.largest_free_bytes, d.b.largest_free_bytes),
    ):
        t.add_row(name, _mib(x), _mib(y), _mib(y - x))
    t.add_row(
        "external frag",
        f"{d.a.external_frag:.1%}",
        f"{d.b.external_frag:.1%}",
        f"{d.external_frag_delta:+.1%}",
    )
    stdout.print(t)
    stdout.print(
        f"segments only in A: {d.segments_only_in_a} ({_mib(d.bytes_only_in_a)}); "
        f"only in B: {d.segments_only_in_b} ({_mib(d.bytes_only_in_b)})"
    )
    t = Table(title="live bytes by site")
    for c in ("site", "A", "B", "B - A"):
        t.add_column(c, justify="right")
    for s in d.sites:
        t.add_row(escape(s.site), _mib(s.a_bytes), _mib(s.b_bytes), _mib(s.delta_bytes))
    stdout.print(t)
