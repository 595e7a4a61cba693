"""``kvscope doctor``: check this host's GPU serving stack, or a captured bundle."""

from __future__ import annotations

from pathlib import Path

import typer

from kvscope.cli.output import print_json, stdout

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skipped": "dim"}


def doctor(
    json_out: bool = typer.Option(False, "--json", help="Machine-readable report on stdout."),
    capture_dir: Path = typer.Option(
        None, "--capture", metavar="DIR", help="Keep the raw probe outputs as a bundle in DIR."
    ),
    from_dir: Path = typer.Option(
        None, "--from", metavar="DIR", help="Check a captured bundle instead of this host."
    ),
    pid: int = typer.Option(
        None, "--pid", help="Also read the maps and environment of this running engine process."
    ),
    python: str = typer.Option(
        None, "--python", help="Interpreter to probe (an engine's venv); default: this one."
    ),
    timeout: float = typer.Option(
        15.0, "--timeout", min=0.5, help="Seconds allowed per external command."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show evidence of ok checks too."),
) -> None:
    """Find driver/runtime, library, GPU-health and host problems before blaming the model.

    Exit code: 0 all ok, 1 warnings, 2 failures (skipped checks do not count).
    """
    import sys

    from kvscope.doctor import ProbeOptions, doctor_live, doctor_offline
    from kvscope.errors import KvscopeError

    if from_dir is not None and (capture_dir is not None or pid is not None or python):
        raise KvscopeError(
            "--from replays a bundle; it cannot be combined with --capture, --pid or --python."
        )
    if from_dir is not None:
        report = doctor_offline(from_dir)
    else:
        opts = ProbeOptions(
            python=python or sys.executable,
            pid=pid,
            command_timeout_s=timeout,
            python_timeout_s=max(60.0, timeout),
        )
        report = doctor_live(capture_dir, opts)
    if json_out:
        print_json(report.to_dict())
    else:
        _render(report, verbose)
    raise typer.Exit(report.exit_code)


def _render(report: object, verbose: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    from kvscope.doctor import Check, DoctorReport, Status

    assert isinstance(report, DoctorReport)
    t = Table(title=escape(f"kvscope doctor: {report.source} ({report.mode})"), show_lines=False)
    for col in ("status", "check", "subject", "finding"):
        t.add_column(col, overflow="fold")
    rows: list[list[Check]] = []
    for c in report.checks:  # fold runs of identical skips (e.g. every GPU check, no GPU)
        prev = rows[-1][0] if rows else None
        same = prev is not None and (prev.status, prev.subject, prev.summary) == (
            c.status,
            c.subject,
            c.summary,
        )
        if same and c.status is Status.SKIPPED:
            rows[-1].append(c)
        else:
            rows.append([c])
    for group in rows:
        c = group[0]
        st = c.status.value
        lines = [escape(c.summary)]
        if c.fix:
            lines.append(f"[cyan]fix:[/cyan] {escape(c.fix)}")
        if verbose or st in ("warn", "fail") or (st == "skipped" and len(group) > 1):
            lines += [f"[dim]{escape(e)}[/dim]" for e in c.evidence]
        prefixes = {x.id.split(".")[0] for x in group}
        head = f"{prefixes.pop()}.*" if len(prefixes) == 1 else f"{c.id} …"
        ids = c.id if len(group) == 1 else f"{head} ({len(group)} checks)"
        t.add_row(f"[{_STYLE[st]}]{st}[/]", escape(ids), escape(c.subject), "\n".join(lines))
    stdout.print(t)
    n = report.counts
    verdict = {0: "[green]healthy[/]", 1: "[yellow]warnings[/]", 2: "[bold red]failures[/]"}
    stdout.print(
        f"{verdict[report.exit_code]}: {n['ok']} ok, {n['warn']} warn, {n['fail']} fail, "
        f"{n['skipped']} skipped (exit code {report.exit_code})"
    )
