"""Writing a memtrace run directory (the layout every kvscope run directory shares).

- ``summary.json``: ``kind`` = ``memtrace``, ``kvscope_version``, the configuration (source
  file, window, options), the headline figures with units in their names, and the full
  report;
- ``timeline.parquet``: ``t_s`` first, then ``device``, ``allocated_bytes``,
  ``reserved_bytes``, downsampled to at most ``max_points`` per device (bucket maxima);
- ``fragmentation.parquet``: the fragmentation course (``t_s``, ``device``, free bytes,
  largest free block, external fragmentation);
- ``segments.parquet``: per-segment end state;
- ``heatmap.parquet``: the segment/block heatmap cells (``row``, ``col``, fractions);
- ``sites.parquet``, ``leaks.parquet``, ``ooms.parquet``: the lists of the report.

A table with no rows is still written with its columns, so readers need no special case.
An existing run directory that holds files is refused unless ``force`` (an earlier run is
never mixed with or silently replaced by a new one); ``summary.json`` is written last and
atomically, so a directory with a summary is a complete run.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kvscope import __version__
from kvscope.errors import KvscopeError
from kvscope.memtrace.analysis import FragPoint, MemtraceReport
from kvscope.memtrace.columns import SnapshotColumns
from kvscope.memtrace.fragmentation import SegmentFrag
from kvscope.memtrace.heatmap import heatmap
from kvscope.memtrace.leaks import LeakCandidate
from kvscope.memtrace.oom import OomEvent
from kvscope.memtrace.sites import SiteStat
from kvscope.memtrace.timeline import device_series, downsample
from kvscope.validate import fresh_run_dir, write_text_atomic


def as_dict(obj: Any) -> Any:
    """Dataclasses to plain JSON-ready values (NaN and infinities become None)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: as_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): as_dict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [as_dict(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _rows(cls: type, rows: list[Any]) -> pa.Table:
    names = [f.name for f in dataclasses.fields(cls)]
    return (
        pa.table({n: [getattr(r, n) for r in rows] for n in names})
        if rows
        else pa.table({n: pa.array([], type=_empty_type(cls, n)) for n in names})
    )


def _empty_type(cls: type, name: str) -> pa.DataType:
    hint = {f.name: f.type for f in dataclasses.fields(cls)}[name]
    return {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}.get(
        str(hint), pa.string()
    )


def write_run(
    report: MemtraceReport,
    cols: SnapshotColumns,
    out_dir: str | Path,
    max_points: int = 2000,
    *,
    force: bool = False,
) -> Path:
    """Write the run directory for ``report`` (and its columns ``cols``) to ``out_dir``."""
    out = fresh_run_dir(out_dir, force=force)
    try:
        out.mkdir(parents=True, exist_ok=True)
        _write_tables(report, cols, out, max_points)
        _write_summary(report, out)
    except OSError as err:
        raise KvscopeError(f"{out}: cannot write the run directory ({err.strerror}).") from None
    return out


def _write_summary(report: MemtraceReport, out: Path) -> None:
    summary = {
        "kind": "memtrace",
        "kvscope_version": __version__,
        "config": {
            "source": report.source,
            "since_s": report.since_s,
            "until_s": report.until_s,
            "has_time": report.has_time,
        },
        **as_dict(report.headline()),
        "report": as_dict(report),
    }
    write_text_atomic(
        out / "summary.json", json.dumps(summary, indent=2, default=str) + "\n", "summary"
    )


def _write_tables(
    report: MemtraceReport, cols: SnapshotColumns, out: Path, max_points: int
) -> None:
    t, dev, a, r = [], [], [], []
    for s in device_series(cols):
        d = downsample(s, max_points)
        t.append(d.t_s)
        dev.append(np.full(d.t_s.size, s.device, np.int64))
        a.append(d.allocated_bytes)
        r.append(d.reserved_bytes)

    def cat(xs: list[Any], dt: type) -> Any:
        return np.concatenate(xs) if xs else np.zeros(0, dt)

    pq.write_table(
        pa.table(
            {
                "t_s": cat(t, np.float64),
                "device": cat(dev, np.int64),
                "allocated_bytes": cat(a, np.int64),
                "reserved_bytes": cat(r, np.int64),
            }
        ),
        out / "timeline.parquet",
    )
    pq.write_table(_rows(FragPoint, report.fragmentation_course), out / "fragmentation.parquet")
    pq.write_table(_rows(SegmentFrag, report.segments), out / "segments.parquet")
    sites = [dataclasses.replace(s) for s in report.top_sites_by_bytes]
    pq.write_table(_rows(SiteStat, sites), out / "sites.parquet")
    pq.write_table(_rows(LeakCandidate, report.leaks), out / "leaks.parquet")
    pq.write_table(_rows(OomEvent, report.ooms), out / "ooms.parquet")
    hm = heatmap(cols)
    rr, cc = np.indices(hm.allocated.shape)
    pq.write_table(
        pa.table(
            {
                "row": rr.ravel(),
                "col": cc.ravel(),
                "allocated_frac": hm.allocated.ravel(),
                "pending_free_frac": hm.pending_free.ravel(),
                "free_frac": hm.free.ravel(),
                "cell_bytes": np.full(rr.size, hm.cell_bytes),
            }
        ),
        out / "heatmap.parquet",
    )
