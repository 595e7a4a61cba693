"""Family rules a generic ``config.json`` reader cannot guess: defaults, layer patterns, towers.

What this module owns, by family (``model_type`` of the language model):

- Defaults for keys a shipped config leaves to its transformers configuration class:
  ``google/gemma-3-27b-it`` names neither ``vocab_size`` nor ``sliding_window_pattern``,
  so ``Gemma3TextConfig``'s 262,208 / 6 / 131,072 positions / tied embeddings apply, as
  they do in every engine that reads the file through transformers.
- Sliding/global layer patterns when ``layer_types`` is absent: Gemma 2 alternates, layer
  0 sliding (``Gemma2Config``: sliding unless ``(i + 1) % 2 == 0``); Gemma 3 keeps five
  sliding layers then one global (``sliding_window_pattern`` 6, same rule with 6).
- Model-level windows: Mistral, Mixtral and Phi-3 set ``sliding_window`` without
  ``layer_types``; vLLM's ``Attention`` then takes the model-level window
  (``cache_config.sliding_window``) on every layer, since ``LlamaAttention`` (which
  ``Phi3ForCausalLM`` inherits) only sets a per-layer window from ``layer_types``
  (vLLM ``vllm/model_executor/models/llama.py``, ``vllm/attention/layer.py``; release not
  pinned: to be checked against a Phi-3 start-up log).
- Score heads: a ``*ForSequenceClassification`` checkpoint (reward models) has no LM head
  but an ``nn.Linear(hidden_size, num_labels)`` (SGLang ``models/llama_classification.py``).
- Norm counts: Gemma 2/3 have four RMSNorms per layer (input, post-attention,
  pre-feedforward, post-feedforward; Gemma 2 report, arXiv 2408.00118 §2); Llama 4's q/k
  norm is an L2 norm without weights (vLLM ``llama4.py``: ``RMSNorm(..., has_weight=False)``);
  MiniMax-M2's ``qk_norm_type`` ``per_layer`` normalises all heads at once, so its weights
  are ``heads x head_dim`` (transformers ``MiniMaxM2Attention``).
- GLM-4.5's ``attention_bias`` puts biases on q/k/v only (vLLM ``glm4_moe.py``:
  ``o_proj`` has ``bias=False``). Seed-OSS (``seed_oss``) is a Llama-style dense decoder
  whose output projection takes its own key, ``attention_out_bias`` (vLLM ``seed_oss.py``:
  ``o_proj`` built with ``bias=config.attention_out_bias``; ByteDance-Seed/Seed-OSS-36B's
  config sets q/k/v biases and no output bias).
- Vision towers of vision-language wrappers: SigLIP (Gemma 3: ~417M, Gemma 3 report,
  arXiv 2503.19786 Table 1) with Gemma 3's projector (``mm_input_projection_weight``
  vision x text hidden, plus ``mm_soft_emb_norm``); Llama 4's tower and adapter; Pixtral
  (Mistral 3: transformers ``PixtralVisionModel``, bias-free, gated SiLU MLP) with Mistral 3's
  projector (RMSNorm, patch merger ``d * s^2 -> d``, two linears to the text width); Kimi
  K2.5's MoonViT-3D with its ``patchmerger`` projector and Kimi-VL's 2D MoonViT with its
  MLP projector (``moonvit_params``); Qwen2-VL's and Qwen2.5-VL's towers
  (:mod:`kvscope.specs.qwen2_vl_tower`); Gemma 4's tower (:mod:`config_gemma4`). Other
  towers are not counted yet.
- 2026 families: GLM-5 (``glm_moe_dsa``) is DeepSeek-V3.2's layout (MLA latent plus a
  lightning-indexer key cache, kind ``mla_sparse``, DeepSeek-style MoE): vLLM maps
  ``GlmMoeDsaForCausalLM`` to ``deepseek_v2.py`` (``class GlmMoeDsaForCausalLM(
  DeepseekV2ForCausalLM)``, vLLM PR #34124). Kimi K2.5 (``kimi_k25``)
  wraps a DeepSeek-V3 text model under ``text_config`` (model_type ``kimi_k2``). Kimi K3
  (``kimi_k3``) wraps a Kimi Linear text model (``kimi_linear``: KDA + gated MLA,
  :mod:`kvscope.specs.config_kimi_linear`) beside a bias-free MoonViT (``moonvit_k3_params``).

- Rotary caches: vLLM builds one cos/sin cache per distinct rotary embedding (``get_rope``
  is memoised on its arguments), of ``max_position_embeddings`` positions, times the factor
  under ``rope_scaling`` type ``linear`` (``LinearScalingRotaryEmbedding`` caches every scaled
  range; vLLM ``vllm/model_executor/layers/rotary_embedding/linear_scaling_rope.py``, v0.19).
  Gemma 3 builds two: the local layers' (``rope_local_base_freq``, unscaled) and the global
  layers' (scaled): 1,048,576 + 131,072 positions for the 4B/12B/27B checkpoints, 0.5 GiB at
  head_dim 256, inside vLLM's "Model loading took" figure.

Units: parameter counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kvscope.specs.config_gemma4 import gemma4_vision_params
from kvscope.specs.qwen2_vl_tower import QWEN2_VL_TYPES, tower_params

#: Language-model ``model_type`` values whose architecture the parser knows (wrappers are
#: read through their ``text_config``: gemma3, llama4, mistral3, kimi_vl, kimi_k25); any
#: other type is refused in one line rather than planned as if it were a Llama.
KNOWN_MODEL_TYPES = (
    "llama", "mistral", "mixtral", "granite", "phi3",
    "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text",
    "gemma", "gemma2", "gemma3_text", "gemma4_text", "llama4_text",
    "glm4_moe", "glm_moe_dsa", "minimax_m2", "gpt_oss", "seed_oss",
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4", "kimi_k2", "kimi_linear",
)  # fmt: skip

#: Families whose attention is always MLA: a config without ``kv_lora_rank`` is refused
#: naming it, not planned as grouped-query attention.
MLA_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa")

#: transformers configuration-class defaults for keys shipped configs omit.
FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma": {"tie_word_embeddings": True},
    "gemma2": {"tie_word_embeddings": True},
    "gemma4_text": {"tie_word_embeddings": True},
    "gemma3_text": {
        "vocab_size": 262_208,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131_072,
        "tie_word_embeddings": True,
        "sliding_window_pattern": 6,
    },
}
#: The text model's type inside a wrapper whose ``text_config`` does not name it.
TEXT_MODEL_TYPE = {
    "gemma3": "gemma3_text",
    "gemma4": "gemma4_text",
    "llama4": "llama4_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "kimi_k25": "deepseek_v3",
    "kimi_vl": "deepseek_v3",
    "kimi_k3": "kimi_linear",
    "qwen2_vl": "qwen2",
    "qwen2_5_vl": "qwen2",
}
#: Text ``model_type`` values that name a known family's decoder under a wrapper's own name:
#: Qwen3-VL builds its language model as ``Qwen3LLMForCausalLM`` / ``Qwen3MoeLLMForCausalLM``
#: (vLLM ``vllm/model_executor/models/qwen3_vl.py`` and ``qwen3_vl_moe.py``, v0.11.0), i.e.
#: the Qwen3 / Qwen3-MoE decoders with interleaved M-RoPE, which changes no weight or KV size.
TEXT_TYPE_ALIAS = {
    "qwen3_vl_text": "qwen3",
    "qwen3_vl_moe_text": "qwen3_moe",
    # Qwen2-VL / Qwen2.5-VL: the Qwen2 decoder with M-RoPE (vLLM qwen2_vl.py, qwen2_5_vl.py
    # build it as Qwen2ForCausalLM)
    "qwen2_vl_text": "qwen2",
    "qwen2_5_vl_text": "qwen2",
}
#: Wrappers whose older config files keep the text model's keys at the top level, beside
#: ``vision_config`` (Qwen/Qwen2.5-VL-7B-Instruct, Qwen/Qwen2-VL-7B-Instruct: transformers
#: 4.41-4.49 files); the text model is then read from the top level under its own type.
FLAT_WRAPPERS = {"qwen2_vl": "qwen2", "qwen2_5_vl": "qwen2"}
#: Families whose ``sliding_window`` applies to every layer when ``layer_types`` is absent.
SLIDING_ALL_LAYERS = ("mistral", "mixtral", "phi3")
#: Families with a fixed sliding/global period when ``layer_types`` is absent.
SLIDING_PERIOD = {"gemma2": 2}
PATTERN_KEY = {"gemma3_text": "sliding_window_pattern"}
#: RMSNorm weight vectors of ``hidden_size`` per decoder layer (default 2).
NORMS_PER_LAYER = {"gemma2": 4, "gemma3_text": 4}
#: Per-head q/k RMSNorm weights without a ``use_qk_norm`` key.
QK_NORM_ALWAYS = ("qwen3", "qwen3_moe", "gemma3_text")
#: ``use_qk_norm`` true, but the norm has no weights.
QK_NORM_WEIGHTLESS = ("llama4", "llama4_text")
#: ``attention_bias`` covers q/k/v but not the output projection.
QKV_BIAS_ONLY = ("glm4_moe",)

Reader = Callable[[str, int | None], int]


def with_defaults(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """``cfg`` with its family's configuration-class defaults for absent keys."""
    defaults = FAMILY_DEFAULTS.get(str(cfg.get("model_type") or ""))
    if not defaults:
        return cfg
    merged = dict(defaults)
    merged.update({k: v for k, v in cfg.items() if v is not None})
    return merged


