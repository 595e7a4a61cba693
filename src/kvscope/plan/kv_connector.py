"""vLLM ``--kv-transfer-config`` with LMCache's connector (``LMCacheConnectorV1``): the memory
LMCache holds beside vLLM's KV pool, and whether vLLM's KV figure sees it. Units: bytes.

Sources: the LMCache 0.3.2 wheel (lmcache/integration/vllm/vllm_adapter.py,
lmcache/v1/gpu_connector.py, lmcache/v1/cache_engine.py, lmcache/v1/config.py); the vLLM
0.9.0.1, 0.9.2, 0.11.0, 0.14.1, 0.27.0, 0.31.0 and 0.33.0 wheels
(vllm/v1/worker/gpu_worker.py, vllm/utils ``memory_profiling``, vllm/config.py).

What LMCache allocates. A worker's connector (``LMCacheConnectorV1Impl``, role WORKER) calls
``init_lmcache_engine``, which builds the GPU connector and the engine:

- ``VLLMPagedMemGPUConnectorV2(use_gpu=True)`` (the default: not layerwise, not NIXL) holds one
  GPU staging buffer ``torch.empty(get_shape(chunk_size))`` of
  ``[2 (1 with MLA), layers of this PP stage, chunk_size, kv_heads_per_rank x head_size]`` in
  the KV dtype (``get_num_kv_heads``: ``max(1, kv_heads // tp)``, 1 with MLA; MLA's head size
  is ``kv_lora_rank + qk_rope_head_dim``). ``LMCACHE_USE_LAYERWISE`` builds
  ``VLLMPagedMemLayerwiseGPUConnector`` instead, whose buffer is made at the first request
  (``_lazy_initialize_buffer``): twice one layer's K cache, that is one layer of the KV pool;
  with ``LMCACHE_ENABLE_BLENDING`` too, ``VLLMBufferLayerwiseGPUConnector`` holds
  ``2 x [2, 32000, kv_heads_per_rank x head_size]`` from the start. ``LMCACHE_ENABLE_NIXL``
  makes no GPU staging buffer (``need_gpu_interm_buffer``).
- ``MixedMemoryAllocator`` pins ``max_local_cpu_size x 2^30`` bytes of host memory
  (``torch.empty(..., pin_memory=True)``; default 5.0, ``LMCACHE_MAX_LOCAL_CPU_SIZE``) in every
  worker, whether ``local_cpu`` is on or off: host memory, not GPU memory.

LMCache reads these from ``LMCACHE_<NAME>`` environment variables (``LMCacheEngineConfig.
from_env``) unless ``LMCACHE_CONFIG_FILE`` names a file; the CLI passes its environment.

Whether vLLM's KV figure sees the GPU buffer, by release:

- 0.9.0.x: ``determine_available_memory`` charges ``allocated_bytes.all.peak`` (every live torch
  tensor) plus the device's non-torch memory, so the buffer leaves the KV pool. The plan keeps
  it in the pool and says so in a warning.
- 0.9.1 (vllm PR #19312, ``shared_gpu.CHECKED_SINCE``) to 0.11.x: the connector is built in
  ``init_device`` after the worker's ``MemorySnapshot``, as torch memory, outside
  ``load_model`` and before the profile's peak reset, so ``memory_profiling`` puts it in no
  term (weights are ``model_memory_usage``; the peak increase starts after it; non-torch
  memory excludes torch's reserve). From 0.14.1 to 0.33 (0.12-0.13 not read),
  ``ensure_kv_transfer_initialized`` runs in ``initialize_from_config``, after the KV size is
  fixed, so 0.27's ``total_consumed`` does not see it either. Either way the pool is
  unchanged and the buffer sits in the headroom that ``gpu_memory_utilization`` leaves,
  beside the CUDA graphs. 0.34's extensible KV cache is not read for connectors (a warning).

vLLM 0.9.2 also turns the hybrid KV cache manager off with any connector
(``VllmConfig.__post_init__``), which changes sliding-window and hybrid models' pools; that
layout is not modelled, so such models are refused. Other connectors (NIXL, P2P NCCL,
offloading, multi) are not modelled and refused.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kvscope.errors import KvscopeError
from kvscope.plan.shared_gpu import CHECKED_SINCE
from kvscope.specs.dtypes import element_bytes

if TYPE_CHECKING:
    from kvscope.plan.config import EngineConfig, Parallelism
    from kvscope.plan.memory import MemoryPlan
    from kvscope.specs.model import ModelSpec

FLAG = "--kv-transfer-config"
LMCACHE = "LMCacheConnectorV1"
#: ``KVTransferConfig.kv_role`` values (vllm/config.py at v0.9.2).
ROLES = ("kv_producer", "kv_consumer", "kv_both")
#: First release read whose V1 engine has ``LMCacheConnectorV1`` (0.8.2 has no V1 connector;
#: 0.8.5-0.8.x are not read).
SINCE = (0, 9, 0)
#: First release whose KV sizing path with a connector is not read (0.34's extensible KV cache
#: builds the connector in ``extend_kv_cache`` and may turn itself off for it).
UNREAD_FROM = (0, 34, 0)
#: ``VLLMBufferLayerwiseGPUConnector``'s default ``max_tokens`` (LMCache 0.3.2).
BLEND_MAX_TOKENS = 32000
_MIB = 2**20


@dataclass(frozen=True)
class LMCacheSettings:
    """The LMCache 0.3.2 settings that size its buffers, with its defaults."""

    chunk_size: int = 256
    use_layerwise: bool = False
    enable_blending: bool = False
    enable_nixl: bool = False
    max_local_cpu_size: float = 5.0  # GB of LMCache's own unit, 2^30 bytes
    config_file: str | None = None


@dataclass(frozen=True)
class KvTransfer:
    """A parsed ``--kv-transfer-config``: the connector, its role and LMCache's settings."""

    connector: str
    role: str
    lmcache: LMCacheSettings = field(default_factory=LMCacheSettings)

    def serve_flag(self) -> str:
        """The ``vllm serve`` flag, shell-quoted (LMCache's settings stay in the environment)."""
        doc = json.dumps({"kv_connector": self.connector, "kv_role": self.role})
        return f"{FLAG} {shlex.quote(doc)}"


