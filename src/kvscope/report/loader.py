"""Read whatever a run directory holds, and say what is missing.

A report must render a run directory that is partial (an interrupted bench, a missing
table): :class:`LoadedRun` keeps each table it could read and a list of problems. Nothing a
run directory holds raises: a ``summary.json`` that is not UTF-8, not JSON or not an object,
a Parquet file that is garbage, a table of the wrong types, a server that exported no
KV-cache gauge (llama.cpp without ``--metrics``, TGI, a proxy: the columns are all null)
each become one line in :attr:`LoadedRun.problems` and the rest still renders.

Two folders hold runs rather than being one: ``kvscope simulate --sweep ... --out DIR``
writes one run directory per point (``DIR/max-num-seqs=32/``, no ``DIR/summary.json``) and
is loaded as kind ``sweep``; ``kvscope bench --find-max-rate --out DIR`` writes a
``summary.json`` with ``"search": "max_rate"`` and one run per probe (``DIR/probe_00_1/``),
loaded as kind ``max-rate``; ``kvscope tune --out DIR`` writes a ``summary.json`` with
``"search": "tune"`` (kind ``tune``; its children are the winner's and vLLM's defaults' point
runs). Their runs are :attr:`LoadedRun.children`. A path that is not
a directory, and a folder with nothing of kvscope's in it (no summary, no table, no run
below it), are errors.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kvscope.errors import KvscopeError
from kvscope.results import read_table
from kvscope.validate import read_text

#: Tables each run kind writes (see ``kvscope.results.run_dir``).
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
    "chunks",
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
#: Columns that carry an engine's KV-cache usage gauge (``watch`` prefixes them with the
#: source, ``engine:host:port/``).
KV_GAUGES = (
    "kv_usage_frac",
    "kv_cache_usage_frac",
    "kv_cache_usage_ratio",
    "kv_cache_usage_perc",
    "kv_usage",
)


@dataclass
class LoadedRun:
    path: Path
    kind: str
    summary: dict[str, Any]
    tables: dict[str, pa.Table] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    children: list[LoadedRun] = field(default_factory=list)
    #: a name to show instead of the folder's (a tune folder's "winner", "defaults")
    name: str | None = None

    @property
    def label(self) -> str:
        return self.name or self.path.name or str(self.path)


def load_run(path: str | Path) -> LoadedRun:
    """Load a run directory (or a sweep / find-max-rate folder of them).

    Raises when the path is not a directory, or holds nothing kvscope wrote.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise KvscopeError(f"{p}: not a run directory (a file, not a folder).")
    if not p.is_dir():
        raise KvscopeError(f"{p}: not a run directory (no such folder).")
    if not (p / "summary.json").exists():
        points = _sweep_points(p)
        if points:
            return LoadedRun(p, "sweep", {}, children=[_load_one(d) for d in points])
    run = _load_one(p)
    if run.summary.get("search") == "tune":
        run.kind = "tune"
        run.children = _tune_children(p, run.summary)
    elif run.summary.get("search") == "max_rate":
        run.kind = "max-rate"
        run.problems = [x for x in run.problems if not x.endswith(".parquet is missing")]
        probes = sorted(d for d in p.glob("probe_*") if (d / "summary.json").is_file())
        run.children = [_load_one(d) for d in probes]
    elif run.kind == "unknown" and not run.tables and run.problems == ["summary.json is missing"]:
        raise KvscopeError(
            f"{p}: holds no kvscope run (no summary.json, no tables, no run folders in it)."
        )
    return run


def _tune_children(p: Path, summary: dict[str, Any]) -> list[LoadedRun]:
    """The winner's and the defaults' run directories of a tune folder."""
    out: list[LoadedRun] = []
    for role in ("winner", "defaults"):
        row = summary.get(role)
        d = p / str(row.get("run_dir", "")) if isinstance(row, dict) else None
        if d is None or d == p or any(c.path == d for c in out):
            continue
        if (d / "summary.json").is_file() and isinstance(row, dict):
            child = _load_one(d)
            child.name = f"{role}: {row.get('label', d.name)}"
            out.append(child)
    return out


