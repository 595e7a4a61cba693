"""Embedded time-series store: one DuckDB file, append-only, one transaction per batch.

Table ``samples(t_s DOUBLE, source VARCHAR, metric VARCHAR, labels VARCHAR, value DOUBLE,
res_s DOUBLE)``: ``t_s`` is Unix time in seconds, ``res_s`` the resolution of the row (0 for a
raw sample, the bucket width for a downsampled mean). Each :meth:`Store.append` is one
``BEGIN ... COMMIT``; DuckDB's write-ahead log makes a committed batch durable, so a process
killed with SIGKILL loses at most the batch it was writing. Batches go in as Arrow columns
(one ``INSERT ... SELECT`` per batch), which is what makes ingest fast.

A store is recognised before it is used (:mod:`kvscope.telemetry.store_file`): a file that is
not DuckDB, or a DuckDB database kvscope did not make, is refused in one line and never
written to.

Retention: :meth:`Store.downsample` replaces raw rows older than a cut-off with per-bucket
means, :meth:`Store.retain` deletes rows older than a horizon, :meth:`Store.maintain` does
both; each is one transaction, so an error leaves the history as it was.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from kvscope.errors import KvscopeError
from kvscope.telemetry.series import Sample
from kvscope.telemetry.store_file import connect_store
from kvscope.validate import finite, writable_file

_SCHEMA = pa.schema(
    [
        ("t_s", pa.float64()),
        ("source", pa.string()),
        ("metric", pa.string()),
        ("labels", pa.string()),
        ("value", pa.float64()),
        ("res_s", pa.float64()),
    ]
)
#: Finest downsampling bucket: a millisecond, a hundredth of the finest sampling interval.
#: Finer buckets divide Unix times into numbers past a double's range (``t / 1e-300`` is
#: infinite), which would turn every averaged row's time into inf or NaN.
MIN_BUCKET_S = 1e-3


def samples_table(samples: Sequence[Sample], res_s: float = 0.0) -> pa.Table:
    """Arrow table of samples in the store's column order."""
    return pa.table(
        [
            pa.array([s.t_s for s in samples], pa.float64()),
            pa.array([s.source for s in samples], pa.string()),
            pa.array([s.metric for s in samples], pa.string()),
            pa.array([s.labels for s in samples], pa.string()),
            pa.array([None if math.isnan(s.value) else s.value for s in samples], pa.float64()),
            pa.array([res_s] * len(samples), pa.float64()),
        ],
        schema=_SCHEMA,
    )


