"""``--cluster cluster.yaml``: a fleet as pools of replicas, read and checked field by field.

The file::

    router: prefix-load              # any --router name (default round-robin)
    router_weights: {prefix: 3, queue: 2, kv: 2}
    autoscale: queue:up=8,down=1,min=2,interval=30,delay=120   # optional, as --autoscale
    pools:
      - name: h100                   # optional (default pool<i>)
        replicas: 4
        gpu: H100                    # any simulate flag, by its long name (dashes or
        max-num-seqs: 256            # underscores); unset flags keep the command line's
      - name: a100
        replicas: 2
        gpu: A100-80GB

Prefill/decode disaggregation (:mod:`kvscope.fleet.pd_file`): one ``role: prefill`` and one
``role: decode`` pool (``replicas`` = engines in the pool) and the KV link between them::

    kv_transfer:
      link: rdma                     # rdma | nvlink | pcie (cited presets), or
                                     # bandwidth_gb_per_s: 50, latency_us: 10, or
                                     # comm_run: runs/comm (a `kvscope comm bench` fit)
    pools:
      - {name: prefill, role: prefill, replicas: 2, gpu: H200, tp: 8}
      - {name: decode, role: decode, replicas: 1, gpu: H200, tp: 8}

Every error is one line naming the file and the field (``pools[1].gpu``); each pool's flags
go through :class:`kvscope.sim.run.SimConfig`'s own checks, and :meth:`FleetConfig.check`
sizes each pool's KV cache with the planner before anything runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvscope.errors import ConfigError, KvscopeError
from kvscope.fleet.config import FleetConfig, PoolConfig, parse_weights
from kvscope.fleet.disagg import DisaggConfig
from kvscope.fleet.pd_file import is_pd, load_pd
from kvscope.sim.run import SimConfig
from kvscope.validate import count, load_yaml

_TOP = {"router", "router_weights", "autoscale", "pools", "kv_transfer"}
#: Fleet-level fields a pool may not set (they belong to the whole fleet or to the run).
_NOT_POOL = {"sweep", "out", "force", "workload", "seed", "router", "replicas_total"}


def load_cluster(path: Path, base: SimConfig, seed: int = 0) -> FleetConfig | DisaggConfig:
    """The fleet ``path`` describes, each pool's flags laid over ``base`` (the command's); a
    :class:`DisaggConfig` when its pools carry prefill/decode roles (:mod:`.pd_file`)."""
    src = str(path)
    doc = load_yaml(path, "cluster spec")
    if not isinstance(doc, dict):
        raise KvscopeError(f"{src}: a cluster spec is a mapping with a 'pools' list.")
    for key in doc:
        if str(key).replace("-", "_") not in _TOP:
            raise ConfigError(src, str(key), f"is not a cluster field (known: {sorted(_TOP)})")
    doc = {str(k).replace("-", "_"): v for k, v in doc.items()}
    if is_pd(doc):
        return load_pd(src, doc, base, _pool)
    pools_doc = doc.get("pools")
    if not isinstance(pools_doc, list) or not pools_doc:
        raise ConfigError(src, "pools", "must be a non-empty list of pools")
    pools = tuple(_pool(src, i, p, base) for i, p in enumerate(pools_doc))
    weights = doc.get("router_weights")
    if weights is not None and not isinstance(weights, dict):
        raise ConfigError(src, "router_weights", "must be a mapping of prefix/queue/kv")
    fleet: dict[str, Any] = {"router_seed": seed}
    try:
        if weights:
            fleet["router_weights"] = parse_weights(
                ",".join(f"{k}={v}" for k, v in weights.items())
            )
        if doc.get("router") is not None:
            fleet["router"] = str(doc["router"])
        if doc.get("autoscale") is not None:
            fleet["autoscale"] = str(doc["autoscale"])
        return FleetConfig(pools, **fleet)
    except ConfigError:
        raise
    except KvscopeError as err:
        raise KvscopeError(f"{src}: {err.one_line()}") from None


def _pool(src: str, i: int, doc: Any, base: SimConfig) -> PoolConfig:
    where = f"pools[{i}]"
    if not isinstance(doc, dict):
        raise ConfigError(src, where, "must be a mapping (replicas, gpu, model, flags)")
    name = str(doc.get("name", f"pool{i}"))
    if "replicas" not in doc:
        raise ConfigError(src, f"{where}.replicas", "is required")
    try:
        replicas = count(doc["replicas"], "replicas", low=1)
    except KvscopeError as err:
        raise ConfigError(
            src, f"{where}.replicas", err.message.removeprefix("replicas ").rstrip(".")
        ) from None
    sim = base
    fields = base.__dataclass_fields__
    for key, value in doc.items():
        if key in ("name", "replicas"):
            continue
        flag = str(key)
        field = flag.replace("-", "_")
        aliases = {"num_gpu_blocks": "num_gpu_blocks_override", "tensor_parallel_size": "tp"}
        if field in _NOT_POOL or aliases.get(field, field) not in fields:
            raise ConfigError(src, f"{where}.{flag}", "is not a per-pool simulate flag")
        if isinstance(value, (dict, list)) or value is None:
            raise ConfigError(src, f"{where}.{flag}", "must be a single value")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        try:
            sim = sim.with_flag(flag, text)
        except KvscopeError as err:
            msg = err.one_line().replace("--sweep ", "").replace("--sweep: ", "")
            raise KvscopeError(f"{src}: field '{where}.{flag}': {msg}") from None
    return PoolConfig(name, replicas, sim)
