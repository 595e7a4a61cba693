"""The job function of ``simulate --sweep``: one configuration on the whole workload.

Top level, so a process pool or Ray ships it by reference; it returns the run directory
``simulate`` writes for one run (requests and steps tables, the figures, the configuration
with its pool and workload), for :class:`kvscope.executor.PointStore` to save.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from kvscope.executor.store import PointResult
from kvscope.fleet import FleetConfig, simulate
from kvscope.fleet.disagg import DisaggConfig
from kvscope.sim.run import SimConfig
from kvscope.workload import Workload


def simulate_run(cfg: SimConfig | FleetConfig | DisaggConfig, workload: Workload) -> PointResult:
    """One engine for a ``SimConfig``, a fleet of replicas for a ``FleetConfig``,
    prefill/decode pools for a ``DisaggConfig``."""
    res = simulate(workload, cfg)
    config: dict[str, Any] = {
        **asdict(res.config),
        "pool": res.pool_info,
        "workload": dict(workload.spec),
    }
    return PointResult(config, res.figures, {"requests": res.requests, "steps": res.steps})
