"""``kvscope.memtrace``: read PyTorch CUDA memory snapshots safely and fast, and say where
fragmentation, leaks and OOMs come from.

Public API:

- :func:`load_snapshot` - a snapshot file as :class:`SnapshotColumns` (safe unpickling,
  columnar, cached in kvscope's cache directory);
- :func:`analyze` - the :class:`MemtraceReport` of a snapshot (timeline, fragmentation,
  OOMs, retries, leaks, sites, categories), optionally inside a time window;
- :func:`compare` - what changed between two snapshots;
- :func:`write_run` - a run directory (``summary.json`` with kind ``memtrace`` + Parquet);
- :func:`recording` - a context manager that records a snapshot around a block of code
  (needs torch and a CUDA device);
- :mod:`kvscope.memtrace.generator` - synthetic snapshots in the real format.

This package imports no torch at module level; only recording needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvscope.memtrace.analysis import MemtraceReport, analyze
from kvscope.memtrace.columns import SnapshotColumns
from kvscope.memtrace.load import load_snapshot

if TYPE_CHECKING:
    from kvscope.memtrace.compare import SnapshotDiff, compare
    from kvscope.memtrace.record import recording
    from kvscope.memtrace.rundir import write_run

# Loaded on first use: the run-directory writer pulls in pyarrow, which a plain
# ``analyze --json`` does not need (start-up time counts for the cached path).
_LAZY = {
    "SnapshotDiff": "kvscope.memtrace.compare",
    "compare": "kvscope.memtrace.compare",
    "recording": "kvscope.memtrace.record",
    "write_run": "kvscope.memtrace.rundir",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kvscope.memtrace' has no attribute '{name}'")


__all__ = [
    "MemtraceReport",
    "SnapshotColumns",
    "SnapshotDiff",
    "analyze",
    "compare",
    "load_snapshot",
    "recording",
    "write_run",
]