def _sweep_points(p: Path) -> list[Path]:
    """Sub-folders of ``p`` that are simulate runs (the points of a ``--sweep``)."""
    out = []
    try:
        subs = sorted(d for d in p.iterdir() if d.is_dir())
    except OSError:
        return []
    for d in subs:
        if d.name.startswith("."):
            continue  # a point being written (kvscope.executor.store)
        try:
            head = (d / "summary.json").read_text(encoding="utf-8", errors="replace")[:4096]
        except OSError:
            continue
        if '"kind": "simulate"' in head or '"kind":"simulate"' in head:
            out.append(d)
    return sorted(out, key=_point_order)


def _point_order(d: Path) -> list[tuple[float, str]]:
    """Order ``block-size=8`` before ``block-size=16``: by each value, numeric if it is."""
    key = []
    for part in d.name.split(","):
        value = part.partition("=")[2]
        try:
            key.append((float(value), ""))
        except ValueError:
            key.append((math.inf, value))
    return key


def _load_one(p: Path) -> LoadedRun:
    problems: list[str] = []
    summary = _read_summary(p, problems)
    kind = summary.get("kind")
    kind = kind if isinstance(kind, str) and kind else _guess_kind(p)
    run = LoadedRun(p, kind, summary, problems=problems)
    for name in KNOWN_TABLES:
        try:
            table = read_table(p, name)
        except (KvscopeError, pa.ArrowException, OSError, ValueError) as err:
            first = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
            run.problems.append(f"{name}: unreadable ({first})")
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
        elif run.tables[name].num_rows == 0:
            run.problems.append(f"{name}.parquet has no rows")
    server = run.tables.get("server")
    if server is not None and server.num_rows and not _has_kv_gauge(server):
        run.problems.append(
            "server: the server exported no KV-cache gauge, so there is no KV-cache chart "
            "(llama.cpp needs --metrics; TGI and most proxies export none)"
        )
    return run


def _read_summary(p: Path, problems: list[str]) -> dict[str, Any]:
    """``summary.json`` as a dict; anything else is a problem line and an empty summary."""
    f = p / "summary.json"
    if not f.exists():
        problems.append("summary.json is missing")
        return {}
    try:
        # NaN, Infinity and 1e999 are read as missing (None): strict JSON has no such numbers
        data = json.loads(
            read_text(f, "run summary"), parse_constant=lambda _: None, parse_float=_finite
        )
    except KvscopeError as err:
        problems.append(f"summary.json is unreadable: {err.one_line()}")
        return {}
    except json.JSONDecodeError as err:
        problems.append(f"summary.json is not valid JSON ({err.msg} at line {err.lineno})")
        return {}
    except (RecursionError, ValueError):
        problems.append("summary.json is not valid JSON (nested too deeply or malformed)")
        return {}
    if not isinstance(data, dict):
        problems.append(f"summary.json holds a JSON {type(data).__name__}, not an object")
        return {}
    return data


def _finite(text: str) -> float | None:
    x = float(text)
    return x if math.isfinite(x) else None


def _has_kv_gauge(table: pa.Table) -> bool:
    """Whether any KV-usage column of ``table`` holds at least one finite number."""
    for c in table.column_names:
        if c.rsplit("/", 1)[-1] not in KV_GAUGES:
            continue
        try:
            v = np.asarray(table.column(c).to_numpy(zero_copy_only=False), dtype=float)
        except (TypeError, ValueError, pa.ArrowException):
            continue
        if np.isfinite(v).any():
            return True
    return False


def _guess_kind(p: Path) -> str:
    if (p / "steps.parquet").exists():
        return "simulate"
    if (p / "server.parquet").exists() and (p / "requests.parquet").exists():
        return "bench"
    return "unknown"
