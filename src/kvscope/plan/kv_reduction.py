"""How much smaller one model's KV cache is than another's, with the basis stated.

Owns :func:`kv_reduction` and :func:`mha_counterfactual`. A KV-reduction percentage means
nothing without its basis: DeepSeek-V2's "reduces the KV cache by 93.3 %" (arXiv 2405.04434,
abstract) compares the served V2 (MLA latent, about 6 bits per element, §3.2.3) with
DeepSeek LLM 67B at 16 bits; the same two models at bf16 differ by 82.2 %, and V2 against an
MHA model of its own shape (the paper's Table 1 comparison) by 98.2 %.
Units: elements and bits per token, all layers, one TP rank (TP 1).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kvscope.errors import KvscopeError
from kvscope.specs.model import LayerSpec, ModelSpec


@dataclass(frozen=True)
class KVReduction:
    """``1 - model_bits / baseline_bits`` per token, and what was compared."""

    model: str
    baseline: str
    model_elements_per_token: float
    baseline_elements_per_token: float
    model_bits_per_element: float
    baseline_bits_per_element: float
    reduction: float
    basis: str


def kv_elements_per_token(model: ModelSpec) -> float:
    """KV-cache elements one token keeps over all layers (full-history caches, TP 1)."""
    return model.kv_bytes_per_token("bfloat16") / 2.0


def mha_counterfactual(model: ModelSpec) -> ModelSpec:
    """The same model with plain multi-head attention: every head keeps its own K and V.

    For MLA layers the per-head dimension is ``qk_nope_head_dim`` (the paper's d_h; V2's
    Table 1 sets d_c = 4 d_h and d_h^R = d_h / 2, so d_h = 128) and V uses ``v_head_dim``.
    """
    layers = []
    for layer in model.layers:
        a = layer.attention
        if a.is_mla_family:
            d_h = a.qk_nope_head_dim or a.head_dim
            a = dataclasses.replace(
                a,
                kind="full",
                num_kv_heads=a.num_heads,
                head_dim=d_h,
                v_head_dim=a.v_head_dim or d_h,
                window=None,
            )
        else:
            a = dataclasses.replace(a, kind="full", num_kv_heads=a.num_heads, window=None)
        layers.append(LayerSpec(a, layer.ffn, layer.extra_params))
    return dataclasses.replace(
        model, name=f"{model.name} (MHA counterfactual)", layers=tuple(layers)
    )


def kv_reduction(
    model: ModelSpec,
    baseline: ModelSpec | None = None,
    model_bits: float = 16.0,
    baseline_bits: float = 16.0,
) -> KVReduction:
    """KV reduction of ``model`` against ``baseline`` (default: its MHA counterfactual).

    ``model_bits`` / ``baseline_bits``: average stored bits per KV element on each side
    (16 for bf16; DeepSeek-V2 as served averages about 6).
    """
    if model_bits <= 0 or baseline_bits <= 0:
        raise KvscopeError("bits per KV element must be positive.")
    base = baseline or mha_counterfactual(model)
    m_el = kv_elements_per_token(model)
    b_el = kv_elements_per_token(base)
    if b_el <= 0:
        raise KvscopeError(f"baseline '{base.name}' keeps no per-token KV cache.")
    basis = (
        f"{m_el:,.0f} elements x {model_bits:g} bit vs {b_el:,.0f} elements x "
        f"{baseline_bits:g} bit per token, all layers"
    )
    return KVReduction(
        model=model.name,
        baseline=base.name,
        model_elements_per_token=m_el,
        baseline_elements_per_token=b_el,
        model_bits_per_element=model_bits,
        baseline_bits_per_element=baseline_bits,
        reduction=1.0 - (m_el * model_bits) / (b_el * baseline_bits),
        basis=basis,
    )
