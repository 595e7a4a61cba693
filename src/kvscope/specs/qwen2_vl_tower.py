"""The vision towers of Qwen2-VL (``qwen2_vl``) and Qwen2.5-VL (``qwen2_5_vl``): their weights
and what vLLM's profiling pass needs of them (:class:`~kvscope.specs.vision_output.VisionOutput`).

Units: parameter counts. Sources: transformers ``Qwen2VisionTransformerPretrainedModel`` and
``Qwen2_5_VisionTransformerPretrainedModel`` (modeling_qwen2_vl.py, modeling_qwen2_5_vl.py) and
vLLM's ``Qwen2VisionTransformer`` / ``Qwen2_5_VisionTransformer``
(vllm/model_executor/models/qwen2_vl.py, qwen2_5_vl.py), which build the same tensors:

* both: a bias-free Conv3d patch embedding (``in_chans x temporal_patch_size x patch_size^2``
  values a patch, ``temporal_patch_size`` 2), rotary positions only (a buffer, no weights),
  ``depth`` blocks with a biased fused qkv (``d -> 3d``) and output projection, and a patch
  merger: a norm over the tower width, then ``d s^2 -> d s^2 -> text`` with biases
  (``s`` = ``spatial_merge_size``);
* Qwen2-VL: LayerNorms (weight and bias) and a two-matrix QuickGELU MLP of
  ``embed_dim * mlp_ratio``; the tower width is ``embed_dim`` and ``vision_config.hidden_size``
  is the text width the merger projects to;
* Qwen2.5-VL: RMSNorms (weight only) and a biased SwiGLU MLP (gate, up, down of
  ``intermediate_size``); the tower width is ``hidden_size`` and the merger projects to
  ``out_hidden_size``. Window attention (``window_size``, ``fullatt_block_indexes``) adds no
  weights.

Pinned to the checkpoints' ``model.safetensors.index.json`` totals: Qwen2.5-VL-7B 8,292,166,656
(tower 676,550,144), Qwen2-VL-7B 8,291,375,616 (tower 675,759,104), Qwen2-VL-2B 2,208,985,600.
Older config files keep the text model's keys at the top level beside ``vision_config``
(transformers < 4.52); newer ones move them under ``text_config`` (``qwen2_vl_text`` /
``qwen2_5_vl_text``): both are read (:mod:`kvscope.specs.config_parse`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kvscope.specs.vision_output import VisionOutput

#: wrappers whose text model is the Qwen2 decoder (with M-RoPE, which adds no weights)
QWEN2_VL_TYPES = ("qwen2_vl", "qwen2_5_vl")

Reader = Callable[[str, int | None], int]


def _channels(get: Reader) -> int:
    # the files name it in_chans (both) and, from transformers 4.5x, in_channels too
    return get("in_channels", get("in_chans", 3))


def tower_params(model_type: str, get: Reader, text_hidden: int) -> int:
    """Weights of a Qwen2-VL / Qwen2.5-VL vision tower and its merger (module docstring)."""
    depth, patch = get("depth", None), get("patch_size", None)
    t, merge = get("temporal_patch_size", 2), get("spatial_merge_size", 2)
    if model_type == "qwen2_vl":
        d = get("embed_dim", None)
        inter = d * get("mlp_ratio", 4)
        out = get("hidden_size", text_hidden)
        norms = 2 * 2 * d  # two LayerNorms, weight and bias
        mlp = (d * inter + inter) + (inter * d + d)
        merger_norm = 2 * d
    else:
        d, inter = get("hidden_size", None), get("intermediate_size", None)
        out = get("out_hidden_size", text_hidden)
        norms = 2 * d  # two RMSNorms
        mlp = 2 * (d * inter + inter) + (inter * d + d)
        merger_norm = d
    n = _channels(get) * t * patch * patch * d
    n += depth * (norms + (d * 3 * d + 3 * d) + (d * d + d) + mlp)
    wide = d * merge * merge
    return n + merger_norm + (wide * wide + wide) + (wide * out + out)


def tower_output(model_type: str, vision: Mapping[str, Any], hidden: int) -> VisionOutput | None:
    """The tower as vLLM's profiling pass sees it; None when ``vision_config`` lacks a size."""

    def size(key: str, default: int = 0) -> int:
        value = vision.get(key, default)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    if model_type == "qwen2_vl":
        width, out = size("embed_dim"), size("hidden_size", hidden)
        inter = width * size("mlp_ratio", 4)
    else:
        width, out = size("hidden_size"), size("out_hidden_size", hidden)
        inter = size("intermediate_size")
    patch, temporal = size("patch_size"), size("temporal_patch_size", 2)
    merge = size("spatial_merge_size", 2)
    channels = size("in_channels") or size("in_chans", 3)
    if min(patch, temporal, merge, out, channels) <= 0:
        return None
    return VisionOutput(
        kind=model_type,
        out_width=out,
        patch_size=patch,
        temporal_patch_size=temporal,
        merge_size=merge,
        in_channels=channels,
        depth=size("depth"),
        width=width,
        intermediate=inter,
        heads=size("num_heads"),
        merger_width=out,
    )
