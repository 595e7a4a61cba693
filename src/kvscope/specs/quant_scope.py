"""Which weight components a checkpoint's module lists leave out of its quantization.

Quantized checkpoints name the modules they keep in the model dtype, each format its own way:

- compressed-tensors ``ignore``: exact module names or ``re:`` regular expressions
  (``moonshotai/Kimi-K2.5``: ``re:.*self_attn.*``, ``re:.*shared_experts.*``,
  ``re:.*mlp\\.(gate|up|gate_up|down)_proj.*``: only the routed experts are int4);
- NVIDIA ModelOpt ``exclude_modules`` (``hf_quant_config.json``) or ``ignore`` (inline
  ``quantization_config``): shell wildcards (``model.layers.3.self_attn*``,
  ``language_model.model.layers.0.mlp.shared_experts*``; ``nvidia/GLM-5-NVFP4`` keeps every
  ``q_a_proj`` / ``q_b_proj`` / ``kv_a_proj_with_mqa`` / ``kv_b_proj`` / ``o_proj`` / indexer
  in bf16);
- AutoRound ``extra_config``: module name -> ``{"bits": 16, "data_type": "float"}`` (or
  another bit width).

vLLM applies these per module (``is_layer_skipped`` in
``vllm/model_executor/layers/quantization/utils/quant_utils.py``; ``ModelOptNvFp4Config.
is_layer_excluded`` in ``modelopt.py``). kvscope counts weights per component, so a component
counts as unconverted when a pattern matches that component's projections in any main decoder
layer. Patterns that name a layer index at or past ``num_hidden_layers`` are the MTP layers
(``model.layers.78*`` in GLM-5) and are skipped; the embedding, router, norms, LM head and
vision tower are in the model dtype already.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

#: Module-name suffixes that stand for each linear component in the engines' naming
#: (Llama / Qwen ``self_attn.q_proj``, DeepSeek MLA ``q_a_proj`` .. ``kv_b_proj``, Qwen's
#: Gated DeltaNet ``linear_attn`` projections; DeepSeek-
#: style ``mlp.shared_experts``, Qwen ``mlp.shared_expert``; a dense layer's ``mlp.down_proj``;
#: DeepSeek / Qwen ``mlp.experts.N``, MiniMax / Mixtral ``block_sparse_moe.experts.N.w2``).
PROBES: dict[str, tuple[str, ...]] = {
    "attention": (
        "self_attn.q_proj",
        "self_attn.o_proj",
        "self_attn.q_a_proj",
        "self_attn.q_b_proj",
        "self_attn.kv_a_proj_with_mqa",
        "self_attn.kv_b_proj",
        # Gated DeltaNet layers (Qwen3-Next / 3.5 / 3.6), counted with the attention
        "linear_attn.in_proj_qkvz",
        "linear_attn.in_proj_qkv",
        "linear_attn.out_proj",
    ),
    "shared_experts": ("mlp.shared_experts.down_proj", "mlp.shared_expert.down_proj"),
    "dense_ffn": ("mlp.down_proj", "mlp.gate_proj", "mlp.up_proj"),
    "routed_experts": ("mlp.experts.0.down_proj", "block_sparse_moe.experts.0.w2"),
}

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)")
#: Prefixes the module names of text models and their wrappers carry before ``layers.N``.
_PREFIXES = ("model.", "language_model.model.", "model.language_model.")


def unconverted_components(patterns: Iterable[object], num_layers: int | None) -> tuple[str, ...]:
    """Components (names of :data:`PROBES`) that any of ``patterns`` keeps unquantized."""
    found: set[str] = set()
    for raw in patterns:
        if not isinstance(raw, str) or not raw:
            continue
        index = _LAYER.search(raw)
        if index is not None and num_layers is not None and int(index.group(1)) >= num_layers:
            continue  # an MTP layer beyond the decoder
        for component, suffixes in PROBES.items():
            if component not in found and any(_matches(raw, s) for s in suffixes):
                found.add(component)
    return tuple(c for c in PROBES if c in found)


def components_of(module: str, num_layers: int | None) -> tuple[str, ...]:
    """The components one module name (or pattern) stands for; ``lm_head`` included."""
    if module == "lm_head" or module.endswith(".lm_head"):
        return ("lm_head",)
    return unconverted_components([module], num_layers)


def _matches(pattern: str, suffix: str) -> bool:
    """Whether ``pattern`` names the ``suffix`` module in some decoder layer."""
    if pattern.startswith("re:"):
        try:
            rx = re.compile(pattern[3:])
        except re.error:
            return False
        return any(rx.fullmatch(f"{p}layers.0.{suffix}") for p in _PREFIXES)
    index = _LAYER.search(pattern)
    if index is not None:
        # compare what follows "layers.N." with the suffix (and its sub-modules)
        rest = pattern[index.end() :].lstrip(".")
        if rest in ("", "*"):
            return False  # a whole layer (one of many): not a component of every layer
        return fnmatch.fnmatchcase(suffix, rest) or fnmatch.fnmatchcase(suffix, rest + ".*")
    return any(fnmatch.fnmatchcase(f"{p}layers.0.{suffix}", pattern) for p in _PREFIXES)
