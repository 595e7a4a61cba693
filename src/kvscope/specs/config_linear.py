"""The hybrid linear-attention layers of a ``config.json``: Qwen3-Next's Gated DeltaNet.

Qwen3-Next (``model_type`` ``qwen3_next``, transformers ``Qwen3NextConfig``) and the Qwen3.5
text models (``qwen3_5_text``, ``qwen3_5_moe_text``, inside the ``qwen3_5`` wrappers) interleave
Gated DeltaNet layers with gated full attention: ``layer_types`` lists ``linear_attention`` /
``full_attention`` when present, else every ``full_attention_interval``-th layer (1-based) is
full attention (vLLM ``vllm/model_executor/models/qwen3_next.py``, v0.10.2). Linear layers
take ``linear_num_key_heads`` / ``linear_num_value_heads`` heads of ``linear_key_head_dim`` /
``linear_value_head_dim`` and a ``linear_conv_kernel_dim`` causal convolution. The conv state
is kept in the model dtype; the recurrent state in ``mamba_ssm_dtype`` when the config names
one (Qwen3.5: ``float32``, which vLLM takes as its ``mamba_ssm_cache_dtype``), else in the
model dtype ("auto"). Full layers have q/k RMSNorm and, unless ``attn_output_gate`` is false,
an output gate. Part of :mod:`kvscope.specs.config_parse`, through its reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvscope.errors import UnknownNameError
from kvscope.specs.attention import AttentionLayer
from kvscope.specs.dtypes import element_bytes

if TYPE_CHECKING:
    from kvscope.specs.config_parse import _Cfg

#: ``model_type`` values read by :func:`hybrid_layers`.
HYBRID_LINEAR_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")


def hybrid_layers(c: _Cfg, h: int, nh: int, n_layers: int, dtype: str) -> list[AttentionLayer]:
    """One :class:`AttentionLayer` per layer: ``gdn`` or gated ``full`` attention."""
    nkv = c.integer("num_key_value_heads", default=nh)
    if nh % nkv:
        raise c.fail("num_key_value_heads", f"({nkv}) must divide num_attention_heads ({nh})")
    head_dim = c.integer("head_dim")
    full = _full_layers(c, n_layers)
    gated = AttentionLayer("full", h, nh, nkv, head_dim, head_dim, qk_norm=True, output_gate=True)
    k_heads = c.integer("linear_num_key_heads")
    v_heads = c.integer("linear_num_value_heads")
    if v_heads % k_heads:
        raise c.fail(
            "linear_num_value_heads",
            f"({v_heads}) must be a multiple of linear_num_key_heads ({k_heads})",
        )
    linear = AttentionLayer(
        "gdn",
        h,
        v_heads,
        k_heads,
        c.integer("linear_key_head_dim"),
        c.integer("linear_value_head_dim"),
        lin_k_heads=k_heads,
        lin_v_heads=v_heads,
        lin_k_dim=c.integer("linear_key_head_dim"),
        lin_v_dim=c.integer("linear_value_head_dim"),
        conv_kernel=c.integer("linear_conv_kernel_dim", default=4),
        conv_state_bytes=element_bytes(dtype),
        ssm_state_bytes=_ssm_bytes(c, dtype),
        ssm_dtype_named=bool(c.text("mamba_ssm_dtype")),
    )
    return [gated if is_full else linear for is_full in full]


def _ssm_bytes(c: _Cfg, dtype: str) -> float:
    name = c.text("mamba_ssm_dtype") or dtype
    try:
        return element_bytes(name)
    except UnknownNameError:
        raise c.fail("mamba_ssm_dtype", f"is {name!r:.40}, not a known dtype") from None


def _full_layers(c: _Cfg, n_layers: int) -> list[bool]:
    types = c.raw.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != n_layers:
            raise c.fail("layer_types", f"must list {n_layers} entries (num_hidden_layers)")
        known = ("full_attention", "linear_attention")
        if not all(t in known for t in types):
            raise c.fail("layer_types", "must list full_attention / linear_attention")
        return [t == "full_attention" for t in types]
    every = c.integer("full_attention_interval")
    return [(i + 1) % every == 0 for i in range(n_layers)]
