"""Feed-forward blocks of a ``config.json``: which layers are dense or MoE, and their widths.

Keys by family (transformers configuration names):
- Mixtral / gpt-oss / MiniMax-M2: ``num_local_experts``; ``intermediate_size`` is the expert
  width. Qwen-MoE: ``num_experts``, ``moe_intermediate_size``, ``decoder_sparse_step``,
  ``mlp_only_layers``, ``shared_expert_intermediate_size``.
- DeepSeek / Kimi / GLM-4.5: ``n_routed_experts``, ``moe_intermediate_size`` (required),
  ``n_shared_experts``, ``first_k_dense_replace``, ``moe_layer_freq``.
- Kimi Linear / Kimi K3: ``num_experts``, ``num_experts_per_token``, ``num_shared_experts``,
  ``moe_intermediate_size``; K3's ``routed_expert_hidden_size`` latent experts.
- Llama 4: ``intermediate_size`` is the expert and shared-expert width,
  ``intermediate_size_mlp`` the dense one, ``interleave_moe_layer_step`` the MoE period
  (layer i is MoE when ``(i + 1) % step == 0``, vLLM ``llama4.py``); one shared expert.
Part of :mod:`kvscope.specs.config_parse`, which validates through the same field reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvscope.specs import families
from kvscope.specs.ffn import FFNLayer

if TYPE_CHECKING:
    from kvscope.specs.config_parse import _Cfg


def ffn_layers(c: _Cfg, model_type: str, h: int, n_layers: int) -> list[FFNLayer]:
    n_exp = next(
        (
            c.integer(k)
            for k in ("n_routed_experts", "num_local_experts", "num_experts")
            if c.has(k)
        ),
        0,
    )
    llama4 = model_type in families.QK_NORM_WEIGHTLESS  # llama4 / llama4_text
    dense_key = "intermediate_size_mlp" if llama4 else "intermediate_size"
    dense_i = c.integer(dense_key, default=0, minimum=0)
    if not n_exp:
        if not dense_i:
            raise c.fail("intermediate_size", "is missing")
        return [FFNLayer("dense", h, intermediate_size=dense_i)] * n_layers
    # gpt-oss also spells it experts_per_token; a config with neither is told the usual name
    k_key = "experts_per_token" if c.has("experts_per_token") else "num_experts_per_tok"
    k_key = "num_experts_per_tok" if c.has("num_experts_per_tok") else k_key
    k_key = "num_experts_per_token" if c.has("num_experts_per_token") else k_key  # Kimi Linear
    top_k = c.integer(k_key)
    if top_k > n_exp:
        raise c.fail(k_key, f"({top_k}) exceeds the number of experts ({n_exp})")
    if llama4:  # experts and the one shared expert use intermediate_size (Llama4TextConfig)
        expert_i = c.integer("intermediate_size")
    elif c.has("moe_intermediate_size") or c.has("n_routed_experts"):
        # DeepSeek-style configs (n_routed_experts: DeepSeek, Kimi, GLM-4.5) always give the
        # expert width apart from the dense one; Mixtral-style ones reuse intermediate_size.
        expert_i = c.integer("moe_intermediate_size")
    else:
        expert_i = dense_i
    if not expert_i:
        raise c.fail("moe_intermediate_size", "is missing")
    shared_key = "num_shared_experts" if c.has("num_shared_experts") else "n_shared_experts"
    n_shared = c.integer(shared_key, default=1 if llama4 else 0, minimum=0)
    shared_i = n_shared * expert_i
    if c.has("shared_expert_intermediate_size"):
        shared_i = c.integer("shared_expert_intermediate_size", minimum=0)
        n_shared = 1 if shared_i else 0
    moe = FFNLayer(
        "moe",
        h,
        num_experts=n_exp,
        experts_per_token=top_k,
        expert_intermediate_size=expert_i,
        num_shared_experts=n_shared,
        shared_intermediate_size=shared_i,
        expert_bias=model_type == "gpt_oss",
        **_latent(c, h),
    )
    dense = FFNLayer("dense", h, intermediate_size=dense_i)
    first_dense = c.integer("first_k_dense_replace", default=0, minimum=0)
    if first_dense > n_layers:
        raise c.fail("first_k_dense_replace", f"({first_dense}) exceeds num_hidden_layers")
    freq = c.integer("moe_layer_freq", default=1)
    # Qwen-MoE's decoder_sparse_step and Llama 4's interleave_moe_layer_step: layer i is MoE
    # when (i + 1) % step == 0 (vLLM llama4.py, qwen2_moe.py).
    step = c.integer("interleave_moe_layer_step" if llama4 else "decoder_sparse_step", default=1)
    mlp_only = _layer_list(c, "mlp_only_layers")
    out = []
    for i in range(n_layers):
        is_moe = i >= first_dense and (i - first_dense) % freq == 0
        is_moe = is_moe and i not in mlp_only and (i + 1) % step == 0
        if not is_moe and not dense_i:
            raise c.fail(dense_key, f"is missing but layer {i} is dense")
        out.append(moe if is_moe else dense)
    return out


def _latent(c: _Cfg, h: int) -> dict[str, int]:
    """Kimi K3's latent MoE: experts of ``routed_expert_hidden_size`` inputs, a replicated
    down (h -> latent) and up (latent -> h) projection and, with ``latent_moe_use_norm``, an
    RMSNorm over the latent (vLLM ``models/kimi_k3/nvidia/model.py``, 0.34.0)."""
    if not c.has("routed_expert_hidden_size"):
        return {}
    latent = c.integer("routed_expert_hidden_size")
    norm = latent if c.boolean("latent_moe_use_norm", False) else 0
    return {"expert_input_size": latent, "latent_params": 2 * h * latent + norm}


def _layer_list(c: _Cfg, key: str) -> set[int]:
    """A list of layer indices (``mlp_only_layers``), each a non-negative integer."""
    value = c.raw.get(key)
    if value is None:
        return set()
    if not isinstance(value, list):
        raise c.fail(key, f"must be a list of layer indices, got {value!r:.40}")
    return {c.check_int(key, i, 0) for i in value}
