"""BurstGPT traces (Wang et al., KDD'25; HPMLL/BurstGPT, CC-BY 4.0).

Two column sets exist: v1.1 ``Timestamp, Model, Request tokens, Response tokens, Total tokens,
Log Type`` and v1.2 which inserts ``Session ID`` and ``Elapsed time`` (seconds for the whole
response). ``Timestamp`` is seconds since the start of the collection. Rows with zero response
tokens are failed requests (the BurstGPT README notes them); they are kept apart - not in the
stream, but counted in ``spec["failed_requests"]`` - so a replay does not send requests the
real service never answered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kvscope.errors import KvscopeError
from kvscope.workload.lengths import MAX_TOKENS
from kvscope.workload.stream import Workload
from kvscope.workload.traces.rows import BadRow, RowPolicy, as_float, as_tokens, csv_rows

REQUIRED = ("Timestamp", "Request tokens", "Response tokens")


def _fast(path: Path) -> Workload | None:
    """pyarrow path for well-formed files (millions of rows); None means use the slow path."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    types = {
        "Timestamp": pa.float64(),
        "Request tokens": pa.int64(),
        "Response tokens": pa.int64(),
        "Session ID": pa.string(),
        "Model": pa.string(),
    }
    try:
        tab = pcsv.read_csv(
            path,
            parse_options=pcsv.ParseOptions(ignore_empty_lines=False),
            convert_options=pcsv.ConvertOptions(column_types=types),
        )
    except (pa.ArrowException, KeyError, OSError):
        return None  # the slow path names the line (or the file) that is wrong
    names = set(tab.column_names)
    if not set(REQUIRED) <= names or any(tab[c].null_count for c in REQUIRED):
        return None
    ts = tab["Timestamp"].to_numpy()
    req = tab["Request tokens"].to_numpy()
    resp = tab["Response tokens"].to_numpy()
    if len(ts) and (
        ts.min() < 0
        or req.min() < 0
        or resp.min() < 0
        or max(req.max(), resp.max()) > MAX_TOKENS
        or not np.isfinite(ts).all()
    ):
        return None
    ok = (req > 0) & (resp > 0)
    keep = np.flatnonzero(ok)
    # header is line 1 and empty lines are not skipped, so data row i is file line i + 2
    ids = np.array([f"{path.stem}:{n}" for n in (keep + 2).tolist()], dtype=object)
    has_session = "Session ID" in names
    models: dict[str, int] = {}
    if "Model" in names:
        vc = pc.value_counts(tab["Model"].filter(pa.array(ok)))
        models = {str(v["values"]): int(v["counts"]) for v in vc.to_pylist()}
    t = ts[keep].astype(np.float64)
    t0 = float(t.min()) if len(t) else 0.0
    sessions = None
    if has_session:
        sessions = tab["Session ID"].to_numpy(zero_copy_only=False)[keep].astype(object)
    failed = len(ts) - len(keep)
    return Workload.build(
        t - t0,
        req[keep],
        resp[keep],
        request_ids=ids,
        session_ids=sessions,
        spec=_spec(path, has_session, t0, failed, models, {"skipped_bad_rows": 0}),
    )


def _spec(
    path: Path,
    has_session: bool,
    t0: float,
    failed: int,
    models: dict[str, int],
    skipped: dict[str, Any],
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": "trace",
        "format": "burstgpt",
        "columns": "v1.2" if has_session else "v1.1",
        "path": str(path),
        "start_offset_s": t0,
        "failed_requests": failed,
        "models": models,
    }
    spec.update(skipped)
    return spec


def load_burstgpt(path: Path, *, skip_bad: bool = False) -> Workload:
    """Read a BurstGPT CSV (v1.1 or v1.2 columns); failed rows are counted, not replayed."""
    fast = _fast(path)
    if fast is not None:
        return fast
    policy = RowPolicy(path, skip_bad)
    header, rows = csv_rows(path)
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise KvscopeError(f"{path}:1: BurstGPT header lacks column(s) {', '.join(missing)}.")
    col = {c: i for i, c in enumerate(header)}
    has_session = "Session ID" in col
    t: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    ids: list[str] = []
    sessions: list[str] = []
    failed = 0
    models: dict[str, int] = {}
    for line, cells in rows:
        try:
            if len(cells) != len(header):
                raise BadRow(f"expected {len(header)} fields, got {len(cells)}")
            ts = as_float(cells[col["Timestamp"]], "Timestamp")
            req = as_tokens(cells[col["Request tokens"]], "Request tokens", 0)
            resp = as_tokens(cells[col["Response tokens"]], "Response tokens", 0)
        except BadRow as err:
            policy.bad(line, str(err))
            continue
        if resp == 0 or req == 0:
            failed += 1
            continue
        t.append(ts)
        prompt.append(req)
        output.append(resp)
        ids.append(f"{path.stem}:{line}")
        if has_session:
            sessions.append(cells[col["Session ID"]].strip())
        if "Model" in col:
            m = cells[col["Model"]].strip()
            models[m] = models.get(m, 0) + 1
    arr = np.asarray(t, dtype=np.float64)
    t0 = float(arr.min()) if len(arr) else 0.0
    spec = _spec(path, has_session, t0, failed, models, policy.summary())
    return Workload.build(
        arr - t0,
        prompt,
        output,
        request_ids=ids,
        session_ids=sessions if has_session else None,
        spec=spec,
    )
