"""Fleet what-ifs: engine replicas in pools behind a router, on one clock, with autoscaling;
prefill/decode disaggregation and its KV transfer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvscope.fleet.config import FleetConfig, PoolConfig, single_pool
from kvscope.fleet.run import simulate_fleet

__all__ = ["FleetConfig", "PoolConfig", "simulate", "simulate_fleet", "single_pool"]


def simulate(workload: Any, cfg: Any, progress: Callable[[int, int], None] | None = None) -> Any:
    """One engine (:func:`kvscope.sim.simulate`) for a ``SimConfig``, a fleet for a
    :class:`FleetConfig`, prefill/decode pools for a ``DisaggConfig``: the one entry point
    the CLI and the sweep executor call."""
    if isinstance(cfg, FleetConfig):
        return simulate_fleet(workload, cfg, progress)
    from kvscope.fleet.disagg import DisaggConfig

    if isinstance(cfg, DisaggConfig):
        from kvscope.fleet.disagg_run import simulate_pd

        return simulate_pd(workload, cfg)
    from kvscope.sim import simulate as simulate_engine

    return simulate_engine(workload, cfg, progress)
