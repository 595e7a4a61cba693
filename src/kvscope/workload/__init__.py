"""Workloads: the one request stream that drives the simulator and the load generator.

Public API: :class:`Request` (one row), :class:`Workload` (the columnar stream),
:func:`build_workload` (from the shared ``--workload/--arrival/...`` flags),
:func:`~kvscope.workload.stats.workload_stats`. Trace loaders live in
:mod:`kvscope.workload.traces`. No torch, HTTP or NVML imports here (layering rule).
"""

from kvscope.workload.request import Request
from kvscope.workload.spec import build_workload
from kvscope.workload.stream import Workload

__all__ = ["Request", "Workload", "build_workload"]