def rope_cache_positions(cfg: Mapping[str, Any], model_type: str, max_pos: int) -> int:
    """Positions summed over the rotary caches vLLM builds for this config (see above)."""
    scaling = cfg.get("rope_scaling")
    factor = 1.0
    if isinstance(scaling, Mapping):
        kind = scaling.get("rope_type") or scaling.get("type")
        raw = scaling.get("factor")
        if kind == "linear" and isinstance(raw, int | float) and 1 <= raw <= 1024:
            factor = float(raw)
    scaled = int(max_pos * factor)
    if model_type == "gemma3_text":
        return max_pos + scaled  # local (unscaled) and global rotary embeddings
    if model_type == "gemma4_text":
        return max_pos + _gemma4_global_rope_positions(cfg, max_pos)
    return scaled


def _gemma4_global_rope_positions(cfg: Mapping[str, Any], max_pos: int) -> int:
    """Gemma 4's second rotary cache (full layers: ``global_head_dim`` rotated over its
    ``partial_rotary_factor``, vLLM ``get_rope`` per layer type in ``gemma4.py``), in positions
    of the sliding layers' ``head_dim`` rotary width."""
    head, wide = cfg.get("head_dim"), cfg.get("global_head_dim")
    params = cfg.get("rope_parameters")
    full = params.get("full_attention") if isinstance(params, Mapping) else None
    factor = full.get("partial_rotary_factor", 1.0) if isinstance(full, Mapping) else 1.0
    if not isinstance(head, int) or not isinstance(wide, int) or head <= 0:
        return max_pos
    if not isinstance(factor, int | float) or not 0 < factor <= 1:
        factor = 1.0
    return int(max_pos * wide * factor / head)


