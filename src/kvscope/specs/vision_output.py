"""What vLLM's multimodal profiling pass needs of a wrapper's vision tower, from config.json:
:class:`VisionOutput` (the width of the tokens it returns, the shape of its largest input).

Units: counts and pixels. Sources: each tower's vLLM model file (vllm/model_executor/models/
qwen3_vl.py, gemma3_mm.py, mistral3.py, mllama4.py) and the checkpoints' processor defaults
named below (Kimi-K2.5's MoonViT: vllm/model_executor/models/kimi_k25.py and
vllm/transformers_utils/configs/kimi_k25.py; Kimi-VL's: kimi_vl.py);
:mod:`kvscope.plan.encoder_profile` turns them into bytes by release.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class VisionOutput:
    """A vision tower as ``vision_config`` states it: the width of each token it returns and the
    shape of its input. Qwen3-VL-style towers patch a resized image: vLLM's
    ``Qwen3_VisionTransformer`` concatenates the merger's output with one deepstack merger's
    output per ``deepstack_visual_indexes`` entry (vllm/model_executor/models/qwen3_vl.py at
    v0.11.0), so ``out_width`` is ``out_hidden_size * (1 + len(deepstack_visual_indexes))``.
    Gemma 3 (``kind`` "gemma3") projects a fixed ``image_size`` square to ``image_rows``
    (``mm_tokens_per_image``) tokens of the text width (gemma3_mm.py); Mistral 3 ("mistral3")
    its largest ``image_size`` square to one text-width token a ``patch_size x
    spatial_merge_size`` patch (mistral3.py); Llama 4 ("llama4") cuts it into ``image_tiles``
    squares of ``image_size`` (mllama4.py). Kimi-K2.5's MoonViT ("kimi_k25") and Kimi-VL's
    ("kimi_vl") patch a resized image like Qwen3-VL; their projectors return rows of the text
    width (``KimiK25Config`` sets ``mm_hidden_size`` to it when the checkpoint states the
    tower's width there)."""

    kind: str  # vision_config.model_type ("qwen3_vl", ...), or "gemma3" / "mistral3" / "llama4"
    out_width: int
    patch_size: int = 0
    temporal_patch_size: int = 1
    merge_size: int = 1  # spatial_merge_size
    in_channels: int = 3
    image_rows: int = 0  # a fixed-size tower's rows an image (0: patched to the image's size)
    image_size: int = 0  # a fixed-size tower's input side, pixels
    image_tiles: int = 1  # squares the largest image is cut into (Llama 4: 16 tiles + global)
    # a Qwen3-VL-style tower's blocks (vision_config depth, hidden_size, intermediate_size,
    # num_heads) and its deepstack mergers' count and width; 0 where config.json lacks them
    depth: int = 0
    width: int = 0
    intermediate: int = 0
    heads: int = 0
    deepstack: int = 0
    merger_width: int = 0  # out_hidden_size: one merger's output width

    @property
    def patch_values(self) -> int:
        """Pixel values of one patch (``in_channels * temporal_patch_size * patch_size**2``)."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2


#: ``max_patches`` of the Llama 4 checkpoints' image processor (``Llama4ImageProcessorFast``'s
#: default, 16 tiles of 336 px), which vLLM's ``get_max_num_tiles`` reads (mllama4.py)
LLAMA4_MAX_PATCHES = 16


def vision_output(raw: Mapping[str, Any], hidden: int) -> VisionOutput | None:
    """A Qwen3-VL-style, Gemma 3, Mistral 3, Llama 4 or Kimi-K2.5 tower (:class:`VisionOutput`),
    else None."""
    vision = raw.get("vision_config")
    if not isinstance(vision, Mapping):
        return None
    if raw.get("model_type") in ("kimi_k25", "kimi_vl"):
        return _moonvit(str(raw["model_type"]), vision, hidden)
    if raw.get("model_type") == "gemma3":  # Gemma3Config's default: 256 tokens an image
        rows, side = raw.get("mm_tokens_per_image", 256), vision.get("image_size")
        if isinstance(rows, int) and isinstance(side, int) and rows > 0 and side > 0:
            return VisionOutput("gemma3", hidden, image_rows=rows, image_size=side)
        return None
    if raw.get("model_type") == "mistral3":  # Pixtral: one token a merged patch of the square
        square = (
            vision.get("image_size"),
            vision.get("patch_size"),
            raw.get("spatial_merge_size", 1),
        )
        sizes = [x for x in square if isinstance(x, int) and x > 0]
        if len(sizes) != len(square):
            return None
        side, patch, merge = sizes
        rows = (side // (patch * merge)) ** 2
        return VisionOutput("mistral3", hidden, image_rows=rows, image_size=side)
    if raw.get("model_type") == "llama4":  # tiles of image_size, pixel-shuffled
        tile_px, tile_patch = vision.get("image_size"), vision.get("patch_size")
        ratio = vision.get("pixel_shuffle_ratio")
        if not (isinstance(tile_px, int) and isinstance(tile_patch, int)):
            return None
        if min(tile_px, tile_patch) <= 0 or not isinstance(ratio, (int, float)) or ratio <= 0:
            return None
        per_tile = (tile_px // tile_patch) ** 2 // round(1 / ratio**2)
        tiles = LLAMA4_MAX_PATCHES + 1  # the processor adds a global tile to a tiled image
        return VisionOutput(
            "llama4", hidden, image_rows=tiles * per_tile, image_size=tile_px, image_tiles=tiles
        )
    keys = ("out_hidden_size", "patch_size", "temporal_patch_size", "spatial_merge_size")
    vals = [x for x in (vision.get(k) for k in keys) if isinstance(x, int) and x > 0]
    if len(vals) != len(keys):
        return None
    out, patch, temporal, merge = vals
    deepstack = vision.get("deepstack_visual_indexes") or []
    channels = vision.get("in_channels", 3)
    size = [vision.get(k) for k in ("depth", "hidden_size", "intermediate_size", "num_heads")]
    depth, width, inter, heads = (x if isinstance(x, int) and x > 0 else 0 for x in size)
    stacks = len(deepstack) if isinstance(deepstack, list) else 0
    return VisionOutput(
        kind=str(vision.get("model_type") or ""),
        out_width=out * (1 + stacks),
        patch_size=patch,
        temporal_patch_size=temporal,
        merge_size=merge,
        in_channels=channels if isinstance(channels, int) and channels > 0 else 3,
        depth=depth,
        width=width,
        intermediate=inter,
        heads=heads,
        deepstack=stacks,
        merger_width=out,
    )


def _moonvit(kind: str, vision: Mapping[str, Any], hidden: int) -> VisionOutput | None:
    """Kimi-K2.5's MoonViT-3D (the checkpoint names the tower's sizes ``vt_*``; vLLM's
    ``KimiK25VisionConfig`` defaults are the same 27 x 1152 / 4304 / 16 heads) or Kimi-VL's
    MoonViT (``MoonViTConfig``: plain names); both project to the text width."""

    def size(key: str) -> int:
        value = vision.get("vt_" + key, vision.get(key))
        return value if isinstance(value, int) and value > 0 else 0

    patch = vision.get("patch_size", 14)
    merge = vision.get("merge_kernel_size", [2, 2])
    if isinstance(merge, list) and merge and all(m == merge[0] for m in merge):
        merge = merge[0]
    if not (isinstance(patch, int) and isinstance(merge, int) and patch > 0 and merge > 0):
        return None
    width = size("hidden_size")
    stated = vision.get("mm_hidden_size")
    out = stated if isinstance(stated, int) and stated > 0 and stated != width else hidden
    return VisionOutput(
        kind=kind,
        out_width=out,
        patch_size=patch,
        merge_size=merge,
        depth=size("num_hidden_layers"),
        width=width,
        intermediate=size("intermediate_size"),
        heads=size("num_attention_heads"),
    )