class Store:
    """A DuckDB file holding samples. Use as a context manager or call :meth:`close`.

    ``create``: a missing file (or an empty DuckDB database) becomes a new store; without it
    (and always with ``read_only``) only an existing kvscope store is opened.
    """

    def __init__(self, path: str | Path, read_only: bool = False, create: bool = True) -> None:
        self.path = Path(path)
        self._con: Any = connect_store(self.path, read_only=read_only, create=create)
        # One thread: the store ingests small batches from a sampler that must stay cheap;
        # DuckDB's default thread pool spends more CPU coordinating than inserting them.
        self._con.execute("SET threads = 1")
        self.rows_written = 0

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def append(self, samples: Sequence[Sample] | pa.Table) -> int:
        """Append one batch in one transaction; returns the rows written."""
        table = samples if isinstance(samples, pa.Table) else samples_table(samples)
        if table.num_rows == 0:
            return 0
        con = self._con
        con.register("_batch", table)
        try:
            con.execute("BEGIN TRANSACTION")
            con.execute("INSERT INTO samples SELECT * FROM _batch")
            con.execute("COMMIT")
        except Exception:
            # A COMMIT that failed (disk full) has rolled back already, and DuckDB then
            # refuses a ROLLBACK ("no transaction is active"), which would hide the cause.
            with contextlib.suppress(Exception):
                con.execute("ROLLBACK")
            raise
        finally:
            with contextlib.suppress(Exception):
                con.unregister("_batch")
        self.rows_written += table.num_rows
        return int(table.num_rows)

    def count(self) -> int:
        return int(self._con.execute("SELECT count(*) FROM samples").fetchone()[0])

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read query (the table is ``samples``)."""
        return [tuple(r) for r in self._con.execute(sql, list(params)).fetchall()]

    def series(
        self, metric: str, source: str | None = None, labels: str = "", since_s: float = 0.0
    ) -> tuple[list[float], list[float]]:
        """(times, values) of one series, ordered by time."""
        sql = "SELECT t_s, value FROM samples WHERE metric = ? AND labels = ? AND t_s >= ?"
        params: list[Any] = [metric, labels, since_s]
        if source is not None:
            sql += " AND source = ?"
            params.append(source)
        rows = self._con.execute(sql + " ORDER BY t_s", params).fetchall()
        return [float(r[0]) for r in rows], [
            math.nan if r[1] is None else float(r[1]) for r in rows
        ]

    def downsample(self, older_than_s: float, bucket_s: float) -> int:
        """Replace raw rows with ``t_s < older_than_s`` by per-``bucket_s`` means; rows removed."""
        return self.maintain(downsample_before_s=older_than_s, bucket_s=bucket_s)[
            "rows_downsampled_away"
        ]

    def retain(self, newer_than_s: float) -> int:
        """Delete every row with ``t_s < newer_than_s``; returns rows deleted."""
        return self.maintain(drop_before_s=newer_than_s)["rows_dropped"]

    def maintain(
        self,
        downsample_before_s: float | None = None,
        bucket_s: float = 60.0,
        drop_before_s: float | None = None,
    ) -> dict[str, int]:
        """Downsample, then drop, in ONE transaction: an error anywhere changes nothing.

        Every value is checked before the transaction starts: a NaN bucket once grouped the
        whole history under NaN times and deleted the raw rows, and an infinite horizon
        deletes everything.
        """
        out: dict[str, int] = {}
        if downsample_before_s is not None:
            downsample_before_s = finite(downsample_before_s, "downsample cut-off time")
            bucket_s = finite(bucket_s, "downsample bucket (--bucket, s)", low=MIN_BUCKET_S)
        if drop_before_s is not None:
            drop_before_s = finite(drop_before_s, "drop cut-off time")
        con = self._con
        con.execute("BEGIN TRANSACTION")
        try:
            if downsample_before_s is not None:
                out["rows_downsampled_away"] = self._downsample(downsample_before_s, bucket_s)
            if drop_before_s is not None:
                n = con.execute(
                    "SELECT count(*) FROM samples WHERE t_s < ?", [drop_before_s]
                ).fetchone()[0]
                con.execute("DELETE FROM samples WHERE t_s < ?", [drop_before_s])
                out["rows_dropped"] = int(n)
            con.execute("COMMIT")
        except BaseException as err:
            con.execute("ROLLBACK")
            if isinstance(err, Exception) and not isinstance(err, KvscopeError):
                raise KvscopeError(
                    f"{self.path}: retention failed, nothing was changed ({_first_line(err)})."
                ) from err
            raise
        return out

    def _downsample(self, older_than_s: float, bucket_s: float) -> int:
        con = self._con
        before = con.execute(
            "SELECT count(*) FROM samples WHERE res_s = 0 AND t_s < ?", [older_than_s]
        ).fetchone()[0]
        con.execute(
            """
            INSERT INTO samples
            SELECT floor(t_s / ?) * ? AS t_b, source, metric, labels, avg(value), ?
            FROM samples WHERE res_s = 0 AND t_s < ?
            GROUP BY t_b, source, metric, labels
            """,
            [bucket_s, bucket_s, bucket_s, older_than_s],
        )
        con.execute("DELETE FROM samples WHERE res_s = 0 AND t_s < ?", [older_than_s])
        after = con.execute(
            "SELECT count(*) FROM samples WHERE res_s = ? AND t_s < ?",
            [bucket_s, older_than_s],
        ).fetchone()[0]
        return int(before) - int(after)

    def export(self, out: str | Path, fmt: str, since_s: float = 0.0) -> int:
        """Write rows with ``t_s >= since_s`` to a Parquet, CSV or JSON Lines file (``fmt``:
        ``parquet``, ``csv``, ``jsonl``); returns rows written.

        The file appears whole or not at all: it is written beside ``out`` and renamed.
        """
        copy_options = {
            "parquet": "(FORMAT parquet)",
            "csv": "(FORMAT csv, HEADER true)",
            "jsonl": "(FORMAT json)",  # DuckDB writes newline-delimited JSON by default
        }
        if fmt not in copy_options:
            raise KvscopeError(f"unknown export format '{fmt}'.", "Use parquet, csv or jsonl.")
        since_s = finite(since_s, "--since")
        out = writable_file(out, "export file")
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise KvscopeError(f"{out}: cannot write the export file ({err.strerror}).") from None
        n = self._con.execute("SELECT count(*) FROM samples WHERE t_s >= ?", [since_s]).fetchone()[
            0
        ]
        opts = copy_options[fmt]
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        path_sql = str(tmp).replace("'", "''")
        try:
            self._con.execute(
                f"COPY (SELECT * FROM samples WHERE t_s >= {float(since_s)!r} "
                f"ORDER BY t_s, source, metric, labels) TO '{path_sql}' {opts}"
            )
            os.replace(tmp, out)
        except Exception as err:
            tmp.unlink(missing_ok=True)
            raise KvscopeError(
                f"{out}: cannot write the export file ({_first_line(err)})."
            ) from err
        return int(n)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
