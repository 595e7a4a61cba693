"""Offload tier specs: the ``--kv-offload`` grammar, the ``--kv-tiers`` YAML file, defaults.

Units: bytes, bytes/s, seconds inside (:class:`kvscope.sim.kv_tiers.TierSpec`); the file
spells them ``capacity_gib`` (GiB), ``read_gb_per_s`` / ``write_gb_per_s`` (GB/s, 10^9 B/s)
and ``latency_us`` (microseconds). Every value passes :func:`kvscope.validate.finite`, so a
bad one is one line naming the field (exit 2).

Defaults per kind (any can be overridden in the file):

* ``cpu``: host DRAM over the GPU's own PCIe link, read and write at the catalogue's
  ``pcie_gbps_per_direction`` of the simulated GPU (PCIe Gen5 x16 on H100/H200/B200:
  32 GT/s x 16 lanes, ~64 GB/s per direction, PCI-SIG PCIe 5.0 base specification); one link
  per GPU (``per-gpu``); 10 us per load (a kvscope assumption: the launch and DMA set-up of
  one batched ``cudaMemcpyAsync``).
* ``disk``: a local datacenter NVMe SSD (PCIe Gen4 x4), 6.9 GB/s read and 4.1 GB/s write
  (Samsung PM9A3 U.2 datasheet, sequential), shared by the engine's GPUs; 100 us per load
  (NVMe read latency, order of magnitude; a kvscope assumption).
* ``remote``: a network KV store (LMCache remote backend, Mooncake store) over one 100 GbE
  link, 12.5 GB/s each way (IEEE 802.3 100GBASE), shared; 1 ms per load (a round trip plus
  the store's lookup; a kvscope assumption).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.sim.kv_tiers import STORE_POLICIES, TIER_KINDS, TierSpec
from kvscope.validate import finite, load_yaml

GIB = float(1 << 30)
#: Largest tier (bytes): an exbibyte, past any store, so block counts stay finite.
MAX_TIER_BYTES = float(1 << 60)

DEFAULTS: dict[str, TierSpec] = {
    "cpu": TierSpec("cpu", 0.0, None, None, 10e-6, "per-gpu"),
    "disk": TierSpec("disk", 0.0, 6.9e9, 4.1e9, 100e-6, "shared"),
    "remote": TierSpec("remote", 0.0, 12.5e9, 12.5e9, 1e-3, "shared"),
}

_UNITS = {
    "": GIB,
    "b": 1.0,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2.0**10,
    "mib": 2.0**20,
    "gib": GIB,
    "tib": 2.0**40,
}
_SIZE = re.compile(r"^\s*([0-9.eE+-]+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, name: str) -> float:
    """``64GiB``, ``1TiB``, ``500GB`` or a bare number of GiB, in bytes."""
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        raise KvscopeError(f"{name}: '{text}' is not a size (e.g. 64GiB, 1TiB, 500GB).")
    value = finite(m.group(1), name, low=0) * _UNITS[unit]
    return finite(value, name, high=MAX_TIER_BYTES)


def _kind(kind: Any, name: str) -> str:
    if kind not in TIER_KINDS:
        raise KvscopeError(f"{name}: unknown tier '{kind}'; use {', '.join(TIER_KINDS)}.")
    return str(kind)


def _unique(specs: list[TierSpec], name: str) -> tuple[TierSpec, ...]:
    kinds = [s.kind for s in specs]
    for k in kinds:
        if kinds.count(k) > 1:
            raise KvscopeError(f"{name}: tier '{k}' is given twice.")
    return tuple(specs)


def parse_offload(text: str, name: str = "--kv-offload") -> tuple[TierSpec, ...]:
    """``cpu:64GiB,disk:1TiB`` (or ``+`` between tiers): tiers of default terms, in order."""
    specs = []
    for item in re.split(r"[,+]", text):
        if not item.strip():
            continue
        kind, sep, size = item.strip().partition(":")
        kind = _kind(kind.strip().lower(), name)
        if not sep:
            raise KvscopeError(f"{name}: '{item.strip()}' needs a size, e.g. {kind}:64GiB.")
        specs.append(replace(DEFAULTS[kind], capacity_bytes=parse_size(size, f"{name} {kind}")))
    if not specs:
        raise KvscopeError(f"{name}: no tier given (e.g. cpu:64GiB,disk:1TiB).")
    return _unique(specs, name)


_FIELDS = ("kind", "capacity_gib", "read_gb_per_s", "write_gb_per_s", "latency_us", "link")


def load_tiers(path: str | Path) -> tuple[tuple[TierSpec, ...], str | None]:
    """A ``--kv-tiers`` file: ``tiers:`` (a list of tier mappings) and optional ``store:``."""
    src = f"--kv-tiers {path}"
    doc = load_yaml(path, "tier spec")
    if not isinstance(doc, dict) or not isinstance(doc.get("tiers"), list) or not doc["tiers"]:
        raise KvscopeError(f"{src}: expected a mapping with a non-empty 'tiers:' list.")
    unknown = sorted(set(doc) - {"tiers", "store"})
    if unknown:
        raise KvscopeError(f"{src}: unknown field '{unknown[0]}' (tiers, store).")
    store = doc.get("store")
    if store is not None and store not in STORE_POLICIES:
        raise KvscopeError(f"{src}: store must be {' or '.join(STORE_POLICIES)}, got '{store}'.")
    specs = [_tier(t, f"{src}: tiers[{i}]") for i, t in enumerate(doc["tiers"])]
    return _unique(specs, src), store


def _tier(t: Any, where: str) -> TierSpec:
    if not isinstance(t, dict):
        raise KvscopeError(f"{where} must be a mapping (kind, capacity_gib, ...).")
    bad = sorted(set(t) - set(_FIELDS))
    if bad:
        raise KvscopeError(f"{where}: unknown field '{bad[0]}' ({', '.join(_FIELDS)}).")
    kind = _kind(t.get("kind"), f"{where}.kind")
    base = DEFAULTS[kind]
    if "capacity_gib" not in t:
        raise KvscopeError(f"{where}.capacity_gib is missing.")
    cap = finite(t["capacity_gib"], f"{where}.capacity_gib", low=0) * GIB
    finite(cap, f"{where}.capacity_gib", high=MAX_TIER_BYTES)
    bw = {}
    for key in ("read_gb_per_s", "write_gb_per_s"):
        if key in t:
            bw[key] = finite(t[key], f"{where}.{key}", low=0, low_open=True, high=1e6) * 1e9
    lat = base.latency_s
    if "latency_us" in t:
        lat = finite(t["latency_us"], f"{where}.latency_us", low=0, high=1e9) / 1e6
    link = t.get("link", base.link)
    if link not in ("per-gpu", "shared"):
        raise KvscopeError(f"{where}.link must be per-gpu or shared, got '{link}'.")
    read = bw.get("read_gb_per_s", base.read_bw)
    write = bw.get("write_gb_per_s", base.write_bw if "read_gb_per_s" not in bw else read)
    return TierSpec(kind, cap, read, write, lat, link)


def with_cpu_size(specs: tuple[TierSpec, ...], gib: float | None) -> tuple[TierSpec, ...]:
    """``--cpu-offload-gib`` over a tier list: None leaves it; 0 removes the CPU tier; a size
    sets it (a CPU tier of default terms goes first when the list has none)."""
    if gib is None:
        return specs
    rest = tuple(s for s in specs if s.kind != "cpu")
    if gib == 0:
        return rest
    cpu = next((s for s in specs if s.kind == "cpu"), DEFAULTS["cpu"])
    return (replace(cpu, capacity_bytes=gib * GIB), *rest)
