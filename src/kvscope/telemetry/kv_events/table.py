"""The ``kv_events`` table of the watch DuckDB store: one row per block event, batched.

Columns (``subscriber.COLUMNS``): ``t_s`` the batch's Unix time in seconds, the endpoint,
the publisher's seq, kind (stored / removed / cleared), block and parent hash, tokens in
the block, block size, medium (GPU / CPU / STORAGE), LoRA id, KV-cache group. Rows are held
in memory and committed in one transaction per flush interval, the same promise as the
samples table (telemetry/store.py): a SIGKILL loses at most one interval.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from kvscope.telemetry.kv_events.subscriber import COLUMNS, Rows, empty_rows

SCHEMA = pa.schema(
    [
        ("t_s", pa.float64()),
        ("endpoint", pa.string()),
        ("seq", pa.int64()),
        ("kind", pa.string()),
        ("block_hash", pa.string()),
        ("parent_hash", pa.string()),
        ("token_count", pa.int32()),
        ("block_size", pa.int32()),
        ("medium", pa.string()),
        ("lora_id", pa.int64()),
        ("group_idx", pa.int32()),
    ]
)
assert tuple(SCHEMA.names) == COLUMNS

#: DuckDB's name for each Arrow type of SCHEMA: the table's DDL follows the schema.
_DUCKDB_TYPES = {
    pa.float64(): "DOUBLE",
    pa.string(): "VARCHAR",
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
}
_DDL = "CREATE TABLE IF NOT EXISTS kv_events ({})".format(
    ", ".join(f"{f.name} {_DUCKDB_TYPES[f.type]}" for f in SCHEMA)
)


def ensure_table(con: Any) -> None:
    con.execute(_DDL)


class KvEventTable:
    """Collects rows from subscribers and commits them every ``flush_s`` on its own thread.

    ``con``: a DuckDB connection of the watch's store (a ``cursor()`` of it is used here, so
    the samples writer keeps its own).
    """

    def __init__(self, con: Any, flush_s: float = 5.0) -> None:
        self._con = con.cursor()
        ensure_table(self._con)
        self.flush_s = flush_s
        self.rows_written = 0
        self.error: str | None = None
        self._lock = threading.Lock()
        self._rows = empty_rows()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kv-events store", daemon=True)

    def start(self) -> KvEventTable:
        self._thread.start()
        return self

    def put(self, rows: Rows) -> None:
        with self._lock:
            for c in COLUMNS:
                self._rows[c].extend(rows[c])

    def _loop(self) -> None:
        while not self._halt.wait(self.flush_s):
            self.flush()

    def flush(self) -> int:
        with self._lock:
            rows, self._rows = self._rows, empty_rows()
        n = len(rows["t_s"])
        if n == 0 or self.error is not None:
            return 0
        table = pa.table([pa.array(rows[c], SCHEMA.field(c).type) for c in COLUMNS], schema=SCHEMA)
        con = self._con
        con.register("_kv_batch", table)
        try:
            con.execute("BEGIN TRANSACTION")
            con.execute("INSERT INTO kv_events SELECT * FROM _kv_batch")
            con.execute("COMMIT")
            self.rows_written += n
        except Exception as e:  # the store stopped (disk full): say so, keep sampling
            with contextlib.suppress(Exception):
                con.execute("ROLLBACK")
            self.error = f"kv_events table: {str(e).splitlines()[0]}"
        finally:
            with contextlib.suppress(Exception):
                con.unregister("_kv_batch")
        return n

    def stop(self) -> None:
        """Stop the flush thread and commit what is held (the table stays readable)."""
        self._halt.set()
        if self._thread.is_alive():
            self._thread.join()
        self.flush()

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(Exception):
            self._con.close()


def read_rows(path: Path) -> list[tuple[Any, ...]]:
    """Every row of a store's kv_events table in arrival order (empty if it has none)."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        have = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'kv_events'"
        ).fetchone()
        if not have or not have[0]:
            return []
        return [tuple(r) for r in con.execute("SELECT * FROM kv_events ORDER BY rowid").fetchall()]
    finally:
        con.close()


def read_capture(path: Path, endpoint: str | None = None) -> list[tuple[Any, ...]]:
    """A store's kv_events rows in arrival order (of one ``endpoint`` when given), checked:
    a path that is not a kvscope store, a store without the table, and an empty capture
    are each one :class:`KvscopeError` line."""
    from kvscope.errors import KvscopeError
    from kvscope.telemetry.store_file import connect_store

    con = connect_store(Path(path), read_only=True, create=False)
    try:
        have = con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'kv_events'"
        ).fetchone()
        if not have or not have[0]:
            raise KvscopeError(
                f"{path}: the store holds no kv_events table.",
                "Record one with kvscope watch --kv-events tcp://HOST:PORT.",
            )
        where, args = ("WHERE endpoint = ?", [endpoint]) if endpoint else ("", [])
        rows = [
            tuple(r)
            for r in con.execute(f"SELECT * FROM kv_events {where} ORDER BY rowid", args).fetchall()
        ]
        if not rows:
            seen = [
                str(r[0]) for r in con.execute("SELECT DISTINCT endpoint FROM kv_events").fetchall()
            ]
            why = f"no events of endpoint {endpoint}" if endpoint else "no events"
            hint = f"It has: {', '.join(sorted(seen)[:5])}." if endpoint and seen else None
            raise KvscopeError(f"{path}: the kv_events table holds {why}.", hint)
        return rows
    finally:
        con.close()


def wait_until(pred: Any, timeout_s: float) -> bool:
    """Poll ``pred()`` until true or the timeout (tests and the benchmark)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return bool(pred())
