"""Embedded time-series store: one DuckDB file, append-only, one transaction per batch.

Table ``samples(t_s DOUBLE, source VARCHAR, metric VARCHAR, labels VARCHAR, value DOUBLE,
res_s DOUBLE)``: ``t_s`` is Unix time in seconds, ``res_s`` the resolution of the row (0 for a
raw sample, the bucket width for a downsampled mean). Each :meth:`Store.append` is one
``BEGIN ... COMMIT``; DuckDB's write-ahead log makes a committed batch durable, so a process
killed with SIGKILL loses at most the batch it was writing. Batches go in as Arrow columns
(one ``INSERT ... SELECT`` per batch), which is what makes ingest fast.

Retention: :meth:`Store.downsample` replaces raw rows older than a cut-off with per-bucket
means, :meth:`Store.retain` deletes rows older than a horizon; both are single transactions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from kvscope.errors import KvscopeError
from kvscope.telemetry.series import Sample

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
_DDL = """
CREATE TABLE IF NOT EXISTS samples (
    t_s DOUBLE NOT NULL, source VARCHAR NOT NULL, metric VARCHAR NOT NULL,
    labels VARCHAR NOT NULL, value DOUBLE, res_s DOUBLE NOT NULL DEFAULT 0
)
"""


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
    """A DuckDB file holding samples. Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        import duckdb

        self.path = Path(path)
        if read_only and not self.path.exists():
            raise KvscopeError(f"store {self.path} does not exist.")
        try:
            self._con: Any = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as err:
            raise KvscopeError(f"cannot open store {self.path}: {err}") from err
        # One thread: the store ingests small batches from a sampler that must stay cheap;
        # DuckDB's default thread pool spends more CPU coordinating than inserting them.
        self._con.execute("SET threads = 1")
        if not read_only:
            self._con.execute(_DDL)
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
            con.execute("ROLLBACK")
            raise
        finally:
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
        if bucket_s <= 0:
            raise KvscopeError("downsample bucket must be positive.")
        con = self._con
        con.execute("BEGIN TRANSACTION")
        try:
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
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        return int(before) - int(after)

    def retain(self, newer_than_s: float) -> int:
        """Delete every row with ``t_s < newer_than_s``; returns rows deleted."""
        con = self._con
        n = con.execute("SELECT count(*) FROM samples WHERE t_s < ?", [newer_than_s]).fetchone()[0]
        con.execute("DELETE FROM samples WHERE t_s < ?", [newer_than_s])
        return int(n)

    def export(self, out: str | Path, fmt: str, since_s: float = 0.0) -> int:
        """Write rows with ``t_s >= since_s`` to a Parquet or CSV file; returns rows written."""
        if fmt not in ("parquet", "csv"):
            raise KvscopeError(f"unknown export format '{fmt}'.", "Use parquet or csv.")
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        n = self._con.execute("SELECT count(*) FROM samples WHERE t_s >= ?", [since_s]).fetchone()[
            0
        ]
        opts = "(FORMAT parquet)" if fmt == "parquet" else "(FORMAT csv, HEADER true)"
        path_sql = str(out).replace("'", "''")
        self._con.execute(
            f"COPY (SELECT * FROM samples WHERE t_s >= {float(since_s)!r} "
            f"ORDER BY t_s, source, metric, labels) TO '{path_sql}' {opts}"
        )
        return int(n)
