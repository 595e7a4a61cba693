"""The fleet flags of ``simulate`` (replicas, router, weights, cluster file, autoscaling).

Without any of them (and no ``--sweep`` over them) ``simulate`` runs one engine as before;
with them it runs a :class:`kvscope.fleet.FleetConfig` (:mod:`kvscope.fleet`), checked by
that layer (routers, weights, autoscaling, each pool's flags and fit on its GPUs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kvscope.errors import KvscopeError

Replicas = Annotated[
    int | None,
    typer.Option(
        "--replicas",
        help="Engine replicas behind a router on one clock (a fleet) [default: one engine].",
    ),
]
Router = Annotated[
    str | None,
    typer.Option(
        "--router",
        help="round-robin, random, least-outstanding, least-kv-usage, session-affinity, "
        "prefix-aware or prefix-load [default: round-robin].",
    ),
]
RouterWeights = Annotated[
    str | None,
    typer.Option(
        "--router-weights",
        help="prefix-load's scorer weights, prefix=W,queue=W,kv=W [default: 3, 2, 2, llm-d's].",
    ),
]
ClusterFile = Annotated[
    Path | None,
    typer.Option(
        "--cluster", help="Cluster YAML: pools of replicas, each with its own model/GPU/flags."
    ),
]
Autoscale = Annotated[
    str | None,
    typer.Option(
        "--autoscale",
        help="schedule:T=N,... or queue|kv:up=X,down=Y[,min,initial,interval,delay] "
        "[default: every replica up throughout].",
    ),
]


def fleet_config(
    cfg: Any,
    replicas: int | None,
    router: str | None,
    weights: str | None,
    cluster: Path | None,
    autoscale: str | None,
    sweep: list[str] | None,
    seed: int | None,
    calibrate: bool,
) -> Any:
    """``cfg`` (one engine) unless a fleet flag or a ``--sweep`` over one is given; then the
    checked :class:`~kvscope.fleet.FleetConfig` (the command line's flags over the file's)."""
    from kvscope.fleet.config import FLEET_FLAGS

    swept = any(s.partition("=")[0].strip().lstrip("-") in FLEET_FLAGS for s in sweep or [])
    given = (replicas, router, weights, cluster, autoscale)
    if not swept and all(v is None for v in given):
        return cfg
    if calibrate:
        raise KvscopeError("--calibrate fits one engine's costs; drop the fleet flags.")
    from kvscope.fleet.config import parse_weights, single_pool

    fleet: dict[str, Any] = {"router_seed": seed or 0}
    if router is not None:
        fleet["router"] = router
    if weights is not None:
        fleet["router_weights"] = parse_weights(weights)
    if autoscale is not None:
        fleet["autoscale"] = autoscale
    if cluster is None:
        from kvscope.fleet.config import MAX_REPLICAS
        from kvscope.validate import count

        n = 1 if replicas is None else count(replicas, "--replicas", low=1, high=MAX_REPLICAS)
        return single_pool(cfg, n, **fleet)
    if replicas is not None:
        raise KvscopeError("--replicas and --cluster: give the replicas in the cluster file.")
    from dataclasses import replace

    from kvscope.fleet.cluster_file import load_cluster
    from kvscope.fleet.disagg import DisaggConfig

    loaded = load_cluster(cluster, cfg, seed or 0)
    if isinstance(loaded, DisaggConfig):
        given_flags = {"--router": router, "--router-weights": weights, "--autoscale": autoscale}
        for flag, value in given_flags.items():
            if value is not None:
                raise KvscopeError(f"{flag}: the cluster file's prefill/decode pools take none.")
        return loaded
    return replace(loaded, **fleet)


def check_point(point: Any) -> None:
    """Before any simulation: a fleet's pools sized by the planner, or one engine's pool."""
    check = getattr(point, "check", None)
    if check is not None:
        check()
        return
    from kvscope.sim.run import build_pool

    build_pool(point)
