"""Load generator for OpenAI-compatible servers (``kvscope bench``).

Public API: :func:`run_bench` (one measured run into a run directory),
:func:`kvscope.bench.search.find_max_rate` (highest rate meeting SLOs), the wire config
:class:`ClientConfig`, the load shape :class:`LoadConfig`, and the mock server in
:mod:`kvscope.bench.mock_server`. This package is the only place kvscope speaks HTTP to an
inference server; it depends on :mod:`kvscope.workload` and :mod:`kvscope.results`.
"""

from kvscope.bench.client import ClientConfig, Endpoint, ErrorKind, normalize_base_url
from kvscope.bench.metrics import parse_slo
from kvscope.bench.records import BENCH_REQUEST_SCHEMA
from kvscope.bench.run import BenchOptions, load_for, prepare, run_bench
from kvscope.bench.runner import LoadConfig

__all__ = [
    "BENCH_REQUEST_SCHEMA",
    "BenchOptions",
    "ClientConfig",
    "Endpoint",
    "ErrorKind",
    "LoadConfig",
    "load_for",
    "normalize_base_url",
    "parse_slo",
    "prepare",
    "run_bench",
]
