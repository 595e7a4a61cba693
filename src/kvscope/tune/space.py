"""The search space of ``kvscope tune``: axes, their defaults per engine, the YAML space file.

An axis is an engine flag (vLLM ``EngineArgs`` names; SGLang's equivalents are mapped by the
simulator and :mod:`kvscope.tune.command`) with the values to try; ``None`` stands for "flag
not given", the engine's own default. A space file (``--space space.yaml``) is a mapping of
axis names to a value or a list of values, each overriding that axis's default, e.g.::

    tp: [1, 2, 4]
    kv_cache_dtype: [auto, fp8]
    max_num_batched_tokens: [null, 4096]

GPU types come from ``--gpu``, the GPU count is bounded by ``--max-gpus`` (points with
TP x PP x DP x replicas above it are left out; a ``num_gpus`` list keeps only those counts).
``replicas`` (engines of the point's layout) and ``router`` (a ``kvscope simulate --router``
name) put several replicas behind a router (:mod:`kvscope.fleet`); the defaults try one
replica, so a fleet search names them, e.g. ``replicas: [1, 2, 4]`` and
``router: [round-robin, prefix-aware]``. A one-replica point has no router.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.fleet.routers import ROUTERS
from kvscope.validate import count, finite, load_yaml

#: Most points one space may expand to (a bound so a typo cannot ask for billions).
MAX_POINTS = 1_000_000


@dataclass(frozen=True)
class Point:
    """One deployment to try: the SimConfig fields tune varies (None: engine default)."""

    gpu: str
    tp: int = 1
    pp: int = 1
    dp: int = 1
    enable_expert_parallel: bool = False
    enable_dp_attention: bool = False
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    gpu_memory_utilization: float | None = None
    speculative_config: str | None = None
    replicas: int = 1
    router: str | None = None

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.replicas

    def sim_fields(self) -> dict[str, Any]:
        """The :class:`kvscope.sim.SimConfig` fields of this point."""
        d = dataclasses.asdict(self)
        d.pop("replicas")
        d.pop("router")
        if d["kv_cache_dtype"] == "auto":
            d["kv_cache_dtype"] = None
        return d

    def label(self) -> str:
        """A short readable name: ``H100x2 tp2 kv=fp8 mnbt=4096`` (defaults left out)."""
        parts = [f"{self.gpu}x{self.num_gpus}", f"tp{self.tp}"]
        if self.pp > 1:
            parts.append(f"pp{self.pp}")
        if self.dp > 1:
            parts.append(f"dp{self.dp}")
        if self.enable_expert_parallel:
            parts.append("ep")
        if self.enable_dp_attention:
            parts.append("dp-attn")
        for name, short in _SHORT.items():
            value = getattr(self, name)
            if value is not None and value != "auto":
                parts.append(f"{short}={value}")
        if not self.enable_prefix_caching:
            parts.append("no-prefix-cache")
        if not self.enable_chunked_prefill:
            parts.append("no-chunked-prefill")
        if self.speculative_config:
            method = json.loads(self.speculative_config).get("method", "spec")
            parts.append(f"spec={method}")
        if self.replicas > 1:
            parts.append(f"x{self.replicas} {self.router or 'round-robin'}")
        return " ".join(parts)


_SHORT = {
    "kv_cache_dtype": "kv",
    "block_size": "bs",
    "max_num_seqs": "mns",
    "max_num_batched_tokens": "mnbt",
    "gpu_memory_utilization": "gmu",
}
#: Axes a space file may name (the Point fields, GPU count and type).
AXES = (
    "gpu",
    "num_gpus",
    "tp",
    "pp",
    "dp",
    "enable_expert_parallel",
    "enable_dp_attention",
    "kv_cache_dtype",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "gpu_memory_utilization",
    "speculative_config",
    "replicas",
    "router",
)
_INT_AXES = {
    "num_gpus",
    "tp",
    "pp",
    "dp",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "replicas",
}
_BOOL_AXES = {
    "enable_expert_parallel",
    "enable_dp_attention",
    "enable_prefix_caching",
    "enable_chunked_prefill",
}
_NULLABLE = {
    "kv_cache_dtype",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "speculative_config",
    "router",
}


def _powers_of_two(limit: int) -> tuple[int, ...]:
    return tuple(2**k for k in range(limit.bit_length()) if 2**k <= limit)


def default_axes(
    engine: str, gpus: Sequence[str], max_gpus: int, moe: bool, mla: bool
) -> dict[str, Any]:
    """The default space: every TP x DP power-of-two split up to ``max_gpus``, KV dtype, the
    scheduler's two budgets (``None`` = the engine default, always tried), layouts the model
    can use (expert parallelism for MoE models, SGLang's DP attention for MLA models)."""
    sizes = _powers_of_two(max_gpus)
    return {
        "gpu": tuple(gpus),
        "num_gpus": None,
        "tp": sizes,
        "pp": (1,),
        "dp": sizes,
        "enable_expert_parallel": (False, True) if moe else (False,),
        "enable_dp_attention": (False, True) if engine == "sglang" and mla else (False,),
        "kv_cache_dtype": ("auto", "fp8"),
        "block_size": (None,),
        "max_num_seqs": (None, 128, 256),
        "max_num_batched_tokens": (None, 2048, 4096, 16384),
        "enable_prefix_caching": (True,),
        "enable_chunked_prefill": (True,),
        "gpu_memory_utilization": (None,),
        "speculative_config": (None,),
        "replicas": (1,),
        "router": (None,),
    }


def _values(name: str, raw: Any, where: str) -> tuple[Any, ...] | None:
    items = raw if isinstance(raw, list) else [raw]
    if name == "num_gpus" and raw is None:
        return None
    if not items:
        raise KvscopeError(f"{where}: '{name}' lists no value (an empty axis leaves no point).")
    out: list[Any] = []
    for v in items:
        if v is None and name in _NULLABLE:
            out.append(None)
        elif name in _BOOL_AXES:
            if not isinstance(v, bool):
                raise KvscopeError(f"{where}: '{name}' takes true or false, got {v!r}.")
            out.append(v)
        elif name in _INT_AXES:
            if isinstance(v, bool) or not isinstance(v, int):
                raise KvscopeError(f"{where}: '{name}' takes whole numbers, got {v!r}.")
            out.append(count(v, f"{where}: {name}", low=1))
        elif name == "gpu_memory_utilization":
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise KvscopeError(f"{where}: '{name}' takes a fraction, got {v!r}.")
            out.append(finite(float(v), f"{where}: {name}", low=0, low_open=True, high=1))
        elif name == "router":
            if v not in ROUTERS:
                raise KvscopeError(
                    f"{where}: router {v!r} is not a router (known: {', '.join(ROUTERS)})."
                )
            out.append(v)
        elif name == "speculative_config":
            out.append(v if isinstance(v, str) else json.dumps(v, sort_keys=True))
        elif isinstance(v, str) and v.strip():
            out.append(v.strip())
        else:
            raise KvscopeError(f"{where}: '{name}' takes names, got {v!r}.")
    return tuple(dict.fromkeys(out))


def load_space(path: str | Path | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The axes of ``defaults`` with those a space file names replaced (checked here)."""
    axes = dict(defaults)
    if path is None:
        return axes
    data = load_yaml(path, "space file")
    where = str(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise KvscopeError(f"{where}: a space file is a mapping of axis: values.")
    for key, raw in data.items():
        if key not in AXES:
            raise KvscopeError(f"{where}: unknown axis '{key}'.", f"Axes: {', '.join(AXES)}.")
        axes[key] = _values(str(key), raw, where)
    return axes


def expand(axes: Mapping[str, Any], max_gpus: int) -> list[Point]:
    """Every point of the space within ``max_gpus`` GPUs (in a fixed order)."""
    names = [a for a in AXES if a != "num_gpus"]
    size = 1
    for a in names:
        size *= len(axes[a])
    if size > MAX_POINTS:
        raise KvscopeError(
            f"the space has {size:,} points, more than {MAX_POINTS:,}; narrow an axis."
        )
    counts = axes.get("num_gpus")
    points: dict[Point, None] = {}
    for combo in itertools.product(*(axes[a] for a in names)):
        p = Point(**dict(zip(names, combo, strict=True)))
        # one replica needs no router; several get round-robin unless the space names one
        if p.replicas == 1 and p.router is not None:
            p = dataclasses.replace(p, router=None)
        elif p.replicas > 1 and p.router is None:
            p = dataclasses.replace(p, router="round-robin")
        n = p.num_gpus
        if n <= max_gpus and (counts is None or n in counts):
            points[p] = None
    if not points:
        raise KvscopeError(
            f"the search space is empty: no point uses at most {max_gpus} GPUs"
            + ("" if counts is None else f" and one of num_gpus {list(counts)}")
            + "."
        )
    return list(points)
