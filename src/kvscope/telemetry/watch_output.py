"""What a ``kvscope watch`` session writes: store batches off the sampling thread, and the
run directory at the end (``summary.json`` and ``server.parquet``)."""

from __future__ import annotations

import json
import math
import queue
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.telemetry.series import Sample
from kvscope.telemetry.store import Store


def write_run_dir(
    out_dir: Path, samples: Sequence[Sample], t0: float, summary: dict[str, Any]
) -> None:
    """``server.parquet`` (``t_s`` from ``t0``, one column per series) and ``summary.json``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    make_dir(out_dir)
    rows: dict[float, dict[str, float]] = {}
    for s in samples:
        col = f"{s.source}/{s.metric}" + (f"{{{s.labels}}}" if s.labels else "")
        rows.setdefault(s.t_s, {})[col] = s.value
    times = sorted(rows)
    cols = sorted({c for r in rows.values() for c in r})
    data: dict[str, Any] = {"t_s": pa.array([t - t0 for t in times], pa.float64())}
    for c in cols:
        data[c] = pa.array([rows[t].get(c) for t in times], pa.float64())
    # A file object, not the path: pyarrow reads 'a:b' in a path as a URI scheme.
    with (out_dir / "server.parquet").open("wb") as f:
        pq.write_table(pa.table(data), f)
    (out_dir / "summary.json").write_text(json.dumps(_finite(summary), indent=2) + "\n")


class StoreWriter(threading.Thread):
    """Commits batches off the sampling thread, in order, one transaction each.

    A COMMIT waits for the write-ahead log to reach the disk (tens of ms on a busy VM);
    doing it here keeps the sampling ticks on time.

    When a write fails (disk full, file size limit, the file's disk gone) the writer stops
    writing: ``failed`` is told at once, in one line, and that batch and every later one are
    kept in ``unwritten`` (memory), so the run directory still gets every sample. The
    watch's exit code reports it (:attr:`error`).
    """

    def __init__(
        self,
        store: Store,
        committed: Callable[[int], None],
        failed: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(name="kvscope-store-writer", daemon=True)
        self.store = store
        self.committed = committed
        self.failed = failed
        self.queue: queue.Queue[list[Sample] | None] = queue.Queue()
        #: One line: why the store stopped taking writes (None while it takes them).
        self.error: str | None = None
        self.unwritten: list[Sample] = []

    def put(self, batch: list[Sample]) -> None:
        self.queue.put(batch)

    def run(self) -> None:
        while (batch := self.queue.get()) is not None:
            if self.error is not None:
                self.unwritten.extend(batch)
                continue
            try:
                self.committed(self.store.append(batch))
            except Exception as err:  # told at once; sampling goes on, into memory
                self.unwritten.extend(batch)
                why = err.one_line() if isinstance(err, KvscopeError) else _first_line(err)
                self.error = f"{self.store.path}: store write failed ({why})"
                if self.failed is not None:
                    self.failed(self.error)

    def close(self) -> None:
        """Drain the queue (every batch committed or kept in ``unwritten``) and stop."""
        self.queue.put(None)
        self.join()


def make_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise KvscopeError(f"{path}: cannot create the run directory ({err.strerror}).") from None


def _finite(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__
