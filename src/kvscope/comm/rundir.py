"""The run directory a ``kvscope comm`` command writes, as it measures.

- ``comm.jsonl``: one JSON object per measured size (or routing skew), appended and
  flushed the moment that point is measured, so a run that fails half-way keeps what it
  measured;
- ``comm.parquet``: the same rows at the end, with the model's prediction added;
- ``comm_samples.parquet``: every raw timing, one row per (step, iteration, rank), seconds;
- ``summary.json``: ``kind`` = ``comm``, ``kvscope_version``, the configuration, the
  environment, the link fit and the headline figures (units in the names), plus
  ``status`` (``ok`` or ``error``) and the error line when a rank failed.

The directory is checked when the run starts, before any rank is launched: a path under a
file, a file in its place or no permission is one error line, and a directory that already
holds a run is refused unless ``force`` (then its files are removed first), so a new run
never mixes with or silently replaces one already measured.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from kvscope import __version__
from kvscope.errors import KvscopeError
from kvscope.validate import fresh_run_dir


def summary_document(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` with ``kind`` and ``kvscope_version`` first: what ``summary.json`` holds."""
    return {"kind": "comm", "kvscope_version": __version__, **summary}


def _finite(obj: Any) -> Any:
    """Non-finite floats become None: strict JSON has no NaN or Infinity."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


class CommRunDir:
    """A run directory being written (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], *, force: bool = False) -> None:
        self.path = fresh_run_dir(Path(path), force=force)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / "comm.jsonl").write_text("")
        except OSError as err:
            raise self._error(err) from None
        self._samples: list[dict[str, Any]] = []
        self._steps = 0

    def _error(self, err: OSError) -> KvscopeError:
        return KvscopeError(f"cannot write run directory {self.path}: {err.strerror}.")

    def append(self, row: dict[str, Any], times_s: np.ndarray) -> None:
        """Record one measured point now: its row and its raw ``times_s[rank, iteration]``."""
        try:
            with (self.path / "comm.jsonl").open("a") as f:
                f.write(json.dumps(_finite(row), default=_json_default, allow_nan=False) + "\n")
                f.flush()
        except OSError as err:
            raise self._error(err) from None
        step, self._steps = self._steps, self._steps + 1
        for rank, per_rank in enumerate(np.asarray(times_s)):
            for it, t in enumerate(per_rank):
                self._samples.append({"step": step, "iteration": it, "rank": rank, "time_s": t})

    def finish(self, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
        """Write the tables and ``summary.json`` (atomically replaced)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            if rows:
                pq.write_table(pa.Table.from_pylist(rows), self.path / "comm.parquet")
            if self._samples:
                pq.write_table(
                    pa.Table.from_pylist(self._samples), self.path / "comm_samples.parquet"
                )
        except OSError as err:
            raise self._error(err) from None
        self.write_summary(summary)

    def write_summary(self, summary: dict[str, Any]) -> None:
        doc = summary_document(summary)
        tmp = self.path / "summary.json.tmp"
        text = json.dumps(_finite(doc), indent=2, default=_json_default, allow_nan=False)
        try:
            tmp.write_text(text + "\n")
            tmp.replace(self.path / "summary.json")
        except OSError as err:
            raise self._error(err) from None
