"""Run directories: ``summary.json`` plus tables written as the run goes.

Tables are crash-safe: each batch is appended to ``<name>.arrows`` (an Arrow IPC stream,
flushed per batch), and :meth:`TableWriter.close` turns it into ``<name>.parquet``. A run
killed before closing still leaves every complete batch readable: :func:`read_table` falls
back to the stream and stops at a torn final batch. Readers ignore columns they do not know.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kvscope import __version__
from kvscope.errors import KvscopeError
from kvscope.validate import fresh_run_dir, load_json, write_text_atomic

RUN_KINDS = ("simulate", "bench", "watch", "memtrace", "comm", "plan")


class TableWriter:
    """Append rows or column batches to one table of a run directory."""

    def __init__(self, directory: Path, name: str, schema: pa.Schema) -> None:
        self.schema = schema
        self.stream_path = directory / f"{name}.arrows"
        self.parquet_path = directory / f"{name}.parquet"
        self._sink = pa.OSFile(str(self.stream_path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, schema)
        self.rows_written = 0
        self._closed = False

    def append_rows(self, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self.append_batch(pa.RecordBatch.from_pylist(list(rows), schema=self.schema))

    def append_columns(self, columns: Mapping[str, Any]) -> None:
        arrays = [pa.array(columns[f.name], type=f.type) for f in self.schema]
        self.append_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))

    def append_batch(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self._writer.write_batch(batch)
        self._sink.flush()
        self.rows_written += batch.num_rows

    def close(self) -> Path:
        """Finish the stream and write the Parquet table; returns its path."""
        if self._closed:
            return self.parquet_path
        self._writer.close()
        self._sink.close()
        table = _read_stream(self.stream_path, self.schema)
        tmp = self.parquet_path.with_suffix(".parquet.tmp")
        # A file object, not a path string: pyarrow reads "file:/x" or "s3:..." as a URI.
        with open(tmp, "wb") as fh:
            pq.write_table(table, fh)
        os.replace(tmp, self.parquet_path)
        self.stream_path.unlink(missing_ok=True)
        self._closed = True
        return self.parquet_path

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_stream(path: Path, schema: pa.Schema | None = None) -> pa.Table:
    batches = []
    try:
        with pa.OSFile(str(path), "rb") as f:
            reader = pa.ipc.open_stream(f)
            schema = reader.schema
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
    except (pa.ArrowInvalid, OSError):
        pass  # a torn last batch (killed mid-write) ends the readable part
    if schema is None:
        raise KvscopeError(f"{path}: not a readable table stream.")
    return pa.Table.from_batches(batches, schema=schema)


class RunDir:
    """A run directory being written: tables plus ``summary.json``."""

    def __init__(self, path: str | Path, kind: str, *, force: bool = False) -> None:
        """Open ``path`` for a new run of ``kind``.

        An existing directory that holds files is refused (an earlier run's measurements are
        never mixed with or replaced by a new one) unless ``force``, which removes them first.
        """
        if kind not in RUN_KINDS:
            raise ValueError(f"unknown run kind {kind!r}")
        self.path = fresh_run_dir(path, force=force)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise KvscopeError(
                f"{self.path}: cannot create run directory ({err.strerror})."
            ) from None
        self.kind = kind
        self.started_unix = time.time()

    def table(self, name: str, schema: pa.Schema) -> TableWriter:
        return TableWriter(self.path, name, schema)

    def write_summary(
        self, config: Mapping[str, Any], figures: Mapping[str, Any], **extra: Any
    ) -> Path:
        """Write ``summary.json`` atomically (kind, version, configuration, headline figures)."""
        doc = {
            "kind": self.kind,
            "kvscope_version": __version__,
            "started_unix_s": self.started_unix,
            "config": dict(config),
            **dict(figures),
            **extra,
        }
        return write_text_atomic(
            self.path / "summary.json", json.dumps(_jsonable(doc), indent=2) + "\n", "summary"
        )


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    if hasattr(obj, "item") and callable(obj.item):
        return _jsonable(obj.item())
    return obj


def read_table(run_dir: str | Path, name: str) -> pa.Table | None:
    """A table of a run directory: the Parquet file, else what an interrupted run streamed,
    else None."""
    d = Path(run_dir)
    parquet = d / f"{name}.parquet"
    if parquet.is_file():
        try:
            with open(parquet, "rb") as fh:
                return pq.read_table(fh)
        except (pa.ArrowException, OSError) as err:
            reason = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
            raise KvscopeError(f"{parquet}: not a readable Parquet table ({reason}).") from None
    stream = d / f"{name}.arrows"
    if stream.is_file():
        return _read_stream(stream)
    return None


def read_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """``summary.json`` of a run directory, or None when absent; unreadable → one error line."""
    p = Path(run_dir) / "summary.json"
    if not p.is_file():
        return None
    data = load_json(p, "summary.json")
    return data if isinstance(data, dict) else None
