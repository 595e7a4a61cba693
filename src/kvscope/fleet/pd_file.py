"""A cluster file's prefill/decode pools and ``kv_transfer`` link, read into a DisaggConfig.

Units: GB/s (10^9 bytes/s) and microseconds in the file, bytes/s and seconds inside. A
cluster file whose pools carry ``role: prefill`` / ``role: decode`` (exactly one of each) and
a top-level ``kv_transfer:`` mapping is a disaggregated deployment
(:class:`kvscope.fleet.disagg.DisaggConfig`): each pool's ``replicas`` is its number of
engines (the ``dp`` of its ``SimConfig``), and the link is one of

* ``link: rdma|nvlink|pcie`` -- the cited presets of :mod:`kvscope.fleet.kv_transfer`, taken
  for the slower of the two pools' GPUs; ``bandwidth_gb_per_s`` / ``latency_us`` override
  the preset's figures;
* ``bandwidth_gb_per_s`` (and optionally ``latency_us``, default 0) alone -- a custom link;
* ``comm_run: DIR`` -- the alpha-beta fit of a ``kvscope comm bench`` run (latency alpha,
  bandwidth 1 / beta), through :func:`kvscope.fleet.kv_transfer.measured_link`.

Every error is one :class:`ConfigError` line naming the field (``kv_transfer.link``,
``pools[1].role``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from kvscope.errors import ConfigError, KvscopeError
from kvscope.fleet.disagg import ROLES, DisaggConfig
from kvscope.fleet.kv_transfer import LINKS, KVLink, default_link, measured_link
from kvscope.sim.run import SimConfig

#: Fields of ``kv_transfer:``.
LINK_FIELDS = ("link", "bandwidth_gb_per_s", "latency_us", "comm_run")
#: Cluster fields a disaggregated deployment does not take (no router in front of it here:
#: vLLM's DP balancer deals requests within each pool).
NOT_PD = ("router", "router_weights", "autoscale")


def is_pd(doc: dict[str, Any]) -> bool:
    """Whether a (key-normalized) cluster document asks for prefill/decode pools."""
    pools = doc.get("pools")
    roles = isinstance(pools, list) and any(isinstance(p, dict) and "role" in p for p in pools)
    return roles or "kv_transfer" in doc


def load_pd(src: str, doc: dict[str, Any], base: SimConfig, pool_of: Any) -> DisaggConfig:
    """The disaggregated deployment of a cluster document; ``pool_of(src, i, doc, base)``
    reads one pool's flags (:func:`kvscope.fleet.cluster_file._pool`)."""
    for key in NOT_PD:
        if doc.get(key) is not None:
            raise ConfigError(src, key, "is not supported with prefill/decode pools (role:)")
    pools_doc = doc.get("pools")
    if not isinstance(pools_doc, list) or not pools_doc:
        raise ConfigError(src, "pools", "must be a non-empty list of pools")
    by_role: dict[str, tuple[int, Any]] = {}
    for i, p in enumerate(pools_doc):
        if not isinstance(p, dict):
            raise ConfigError(src, f"pools[{i}]", "must be a mapping (role, replicas, flags)")
        if "role" not in p:
            raise ConfigError(
                src,
                f"pools[{i}].role",
                "is required: with prefill/decode pools, every pool "
                "is role: prefill or role: decode",
            )
        role = p["role"]
        if role not in ROLES:
            raise ConfigError(src, f"pools[{i}].role", f"must be prefill or decode, got '{role}'")
        if role in by_role:
            raise ConfigError(
                src,
                f"pools[{i}].role",
                f"is a second {role} pool; give one prefill and one "
                "decode pool (engines as its replicas)",
            )
        by_role[role] = (i, p)
    for role in ROLES:
        if role not in by_role:
            other = ROLES[1 - ROLES.index(role)]
            raise ConfigError(src, "pools", f"has a {other} pool but no {role} pool")
    if "kv_transfer" not in doc:
        raise ConfigError(src, "kv_transfer", "is required with prefill/decode pools")
    sims: dict[str, SimConfig] = {}
    names: dict[str, str] = {}
    for role, (i, p) in by_role.items():
        pool = pool_of(src, i, {k: v for k, v in p.items() if k != "role"}, base)
        if pool.sim.dp > 1:
            raise ConfigError(
                src, f"pools[{i}]", "sets --data-parallel-size; give the pool's engines as replicas"
            )
        if pool.sim.engine != "vllm" or pool.sim.allocator != "paged":
            raise ConfigError(
                src,
                f"pools[{i}]",
                "runs vLLM's disaggregated serving: --engine vllm with the paged allocator",
            )
        if pool.sim.speculative_config is not None:
            raise ConfigError(
                src, f"pools[{i}]", "takes no --speculative-config (simulated for one engine)"
            )
        if pool.sim.window_model != "bound":
            raise ConfigError(src, f"pools[{i}].window-model", "must be bound for disaggregation")
        try:
            sims[role] = replace(pool.sim, dp=pool.replicas)
        except KvscopeError as err:
            raise ConfigError(src, f"pools[{i}].replicas", err.one_line().rstrip(".")) from None
        names[role] = str(p.get("name", role))
    link = _link(src, doc["kv_transfer"], sims["prefill"], sims["decode"])
    return DisaggConfig(sims["prefill"], sims["decode"], link, (names["prefill"], names["decode"]))


