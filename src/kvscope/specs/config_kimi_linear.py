"""Kimi Linear's layers from a ``config.json``: KDA linear attention beside gated MLA.

Kimi-Linear-48B-A3B (``model_type`` ``kimi_linear``) and Kimi K3's text model (``kimi_linear``
under the ``kimi_k3`` wrapper's ``text_config``) interleave Kimi Delta Attention layers with
Multi-head Latent Attention. ``linear_attn_config`` names them, 1-based: ``kda_layers`` and
``full_attn_layers`` together list every layer once; KDA layers take ``num_heads`` heads of
``head_dim`` and a ``short_conv_kernel_size`` causal convolution; ``use_full_rank_gate`` makes
the output gate one ``g_proj`` (K3) instead of ``g_a`` / ``g_b``. MLA layers read the DeepSeek
keys (``kv_lora_rank``, ``q_lora_rank``, ``qk_*_head_dim``, ``v_head_dim``) and, with
``mla_use_output_gate``, a ``g_proj``. K3 adds attention residuals (``attn_res_block_size``:
an RMSNorm and a ``1 x h`` projection before attention and before the MLP on every layer and
at the output).

KV state (vLLM ``MambaStateShapeCalculator.kda_state_shape`` / ``kda_state_dtype``,
vllm/model_executor/layers/mamba/mamba_utils.py, 0.22.0 to 0.34.0): per KDA layer a conv
window of ``(kernel - 1) x 3 x heads x head_dim`` in the model dtype and one
``head_dim x head_dim`` matrix per head in float32 (0.34.0's ``--mamba-ssm-cache-dtype``
``bfloat16`` halves it); the MLA layers keep the 576-element latent per token. Units: elements
and bytes. Part of :mod:`kvscope.specs.config_parse`, through its field reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kvscope.specs.attention import AttentionLayer
from kvscope.specs.dtypes import element_bytes

if TYPE_CHECKING:
    from kvscope.specs.config_parse import _Cfg

#: ``model_type`` values read by :func:`kimi_linear_layers`.
KIMI_LINEAR_TYPES = ("kimi_linear",)
#: KDA's recurrent state dtype under vLLM's default ``--mamba-ssm-cache-dtype auto``.
KDA_RECURRENT_BYTES = 4.0


def kimi_linear_layers(c: _Cfg, h: int, nh: int, n_layers: int, dtype: str) -> list[AttentionLayer]:
    """One :class:`AttentionLayer` per layer: KDA (kind ``gdn``, variant ``kda``) or MLA."""
    from kvscope.specs.config_parse import _Cfg, mla_layer

    raw = c.raw.get("linear_attn_config")
    if not isinstance(raw, Mapping):
        raise c.fail("linear_attn_config", "is missing; Kimi Linear names its KDA layers there")
    la = _Cfg(raw, c.source, "linear_attn_config.")
    kda = _layer_set(la, "kda_layers", n_layers)
    full = _layer_set(la, "full_attn_layers", n_layers)
    if kda & full or len(kda) + len(full) != n_layers:
        raise la.fail(
            "linear_attn_config.kda_layers",
            f"and full_attn_layers must list each of the {n_layers} layers once (1-based)",
        )
    heads, head_dim = la.integer("num_heads"), la.integer("head_dim")
    linear = AttentionLayer(
        "gdn",
        h,
        heads,
        heads,
        head_dim,
        head_dim,
        lin_k_heads=heads,
        lin_v_heads=heads,
        lin_k_dim=head_dim,
        lin_v_dim=head_dim,
        conv_kernel=la.integer("short_conv_kernel_size", default=4),
        conv_state_bytes=element_bytes(dtype),
        ssm_state_bytes=KDA_RECURRENT_BYTES,
        ssm_dtype_named=True,
        lin_variant="kda",
        kda_full_gate=la.boolean("use_full_rank_gate", False),
    )
    mla = mla_layer(c, h, nh, output_gate=c.boolean("mla_use_output_gate", False))
    return [linear if i + 1 in kda else mla for i in range(n_layers)]


def attention_residual_params(c: _Cfg, h: int) -> tuple[int, int]:
    """(per-layer, final) weights of K3's attention residuals: two RMSNorms and two ``1 x h``
    projections per layer, one of each at the output (vLLM ``models/kimi_k3/nvidia/model.py``
    ``self_attention_res_*``, ``mlp_res_*``, ``output_attn_res_*``); (0, 0) without them."""
    if not c.has("attn_res_block_size"):
        return 0, 0
    c.integer("attn_res_block_size")
    return 4 * h, 2 * h


def _layer_set(la: _Cfg, key: str, n_layers: int) -> set[int]:
    value = la.raw.get(key)
    if value is None:
        raise la.fail(la.prefix + key, "is missing")
    if not isinstance(value, list):
        raise la.fail(la.prefix + key, f"must list 1-based layer numbers, got {value!r:.40}")
    return {la.check_int(key, i, 1, n_layers) for i in value}
