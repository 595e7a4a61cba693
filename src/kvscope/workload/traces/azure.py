"""Azure LLM inference traces (Splitwise 2023 and DynamoLLM 2024 releases).

Columns ``TIMESTAMP, ContextTokens, GeneratedTokens`` (Azure/AzurePublicDataset,
``AzureLLMInferenceDataset2023.md``): the 2023 files write ``YYYY-MM-DD HH:MM:SS.fffffff``
(7 fractional digits), the 2024 week-long files add a ``+00:00`` offset and vary the precision.
pyarrow's ISO-8601 cast takes both at nanosecond resolution. Arrival = seconds since the
first row; the absolute start goes into ``spec["start_time"]``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from kvscope.errors import KvscopeError
from kvscope.workload.lengths import MAX_TOKENS
from kvscope.workload.stream import Workload, make_ids
from kvscope.workload.traces.rows import BadRow, RowPolicy, as_tokens, csv_rows

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
#: Largest |nanoseconds since 1970| taken (2**62 ns, about 146 years either way), so that the
#: difference of any two rows still fits in int64.
_NS_LIMIT = 2**62


def _fast(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    try:
        tab = pcsv.read_csv(
            path,
            parse_options=pcsv.ParseOptions(ignore_empty_lines=False),
            convert_options=pcsv.ConvertOptions(
                column_types={
                    "TIMESTAMP": pa.string(),
                    "ContextTokens": pa.int64(),
                    "GeneratedTokens": pa.int64(),
                },
                include_columns=list(COLUMNS),
            ),
        )
    except (pa.ArrowException, KeyError, OSError):
        return None  # the slow path names the line (or the file) that is wrong
    if any(tab[c].null_count for c in COLUMNS):
        return None
    ts = None
    for typ in (pa.timestamp("ns"), pa.timestamp("ns", tz="UTC")):
        try:
            ts = pc.cast(tab["TIMESTAMP"], typ)
            break
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    if ts is None:
        return None
    ns = ts.combine_chunks().cast(pa.int64()).to_numpy()
    prompt = tab["ContextTokens"].to_numpy()
    output = tab["GeneratedTokens"].to_numpy()
    if len(ns) and (
        prompt.min() < 1
        or output.min() < 0
        or max(prompt.max(), output.max()) > MAX_TOKENS
        or ns.min() < -_NS_LIMIT
        or ns.max() > _NS_LIMIT
    ):
        return None
    start = str(tab["TIMESTAMP"][int(np.argmin(ns))].as_py()) if len(ns) else ""
    return ns, prompt, output, start


def _parse_ts(text: str) -> int:
    """Nanoseconds since the epoch (naive times taken as UTC), keeping all 7+ digits."""
    raw = text.strip()
    try:
        dt = datetime.fromisoformat(raw)
    except ValueError:
        raise BadRow(f"TIMESTAMP {text!r} is not an ISO date-time") from None
    whole = dt.replace(microsecond=0)
    if whole.tzinfo is None:
        whole = whole.replace(tzinfo=UTC)
    sub_ns = 0
    if "." in raw:
        digits = ""
        for ch in raw.split(".", 1)[1]:
            if not ch.isdigit():
                break
            digits += ch
        sub_ns = int(digits[:9].ljust(9, "0")) if digits else 0
    ns = int(whole.timestamp()) * 1_000_000_000 + sub_ns
    if abs(ns) > _NS_LIMIT:
        # Nanoseconds are kept in int64, and differences between rows must fit too.
        raise BadRow(f"TIMESTAMP {text.strip()[:40]!r} is outside the years 1824-2116")
    return ns


def _slow(path: Path, policy: RowPolicy) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
    header, rows = csv_rows(path)
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise KvscopeError(f"{path}:1: Azure trace header lacks column(s) {', '.join(missing)}.")
    col = {c: header.index(c) for c in COLUMNS}
    ns, prompt, output, lines = [], [], [], []
    for line, cells in rows:
        try:
            if len(cells) != len(header):
                raise BadRow(f"expected {len(header)} fields, got {len(cells)}")
            ns.append(_parse_ts(cells[col["TIMESTAMP"]]))
            prompt.append(as_tokens(cells[col["ContextTokens"]], "ContextTokens", 1))
            output.append(as_tokens(cells[col["GeneratedTokens"]], "GeneratedTokens", 0))
            lines.append(line)
        except BadRow as err:
            del ns[len(lines) :], prompt[len(lines) :], output[len(lines) :]
            policy.bad(line, str(err))
    return (
        np.asarray(ns, np.int64),
        np.asarray(prompt, np.int64),
        np.asarray(output, np.int64),
        lines,
    )


def load_azure(path: Path, *, skip_bad: bool = False) -> Workload:
    """Read an Azure LLM inference CSV (2023 or 2024 columns)."""
    policy = RowPolicy(path, skip_bad)
    fast = _fast(path)
    if fast is not None:
        ns, prompt, output, start = fast
        ids = make_ids(f"{path.stem}:", len(ns), start=2)
    else:
        ns, prompt, output, line_list = _slow(path, policy)
        ids = np.array([f"{path.stem}:{n}" for n in line_list], dtype=object)
        start = ""
    t0 = int(ns.min()) if len(ns) else 0
    arrival = (ns - t0).astype(np.float64) / 1e9
    spec = {"source": "trace", "format": "azure", "path": str(path), "start_time": start}
    spec.update(policy.summary())
    return Workload.build(arrival, prompt, output, request_ids=ids, spec=spec)