def _env_bool(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "false").lower() in ("true", "1")  # LMCache's ``to_bool``


def _env_number(env: Mapping[str, str], name: str, default: float, integer: bool) -> float:
    text = env.get(name)
    if text is None:
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise KvscopeError(f"{name}={text!r} is not {kind}.") from None
    if not value > 0 or value != value or value == float("inf"):
        raise KvscopeError(f"{name} must be positive, got {text}.")
    return value


def lmcache_settings(env: Mapping[str, str]) -> LMCacheSettings:
    """LMCache's settings from ``LMCACHE_*`` variables, as ``LMCacheEngineConfig.from_env``."""
    return LMCacheSettings(
        chunk_size=int(_env_number(env, "LMCACHE_CHUNK_SIZE", 256, integer=True)),
        use_layerwise=_env_bool(env, "LMCACHE_USE_LAYERWISE"),
        enable_blending=_env_bool(env, "LMCACHE_ENABLE_BLENDING"),
        enable_nixl=_env_bool(env, "LMCACHE_ENABLE_NIXL"),
        max_local_cpu_size=_env_number(env, "LMCACHE_MAX_LOCAL_CPU_SIZE", 5.0, integer=False),
        config_file=env.get("LMCACHE_CONFIG_FILE") or None,
    )


def parse_kv_transfer(text: str, env: Mapping[str, str] | None = None) -> KvTransfer:
    """``--kv-transfer-config JSON`` (vLLM's ``KVTransferConfig``) with LMCache's settings."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise KvscopeError(f"{FLAG} is not JSON: {err.msg}.") from None
    if not isinstance(doc, dict):
        raise KvscopeError(f"{FLAG} must be a JSON object.")
    connector, role = doc.get("kv_connector"), doc.get("kv_role")
    if not isinstance(connector, str) or not connector:
        raise KvscopeError(f'{FLAG} needs "kv_connector", e.g. "{LMCACHE}".')
    if connector != LMCACHE:
        raise KvscopeError(
            f"{FLAG}: connector {connector!r} is not modelled; only {LMCACHE} is.",
            f"Drop {FLAG} to plan without the connector.",
        )
    if role not in ROLES:  # KVTransferConfig.__post_init__ refuses the same
        raise KvscopeError(f'{FLAG}: "kv_role" must be one of {", ".join(ROLES)}; got {role!r}.')
    return KvTransfer(connector, str(role), lmcache_settings(env or {}))


def check_kv_transfer(model: ModelSpec, eng: EngineConfig) -> None:
    """Refuse a connector where the plan cannot follow it (engine, release, KV layout)."""
    kv = eng.kv_transfer
    if kv is None:
        return
    if eng.engine != "vllm":
        raise KvscopeError(
            f"{FLAG} is vLLM's; SGLang has no such flag.", f"Drop {FLAG} with --engine sglang."
        )
    if eng.version < SINCE:
        raise KvscopeError(
            f"{LMCACHE} is a V1 connector; vLLM {eng.version_text} is not read for it "
            "(0.8.2 has no V1 connector API).",
            "Plan vLLM 0.9.0 or later.",
        )
    kinds = set(model.attention_kinds)
    if not kinds <= {"full", "mla"}:
        raise KvscopeError(
            f"{model.name} has {', '.join(sorted(kinds - {'full', 'mla'}))} layers; vLLM turns "
            "its hybrid KV cache manager off with a connector, a layout kvscope does not model.",
            f"Drop {FLAG} to plan the hybrid layout.",
        )
    if "mla" in kinds and kv.lmcache.use_layerwise:
        raise KvscopeError(  # init_lmcache_engine raises the same
            "LMCache refuses LMCACHE_USE_LAYERWISE with MLA ('layerwise MLA connector is not "
            "supported yet').",
            "Unset LMCACHE_USE_LAYERWISE.",
        )


def _row_bytes(model: ModelSpec, par: Parallelism, kv_dtype: str) -> float:
    """``kv_heads_per_rank x head_size`` elements of one token and layer, in bytes."""
    att = model.first_attention
    if model.uses_mla:
        return (att.kv_lora_rank + att.qk_rope_head_dim) * element_bytes(kv_dtype)
    return max(1, att.num_kv_heads // par.tp) * att.head_dim * element_bytes(kv_dtype)


def staging_buffer_bytes(
    model: ModelSpec, par: Parallelism, kv_dtype: str, layers: int, lm: LMCacheSettings
) -> int:
    """GPU bytes LMCache 0.3.2's connector allocates when the worker starts (per GPU)."""
    if lm.enable_nixl:
        return 0
    row = _row_bytes(model, par, kv_dtype)
    if lm.use_layerwise:
        return int(2 * 2 * BLEND_MAX_TOKENS * row) if lm.enable_blending else 0
    kv = 1 if model.uses_mla else 2
    return int(kv * layers * lm.chunk_size * row)


