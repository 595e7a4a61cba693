"""The progress bar of a many-point job: points done of all, the best so far, an ETA.

Drawn with rich on the console it is given (stderr for the CLI), refreshed as each point is
saved; the ETA is rich's, from the rate at which points have finished in this run (resumed
points are counted as done at once and do not speed it up).
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class JobProgress:
    """``with JobProgress(console, total, "tune") as bar: bar.done(best="...")``."""

    def __init__(self, console: Any, total: int, what: str) -> None:
        self._bar = Progress(
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[best]}"),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
        self._task = self._bar.add_task(what, total=total, best="")

    def __enter__(self) -> JobProgress:
        self._bar.start()
        return self

    def __exit__(
        self, exc: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._bar.stop()

    def stop(self) -> None:
        """Take the bar off the screen (before a last message)."""
        self._bar.stop()

    def stage(self, what: str, total: int) -> None:
        """Start a new stage (a rung of successive halving) of ``total`` points."""
        self._bar.reset(self._task, total=total, description=what)

    def done(self, best: str | None = None, advance: int = 1, label: str = "best") -> None:
        """One more point finished; ``best`` is shown as ``label: best``."""
        if best is not None:
            self._bar.update(self._task, advance=advance, best=f"{label}: {best}")
        else:
            self._bar.advance(self._task, advance)
