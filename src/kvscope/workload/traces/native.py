"""kvscope's own workload files: JSONL (one request object per line) and Parquet.

Columns (both formats): ``request_id`` (string), ``arrival_s`` (float seconds from the
workload start), ``prompt_tokens``, ``output_tokens`` (integers), and when present
``session_id``, ``turn``, ``prefix_hashes`` (list of int64, full blocks, chained) with
``hash_block_size``, and ``prompt_text``. Parquet keeps the workload's ``spec`` and block size
in the schema metadata under ``kvscope.workload``. Writers are deterministic: the same stream
gives byte-identical files (floats are written with ``repr``, which round-trips exactly).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.errors import KvscopeError
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

META_KEY = b"kvscope.workload"
FORMAT_VERSION = 1


def _table(w: Workload) -> Any:
    import pyarrow as pa

    cols: dict[str, Any] = {
        "request_id": pa.array(w.request_ids, type=pa.string()),
        "arrival_s": pa.array(w.arrival_s, type=pa.float64()),
        "prompt_tokens": pa.array(w.prompt_tokens, type=pa.int64()),
        "output_tokens": pa.array(w.output_tokens, type=pa.int64()),
    }
    if w.session_ids is not None:
        cols["session_id"] = pa.array(w.session_ids, type=pa.string())
    if w.turns is not None:
        cols["turn"] = pa.array(w.turns, type=pa.int64(), mask=w.turns < 0)
    if w.hash_offsets is not None and w.hash_values is not None:
        values = pa.array(w.hash_values, type=pa.int64())
        if int(w.hash_offsets[-1]) < 2**31:
            off = pa.array(w.hash_offsets.astype(np.int32), type=pa.int32())
            cols["prefix_hashes"] = pa.ListArray.from_arrays(off, values)
        else:
            cols["prefix_hashes"] = pa.LargeListArray.from_arrays(pa.array(w.hash_offsets), values)
    if w.prompt_texts is not None:
        cols["prompt_text"] = pa.array(w.prompt_texts, type=pa.string())
    meta = {"version": FORMAT_VERSION, "hash_block_size": w.hash_block_size, "spec": dict(w.spec)}
    return pa.table(cols).replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True)})


def _replace_when_done(path: Path) -> Path:
    """The temporary name a writer fills before :func:`os.replace` moves it onto ``path``, so an
    interrupted write never leaves half a file (nor destroys the one it was replacing)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise KvscopeError(f"{path}: cannot create its folder ({err.strerror}).") from None
    return path.with_name(path.name + ".tmp")


def _commit(tmp: Path, path: Path) -> Path:
    os.replace(tmp, path)
    return path


def write_parquet(w: Workload, path: Path) -> Path:
    """Write ``w`` as Parquet (zstd) with its spec in the schema metadata."""
    import pyarrow.parquet as pq

    tmp = _replace_when_done(path)
    try:
        # A file object, not a path: pyarrow reads "file:/x" or "s3:/x" in a path as a URI
        # and would write somewhere else entirely.
        with tmp.open("wb") as f:
            pq.write_table(_table(w), f, compression="zstd")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return _commit(tmp, path)


