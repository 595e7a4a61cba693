"""``kvscope simulate``'s serial run loop: each point simulated with a progress bar on stderr,
its run directory written as it finishes, and Ctrl-C recorded (exit 130) without losing the
points already written. The sweep's parallel executor is :mod:`kvscope.cli.simulate_sweep`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import typer

from kvscope.cli.output import stderr


def run_points(
    points: list[Any], labels: list[str], w: Any, out: Path | None
) -> list[dict[str, Any]]:
    """Simulate each point and write its run directory; Ctrl-C records the point it hit
    (earlier points' directories are complete and stay as they are)."""
    from dataclasses import replace

    from kvscope.sim.run import SimInterrupted

    results = []
    spec = dict(w.spec)
    for point, label in zip(points, labels, strict=True):
        d = None if out is None else (out / label.replace("/", "_") if label else out)
        res = None
        try:
            if label:
                stderr.print(f"[dim]simulating {label} ...[/dim]")
            res = run_point(point, w, stderr)
            run_dir = None
            if d is not None:
                # absolute: pyarrow takes a relative "file:/x" or "s3:/x" for a URI
                res.write(d.absolute(), spec)
                run_dir = str(d)
            results.append({"point": label or None, "run_dir": run_dir, **res.figures})
        except SimInterrupted as stop:
            stopped(stop.result, d, point, spec)
        except KeyboardInterrupt:
            # Before the engine ran, or while the tables were written (then write them
            # again, marked interrupted).
            stopped(None if res is None else replace(res, interrupted=True), d, point, spec)
    return results


def stopped(result: Any, d: Path | None, cfg: Any, spec: dict[str, Any]) -> NoReturn:
    """Record an interrupted run in ``d`` (what the engine served, or at least the config),
    say so in one line and exit 130, as a shell expects after Ctrl-C."""
    from dataclasses import asdict

    from kvscope.sim.outputs import write_interrupted

    if d is None:
        sys.stderr.write("kvscope: interrupted\n")
        raise typer.Exit(130)
    path = d
    if result is not None:
        result.write(d.absolute(), spec, force=True)
        done = result.figures.get("completed", 0)
        sys.stderr.write(
            f"kvscope: interrupted; the partial run ({done:,} of "
            f"{result.figures.get('requests', 0):,} requests finished) is in {path}\n"
        )
    else:
        write_interrupted(d.absolute(), {**asdict(cfg), "workload": spec})
        sys.stderr.write(f"kvscope: interrupted before simulating; {path}/summary.json says so\n")
    raise typer.Exit(130)


def run_point(cfg: Any, w: Any, console: Any) -> Any:
    """One simulation with a progress bar on stderr, shown once the loop is under way."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from kvscope.fleet import simulate as run_sim

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    task = bar.add_task("simulating", total=len(w))

    def progress(done: int, total: int) -> None:
        if not bar.live.is_started:
            bar.start()
        bar.update(task, completed=done)

    try:
        return run_sim(w, cfg, progress)
    finally:
        if bar.live.is_started:
            bar.stop()
