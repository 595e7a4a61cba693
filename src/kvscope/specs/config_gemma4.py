"""Gemma 4 (``gemma4`` wrapper, ``gemma4_text`` decoder): layers, per-layer inputs, vision tower.

What the ``gemma4_text`` keys mean, as vLLM builds the model (``vllm/model_executor/models/
gemma4.py`` and ``vllm/transformers_utils/configs/gemma4.py`` in the 0.25.0-0.31.0 wheels):

- ``layer_types`` picks sliding (``head_dim``, ``num_key_value_heads``, ``sliding_window``) or
  full attention per layer. Full layers use ``global_head_dim``; with ``attention_k_eq_v`` they
  also use ``num_global_key_value_heads`` (``gemma4_layer_config``) and the checkpoint ships
  ``k_proj`` only: vLLM loads K into both the K and V slots of its fused ``qkv_proj`` and
  caches V beside K, so the weights and the cache count V as a full tensor.
- The last ``num_kv_shared_layers`` layers project Q only (no k/v projections, no k_norm) and
  read the cache of the last earlier layer of their type (``kv_sharing_target_layer_name``):
  they keep no KV of their own. ``use_double_wide_mlp`` doubles their MLP width.
- Every layer has q/k RMSNorms with weights (v_norm has none), four hidden-size RMSNorms and a
  ``layer_scalar``. ``enable_moe_block`` adds, beside the dense MLP (``intermediate_size``), a
  mixture of ``num_experts`` experts of ``moe_intermediate_size`` picked ``top_k_experts`` at a
  time, a router (``proj`` hidden x experts, ``scale`` hidden), ``per_expert_scale`` and three
  more RMSNorms.
- Per-layer inputs (``hidden_size_per_layer_input`` > 0, E2B/E4B): an embedding table of
  ``vocab_size_per_layer_input x layers x per_layer`` and a projection ``hidden -> layers x
  per_layer`` with its norm at the model; per layer a gate (hidden -> per_layer), a projection
  (per_layer -> hidden) and an RMSNorm.
- Vision tower (``gemma4_vision``): a bias-free patch projection (3 x patch^2 -> width), a
  position table of ``2 x position_embedding_size x width``, per layer bias-free q/k/v/o, q/k
  norms of ``head_dim``, four RMSNorms and a gated MLP, ``std_bias``/``std_scale`` when
  ``standardize``; then ``embed_vision`` (width -> text hidden, weightless norm).
  google/gemma-4-31B-it's safetensors (huggingface.co/google/gemma-4-31B-it, two shards) hold
  31,273,088,876 parameters; vLLM allocates 10 x 5,376 x 2,048 more for the V slots.
- Audio tower (``audio_config``, E2B/E4B): vLLM builds it with ``AutoModel.from_config`` beside
  ``embed_audio`` whenever the audio modality is not limited to 0 (``Gemma4ForConditional
  Generation.__init__``, vllm/model_executor/models/gemma4_mm.py of the 0.34.0 wheel). The
  USM conformer as Google's PyTorch reference builds it (``Gemma4AudioModel``, width h,
  FFN 4h): a subsampler of two bias-free 3x3 convolutions (1 -> c0 -> c1 channels, each with
  a scale-only LayerNorm) and a bias-free ``(c0 / 4) c1 -> h`` projection; per layer two
  feed-forward blocks (h -> 4h -> h, two RMSNorms each), bias-free q/k/v/post and relative-key
  projections with a ``per_dim_scale`` of head_dim, a light convolution (h -> 2h GLU, a
  depthwise kernel of ``conv_kernel_size``, h -> h, two RMSNorms) and three RMSNorms; then
  ``output_proj`` (h -> ``output_proj_dims`` with bias) and ``embed_audio`` (that width ->
  text hidden). For E4B this is 308.8 M parameters, 0.58 GiB in bf16: with it the planned
  weights equal the 14.89 GiB checkpoint vLLM reports loading. It is counted with the vision
  tower (dropped together when images and videos are limited to 0, which vLLM does only when
  audio is limited to 0 as well).

Units: parameter counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kvscope.specs.attention import AttentionLayer
from kvscope.specs.ffn import FFNLayer

if TYPE_CHECKING:
    from kvscope.specs.config_parse import _Cfg

MODEL_TYPE = "gemma4_text"


def _sliding_flags(c: _Cfg, n_layers: int) -> list[bool]:
    types = c.raw.get("layer_types")
    if not isinstance(types, list) or len(types) != n_layers:
        raise c.fail("layer_types", f"must list {n_layers} entries (num_hidden_layers)")
    if not all(t in ("sliding_attention", "full_attention") for t in types):
        raise c.fail("layer_types", "must list sliding_attention or full_attention per layer")
    return [t == "sliding_attention" for t in types]


def gemma4_layers(c: _Cfg, h: int, nh: int, n_layers: int) -> list[AttentionLayer]:
    """Attention of every Gemma 4 decoder layer (see the module text)."""
    sliding = _sliding_flags(c, n_layers)
    window = c.integer("sliding_window")
    head_dim = c.integer("head_dim")
    nkv = c.integer("num_key_value_heads")
    global_dim = c.integer("global_head_dim", default=head_dim)
    k_eq_v = c.boolean("attention_k_eq_v", False)
    global_kv = c.integer("num_global_key_value_heads", default=nkv) if k_eq_v else nkv
    shared = c.integer("num_kv_shared_layers", default=0, minimum=0)
    if shared >= n_layers:
        raise c.fail("num_kv_shared_layers", f"({shared}) must be below num_hidden_layers")
    first_shared = n_layers - shared
    for kind in (True, False):
        if shared and kind in sliding[first_shared:] and kind not in sliding[:first_shared]:
            raise c.fail("num_kv_shared_layers", "leaves a shared layer no earlier layer to read")
    bias = c.boolean("attention_bias", False)
    out = []
    for i, s in enumerate(sliding):
        dim, kv = (head_dim, nkv) if s else (global_dim, global_kv)
        if nh % kv:
            key = "num_key_value_heads" if s else "num_global_key_value_heads"
            raise c.fail(key, f"({kv}) must divide num_attention_heads ({nh})")
        out.append(
            AttentionLayer(
                "sliding" if s else "full",
                hidden_size=h,
                num_heads=nh,
                num_kv_heads=kv,
                head_dim=dim,
                v_head_dim=dim,
                window=window if s else None,
                qkv_bias=bias,
                o_bias=bias,
                qk_norm=True,
                k_eq_v=k_eq_v and not s,
                kv_shared=i >= first_shared,
            )
        )
    return out


def gemma4_ffns(c: _Cfg, h: int, n_layers: int) -> list[FFNLayer]:
    """Dense MLP of every layer, with the expert block beside it when ``enable_moe_block``."""
    dense = c.integer("intermediate_size")
    shared = c.integer("num_kv_shared_layers", default=0, minimum=0)
    wide = c.boolean("use_double_wide_mlp", False)
    moe = c.boolean("enable_moe_block", False)
    if moe:
        n_exp = c.integer("num_experts")
        top_k = c.integer("top_k_experts")
        if top_k > n_exp:
            raise c.fail("top_k_experts", f"({top_k}) exceeds num_experts ({n_exp})")
        key = "moe_intermediate_size" if c.has("moe_intermediate_size") else None
        expert_i = c.integer(key or "expert_intermediate_size")
    out = []
    for i in range(n_layers):
        width = dense * (2 if wide and i >= n_layers - shared > 0 else 1)
        if moe:  # the dense MLP runs on every token: an always-active shared expert
            out.append(
                FFNLayer(
                    "moe",
                    h,
                    num_experts=n_exp,
                    experts_per_token=top_k,
                    expert_intermediate_size=expert_i,
                    num_shared_experts=1,
                    shared_intermediate_size=width,
                )
            )
        else:
            out.append(FFNLayer("dense", h, intermediate_size=width))
    return out


def gemma4_layer_extra(c: _Cfg, h: int) -> int:
    """Per-layer weights outside attention and FFN: norms, layer scalar, router extras, PLE."""
    n = 4 * h + 1  # input, post-attention, pre/post-feedforward RMSNorms; layer_scalar
    if c.boolean("enable_moe_block", False):
        n += 3 * h + h + c.integer("num_experts")  # three norms, router scale, per_expert_scale
    ple = c.integer("hidden_size_per_layer_input", default=0, minimum=0)
    if ple:
        n += 2 * h * ple + h  # per_layer_input_gate, per_layer_projection, its norm
    return n


def gemma4_embedding_extra(c: _Cfg, h: int, n_layers: int) -> int:
    """Model-level per-layer-input weights: the table, the projection and its norm."""
    ple = c.integer("hidden_size_per_layer_input", default=0, minimum=0)
    if not ple:
        return 0
    vocab = c.integer("vocab_size_per_layer_input", default=c.integer("vocab_size"))
    return vocab * n_layers * ple + h * n_layers * ple + ple


def gemma4_vision_params(
    vision: Mapping[str, Any], get: Callable[[str, int | None], int], text_hidden: int
) -> int:
    """Vision tower and ``embed_vision`` projector weights (see the module text)."""
    d, i = get("hidden_size", None), get("intermediate_size", None)
    layers, patch = get("num_hidden_layers", None), get("patch_size", None)
    pos, head = get("position_embedding_size", None), get("head_dim", None)
    n = 3 * patch * patch * d + 2 * pos * d
    n += layers * (4 * d * d + 2 * head + 4 * d + 3 * d * i)
    if vision.get("standardize") is True:
        n += 2 * d
    audio = vision.get("_audio_config")
    if isinstance(audio, Mapping):
        n += gemma4_audio_params(audio, text_hidden)
    return n + d * text_hidden


def gemma4_audio_params(audio: Mapping[str, Any], text_hidden: int) -> int:
    """Audio tower and ``embed_audio`` projector weights (see the module text)."""
    h = int(audio.get("hidden_size") or 0)
    layers = int(audio.get("num_hidden_layers") or 0)
    heads = int(audio.get("num_attention_heads") or 1)
    kernel = int(audio.get("conv_kernel_size") or 0)
    out = int(audio.get("output_proj_dims") or h)
    channels = audio.get("subsampling_conv_channels") or [0, 0]
    c0, c1 = int(channels[0]), int(channels[-1])
    sub = 9 * c0 + c0 + 9 * c0 * c1 + c1 + (c0 // 4) * c1 * h
    per_layer = 24 * h * h + (9 + kernel) * h + h // heads
    return sub + layers * per_layer + h * out + out + out * text_hidden