def sliding_pattern(period: int, n_layers: int) -> list[bool]:
    """Which layers slide under a period: every ``period``-th layer (1-based) is global."""
    return [(i + 1) % period != 0 for i in range(n_layers)]


def siglip_params(get: Reader, use_head: bool) -> int:
    """Weights of a SigLIP vision tower (transformers ``SiglipVisionModel``).

    Patch embedding (conv with bias), learned positions over ``(image/patch)^2`` patches,
    per layer two LayerNorms (weight and bias), q/k/v/out projections with biases and a
    two-matrix GELU MLP with biases; a final LayerNorm; the attention-pooling head only
    when ``vision_use_head`` is true.
    """
    d, i = get("hidden_size", None), get("intermediate_size", None)
    layers, patch = get("num_hidden_layers", None), get("patch_size", None)
    image, channels = get("image_size", None), get("num_channels", 3)
    n = channels * patch * patch * d + d + (image // patch) ** 2 * d
    per_layer = 2 * 2 * d + 4 * (d * d + d) + (d * i + i) + (i * d + d)
    n += layers * per_layer + 2 * d
    if use_head:
        # probe, multi-head attention (in_proj 3d x d + bias, out_proj), LayerNorm, MLP
        n += d + 3 * d * d + 3 * d + d * d + d + 2 * d + (d * i + i) + (i * d + d)
    return n


def llama4_vision_params(get: Reader, projector_bias: bool, text_hidden: int) -> int:
    """Weights of Llama 4's vision tower, pixel-shuffle adapter and projector.

    transformers ``Llama4VisionModel``: class embedding, learned positions over
    ``(image/patch)^2 + 1`` tokens, a bias-free patch projection, LayerNorms before and after
    the encoder, encoder layers shaped like SigLIP's, then ``vision_adapter`` (fc1
    ``intermediate_size`` -> ``projector_input_dim``, fc2 ``projector_input_dim`` ->
    ``projector_output_dim``, no biases) and ``multi_modal_projector`` (``vision_output_dim``
    -> text hidden). With it Llama-4-Scout counts 108.6B, 0.3 % under the card's 109B.
    """
    d, i = get("hidden_size", None), get("intermediate_size", None)
    layers, patch = get("num_hidden_layers", None), get("patch_size", None)
    image, channels = get("image_size", None), get("num_channels", 3)
    p_in, p_out = get("projector_input_dim", None), get("projector_output_dim", None)
    out_dim = get("vision_output_dim", None)
    n = d + ((image // patch) ** 2 + 1) * d + channels * patch * patch * d + 2 * 2 * d
    n += layers * (2 * 2 * d + 4 * (d * d + d) + (d * i + i) + (i * d + d))
    n += i * p_in + p_in * p_out
    n += out_dim * text_hidden + (text_hidden if projector_bias else 0)
    return n


def pixtral_params(get: Reader, merge: int, text_hidden: int, bias: bool) -> int:
    """Weights of a Pixtral vision tower and Mistral 3's multimodal projector.

    transformers ``PixtralVisionModel``: a bias-free patch convolution, ``ln_pre`` RMSNorm,
    per layer two RMSNorms, bias-free q/k/v/o and a gated (gate/up/down) MLP.
    ``Mistral3MultiModalProjector``: RMSNorm over the vision width, ``Mistral3PatchMerger``
    (``d * spatial_merge_size^2 -> d``, no bias), ``linear_1`` (d -> text) and ``linear_2``
    (text -> text), biased when ``multimodal_projector_bias`` is true. Mistral-Small-3.1-24B:
    0.439B, which with its text model gives the 44.76 GiB vLLM 0.19.0 loads in bf16.
    """
    d, i = get("hidden_size", None), get("intermediate_size", None)
    layers, patch = get("num_hidden_layers", None), get("patch_size", None)
    channels = get("num_channels", 3)
    n = channels * patch * patch * d + d
    n += layers * (2 * d + 4 * d * d + 3 * d * i)
    n += d + d * merge * merge * d + d * text_hidden + text_hidden * text_hidden
    if bias:
        n += 2 * text_hidden
    return n


def qwen3_vl_vision_params(get: Reader, deepstack: int) -> int:
    """Weights of the Qwen3-VL / Qwen3.5 vision tower (transformers ``Qwen3VLVisionModel``).

    A biased Conv3d patch embedding (``in_channels x temporal_patch x patch^2`` per output),
    learned positions (``num_position_embeddings``), ``depth`` blocks of two LayerNorms, a
    biased fused qkv and output projection and a biased two-matrix MLP, then the patch merger
    (LayerNorm, ``d s^2 -> d s^2 -> out_hidden_size``, biased) and one more merger per
    ``deepstack_visual_indexes`` entry. Qwen3.5-27B: 0.461B.
    """
    d, i, depth = get("hidden_size", None), get("intermediate_size", None), get("depth", None)
    patch, t = get("patch_size", None), get("temporal_patch_size", 2)
    ch, pos = get("in_channels", 3), get("num_position_embeddings", None)
    merge, out = get("spatial_merge_size", 2), get("out_hidden_size", None)
    n = ch * t * patch * patch * d + d + pos * d
    n += depth * (2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * i + i) + (i * d + d))
    wide = d * merge * merge
    merger = 2 * d + (wide * wide + wide) + (wide * out + out)
    return n + merger * (1 + deepstack)


def moonvit_params(get: Reader, merge: int, text_hidden: int, prefix: str = "vt_") -> int:
    """Weights of a MoonViT tower and its projector: Kimi K2.5's MoonViT-3D with the
    ``patchmerger`` projector, or Kimi-VL's 2D MoonViT with ``KimiVLMultiModalProjector``.

    vLLM ``kimi_k25_vit.py`` (``MoonViT3dPretrainedModel``, ``KimiK25MultiModalProjector``;
    the ``vt_*`` keys of the checkpoint's ``vision_config`` are the tower's sizes) and vLLM
    ``moonvit.py`` / ``kimi_vl.py`` (``MoonVitPretrainedModel`` with ``attn_bias=True``,
    ``KimiVLMultiModalProjector``; Kimi-VL's ``vision_config`` names the sizes without the
    prefix, ``prefix=""``) build the same parts: a biased patch convolution, a learned
    ``init_pos_emb_height x init_pos_emb_width`` position table (rotary and temporal tables
    are buffers), per block two LayerNorms, a biased fused qkv and output projection and a
    biased two-matrix GELU MLP, a final LayerNorm; the projector's LayerNorm over the tower
    width, then ``d m^2 -> d m^2 -> text`` with biases (``m`` = ``merge_kernel_size``).
    Kimi K2.5: 0.417B tower + 0.054B projector; Kimi-VL-A3B: 0.417B + 0.031B.
    """
    d, i = get(prefix + "hidden_size", None), get(prefix + "intermediate_size", None)
    layers, patch = get(prefix + "num_hidden_layers", None), get("patch_size", None)
    height, width = get("init_pos_emb_height", None), get("init_pos_emb_width", None)
    n = 3 * patch * patch * d + d + height * width * d
    n += layers * (2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * i + i) + (i * d + d))
    n += 2 * d
    wide = d * merge * merge
    out = get("text_hidden_size", text_hidden)
    return n + 2 * d + (wide * wide + wide) + (wide * out + out)


def moonvit_k3_params(get: Reader, text_hidden: int) -> int:
    """Weights of Kimi K3's MoonViT tower and ``patchmergerv2`` projector (bias-free).

    Kimi K3's checkpoint (``moonshotai/Kimi-K3`` safetensors listing): a bias-free patch
    convolution, a ``init_pos_emb_height x init_pos_emb_width`` position table, per block two
    RMSNorms, a fused ``wqkv`` of ``3 x qkv_hidden_size`` outputs, ``wo`` back to the tower
    width and a two-matrix MLP, a final norm; the projector maps ``d m^2`` through
    ``mm_hidden_size x m^2`` to the text width and ends in an RMSNorm over it (m = 2).
    """
    d, i = get("vt_hidden_size", None), get("vt_intermediate_size", None)
    layers, patch = get("vt_num_hidden_layers", None), get("patch_size", None)
    height, width = get("init_pos_emb_height", None), get("init_pos_emb_width", None)
    qkv = get("qkv_hidden_size", d)
    n = 3 * patch * patch * d + height * width * d
    n += layers * (2 * d + d * 3 * qkv + qkv * d + 2 * d * i) + d
    wide = get("mm_hidden_size", d) * 4
    out = get("text_hidden_size", text_hidden)
    return n + wide * wide + wide * out + out


def vision_params(model_type: str, vision: Mapping[str, Any], text_hidden: int, get: Reader) -> int:
    """Vision tower plus projector weights of a wrapper of ``model_type``; 0 when unknown."""
    kind = vision.get("model_type")
    if model_type == "kimi_k3":
        return moonvit_k3_params(get, text_hidden)
    if model_type in QWEN2_VL_TYPES:  # the tower's files name no type, or the wrapper's
        return tower_params(model_type, get, text_hidden)
    if kind == "gemma4_vision":
        return gemma4_vision_params(vision, get, text_hidden)
    if model_type in ("kimi_k25", "kimi_vl"):
        merge = vision.get("merge_kernel_size") or [2, 2]
        side = merge[0] if isinstance(merge, list) and merge else 2
        side = int(side) if isinstance(side, int) else 2
        return moonvit_params(get, side, text_hidden, "vt_" if model_type == "kimi_k25" else "")
    if kind == "siglip_vision_model":
        # SiglipVisionModel builds the head unless the config sets vision_use_head false.
        n = siglip_params(get, vision.get("vision_use_head", True) is not False)
        if model_type == "gemma3":
            d = get("hidden_size", None)
            n += d * text_hidden + d  # mm_input_projection_weight, mm_soft_emb_norm
        return n
    # the tower's own type: qwen3_5 in the first Qwen3.5 files, qwen3_5_vision in Qwen3.6's;
    # Qwen3-VL's tower (the wrapper's name as its type) is the same Qwen3VLVisionModel
    wrappers = ("qwen3_5", "qwen3_5_moe", "qwen3_vl", "qwen3_vl_moe")
    towers = (*wrappers, "qwen3_5_vision", "qwen3_5_moe_vision")
    if kind in towers and model_type in wrappers:
        stack = vision.get("deepstack_visual_indexes") or []
        return qwen3_vl_vision_params(get, len(stack) if isinstance(stack, list) else 0)
    if kind == "pixtral" and model_type == "mistral3":
        merge = vision.get("_spatial_merge_size", 2)
        bias = vision.get("_projector_bias") is True
        return pixtral_params(get, int(merge), text_hidden, bias)
    if kind == "llama4_vision_model":
        bias = vision.get("multi_modal_projector_bias") is True
        return llama4_vision_params(get, bias, text_hidden)
    return 0


def classifier_labels(raw: Mapping[str, Any]) -> int:
    """Rows of the score head of a ``*ForSequenceClassification`` checkpoint (reward and
    classifier models): ``num_labels``, else the size of ``id2label``, else transformers'
    default of 2; 0 for any other architecture (see ``ModelSpec.classifier_labels``)."""
    archs = raw.get("architectures") or []
    if not (
        isinstance(archs, list) and archs and str(archs[0]).endswith("ForSequenceClassification")
    ):
        return 0
    num = raw.get("num_labels")
    if isinstance(num, int) and num > 0:
        return num
    id2label = raw.get("id2label")
    return len(id2label) if isinstance(id2label, dict) and id2label else 2
