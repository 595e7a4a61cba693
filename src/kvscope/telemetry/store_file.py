"""Recognise a telemetry store before using it, and never touch a database kvscope did not make.

``--store`` names a path a user types; it may hold anything: a text file, a Parquet file, a
DuckDB database of their own (payroll, analytics). Opening such a file for writing would add
kvscope's table to it (``CREATE TABLE IF NOT EXISTS samples``) or fail deep inside a query
with a DuckDB traceback. So, before a connection that may write is made:

1. the file must be a regular file whose header carries DuckDB's magic number (``DUCK`` at
   byte 8 of every DuckDB database file, DuckDB's ``storage/storage_info.hpp``);
2. opened read-only, it must be a kvscope store: it holds the ``kvscope_store`` marker table,
   or (stores written before the marker existed) a ``samples`` table with exactly kvscope's
   columns. An empty DuckDB database may become a store only when the caller creates one.

A new store is made with its table and marker in one transaction, so a store is never seen
half made.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kvscope import __version__
from kvscope.errors import KvscopeError
from kvscope.validate import writable_file

#: DuckDB's magic number and where it sits in a database file's first block.
DUCKDB_MAGIC = b"DUCK"
MAGIC_OFFSET = 8
#: The marker table, and the store format it records (bumped if the samples table changes).
MARKER_TABLE = "kvscope_store"
STORE_FORMAT = 1
#: The samples table's columns as DuckDB's information_schema reports them.
COLUMNS = (
    ("t_s", "DOUBLE"),
    ("source", "VARCHAR"),
    ("metric", "VARCHAR"),
    ("labels", "VARCHAR"),
    ("value", "DOUBLE"),
    ("res_s", "DOUBLE"),
)
_DDL = (
    """
    CREATE TABLE samples (
        t_s DOUBLE NOT NULL, source VARCHAR NOT NULL, metric VARCHAR NOT NULL,
        labels VARCHAR NOT NULL, value DOUBLE, res_s DOUBLE NOT NULL DEFAULT 0
    )
    """,
    f"CREATE TABLE {MARKER_TABLE} (format INTEGER, kvscope_version VARCHAR, created_s DOUBLE)",
)
_HINT = "Name a new file (kvscope creates the store) or a store kvscope wrote."


def not_a_store(path: Path, why: str) -> KvscopeError:
    return KvscopeError(f"{path}: not a kvscope store ({why}).", _HINT)


def check_duckdb_file(path: Path) -> None:
    """Refuse, without opening it in DuckDB, a path that is not a DuckDB database file."""
    if path.is_dir():
        raise KvscopeError(f"{path}: is a directory, not a kvscope store.", _HINT)
    if not path.is_file():
        raise not_a_store(path, "not a regular file")
    try:
        with path.open("rb") as f:
            head = f.read(MAGIC_OFFSET + len(DUCKDB_MAGIC))
    except OSError as err:
        raise KvscopeError(f"{path}: cannot read the store ({err.strerror}).") from None
    if not head:
        raise not_a_store(path, "an empty file, not a DuckDB database")
    if head[MAGIC_OFFSET:] != DUCKDB_MAGIC:
        raise not_a_store(path, "not a DuckDB database file")


def _connect(path: Path, read_only: bool) -> Any:
    import duckdb

    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as err:
        text = str(err)
        if "lock" in text.lower():
            raise KvscopeError(
                f"{path}: the store is in use by another process (a running kvscope watch?).",
                "DuckDB lets one process write a store; stop it or read a copy.",
            ) from None
        first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
        raise KvscopeError(f"{path}: cannot open the store ({first}).") from None


def _kind(con: Any, path: Path) -> str:
    """'kvscope' (marked), 'legacy' (kvscope's samples table, no marker) or 'empty'."""
    tables = sorted(
        str(r[0])
        for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
    )
    if not tables:
        return "empty"
    cols = tuple(
        (str(r[0]), str(r[1]).upper())
        for r in con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_name = 'samples' ORDER BY ordinal_position"
        ).fetchall()
    )
    if cols == COLUMNS:
        return "kvscope" if MARKER_TABLE in tables else "legacy"
    if "samples" in tables:
        names = ", ".join(c for c, _ in cols)
        raise not_a_store(path, f"its 'samples' table has columns {names}, not kvscope's")
    shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
    raise not_a_store(path, f"a DuckDB database of other tables: {shown}")


def connect_store(path: Path, *, read_only: bool, create: bool) -> Any:
    """A DuckDB connection to the kvscope store at ``path`` (made new when allowed)."""
    try:
        return _connect_store(path, read_only, create)
    except OSError as err:  # a name too long for the file system, a loop of links
        raise KvscopeError(f"{path}: cannot open the store ({err.strerror or err}).") from None


def _connect_store(path: Path, read_only: bool, create: bool) -> Any:
    if not path.exists() and not path.is_symlink():
        if read_only or not create:
            raise KvscopeError(f"store {path} does not exist.", "Record one with kvscope watch.")
        writable_file(path, "telemetry store")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise KvscopeError(f"{path}: cannot create the store ({err.strerror}).") from None
        con = _connect(path, read_only=False)
        _initialise(con)
        return con
    check_duckdb_file(path)
    probe = _connect(path, read_only=True)
    try:
        kind = _kind(probe, path)
    finally:
        probe.close()
    if kind == "empty" and (read_only or not create):
        raise not_a_store(path, "an empty DuckDB database")
    con = _connect(path, read_only=read_only)
    if kind == "empty":
        _initialise(con)
    elif kind == "legacy" and not read_only:
        _initialise(con, marker_only=True)  # a store from before the marker: mark it
    return con


def _initialise(con: Any, marker_only: bool = False) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        for ddl in _DDL[1:] if marker_only else _DDL:
            con.execute(ddl)
        con.execute(
            f"INSERT INTO {MARKER_TABLE} VALUES (?, ?, ?)", [STORE_FORMAT, __version__, time.time()]
        )
        con.execute("COMMIT")
    except Exception as err:
        con.execute("ROLLBACK")
        con.close()
        raise KvscopeError(f"cannot make the store's tables ({err}).") from err