def write_jsonl(w: Workload, path: Path) -> Path:
    """Write ``w`` as JSONL, one request per line, columns in a fixed order."""
    tmp = _replace_when_done(path)
    try:
        _write_jsonl(w, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return _commit(tmp, path)


def _write_jsonl(w: Workload, path: Path) -> None:
    ids = w.request_ids.tolist()
    arr = w.arrival_s.tolist()
    pt = w.prompt_tokens.tolist()
    ot = w.output_tokens.tolist()
    sess = None if w.session_ids is None else w.session_ids.tolist()
    turns = None if w.turns is None else w.turns.tolist()
    texts = None if w.prompt_texts is None else w.prompt_texts.tolist()
    off = None if w.hash_offsets is None else w.hash_offsets.tolist()
    vals = None if w.hash_values is None else w.hash_values.tolist()
    dumps = json.dumps
    with path.open("w", encoding="utf-8", newline="\n") as f:
        buf: list[str] = []
        for i in range(len(ids)):
            line = (
                f'{{"request_id":{dumps(ids[i])},"arrival_s":{arr[i]!r},'
                f'"prompt_tokens":{pt[i]},"output_tokens":{ot[i]}'
            )
            if sess is not None:
                line += f',"session_id":{dumps(sess[i])}'
            if turns is not None and turns[i] >= 0:
                line += f',"turn":{turns[i]}'
            if off is not None and vals is not None:
                hs = ",".join(map(str, vals[off[i] : off[i + 1]]))
                line += f',"prefix_hashes":[{hs}],"hash_block_size":{w.hash_block_size}'
            if texts is not None and texts[i] is not None:
                line += f',"prompt_text":{dumps(texts[i])}'
            buf.append(line + "}\n")
            if len(buf) >= 65536:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


def _from_table(tab: Any, path: Path, spec: dict[str, Any], block_size: int | None) -> Workload:
    import pyarrow as pa

    names = set(tab.column_names)
    for c in ("arrival_s", "prompt_tokens", "output_tokens"):
        if c not in names:
            raise KvscopeError(f"{path}: kvscope workload lacks column '{c}'.")
    n = tab.num_rows
    for c in ("arrival_s", "prompt_tokens", "output_tokens"):
        if tab[c].null_count:
            raise KvscopeError(f"{path}: column '{c}' has empty values.")
    _check_types(tab, path)
    arr = tab["arrival_s"].to_numpy().astype(np.float64)
    pt = tab["prompt_tokens"].to_numpy().astype(np.int64)
    ot = tab["output_tokens"].to_numpy().astype(np.int64)
    bad = np.flatnonzero(
        (arr < 0) | ~np.isfinite(arr) | (pt < 1) | (ot < 0) | (pt > MAX_TOKENS) | (ot > MAX_TOKENS)
    )
    if len(bad):
        i = int(bad[0])
        raise KvscopeError(
            f"{path}: row {i + 1}: arrival_s must be >= 0, prompt_tokens >= 1, "
            f"output_tokens >= 0, token counts <= {MAX_TOKENS:,} "
            f"(got {arr[i]}, {pt[i]}, {ot[i]})."
        )
    if block_size is not None and (
        not isinstance(block_size, int)
        or isinstance(block_size, bool)
        or not 1 <= block_size <= MAX_TOKENS
    ):
        raise KvscopeError(f"{path}: hash_block_size must be a positive integer.")
    ids = (
        tab["request_id"].to_numpy(zero_copy_only=False).astype(object)
        if "request_id" in names and not tab["request_id"].null_count
        else make_ids("r", n)
    )
    kw: dict[str, Any] = {}
    if "session_id" in names:
        kw["session_ids"] = tab["session_id"].to_numpy(zero_copy_only=False).astype(object)
    if "turn" in names:
        kw["turns"] = tab["turn"].fill_null(-1).to_numpy().astype(np.int64)
    if "prompt_text" in names:
        kw["prompt_texts"] = tab["prompt_text"].to_numpy(zero_copy_only=False).astype(object)
    if "prefix_hashes" in names:
        h = tab["prefix_hashes"].combine_chunks()
        if h.null_count:
            h = h.fill_null(pa.scalar([], type=h.type))
        off = h.offsets.to_numpy().astype(np.int64)
        vals = h.values.to_numpy().astype(np.int64)[off[0] : off[-1]]
        kw.update(hash_offsets=off - off[0], hash_values=vals, hash_block_size=block_size)
        if block_size is None and len(vals):
            raise KvscopeError(f"{path}: prefix_hashes given without hash_block_size.")
        if block_size is None:
            kw.update(hash_offsets=None, hash_values=None)
    return Workload.build(arr, pt, ot, request_ids=ids, spec=spec, **kw)


#: What each known column may hold: a reader that met a string where a count belongs would
#: otherwise fail deep inside numpy instead of naming the column.
_KINDS = {
    "arrival_s": "number",
    "prompt_tokens": "integer",
    "output_tokens": "integer",
    "turn": "integer",
    "request_id": "text",
    "session_id": "text",
    "prompt_text": "text",
    "prefix_hashes": "integer list",
}


def _check_types(tab: Any, path: Path) -> None:
    import pyarrow as pa

    t = pa.types
    for name, kind in _KINDS.items():
        if name not in tab.column_names:
            continue
        typ = tab.schema.field(name).type
        if kind == "integer list":
            ok = (t.is_list(typ) or t.is_large_list(typ)) and (
                t.is_integer(typ.value_type) or t.is_null(typ.value_type)
            )
        elif kind == "number":
            ok = t.is_integer(typ) or t.is_floating(typ)
        elif kind == "integer":
            ok = t.is_integer(typ)
        else:
            ok = t.is_string(typ) or t.is_large_string(typ) or t.is_null(typ)
        if not ok:
            raise KvscopeError(f"{path}: column '{name}' holds {typ}, expected {kind}s.")


def read_parquet(path: Path) -> Workload:
    """Read a kvscope Parquet workload."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with path.open("rb") as f:  # a file object: a path like "s3:/x" is not a URI here
            tab = pq.read_table(f)
    except (pa.ArrowException, OSError) as err:
        raise KvscopeError(f"{path}: cannot read Parquet ({_first_line(err)}).") from None
    raw = (tab.schema.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):
        meta = None
    if not isinstance(meta, dict):
        raise KvscopeError(f"{path}: the kvscope.workload metadata is not a JSON object.")
    spec = {"source": "file", "format": "kvscope", "path": str(path)}
    if meta.get("spec"):
        spec["generated_by"] = meta["spec"]
    return _from_table(tab, path, spec, meta.get("hash_block_size"))


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0][:200] if text else type(err).__name__


def _text_or_none(row: dict[str, Any], key: str) -> str | None:
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRow(f"field '{key}' must be text")
    return value


def _slow_jsonl(path: Path, policy: RowPolicy) -> Workload:
    rows: list[dict[str, Any]] = []
    block_sizes: set[int] = set()
    for n, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json_object_line(line)
            rec = {
                "request_id": str(row.get("request_id", f"{path.stem}:{n}")),
                "arrival_s": as_float(row.get("arrival_s"), "arrival_s"),
                "prompt_tokens": as_tokens(row.get("prompt_tokens"), "prompt_tokens", 1),
                "output_tokens": as_tokens(row.get("output_tokens"), "output_tokens", 0),
                "session_id": None if row.get("session_id") is None else str(row["session_id"]),
                "turn": -1 if row.get("turn") is None else as_int(row["turn"], "turn"),
                "prompt_text": _text_or_none(row, "prompt_text"),
            }
            hashes = row.get("prefix_hashes") or []
            if not isinstance(hashes, list):
                raise BadRow("field 'prefix_hashes' must be a list of integers")
            rec["prefix_hashes"] = [as_int(h, "prefix_hashes", -(1 << 63)) for h in hashes]
            if hashes:
                block_sizes.add(as_tokens(row.get("hash_block_size"), "hash_block_size", 1))
        except BadRow as err:
            policy.bad(n, str(err))
            continue
        rows.append(rec)
    if len(block_sizes) > 1:
        shown = ", ".join(str(v) for v in sorted(block_sizes))
        raise KvscopeError(f"{path}: rows mix hash_block_size values {shown}.")
    import pyarrow as pa

    tab = pa.Table.from_pylist(rows) if rows else None
    spec: dict[str, Any] = {"source": "file", "format": "kvscope", "path": str(path)}
    spec.update(policy.summary())
    if tab is None:
        return Workload.empty(spec)
    if not any(r["session_id"] is not None for r in rows):
        tab = tab.drop_columns(["session_id", "turn"])
    if not any(r["prompt_text"] is not None for r in rows):
        tab = tab.drop_columns(["prompt_text"])
    if not block_sizes:
        tab = tab.drop_columns(["prefix_hashes"])
    return _from_table(tab, path, spec, block_sizes.pop() if block_sizes else None)


def read_jsonl(path: Path, *, skip_bad: bool = False) -> Workload:
    """Read kvscope JSONL; a malformed line is an error naming the line (or skipped)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    schema = pa.schema(
        [
            ("request_id", pa.string()),
            ("arrival_s", pa.float64()),
            ("prompt_tokens", pa.int64()),
            ("output_tokens", pa.int64()),
            ("session_id", pa.string()),
            ("turn", pa.int64()),
            ("prefix_hashes", pa.list_(pa.int64())),
            ("hash_block_size", pa.int64()),
            ("prompt_text", pa.string()),
        ]
    )
    try:
        tab = pj.read_json(
            path,
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
        sizes = pc.unique(tab["hash_block_size"].drop_null()).to_pylist()
        ok = (
            len(sizes) <= 1
            and all(
                not tab[c].null_count
                for c in ("request_id", "arrival_s", "prompt_tokens", "output_tokens")
            )
            and not (tab["prefix_hashes"].null_count < tab.num_rows and not sizes)
        )
        if ok:
            for c in ("session_id", "turn", "prompt_text", "prefix_hashes"):
                if tab[c].null_count == tab.num_rows:
                    tab = tab.drop_columns([c])
            spec = {"source": "file", "format": "kvscope", "path": str(path), "skipped_bad_rows": 0}
            return _from_table(tab, path, spec, int(sizes[0]) if sizes else None)
    except (pa.ArrowException, OSError, KvscopeError):
        pass  # the slow path names the line that is wrong
    return _slow_jsonl(path, RowPolicy(path, skip_bad))
