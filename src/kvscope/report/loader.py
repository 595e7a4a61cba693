"""Read whatever a run directory holds, and say what is missing.

A report must render a run directory that is partial (an interrupted bench, a missing
table): :class:`LoadedRun` keeps each table it could read and a list of problems.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from kvscope.errors import KvscopeError
from kvscope.results import read_summary, read_table

#: Tables each run kind is expected to have (SPEC.md "Run directory").
EXPECTED: dict[str, tuple[str, ...]] = {
    "simulate": ("requests", "steps"),
    "bench": ("requests", "server"),
    "watch": ("server",),
    "memtrace": (),
    "comm": (),
    "plan": (),
}
KNOWN_TABLES = (
    "requests",
    "steps",
    "server",
    "samples",
    "comm",
    "timeline",
    "segments",
    "blocks",
    "sites",
    "heatmap",
    "fragmentation",
)


@dataclass
class LoadedRun:
    path: Path
    kind: str
    summary: dict[str, Any]
    tables: dict[str, pa.Table] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.path.name or str(self.path)


def load_run(path: str | Path) -> LoadedRun:
    """Load a run directory; raises only when the path is not a directory at all."""
    p = Path(path)
    if not p.is_dir():
        raise KvscopeError(f"{p}: not a run directory (no such folder).")
    problems: list[str] = []
    try:
        summary = read_summary(p)
    except KvscopeError as err:
        summary, problems = None, [err.one_line()]
    if summary is None:
        problems.append("summary.json is missing or unreadable")
        summary = {}
    kind = str(summary.get("kind") or _guess_kind(p))
    run = LoadedRun(p, kind, summary, problems=problems)
    for name in KNOWN_TABLES:
        try:
            table = read_table(p, name)
        except (KvscopeError, pa.ArrowInvalid, OSError) as err:
            run.problems.append(f"{name}: unreadable ({str(err).splitlines()[0][:120]})")
            continue
        if table is not None:
            run.tables[name] = table
            if (p / f"{name}.arrows").exists():
                run.problems.append(
                    f"{name}: run was interrupted; showing the "
                    f"{table.num_rows} rows written before it stopped"
                )
    for name in EXPECTED.get(kind, ()):
        if name not in run.tables:
            run.problems.append(f"{name}.parquet is missing")
    return run


def _guess_kind(p: Path) -> str:
    if (p / "steps.parquet").exists():
        return "simulate"
    if (p / "server.parquet").exists() and (p / "requests.parquet").exists():
        return "bench"
    return "unknown"
