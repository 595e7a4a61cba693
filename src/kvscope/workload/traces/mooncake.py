"""Mooncake traces (Qin et al., FAST'25; kvcache-ai/Mooncake ``FAST25-release/traces``).

JSONL, one request per line: ``timestamp`` (milliseconds since the trace start),
``input_length``, ``output_length`` and ``hash_ids`` - remapped ids of the prompt's prefix
blocks of 512 tokens (the release README), equal leading ids meaning a reusable prefix.
Milliseconds become seconds here; the 512-token block size travels with the hashes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kvscope.workload.lengths import MAX_TOKENS
from kvscope.workload.stream import Workload, make_ids
from kvscope.workload.traces.rows import (
    BadRow,
    RowPolicy,
    as_float,
    as_int,
    as_tokens,
    json_object_line,
    read_text,
)

#: Tokens per ``hash_ids`` block in the FAST'25 release (FAST25-release/README.md).
MOONCAKE_BLOCK_TOKENS = 512
FIELDS = ("timestamp", "input_length", "output_length")


def _fast(path: Path) -> tuple[Any, ...] | None:
    import pyarrow as pa
    import pyarrow.json as pj

    try:
        tab = pj.read_json(path)
    except (pa.ArrowException, OSError):
        return None  # the slow path names the line (or the file) that is wrong
    names = set(tab.column_names)
    if not set(FIELDS) <= names or any(tab[c].null_count for c in FIELDS):
        return None
    if not all(
        pa.types.is_integer(tab[c].type) or pa.types.is_floating(tab[c].type) for c in FIELDS
    ):
        return None
    ts = tab["timestamp"].to_numpy().astype(np.float64)
    prompt = tab["input_length"].to_numpy()
    output = tab["output_length"].to_numpy()
    if not (np.issubdtype(prompt.dtype, np.integer) and np.issubdtype(output.dtype, np.integer)):
        return None
    if len(ts) and (
        ts.min() < 0
        or prompt.min() < 1
        or output.min() < 0
        or max(prompt.max(), output.max()) > MAX_TOKENS
        or not np.isfinite(ts).all()
    ):
        return None
    if "hash_ids" in names:
        h = tab["hash_ids"].combine_chunks()
        if (
            not pa.types.is_list(h.type)
            or h.null_count
            or not pa.types.is_integer(h.type.value_type)
        ):
            return None
        off = h.offsets.to_numpy().astype(np.int64)
        vals = h.values.to_numpy().astype(np.int64)
        off = off - off[0]
        vals = vals[: off[-1]] if len(off) else vals
    else:
        off = np.zeros(len(ts) + 1, dtype=np.int64)
        vals = np.zeros(0, dtype=np.int64)
    return ts, prompt.astype(np.int64), output.astype(np.int64), off, vals


def _slow(path: Path, policy: RowPolicy) -> tuple[Any, ...]:
    ts, prompt, output, lines = [], [], [], []
    off = [0]
    vals: list[int] = []
    for n, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json_object_line(line)
            missing = [f for f in FIELDS if f not in row]
            if missing:
                raise BadRow(f"missing field(s) {', '.join(missing)}")
            t = as_float(row["timestamp"], "timestamp")
            p = as_tokens(row["input_length"], "input_length", 1)
            o = as_tokens(row["output_length"], "output_length", 0)
            hashes = row.get("hash_ids", [])
            if not isinstance(hashes, list):
                raise BadRow("field 'hash_ids' must be a list of integers")
            hs = [as_int(h, "hash_ids", -(1 << 62)) for h in hashes]
        except BadRow as err:
            policy.bad(n, str(err))
            continue
        ts.append(t)
        prompt.append(p)
        output.append(o)
        lines.append(n)
        vals.extend(hs)
        off.append(len(vals))
    return (
        np.asarray(ts, np.float64),
        np.asarray(prompt, np.int64),
        np.asarray(output, np.int64),
        np.asarray(off, np.int64),
        np.asarray(vals, np.int64),
        lines,
    )


def load_mooncake(path: Path, *, skip_bad: bool = False) -> Workload:
    """Read a Mooncake FAST'25 JSONL trace (ms timestamps, 512-token ``hash_ids``)."""
    policy = RowPolicy(path, skip_bad)
    fast = _fast(path)
    if fast is not None:
        ts, prompt, output, off, vals = fast
        ids = make_ids(f"{path.stem}:", len(ts), start=1)
    else:
        ts, prompt, output, off, vals, lines = _slow(path, policy)
        ids = np.array([f"{path.stem}:{n}" for n in lines], dtype=object)
    arrival = ts / 1000.0
    if len(arrival):
        arrival = arrival - arrival.min()
    blocks = np.diff(off)
    consistent = int(
        np.count_nonzero(
            ((blocks - 1) * MOONCAKE_BLOCK_TOKENS < prompt)
            & (prompt <= blocks * MOONCAKE_BLOCK_TOKENS)
        )
    )
    spec: dict[str, Any] = {
        "source": "trace",
        "format": "mooncake",
        "path": str(path),
        "timestamp_unit": "ms",
        "hash_block_size": MOONCAKE_BLOCK_TOKENS,
        "rows_consistent_with_block_size": consistent,
    }
    spec.update(policy.summary())
    return Workload.build(
        arrival,
        prompt,
        output,
        request_ids=ids,
        hash_offsets=off,
        hash_values=vals,
        hash_block_size=MOONCAKE_BLOCK_TOKENS,
        spec=spec,
    )