def with_connector(
    plan: MemoryPlan, model: ModelSpec, par: Parallelism, eng: EngineConfig
) -> MemoryPlan:
    """``plan`` with the connector's notes (and a warning where vLLM charges the buffer)."""
    kv = eng.kv_transfer
    if kv is None:
        return plan
    check_kv_transfer(model, eng)
    lm = kv.lmcache
    stage = plan.ranks[0]
    gpu = staging_buffer_bytes(model, par, plan.kv_cache_dtype, stage.layers, lm)
    notes = [
        f"{LMCACHE} (LMCache 0.3.2's sizes): a {gpu / _MIB:.2f} MiB GPU staging buffer a GPU "
        f"(chunk {lm.chunk_size}, {stage.layers} layers) and "
        f"{lm.max_local_cpu_size:.2f} GiB of pinned host memory a worker.",
    ]
    warnings = []
    if lm.use_layerwise and not lm.enable_blending and not lm.enable_nixl:
        layer = stage.kv_cache_gib / max(1, stage.layers)
        notes.append(
            f"LMCACHE_USE_LAYERWISE: the first request allocates one layer of the KV pool "
            f"({layer * 1024:.1f} MiB) as LMCache's buffer, outside the pool."
        )
    if eng.version < CHECKED_SINCE:
        warnings.append(
            f"vLLM {eng.version_text} charges LMCache's {gpu / _MIB:.2f} MiB buffer to its "
            "profiled peak, so its pool is smaller by that; the plan does not subtract it."
        )
    else:
        notes.append(
            f"vLLM {eng.version_text} charges the buffer to no term (built after its memory "
            "snapshot, outside the weights and the profiled peak, or after the KV size is "
            "fixed): the KV pool is unchanged and the buffer sits in the headroom "
            "gpu_memory_utilization leaves."
        )
    if eng.version >= UNREAD_FROM:
        warnings.append(
            f"How vLLM {eng.version_text} sizes the KV cache with a connector is not read; "
            "the plan follows 0.33."
        )
    if lm.config_file:
        warnings.append(
            f"LMCACHE_CONFIG_FILE={lm.config_file} is not read; LMCache's defaults and the "
            "LMCACHE_* variables are planned."
        )
    return replace(plan, notes=plan.notes + tuple(notes), warnings=plan.warnings + tuple(warnings))
