"""Plain-data summaries of models and GPUs (what ``kvscope models show`` prints).

Keys carry their units (``_b`` billions of parameters, ``_gib`` binary gigabytes,
``_bytes`` bytes).
"""

from __future__ import annotations

from typing import Any

from kvscope.specs.dtypes import resolve_kv_dtype
from kvscope.specs.hardware import GIB, GPUSpec
from kvscope.specs.model import ModelSpec


def describe_model(
    m: ModelSpec, kv_cache_dtype: str | None = None, indexer_dtype: str = "fp8"
) -> dict[str, Any]:
    """Derived figures of a model: parameters, weights, KV bytes per token by layer group."""
    kv = resolve_kv_dtype(kv_cache_dtype, m.dtype)
    m.check_kv_dtype(kv)
    groups = m.kv_groups(kv, 1, indexer_dtype)
    moe = m.moe_layer
    return {
        "id": m.name,
        "model_type": m.model_type,
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "vocab_size": m.vocab_size,
        "max_position_embeddings": m.max_position_embeddings,
        "attention_kinds": m.attention_kinds,
        "ffn": (
            {
                "kind": "moe",
                "num_experts": moe.num_experts,
                "experts_per_token": moe.experts_per_token,
                "num_shared_experts": moe.num_shared_experts,
                "expert_intermediate_size": moe.expert_intermediate_size,
                "moe_layers": sum(1 for layer in m.layers if layer.ffn.is_moe),
            }
            if moe
            else {"kind": "dense", "intermediate_size": m.layers[0].ffn.intermediate_size}
        ),
        "dtype": m.dtype,
        "quantization": m.quantization.description,
        "total_params_b": m.total_params / 1e9,
        "active_params_b": m.active_params / 1e9,
        "active_params_excl_embedding_b": m.active_params_excl_embedding / 1e9,
        "params_b_by_component": {k: v / 1e9 for k, v in m.params.items()},
        "weights_gib": m.total_weight_bytes / GIB,
        "weights_gib_by_component": {k: v / GIB for k, v in m.weight_bytes.items()},
        "num_mtp_layers_excluded": m.num_mtp_layers,
        "kv_cache_dtype": kv,
        "kv_bytes_per_token": m.kv_bytes_per_token(kv, 1, indexer_dtype),
        "kv_groups": [
            {
                "kind": g.kind,
                "num_layers": len(g.layers),
                "first_layer": g.layers[0],
                "bytes_per_token_per_layer": g.bytes_per_token_per_layer,
                "bytes_per_token": g.bytes_per_token,
                "bounded_bytes_per_request": g.bounded_bytes_per_request,
                "caches": [
                    {
                        "name": c.name,
                        "entry_bytes": c.entry_bytes,
                        "tokens_per_entry": c.tokens_per_entry,
                        "window_tokens": c.window_tokens,
                        "fixed_bytes": c.fixed_bytes,
                    }
                    for c in g.caches
                ],
            }
            for g in groups
        ],
        "kv_gib_at_max_context": m.kv_bytes_for_request(
            m.max_position_embeddings, kv, 1, indexer_dtype
        )
        / GIB,
        "published": {
            "total_params_b": _b(m.published.total_params),
            "active_params_b": _b(m.published.active_params),
            "active_convention": m.published.active_convention,
            "source": m.published.source,
        },
        "source": m.source,
    }


def _b(x: float | None) -> float | None:
    return None if x is None else x / 1e9


def describe_gpu(g: GPUSpec) -> dict[str, Any]:
    """A GPU's catalogue figures in display units."""
    return {
        "name": g.name,
        "vendor": g.vendor,
        "architecture": g.architecture,
        "memory_gib": g.memory_gib,
        "memory_bytes": g.memory_bytes,
        "memory_marketing_gb": g.memory_marketing_gb,
        "hbm_bandwidth_gbps": g.hbm_bandwidth / 1e9,
        "bf16_dense_tflops": g.bf16_flops / 1e12,
        "fp8_dense_tflops": None if g.fp8_flops is None else g.fp8_flops / 1e12,
        "fp4_dense_tflops": None if g.fp4_flops is None else g.fp4_flops / 1e12,
        "nvlink_gbps_per_direction": g.nvlink_bandwidth / 1e9,
        "pcie_gbps_per_direction": g.pcie_bandwidth / 1e9,
        "tdp_w": g.tdp_w,
        "aliases": list(g.aliases),
        "confidence": g.confidence,
        "sources": dict(g.sources),
        "memory_source": g.memory_source,
    }
