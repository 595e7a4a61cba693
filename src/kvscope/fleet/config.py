"""A fleet to simulate: pools of replicas (each its own model, GPU, flags), router, autoscaling.

:class:`FleetConfig` is the cluster-level twin of :class:`kvscope.sim.run.SimConfig`: every
pool holds a checked ``SimConfig`` for one replica and a replica count; the router and its
weights, the router's seed and the autoscaling policy are fleet fields. ``with_flag`` sets a
fleet field (``replicas``, ``router``, ``router-weights``, ``autoscale``) or, for any other
simulate flag, that flag in every pool, so ``--sweep`` spans both. Pools are the unit a later
prefill/decode split drives (a prefill pool and a decode pool, each with its own GPU/flags).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.fleet.autoscale import Policy, parse_autoscale
from kvscope.fleet.routers import ROUTERS, RouterWeights
from kvscope.sim.run import SimConfig
from kvscope.validate import count, finite

#: Most replicas one fleet simulation runs (each a whole engine stepped at every arrival).
MAX_REPLICAS = 1024
#: The fleet fields ``with_flag`` (``--sweep``) sets, by their flag spelling.
FLEET_FLAGS = ("replicas", "router", "router-weights", "autoscale")


@dataclass(frozen=True)
class PoolConfig:
    """``replicas`` engines, each configured as ``sim`` (its own model, GPU and flags)."""

    name: str
    replicas: int
    sim: SimConfig


@dataclass(frozen=True)
class FleetConfig:
    """Pools of replicas behind one router on one clock."""

    pools: tuple[PoolConfig, ...]
    router: str = "round-robin"
    router_weights: RouterWeights = field(default_factory=RouterWeights)
    router_seed: int = 0
    autoscale: str | None = None

    def __post_init__(self) -> None:
        if not self.pools:
            raise KvscopeError("cluster: pools must list at least one pool.")
        if self.router not in ROUTERS:
            raise KvscopeError(
                f"--router must be one of {', '.join(ROUTERS)}, got '{self.router}'."
            )
        w = self.router_weights
        for name in ("prefix", "queue", "kv"):
            finite(getattr(w, name), f"--router-weights {name}", low=0, high=1e6)
        if w.prefix + w.queue + w.kv <= 0:
            raise KvscopeError("--router-weights: at least one weight must be > 0.")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise KvscopeError(f"cluster: pool names must differ, got {names}.")
        for p in self.pools:
            count(p.replicas, f"pool '{p.name}': replicas", low=1, high=MAX_REPLICAS)
            if p.sim.dp > 1:
                raise KvscopeError(
                    f"pool '{p.name}': --data-parallel-size is vLLM's own DP balancer inside "
                    "one deployment; give a fleet's engines as replicas instead."
                )
            if p.sim.speculative_config is not None:
                raise KvscopeError(
                    f"pool '{p.name}': --speculative-config is simulated for one engine, "
                    "not a fleet of replicas."
                )
        count(self.replicas, "replicas (all pools)", low=1, high=MAX_REPLICAS)
        self.policy()

    @property
    def replicas(self) -> int:
        """Replicas declared over every pool (the autoscaler's ceiling)."""
        return sum(p.replicas for p in self.pools)

    @property
    def cost_file(self) -> str | None:
        return self.pools[0].sim.cost_file

    def policy(self) -> Policy | None:
        """The checked autoscaling policy, or None (every replica routable throughout)."""
        return None if self.autoscale is None else parse_autoscale(self.autoscale, self.replicas)

    def check(self) -> None:
        """Size every pool's KV cache by the planner (a pool that does not fit its GPUs is
        one line naming the pool) before any simulation starts."""
        from kvscope.sim.run import build_pool

        for i, p in enumerate(self.pools):
            try:
                build_pool(p.sim)
            except KvscopeError as err:
                raise KvscopeError(f"pools[{i}] ({p.name}): {err.one_line()}") from None

    def with_flag(self, flag: str, value: str) -> FleetConfig:
        """A copy with one fleet field or simulate flag (every pool's) set; for sweeps."""
        name = flag.lstrip("-")
        if name == "replicas":
            if len(self.pools) != 1:
                raise KvscopeError(
                    "--sweep replicas: the cluster has several pools; sweep one pool's "
                    "replicas in the cluster file instead."
                )
            try:
                n = int(value)
            except ValueError:
                raise KvscopeError(f"--sweep replicas: '{value}' is not an integer.") from None
            return replace(self, pools=(replace(self.pools[0], replicas=n),))
        if name == "router":
            return replace(self, router=value)
        if name == "router-weights":
            return replace(self, router_weights=parse_weights(value))
        if name == "autoscale":
            return replace(self, autoscale=None if value == "none" else value)
        pools = tuple(replace(p, sim=p.sim.with_flag(flag, value)) for p in self.pools)
        return replace(self, pools=pools)


def parse_weights(text: str) -> RouterWeights:
    """``prefix=3,queue=2,kv=2`` (any subset; the rest keep llm-d's defaults)."""
    values: dict[str, Any] = {}
    for item in text.split(","):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or key not in ("prefix", "queue", "kv"):
            raise KvscopeError(
                f"--router-weights: '{item.strip()}' is not prefix=W, queue=W or kv=W."
            )
        values[key] = finite(raw.strip(), f"--router-weights {key}", low=0, high=1e6)
    return RouterWeights(**values)


def single_pool(sim: SimConfig, replicas: int, **fleet: Any) -> FleetConfig:
    """``replicas`` copies of one engine configuration (``--replicas N``)."""
    return FleetConfig((PoolConfig("default", replicas, sim),), **fleet)
