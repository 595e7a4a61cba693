"""Shared result records and run directories.

``kvscope simulate`` and ``kvscope bench`` write the same per-request schema
(:data:`REQUEST_SCHEMA`) so a simulated and a measured run of one workload compare row by
row. Every command that produces results writes a run directory: ``summary.json`` plus
Parquet tables (see :mod:`kvscope.results.run_dir`).
"""

from kvscope.results.records import REQUEST_COLUMNS, REQUEST_SCHEMA, RequestRecord, Status
from kvscope.results.run_dir import RunDir, TableWriter, read_summary, read_table
from kvscope.results.stats import goodput, latency_summary, percentiles

__all__ = [
    "REQUEST_COLUMNS",
    "REQUEST_SCHEMA",
    "RequestRecord",
    "RunDir",
    "Status",
    "TableWriter",
    "goodput",
    "latency_summary",
    "percentiles",
    "read_summary",
    "read_table",
]