def _number(src: str, doc: dict[str, Any], key: str, positive: bool) -> float:
    where = f"kv_transfer.{key}"
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(src, where, "must be a number")
    try:
        x = float(value)
    except ValueError:
        raise ConfigError(src, where, f"must be a number, got '{value}'") from None
    if not math.isfinite(x) or (x <= 0 if positive else x < 0):
        raise ConfigError(src, where, f"must be {'> 0' if positive else '>= 0'}, got {value}")
    return x


def _link(src: str, doc: Any, prefill: SimConfig, decode: SimConfig) -> KVLink:
    """The ``kv_transfer:`` mapping as a :class:`KVLink`."""
    if not isinstance(doc, dict):
        raise ConfigError(src, "kv_transfer", "must be a mapping (link, bandwidth_gb_per_s, ...)")
    doc = {str(k).replace("-", "_"): v for k, v in doc.items()}
    for key in doc:
        if key not in LINK_FIELDS:
            raise ConfigError(src, f"kv_transfer.{key}", f"is not a link field {LINK_FIELDS}")
    bw = (
        _number(src, doc, "bandwidth_gb_per_s", True) * 1e9 if "bandwidth_gb_per_s" in doc else None
    )
    lat = _number(src, doc, "latency_us", False) * 1e-6 if "latency_us" in doc else None
    if "comm_run" in doc:
        if len(doc) > 1:
            raise ConfigError(src, "kv_transfer.comm_run", "takes no other link field")
        return _comm_link(src, str(doc["comm_run"]))
    if "link" in doc:
        kind = doc["link"]
        if kind not in LINKS:
            raise ConfigError(
                src, "kv_transfer.link", f"must be one of {', '.join(LINKS)}, got '{kind}'"
            )
        from kvscope.specs.hardware import get_gpu

        try:
            links = [default_link(kind, get_gpu(c.gpu)) for c in (prefill, decode)]
        except KvscopeError as err:
            raise ConfigError(
                src, "kv_transfer.link", f"cannot be priced: {err.one_line().rstrip('.')}"
            ) from None
        slow = min(links, key=lambda k: k.bandwidth)
        return KVLink(
            kind,
            slow.bandwidth if bw is None else bw,
            slow.latency_s if lat is None else lat,
        )
    if bw is None:
        raise ConfigError(src, "kv_transfer", "needs link, bandwidth_gb_per_s or comm_run")
    return KVLink("custom", bw, 0.0 if lat is None else lat)


def _comm_link(src: str, run_dir: str) -> KVLink:
    """The link a ``kvscope comm bench`` run fitted (its summary's ``fit``)."""
    from kvscope.comm.model import read_run_fit

    where = "kv_transfer.comm_run"
    try:
        fit, _summary = read_run_fit(run_dir)
        if fit.beta_s_per_byte <= 0:
            raise ConfigError(src, where, f"'{run_dir}': the fit has no bandwidth term (beta 0)")
        return measured_link(fit, f"measured ({run_dir})")
    except ConfigError:
        raise
    except KvscopeError as err:
        raise ConfigError(src, where, err.one_line().rstrip(".")) from None
